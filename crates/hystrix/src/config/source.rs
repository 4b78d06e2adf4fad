//! Loading a whole source (a file, the environment) into the store: name checks with
//! did-you-mean suggestions, the all-or-nothing swap, and what a load reports.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;

use crate::config::store::{SourceId, StageError, Write, name_the_value, parse_name};
use crate::config::{
    COLLAPSER_PROPERTIES, COMMAND_PROPERTIES, Origin, Properties, PropertyInfo, PropertyValue,
    STREAM_PROPERTIES, THREAD_POOL_PROPERTIES,
};
use crate::error::ConfigError;

/// What a successful load did: how many values the source gives now, which changed, and the
/// warnings (names that are not properties, and changes some keys do not take).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LoadReport {
    /// The values this source gives now (each a property of one key or a global default).
    pub applied: usize,
    /// The full names whose value from this source was added, changed or removed by this load,
    /// sorted. Empty when a reload found nothing new.
    pub changed: Vec<String>,
    /// Names outside `hystrix.*` that are not close to any property name (another library's
    /// keys in a shared file), left alone without a warning.
    pub skipped: usize,
    /// What the caller should know; each is also logged with `tracing::warn!`.
    pub warnings: Vec<LoadWarning>,
}

/// Something a load left alone, or a change some keys do not take. Loads never fail for these.
///
/// The message shows names as [`str::escape_debug`] does, so that a line break or a NUL in a
/// name cannot split a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadWarning {
    /// A name that is not a property (Hystrix files often carry other libraries' keys): ignored.
    UnknownProperty {
        /// The name as written.
        name: String,
        /// Where it was written.
        origin: Origin,
        /// The closest property name, when one is close (a typo, another case).
        suggestion: Option<String>,
    },
    /// A Hystrix property that hystrix-rs does not have: ignored, with the reason.
    Unsupported {
        /// The name as written.
        name: String,
        /// Where it was written.
        origin: Origin,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// A property name whose key no command, pool or collapser can have (e.g. one with
    /// surrounding whitespace): ignored.
    UnusableKey {
        /// The name as written.
        name: String,
        /// Where it was written.
        origin: Origin,
        /// Why the key cannot be used.
        reason: String,
    },
    /// A name set twice in one source: the later value applies (as in a Java `.properties`
    /// file).
    Duplicate {
        /// The full name.
        name: String,
        /// The value that applies.
        origin: Origin,
        /// The earlier value, ignored.
        ignored: Origin,
    },
    /// A changed global default of a property that is fixed once a key is in use:
    /// the keys listed keep their value; keys created later take the new one.
    FixedKept {
        /// The global default's full name.
        name: String,
        /// The keys in use that keep their value, sorted.
        keys: Vec<String>,
    },
}

impl LoadWarning {
    /// Whether a registry that denies unknown properties refuses the load for this warning: a
    /// name that is not a property (a typo, a Hystrix property hystrix-rs does not have, a key
    /// no command can have), not a consequence of valid values.
    fn is_unknown_name(&self) -> bool {
        matches!(
            self,
            LoadWarning::UnknownProperty { .. }
                | LoadWarning::Unsupported { .. }
                | LoadWarning::UnusableKey { .. }
        )
    }

    /// The message, saying that the name was `done` ("ignored" or "refused").
    fn describe(&self, f: &mut fmt::Formatter<'_>, done: &str) -> fmt::Result {
        match self {
            LoadWarning::UnknownProperty {
                name,
                origin,
                suggestion: Some(suggestion),
            } => write!(
                f,
                "{origin}: unknown property `{}` {done}; did you mean `{suggestion}`?",
                name.escape_debug()
            ),
            LoadWarning::UnknownProperty { name, origin, .. } => {
                write!(
                    f,
                    "{origin}: unknown property `{}` {done}",
                    name.escape_debug()
                )
            }
            LoadWarning::Unsupported {
                name,
                origin,
                reason,
            } => write!(f, "{origin}: `{}` {done}: {reason}", name.escape_debug()),
            LoadWarning::UnusableKey {
                name,
                origin,
                reason,
            } => write!(f, "{origin}: `{}` {done}: {reason}", name.escape_debug()),
            LoadWarning::Duplicate {
                name,
                origin,
                ignored,
            } => write!(
                f,
                "{origin}: `{}` is also set at {ignored}; the value here applies",
                name.escape_debug()
            ),
            LoadWarning::FixedKept { name, keys } => write!(
                f,
                "`{}` is fixed once a key is in use: {} {}, keys created later use the new one",
                name.escape_debug(),
                keys.join(", "),
                if keys.len() == 1 {
                    "keeps its value"
                } else {
                    "keep their value"
                }
            ),
        }
    }
}

impl fmt::Display for LoadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(f, "ignored")
    }
}

/// Why a load changed nothing: the source could not be read or parsed, or a value was refused.
/// Every variant names where (file and line, variable, or settings section) and, for a value,
/// the property.
///
/// The message shows property and variable names (and values, through [`ConfigError`]) as
/// [`str::escape_debug`] does, so that a line break or a NUL cannot split a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The operating system's reason.
        reason: String,
    },
    /// The file's extension names no format this build reads (`.toml`, `.properties`).
    UnknownFormat {
        /// The file.
        path: std::path::PathBuf,
    },
    /// The text is not valid in its format.
    Syntax {
        /// The file.
        path: std::path::PathBuf,
        /// The 1-based line where the problem is.
        line: usize,
        /// The property name on that line, when it can be read.
        property: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A value was refused: it does not parse, is out of range, breaks a rule tying properties
    /// together, or changes a fixed property of a key in use. `error` names the property.
    Invalid {
        /// Where the value was written. For a rule between properties: the first value at
        /// which the source, read in order, breaks the rule.
        origin: Origin,
        /// Why, naming the full property name (boxed: it is large, and errors are rare).
        error: Box<ConfigError>,
    },
    /// A rule broke because this load removed values the source gave before (e.g. a run-time
    /// value relied on one): `error` names the property.
    Removal {
        /// The source: a file's path, `environment` or ``section `<name>` ``.
        source: String,
        /// Why, naming the full property name.
        error: Box<ConfigError>,
    },
    /// Two environment variables set one property (its verbatim and its shell-friendly name).
    Conflict {
        /// The full property name.
        name: String,
        /// The variables.
        variables: [String; 2],
    },
    /// The source names something that is not a property, in a registry that denies unknown
    /// properties
    /// ([`RegistryBuilder::deny_unknown_properties`](crate::RegistryBuilder::deny_unknown_properties)):
    /// the first such name, as the warning it would otherwise be (with its origin and
    /// did-you-mean suggestion).
    Denied {
        /// What a registry that allows unknown names would have warned of.
        warning: Box<LoadWarning>,
    },
    /// Loading the file panicked: a bug, in a parser (another crate's code, met on unusual
    /// input) or in hystrix-rs. The panic was caught, so the file is refused like any invalid
    /// file: nothing changed, and a watcher goes on watching.
    Internal {
        /// The file.
        path: std::path::PathBuf,
        /// What panicked, and the panic's message.
        message: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read { path, reason } => {
                write!(f, "cannot read {}: {reason}", path.display())
            }
            LoadError::UnknownFormat { path } => write!(
                f,
                "cannot tell the format of {}: expected a .toml or .properties file (or name \
                 the format with load_file_as)",
                path.display()
            ),
            LoadError::Syntax {
                path,
                line,
                property: Some(property),
                message,
            } => write!(
                f,
                "{}:{line}: `{}`: {message}",
                path.display(),
                // As written in the file (`\u00zz`, not `\\u00zz`): escaped as `escape_debug`
                // does, but a backslash once.
                property.escape_debug().to_string().replace(r"\\", r"\")
            ),
            LoadError::Syntax {
                path,
                line,
                message,
                ..
            } => write!(f, "{}:{line}: {message}", path.display()),
            LoadError::Invalid { origin, error } => write!(f, "{origin}: {error}"),
            LoadError::Removal { source, error } => write!(f, "{source}: {error}"),
            LoadError::Conflict { name, variables } => write!(
                f,
                "`{}` is set by two environment variables, {} and {}: keep one",
                name.escape_debug(),
                variables[0].escape_debug(),
                variables[1].escape_debug()
            ),
            LoadError::Denied { warning } => {
                warning.describe(f, "refused")?;
                f.write_str(" (this registry denies unknown properties: nothing was loaded)")
            }
            LoadError::Internal { path, message } => write!(
                f,
                "cannot load {}: {message} (a bug: nothing was changed; please report it with \
                 the file)",
                path.display()
            ),
        }
    }
}

impl StdError for LoadError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            LoadError::Invalid { error, .. } | LoadError::Removal { error, .. } => {
                Some(error.as_ref())
            }
            _ => None,
        }
    }
}

/// One value read from a source: its name as written, its value, where it was written, and a
/// reason to refuse it whatever the property (a TOML array).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) value: PropertyValue,
    pub(crate) origin: Origin,
    pub(crate) refused: Option<&'static str>,
}

impl Entry {
    pub(crate) fn new(name: String, value: PropertyValue, origin: Origin) -> Self {
        Entry {
            name,
            value,
            origin,
            refused: None,
        }
    }

    /// The entry for a value at the end of a path of keys in a tree of tables (a TOML file, a
    /// section of an application's settings), `name` being the path joined with dots (see
    /// [`joined`]): one reading of values for every tree-shaped source.
    #[cfg(any(feature = "config-files", feature = "serde"))]
    pub(crate) fn of_leaf(name: String, leaf: Leaf, origin: Origin) -> Self {
        let (value, refused) = match leaf {
            Leaf::Bool(flag) => (PropertyValue::Bool(flag), None),
            Leaf::Int(int) => (PropertyValue::Int(int), None),
            Leaf::Str(text) | Leaf::Text(text) => (PropertyValue::Str(text), None),
            Leaf::Array(shown) => (
                PropertyValue::Str(shown),
                Some("an array is not a property value"),
            ),
        };
        Entry {
            refused,
            ..Entry::new(name, value, origin)
        }
    }
}

/// A value in a tree of tables, as its source typed it.
#[cfg(any(feature = "config-files", feature = "serde"))]
pub(crate) enum Leaf {
    Bool(bool),
    /// A whole number within `i64` (one beyond is [`Leaf::Text`], for its property to refuse by
    /// range).
    Int(i64),
    /// A string: parsed by the property's type (`"250"` works as well as `250`).
    Str(String),
    /// Any other scalar (a float, a date, a number beyond `i64`) as written: left to the
    /// property's type, which names what it expects (a float reads where a float is wanted).
    Text(String),
    /// An array, as written: no property takes one.
    Array(String),
}

/// The name `prefix` continued by `key`: a tree's path of keys joined with dots.
#[cfg(any(feature = "config-files", feature = "serde"))]
pub(crate) fn joined(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

/// What a name in a source is.
enum Kind {
    Property,
    UnusableKey(String),
    Unsupported(&'static str),
    Unknown(Option<String>),
    /// Outside `hystrix.*` and far from every property: another library's key.
    Foreign,
}

fn kind_of(name: &str) -> Kind {
    match parse_name(name) {
        Ok(_) => return Kind::Property,
        Err(ConfigError::UnknownProperty { .. }) => {}
        Err(other) => return Kind::UnusableKey(other.to_string()),
    }
    if name.starts_with("hystrix.timer.threadpool.") {
        return Kind::Unsupported(
            "hystrix-rs has no timer thread pool: timeouts and timers run on the registry's Clock",
        );
    }
    if name.starts_with("hystrix.plugin.") {
        return Kind::Unsupported(
            "plugins are registered in code, per registry, with Registry::builder()",
        );
    }
    let suggestion = suggest(name);
    if name.starts_with("hystrix.") || suggestion.is_some() {
        Kind::Unknown(suggestion)
    } else {
        Kind::Foreign
    }
}

/// The keyed kinds: the first two segments of their names, and their properties.
const KEYED_KINDS: [(&str, &[PropertyInfo]); 3] = [
    ("hystrix.command", COMMAND_PROPERTIES),
    ("hystrix.threadpool", THREAD_POOL_PROPERTIES),
    ("hystrix.collapser", COLLAPSER_PROPERTIES),
];

/// `name` under the kind whose property it ends with, when it sits under another kind's
/// prefix (`hystrix.command.A.coreSize`: `hystrix.threadpool.A.coreSize`), the key kept.
fn of_another_kind(name: &str) -> Option<String> {
    let (under, rest) = KEYED_KINDS.iter().find_map(|(prefix, _)| {
        let rest = name.strip_prefix(prefix)?.strip_prefix('.')?;
        Some((*prefix, rest))
    })?;
    KEYED_KINDS
        .iter()
        .filter(|(prefix, _)| *prefix != under)
        .flat_map(|(prefix, infos)| infos.iter().map(move |info| (*prefix, info)))
        .find_map(|(prefix, info)| {
            let key = rest.strip_suffix(info.name)?.strip_suffix('.')?;
            let refused = key.is_empty()
                || key.len() > MAX_KEY_LEN
                || (key == "default" && info.instance_only);
            (!refused).then(|| format!("{prefix}.{key}.{}", info.name))
        })
}

/// The longest key, in bytes, that [`CommandKey::new`](crate::CommandKey::new) and the other
/// keys' `new` accept.
const MAX_KEY_LEN: usize = 200;

/// The property name closest to `name`, if one is close: within a quarter of the property
/// name's length in edits (at least 2), comparing without case first (names are case-sensitive,
/// so `coresize` suggests `coreSize`). The key is kept as written.
///
/// A key longer than a key may be (200 bytes) is suggested nothing: no command, pool or
/// collapser can have it. This also bounds the cost: the edit distance takes time quadratic in
/// the lengths compared, and a candidate is as long as the name written only when its key is.
pub(crate) fn suggest(name: &str) -> Option<String> {
    if let Some(moved) = of_another_kind(name) {
        return Some(moved);
    }
    let lower = name.to_ascii_lowercase();
    let mut best: Option<((usize, usize), String)> = None;
    let mut consider = |candidate: String, property: &str| {
        let budget = (property.len() / 4).max(2);
        if candidate.len().abs_diff(name.len()) > budget || candidate == name {
            return;
        }
        let score = (
            strsim::osa_distance(&lower, &candidate.to_ascii_lowercase()),
            strsim::osa_distance(name, &candidate),
        );
        if score.0 <= budget && best.as_ref().is_none_or(|(top, _)| score < *top) {
            best = Some((score, candidate));
        }
    };
    for info in STREAM_PROPERTIES {
        consider(format!("hystrix.{}", info.name), info.name);
    }
    let segments: Vec<&str> = name.split('.').collect();
    for (prefix, infos) in KEYED_KINDS {
        for info in infos {
            let tail = info.name.split('.').count();
            // A typo may also add or lose a dot: try the key one segment shorter or longer.
            for tail in tail.saturating_sub(1).max(1)..=tail + 1 {
                if segments.len() < 3 + tail {
                    continue;
                }
                let key = &segments[2..segments.len() - tail];
                // The key's length, dots included, without joining it.
                if key.iter().map(|segment| segment.len() + 1).sum::<usize>() > MAX_KEY_LEN + 1 {
                    continue;
                }
                let key = key.join(".");
                let key = if key.eq_ignore_ascii_case("default") {
                    if info.instance_only {
                        continue;
                    }
                    "default".to_owned()
                } else {
                    key
                };
                consider(format!("{prefix}.{key}.{}", info.name), info.name);
            }
        }
    }
    best.map(|(_, candidate)| candidate)
}

impl Properties {
    /// Replaces every value `source` gave with `entries`, all or nothing, and reports what
    /// changed. Names that are not properties are warned about (or skipped), never errors.
    pub(crate) fn load_entries(
        &self,
        source: SourceId,
        entries: &[Entry],
    ) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (index, entry) in entries.iter().enumerate() {
            if let Some(earlier) = last.insert(&entry.name, index) {
                report.warnings.push(LoadWarning::Duplicate {
                    name: entry.name.clone(),
                    origin: entry.origin.clone(),
                    ignored: entries[earlier].origin.clone(),
                });
            }
        }
        let mut writes = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            if last.get(entry.name.as_str()) != Some(&index) {
                continue;
            }
            match kind_of(&entry.name) {
                Kind::Property => {
                    let target = parse_name(&entry.name);
                    let error = match (entry.refused, target) {
                        (None, Ok(target)) => {
                            writes.push(Write {
                                target,
                                name: &entry.name,
                                value: Some(entry.value.clone()),
                                origin: entry.origin.clone(),
                            });
                            continue;
                        }
                        (Some(reason), _) => ConfigError::InvalidValue {
                            name: entry.name.clone(),
                            value: entry.value.to_string(),
                            reason: reason.to_owned(),
                        },
                        (None, Err(error)) => error,
                    };
                    return Err(LoadError::Invalid {
                        origin: entry.origin.clone(),
                        error: Box::new(error),
                    });
                }
                Kind::UnusableKey(reason) => report.warnings.push(LoadWarning::UnusableKey {
                    name: entry.name.clone(),
                    origin: entry.origin.clone(),
                    reason,
                }),
                Kind::Unsupported(reason) => report.warnings.push(LoadWarning::Unsupported {
                    name: entry.name.clone(),
                    origin: entry.origin.clone(),
                    reason,
                }),
                Kind::Unknown(suggestion) => report.warnings.push(LoadWarning::UnknownProperty {
                    name: entry.name.clone(),
                    origin: entry.origin.clone(),
                    suggestion,
                }),
                Kind::Foreign => report.skipped += 1,
            }
        }
        let denied = self.rules().deny_unknown;
        if let Some(warning) = report
            .warnings
            .iter()
            .find(|w| denied && w.is_unknown_name())
        {
            return Err(LoadError::Denied {
                warning: Box::new(warning.clone()),
            });
        }
        let applied = self
            .replace_source(&source, &writes)
            .map_err(|err| attribute(err, &writes, &source))?;
        report.applied = writes.len();
        report.changed = applied.changed;
        let mut kept: Vec<LoadWarning> = Vec::new();
        for fixed in applied.fixed_kept {
            match kept.last_mut() {
                Some(LoadWarning::FixedKept { name, keys }) if *name == fixed.name => {
                    keys.push(fixed.key);
                }
                _ => kept.push(LoadWarning::FixedKept {
                    name: fixed.name,
                    keys: vec![fixed.key],
                }),
            }
        }
        report.warnings.extend(kept);
        for warning in &report.warnings {
            tracing::warn!("hystrix: {warning}");
        }
        tracing::info!(
            "hystrix: loaded {} properties from {} ({} changed)",
            report.applied,
            describe(&source),
            report.changed.len()
        );
        Ok(report)
    }
}

fn describe(source: &SourceId) -> String {
    match source {
        SourceId::File(path) => path.display().to_string(),
        SourceId::Section(name) => format!("section `{}`", name.escape_debug()),
        SourceId::Env => "environment".to_owned(),
        SourceId::Runtime => "run time".to_owned(),
    }
}

/// Where a refused load went wrong: the write that broke a rule (see
/// `Properties::replace_source`), or the removal of values the source gave before.
fn attribute(err: StageError, writes: &[Write<'_>], source: &SourceId) -> LoadError {
    let StageError { write, error } = err;
    match write.and_then(|index| writes.get(index)) {
        Some(write) => {
            let value = write.value.as_ref().map(ToString::to_string);
            LoadError::Invalid {
                origin: write.origin.clone(),
                error: Box::new(name_the_value(
                    error,
                    write.name,
                    &value.unwrap_or_default(),
                    "",
                )),
            }
        }
        None => LoadError::Removal {
            source: describe(source),
            error: Box::new(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_fixed_value_speaks_of_one_key_or_several() {
        let kept = |keys: &[&str]| {
            LoadWarning::FixedKept {
                name: "hystrix.command.default.metrics.rollingStats.numBuckets".to_owned(),
                keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            }
            .to_string()
        };
        assert!(kept(&["GetUser"]).contains(": GetUser keeps its value, keys"));
        assert!(kept(&["A", "B"]).contains(": A, B keep their value, keys"));
    }

    #[test]
    fn suggestions_fix_typos_case_and_keep_the_key() {
        let too_long = format!("hystrix.command.{}.fallback.enabeld", "k".repeat(201));
        let moved_too_long = format!("hystrix.command.{}.coreSize", "k".repeat(201));
        let cases = [
            (
                "hystrix.command.default.execution.isolation.thread.timeoutInMiliseconds",
                Some("hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds"),
            ),
            (
                "hystrix.command.GetUser.execution.isolation.thread.interruptOnCancel",
                Some("hystrix.command.GetUser.execution.isolation.thread.interruptOnFutureCancel"),
            ),
            (
                "hystrix.threadpool.svc.users.coresize",
                Some("hystrix.threadpool.svc.users.coreSize"),
            ),
            (
                "hystrix.comand.GetUser.fallback.enabled",
                Some("hystrix.command.GetUser.fallback.enabled"),
            ),
            (
                "hystrix.COMMAND.DEFAULT.CIRCUITBREAKER.ENABLED",
                Some("hystrix.command.default.circuitBreaker.enabled"),
            ),
            (
                "hystrix.stream.dashboard.intervalInMilis",
                Some("hystrix.stream.dashboard.intervalInMilliseconds"),
            ),
            // A property of another kind: the same key under that kind.
            (
                "hystrix.command.UserService.coreSize",
                Some("hystrix.threadpool.UserService.coreSize"),
            ),
            (
                "hystrix.threadpool.P.fallback.enabled",
                Some("hystrix.command.P.fallback.enabled"),
            ),
            (
                "hystrix.command.default.maxRequestsInBatch",
                Some("hystrix.collapser.default.maxRequestsInBatch"),
            ),
            ("hystrix.command.GetUser.somethingElse", None),
            // A key no command can have, however close the rest.
            (too_long.as_str(), None),
            (moved_too_long.as_str(), None),
            ("ribbon.ReadTimeout", None),
            ("eureka.client.serviceUrl.defaultZone", None),
        ];
        for (name, expected) in cases {
            assert_eq!(suggest(name).as_deref(), expected, "{name}");
        }
    }

    #[test]
    fn the_longest_key_is_the_longest_a_key_may_be() {
        assert!(crate::CommandKey::new("k".repeat(MAX_KEY_LEN)).is_ok());
        assert!(crate::CommandKey::new("k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(crate::ThreadPoolKey::new("k".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
