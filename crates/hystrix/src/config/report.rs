//! What [`Properties::explain`](crate::config::Properties::explain) reports: a property's
//! effective value, the layer and source that gave it, and the values it hides.

use std::fmt;
use std::path::PathBuf;

use crate::config::PropertyValue;

/// One of the four layers of a value, lowest precedence first: a property takes its value from the
/// highest layer that has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PropertyLayer {
    /// Hystrix's default, in code.
    CodeDefault,
    /// The dynamic global default, `hystrix.<kind>.default.<name>` (for the global stream
    /// properties, their only name).
    GlobalDefault,
    /// The value given in code to the key's builder (e.g. `Command::builder(..).timeout(..)`);
    /// it hides the dynamic global default.
    Builder,
    /// The dynamic per-key value, `hystrix.<kind>.<Key>.<name>`.
    PerKey,
}

impl PropertyLayer {
    /// A short name: `"code default"`, `"global default"`, `"builder"` or `"per key"`.
    pub const fn name(self) -> &'static str {
        match self {
            PropertyLayer::CodeDefault => "code default",
            PropertyLayer::GlobalDefault => "global default",
            PropertyLayer::Builder => "builder",
            PropertyLayer::PerKey => "per key",
        }
    }
}

impl fmt::Display for PropertyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a value was written. Within a dynamic layer the sources rank file or section <
/// environment < run time; among files and sections, the one first loaded later ranks higher
/// (reloading one keeps its rank).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// In code: Hystrix's default, or a builder call.
    Code,
    /// A configuration file (`Properties::load_file`, feature `config-files`),
    /// at a 1-based line.
    File {
        /// The file's path, made absolute when it was loaded (or the name given to
        /// `Properties::load_text`).
        path: PathBuf,
        /// The 1-based line of the value (of its first line, for a continued `.properties`
        /// line).
        line: usize,
    },
    /// An environment variable ([`Properties::load_env`](crate::config::Properties::load_env)).
    Environment {
        /// The variable's name, e.g. `HYSTRIX__command__GetUser__fallback__enabled`.
        variable: String,
    },
    /// A section of the application's own settings, deserialized as a
    /// `config::PropertiesSection` and loaded with `Properties::load_section` (feature
    /// `serde`).
    Section {
        /// The name it was loaded under, e.g. `hystrix` or `settings.toml [hystrix]`.
        name: String,
    },
    /// Set at run time with [`Properties::set`](crate::config::Properties::set) or
    /// [`set_all`](crate::config::Properties::set_all) (the admin endpoint uses them).
    Runtime,
}

impl fmt::Display for Origin {
    /// `code`, `<path>:<line>`, `environment variable <NAME>`, ``section `<name>` `` (names
    /// escaped as [`str::escape_debug`] does) or `run time`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Code => f.write_str("code"),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Environment { variable } => {
                write!(f, "environment variable {}", variable.escape_debug())
            }
            Origin::Section { name } => write!(f, "section `{}`", name.escape_debug()),
            Origin::Runtime => f.write_str("run time"),
        }
    }
}

/// A value that one layer and source give a property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerValue {
    /// The value; `None` only for the code default of an optional property that has none
    /// (`threadPoolKeyOverride`, `execution.isolation.strategy`).
    pub value: Option<PropertyValue>,
    /// The layer that holds it.
    pub layer: PropertyLayer,
    /// The source that wrote it.
    pub origin: Origin,
}

/// A property's effective value and its provenance, from
/// [`Properties::explain`](crate::config::Properties::explain).
///
/// For a key in use (a command, pool or collapser was defined with it) `value` is the value its
/// executions read now; for any other key, what a new key would get.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PropertyReport {
    /// The full name asked about, e.g.
    /// `hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds`.
    pub name: String,
    /// The effective value (`None` for an unset optional property).
    pub value: Option<PropertyValue>,
    /// The layer the value comes from.
    pub layer: PropertyLayer,
    /// The source that wrote the value.
    pub origin: Origin,
    /// `true` if a change applies to keys in use at their next execution; `false` for a
    /// property fixed once its key is in use, and for the stream properties, which
    /// are read once when a stream server is built.
    pub dynamic: bool,
    /// `true` if the key has live state (a definition uses it).
    pub key_in_use: bool,
    /// For a fixed property of a key in use: the value the layers give now, if it differs from
    /// the one the key keeps; it applies after `Registry::remove` of the key.
    pub pending: Option<LayerValue>,
    /// The values lower layers or sources give, hidden by the effective one, highest first.
    pub overridden: Vec<LayerValue>,
}
