//! A section of an application's own settings as a source of properties, read with serde (the
//! feature `serde`): [`PropertiesSection`] and [`Properties::load_section`].

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::config::source::{Entry, Leaf, joined};
use crate::config::store::{SourceId, check_value, parse_name};
use crate::config::{LoadError, LoadReport, Origin, Properties, PropertyValue};
use crate::error::ConfigError;

/// The `hystrix` section of an application's own settings: command, thread-pool, collapser
/// and stream properties by their Hystrix names, read with serde from whatever the application
/// reads its settings with (`figment`, `config`, `toml`, `serde_json`, ...), then loaded into a
/// registry with [`Properties::load_section`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use figment::providers::{Format, Toml};
///
/// #[derive(serde::Deserialize)]
/// struct Settings {
///     listen: String,
///     hystrix: hystrix::config::PropertiesSection,
/// }
///
/// let settings: Settings = figment::Figment::new()
///     .merge(Toml::string(r#"
///         listen = "0.0.0.0:8080"
///
///         [hystrix.command.GetUser]
///         execution.isolation.thread.timeoutInMilliseconds = 250
///
///         [hystrix.threadpool.UserService]
///         coreSize = 20
///     "#))
///     .extract()?;
/// let registry = hystrix::Registry::new();
/// let report = registry.properties().load_section("hystrix", &settings.hystrix)?;
/// assert_eq!(report.applied, 2);
/// # Ok(())
/// # }
/// ```
///
/// # Shape
///
/// A map whose paths of keys, joined with dots, are the property names after `hystrix.`, read
/// as a TOML file's are (see the [module docs](crate::config#toml-files)): a table per key with
/// dotted property names, fully nested tables and quoted full names all mean the same. A
/// leading `hystrix` key is also accepted, so full names copied from a `.properties` file
/// (`"hystrix.command.GetUser.fallback.enabled" = false`) and a whole Hystrix TOML file
/// deserialize too. Map keys may be strings, integers or booleans (as YAML writes them).
///
/// # Values
///
/// Booleans, integers and strings, each parsed by its property's type as in files and the
/// environment: `"250"` works as well as `250`, and `"yes"` as well as `true` (providers that
/// read environment variables deliver strings). A float works where the property takes one
/// (`retry.backoff.multiplier`); no property takes an array, a null or a map at a property's
/// name.
///
/// # Errors
///
/// Deserialization fails, through serde's `Error::custom`, on a value that its property refuses
/// on its own (it does not parse, or is out of range), naming the full property name and the
/// reason, as a file's or the environment's load would: ``invalid value `120` for
/// `hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage`: must be a percentage from
/// 0 to 100``. The rules tying properties together (a `numBuckets` divides its window, ...) and
/// the registry's own rules (chaos allowed, fixed properties of keys in use) are checked when
/// the section is loaded, against the registry's other sources.
///
/// A name given twice (two spellings of one path, such as a quoted dotted key and nested
/// tables) with different values fails too, as two environment variables for one property do:
/// a map's order is the deserializer's (figment sorts keys), so neither can be taken as the
/// later one. Given twice as the same text (`false` and `"false"`), it is kept once.
///
/// Names that are not properties do not fail deserialization: the load reports them as
/// warnings, with a did-you-mean suggestion when one is close, as for a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PropertiesSection {
    /// Full names (`hystrix.` and the path) and values, in the order the deserializer gave
    /// them.
    values: Vec<(String, PropertyValue)>,
}

impl PropertiesSection {
    /// An empty section (what a missing section means with `#[serde(default)]`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of values (each full name once).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// `true` if the section has no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The full names (`hystrix.command.GetUser.…`) and values, in the order read. Values are
    /// as the deserializer typed them (not yet parsed by their property's type).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PropertyValue)> {
        self.values
            .iter()
            .map(|(name, value)| (name.as_str(), value))
    }

    /// The value given for a full name (`hystrix.command.GetUser.…`).
    pub fn get(&self, full_name: &str) -> Option<&PropertyValue> {
        self.values
            .iter()
            .find(|(name, _)| name == full_name)
            .map(|(_, value)| value)
    }
}

impl Properties {
    /// Loads a section of the application's settings as a source named `name` (any label: the
    /// key it sits under, `settings.toml [hystrix]`, ...): its values enter the dynamic layers
    /// (global default, per key) their names give. A section ranks as a configuration file
    /// does: above the files and sections first loaded before it, below the environment
    /// ([`load_env`](Properties::load_env)) and run-time values. Loading a section under the
    /// same name again replaces only the values it gave before (a reload); the values of files,
    /// the environment, run time and other sections stay.
    /// [`explain`](Properties::explain) names it as [`Origin::Section`].
    ///
    /// Names that are not properties are warnings in the report, with a did-you-mean
    /// suggestion when one is close.
    ///
    /// # Errors
    /// As `load_file`'s, without reading or syntax: [`LoadError::Invalid`] naming the section
    /// and the property, for a value that does not parse, is out of range or breaks a rule
    /// tying properties together (listed at [`load_env_from`](Properties::load_env_from)), or a
    /// per-key change of a fixed property of a key in use; [`LoadError::Removal`] if dropping a
    /// value the section gave before leaves such a rule broken.
    ///
    /// On error nothing changes: the values loaded before stay.
    pub fn load_section(
        &self,
        name: &str,
        section: &PropertiesSection,
    ) -> Result<LoadReport, LoadError> {
        let origin = Origin::Section {
            name: name.to_owned(),
        };
        let entries: Vec<Entry> = section
            .values
            .iter()
            .map(|(full_name, value)| Entry::new(full_name.clone(), value.clone(), origin.clone()))
            .collect();
        self.load_entries(SourceId::Section(name.to_owned()), &entries)
    }
}

impl<'de> de::Deserialize<'de> for PropertiesSection {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut entries = Vec::new();
        deserializer.deserialize_map(Node {
            prefix: "",
            entries: &mut entries,
        })?;
        let mut values: Vec<(String, PropertyValue)> = Vec::with_capacity(entries.len());
        // Each full name's place in `values`.
        let mut places: HashMap<String, usize> = HashMap::with_capacity(entries.len());
        for entry in entries {
            let full_name = full_name(entry.name);
            let refused = match entry.refused {
                Some(reason) => Err(ConfigError::InvalidValue {
                    name: full_name.clone(),
                    value: entry.value.to_string(),
                    reason: reason.to_owned(),
                }),
                None => check_value(&full_name, &entry.value),
            };
            match refused {
                // A name that is not a property is the load's warning, not an error here.
                Err(ConfigError::UnknownProperty { .. } | ConfigError::InvalidKey { .. })
                | Ok(()) => {}
                Err(error) => return Err(de::Error::custom(error)),
            }
            // Two spellings of one name: a map's order says nothing (figment sorts its keys),
            // so different values are an error, not a guess.
            match places.get(&full_name).map(|&place| &values[place].1) {
                Some(earlier) if earlier.to_string() == entry.value.to_string() => {}
                Some(earlier) => {
                    return Err(de::Error::custom(format_args!(
                        "`{}` is given twice, as `{}` and `{}`: keep one spelling (a \
                         quoted dotted name and nested keys are two keys to your settings \
                         library, which merges an override, say from the environment, into \
                         the nested one only)",
                        full_name.escape_debug(),
                        earlier.to_string().escape_debug(),
                        entry.value.to_string().escape_debug()
                    )));
                }
                None => {
                    places.insert(full_name.clone(), values.len());
                    values.push((full_name, entry.value));
                }
            }
        }
        Ok(PropertiesSection { values })
    }
}

/// The full property name of a path in the section: `hystrix.` and the path, unless the path
/// starts with `hystrix` already.
fn full_name(path: String) -> String {
    if path == "hystrix" || path.starts_with("hystrix.") {
        path
    } else {
        joined("hystrix", &path)
    }
}

/// The value at the path `prefix`: a map continues the path, anything else is a leaf.
struct Node<'a> {
    prefix: &'a str,
    entries: &'a mut Vec<Entry>,
}

impl Node<'_> {
    /// Keeps a value at the path; refused in place of the whole section.
    fn leaf<E: de::Error>(self, leaf: Leaf) -> Result<(), E> {
        // The origin is set by the load, which knows the section's name.
        let entry = Entry::of_leaf(self.prefix.to_owned(), leaf, Origin::Code);
        if self.prefix.is_empty() {
            return Err(E::custom(format_args!(
                "expected a map of Hystrix properties, found `{}`",
                entry.value
            )));
        }
        self.entries.push(entry);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            f.write_str("a map of Hystrix properties")
        } else {
            write!(f, "a value or a map for `{}`", self.prefix.escape_debug())
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.leaf(Leaf::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.leaf(Leaf::Int(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<(), E> {
        self.leaf(i64::try_from(v).map_or_else(|_| Leaf::Text(v.to_string()), Leaf::Int))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.visit_i128(i128::from(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<(), E> {
        self.leaf(i64::try_from(v).map_or_else(|_| Leaf::Text(v.to_string()), Leaf::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.leaf(Leaf::Text(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.leaf(Leaf::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
        self.leaf(Leaf::Str(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.prefix.is_empty() {
            // `hystrix:` with nothing under it (YAML): an empty section.
            return Ok(());
        }
        Err(E::custom(format_args!(
            "`{}`: no value",
            joined("hystrix", self.prefix).escape_debug()
        )))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut shown = Vec::new();
        while let Some(item) = seq.next_element::<Shown>()? {
            shown.push(item.0);
        }
        self.leaf(Leaf::Array(format!("[{}]", shown.join(", "))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // A map where a property's value goes (a TOML table, or a TOML date, which figment
        // hands over as a map): no property takes one, and its keys would only make unknown
        // names of the property's.
        if !self.prefix.is_empty() {
            let name = full_name(self.prefix.to_owned());
            if parse_name(&name).is_ok() {
                return Err(de::Error::custom(ConfigError::InvalidValue {
                    name,
                    value: "{…}".to_owned(),
                    reason: "expected a value, found a table (or a date, which no property takes)"
                        .to_owned(),
                }));
            }
        }
        while let Some(Shown(key)) = map.next_key::<Shown>()? {
            let name = joined(self.prefix, &key);
            map.next_value_seed(Node {
                prefix: &name,
                entries: self.entries,
            })?;
        }
        Ok(())
    }
}

/// A map key, or an array's item, as text: strings, numbers and booleans as written, anything
/// else as `…`.
struct Shown(String);

impl<'de> de::Deserialize<'de> for Shown {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ShownVisitor)
    }
}

struct ShownVisitor;

impl<'de> Visitor<'de> for ShownVisitor {
    type Value = Shown;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a number or a boolean")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Shown, E> {
        Ok(Shown(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Shown, E> {
        Ok(Shown(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Shown, E> {
        Ok(Shown(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Shown, E> {
        Ok(Shown(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Shown, E> {
        Ok(Shown(v.to_owned()))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Shown, E> {
        Ok(Shown("…".to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shown, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Shown("[…]".to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shown, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shown("{…}".to_owned()))
    }
}
