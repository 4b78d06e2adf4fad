//! Properties: Hystrix's names and defaults, typed, validated and layered.
//!
//! Every command and thread-pool property has its Hystrix name (`execution.isolation.thread.
//! timeoutInMilliseconds`, `coreSize`, ...) and default. Values come from four layers, lowest to
//! highest, exactly as Hystrix's chained properties:
//!
//! 1. the default in code ([`CommandProperties::default`]);
//! 2. the dynamic global default, `hystrix.command.default.<name>`;
//! 3. the value given to the command's builder;
//! 4. the dynamic per-key value, `hystrix.command.<CommandKey>.<name>`.
//!
//! A builder value therefore hides the dynamic global default; only the per-key value can
//! override it. A change of a dynamic value applies to the next execution. Properties marked
//! *fixed* (the window sizes and bucket counts, `threadPoolKeyOverride`, `maxQueueSize`) cannot
//! change for a key already in use: a per-key change is refused, a global change applies to keys
//! created later and is reported for the others ([`LoadWarning::FixedKept`] and a log line).
//!
//! Invalid values are refused with the property's full name and the reason, never replaced by a
//! default.
//!
//! ```
//! use hystrix::Registry;
//!
//! let registry = Registry::new();
//! registry
//!     .properties()
//!     .set("hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds", 250)?;
//! let err = registry
//!     .properties()
//!     .set("hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage", 120)
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "invalid value `120` for `hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage`: \
//!      must be a percentage from 0 to 100"
//! );
//! # Ok::<(), hystrix::ConfigError>(())
//! ```
//!
//! # Sources
//!
//! The two dynamic layers (global default, per key) are each fed by three kinds of source,
//! ranked within the layer, lowest first:
//!
//! 1. configuration files (`Properties::load_file`, feature `config-files`, on by default) and
//!    sections of the application's own settings read with serde (`PropertiesSection`,
//!    `Properties::load_section`, feature `serde`); among several, the one first loaded later
//!    ranks higher (a reload keeps its rank);
//! 2. the environment ([`Properties::load_env`], [`Properties::load_env_from`]);
//! 3. run-time changes ([`Properties::set`], [`Properties::set_all`], [`Properties::unset`];
//!    the admin endpoint uses them).
//!
//! So a per-key value from a file still beats a global default set at run time: the four layers
//! above come first, the sources only order values within one layer. Loading a source again
//! replaces only what that source gave before: a reload of a file keeps run-time and
//! environment values. Every load checks the whole result before it swaps it in, so an invalid
//! source changes nothing ([`LoadError`] names the file and line, or the variable, and the
//! property). [`Properties::explain`] reports a property's effective value, its layer and its
//! source ([`Origin`]: code, a file's line, a variable, a settings section, run time).
//!
//! Names that are not properties do not fail a load by default (property files often carry
//! other libraries' keys): a name under `hystrix.` is a warning in the [`LoadReport`], with a
//! did-you-mean suggestion when one is close (`...timeoutInMiliseconds`: did you mean
//! `...timeoutInMilliseconds`?); a name outside `hystrix.` is a warning only when it is close to
//! a property name, else it is skipped. A registry built with
//! [`deny_unknown_properties`](crate::RegistryBuilder::deny_unknown_properties) refuses, from
//! every source, a load that would warn of such a name ([`LoadError::Denied`]).
//!
//! ## Java `.properties` files
//!
//! A Hystrix or Archaius property file loads unchanged: the same names, `=`, `:` or whitespace
//! between name and value, `#` and `!` comments, `\` continuation lines and escapes, as
//! `java.util.Properties` reads them (`FileFormat::Properties`).
//!
//! A file that is valid UTF-8 is read as UTF-8; any other is read as ISO-8859-1, as Java's
//! `Properties.load(InputStream)` reads every file, so a Latin-1 `# café` comment loads. A file
//! that begins with a UTF-8 byte-order mark but is not valid UTF-8 is refused, naming the line.
//!
//! ```properties
//! hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds=1000
//! hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage: 40
//! hystrix.threadpool.UserService.coreSize 20
//! ```
//!
//! ## TOML files
//!
//! A value's full name is the path of TOML keys that leads to it, joined with dots. So a table
//! per key with dotted property names, fully nested tables, and quoted full names all mean the
//! same; a command key that contains dots is quoted in a table header.
//!
//! ```toml
//! [hystrix.command.default]
//! execution.isolation.thread.timeoutInMilliseconds = 1000
//! circuitBreaker.errorThresholdPercentage = 50
//!
//! [hystrix.command.GetUser]
//! execution.isolation.thread.timeoutInMilliseconds = 250
//! "circuitBreaker.requestVolumeThreshold" = 10   # a quoted key's dots count too
//!
//! [hystrix.command."svc.users.GetProfile"]       # a key with dots
//! fallback.enabled = false
//!
//! [hystrix.threadpool.UserService]
//! coreSize = 20
//! maxQueueSize = 100
//! ```
//!
//! Integers, booleans and strings are values (`"500"` works as well as `500`); a float, a date
//! or an array is refused by name. A value that is not TOML at all is a syntax error that names
//! the property too: `strategy = THREAD` (a string must be quoted) gives
//! ``hystrix.toml:2: `hystrix.command.GetUser.execution.isolation.strategy`: `THREAD` is not a
//! TOML value; a string is written in quotes: "THREAD"``.
//!
//! ## Environment variables
//!
//! Two forms, both exact and case-sensitive (see [`env_var_name`]):
//!
//! | form | variable | property |
//! |---|---|---|
//! | verbatim (as Archaius reads the environment) | `hystrix.command.GetUser.fallback.enabled` | the same |
//! | shell-friendly: `HYSTRIX__`, then the name after `hystrix.` with each `.` written `__` | `HYSTRIX__command__GetUser__fallback__enabled` | `hystrix.command.GetUser.fallback.enabled` |
//!
//! The shell-friendly form keeps every letter's case, because names and keys are
//! case-sensitive: `HYSTRIX__threadpool__UserService__coreSize=20`. It is read back by taking
//! each `__` as a `.`, left to right, so it is reversible for every name without `__` and
//! without a `_` just before a `.` (give those verbatim). A property set both ways is an error
//! ([`LoadError::Conflict`]), not a guess.
//!
//! ## Hot reload
//!
//! With the feature `reload` (off by default), `Properties::watch_file` loads a file and
//! reloads it whenever it changes: it watches the file's folder (editors replace files by
//! renaming), waits for changes to settle (200 ms by default), then loads the file as
//! `Properties::load_file` does. An invalid file changes nothing; the last good values stay,
//! the error (file, line, property) is logged with `tracing::error!` and handed to the
//! `on_reload` callback. No file ends the watcher, not even one that makes a parser panic
//! (caught: [`LoadError::Internal`]); the next edit is loaded as usual. The watcher stops when
//! its handle drops; `reload_now()` reloads at once, for tests and admin tools.

mod collapser;
mod command;
mod env;
#[cfg(feature = "config-files")]
mod file;
#[cfg(feature = "reload")]
mod reload;
mod report;
#[cfg(feature = "serde")]
mod section;
mod source;
mod store;
mod stream;
mod thread_pool;
mod value;

use std::fmt;
use std::str::FromStr;

pub(crate) use collapser::CollapserLayer;
pub use collapser::{COLLAPSER_PROPERTIES, CollapserProperties};
pub use command::{COMMAND_PROPERTIES, CommandProperties};
pub(crate) use command::{CommandLayer, HotCommandProperties, HotSnapshot, MAX_BUCKETS};
pub use env::{ENV_PREFIX, env_var_name, property_name_of_env_var};
#[cfg(feature = "config-files")]
pub use file::FileFormat;
#[cfg(feature = "reload")]
pub use reload::{DEFAULT_DEBOUNCE, FileWatcher, ReloadEvent, ReloadTrigger, WatchOptions};
pub use report::{LayerValue, Origin, PropertyLayer, PropertyReport};
#[cfg(feature = "serde")]
pub use section::PropertiesSection;
pub use source::{LoadError, LoadReport, LoadWarning};
pub use store::Properties;
pub(crate) use store::{
    CollapserKind, CommandKind, PropertyCell, Rules, ThreadPoolKind, layer_error,
};
pub(crate) use stream::StreamLayer;
pub use stream::{STREAM_PROPERTIES, StreamProperties};
pub(crate) use thread_pool::{HotPoolSnapshot, ThreadPoolLayer};
pub use thread_pool::{THREAD_POOL_PROPERTIES, ThreadPoolProperties};
pub use value::PropertyValue;
pub(crate) use value::{PropertyType, ceil_millis};

/// How a command isolates its run from the caller (Hystrix's `execution.isolation.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsolationStrategy {
    /// Run on the thread pool of the command's thread-pool key; bounded by its size and queue.
    Thread,
    /// Run on the caller's thread (or task), bounded by a semaphore of
    /// `execution.isolation.semaphore.maxConcurrentRequests` permits.
    Semaphore,
}

impl IsolationStrategy {
    /// Hystrix's name: `"THREAD"` or `"SEMAPHORE"`.
    pub const fn name(self) -> &'static str {
        match self {
            IsolationStrategy::Thread => "THREAD",
            IsolationStrategy::Semaphore => "SEMAPHORE",
        }
    }
}

impl fmt::Display for IsolationStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IsolationStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_uppercase().as_str() {
            "THREAD" => Ok(IsolationStrategy::Thread),
            "SEMAPHORE" => Ok(IsolationStrategy::Semaphore),
            _ => Err("expected THREAD or SEMAPHORE".into()),
        }
    }
}

impl PropertyType for IsolationStrategy {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        match value {
            PropertyValue::Str(s) => s.parse(),
            _ => Err("expected THREAD or SEMAPHORE".into()),
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Str(self.name().to_owned()))
    }
}

/// Whether a property can change while its key is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Read at each execution (or schedule): a change applies to the next one.
    Dynamic,
    /// Read once when the key's state is created (it sizes a structure).
    Fixed,
}

/// Where a property may be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Both `hystrix.<kind>.default.<name>` and `hystrix.<kind>.<Key>.<name>`.
    Any,
    /// Only per key (Hystrix's `threadPoolKeyOverride`).
    InstanceOnly,
}

/// Describes one property: its Hystrix name and how it may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyInfo {
    /// The name after `hystrix.command.<Key>.` (or `hystrix.threadpool.<Key>.`), e.g.
    /// `"execution.isolation.thread.timeoutInMilliseconds"`.
    pub name: &'static str,
    /// `true` if a change applies to keys already in use (at their next execution); `false` if
    /// the value is fixed once a key's state exists.
    pub dynamic: bool,
    /// `true` if the property exists only per key (no `default` form).
    pub instance_only: bool,
}

/// A property name that is not in the table, or a value that does not parse or validate.
#[derive(Debug)]
pub(crate) enum LayerError {
    Unknown,
    InstanceOnly,
    Invalid(String),
}

/// A check of one property value; `Err` holds the reason shown to the user.
pub(crate) type Check<T> = fn(&T) -> Result<(), String>;

pub(crate) fn no_check<T>(_: &T) -> Result<(), String> {
    Ok(())
}

pub(crate) fn positive_ms(v: &u64) -> Result<(), String> {
    if *v >= 1 {
        Ok(())
    } else {
        Err("must be at least 1 ms".into())
    }
}

pub(crate) fn at_least_one<T: Into<u64> + Copy>(v: &T) -> Result<(), String> {
    if (*v).into() >= 1 {
        Ok(())
    } else {
        Err("must be at least 1".into())
    }
}

/// Generates, from one table, a kind's resolved properties struct, its layer of optional values,
/// and its [`PropertyInfo`] list, so names, types and defaults are written once.
macro_rules! property_table {
    (
        $(#[$smeta:meta])*
        pub struct $Props:ident;
        layer $Layer:ident;
        info $INFO:ident;
        $(
            $(#[$fmeta:meta])*
            $field:ident: $ty:ty = $default:expr;
                $name:literal, $mode:ident, $scope:ident, $check:expr;
        )*
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        pub struct $Props {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $Props {
            /// Hystrix's defaults.
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        /// Every property of this kind, in table order.
        pub static $INFO: &[$crate::config::PropertyInfo] = &[
            $( $crate::config::PropertyInfo {
                name: $name,
                dynamic: matches!($crate::config::Mode::$mode, $crate::config::Mode::Dynamic),
                instance_only: matches!($crate::config::Scope::$scope, $crate::config::Scope::InstanceOnly),
            }, )*
        ];

        impl $Props {
            /// The value of the property named `name` (its Hystrix name, without the
            /// `hystrix.<kind>.<Key>.` prefix); `None` for an unknown name or an unset optional
            /// property.
            pub fn get(&self, name: &str) -> Option<$crate::config::PropertyValue> {
                match name {
                    $( $name => $crate::config::PropertyType::to_value(&self.$field), )*
                    _ => None,
                }
            }

            /// Keeps `current`'s value of every fixed property; returns the names that differed.
            pub(crate) fn keep_fixed_from(&mut self, current: &Self) -> Vec<&'static str> {
                let mut kept = Vec::new();
                $(
                    if matches!($crate::config::Mode::$mode, $crate::config::Mode::Fixed)
                        && self.$field != current.$field
                    {
                        self.$field = current.$field.clone();
                        kept.push($name);
                    }
                )*
                kept
            }
        }

        /// One layer of values: `None` where the layer says nothing.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub(crate) struct $Layer {
            $( pub(crate) $field: Option<$ty>, )*
        }

        impl $Layer {
            /// Parses and checks `value`, then stores it under `name`.
            pub(crate) fn set(
                &mut self,
                name: &str,
                value: &$crate::config::PropertyValue,
                instance: bool,
            ) -> Result<(), $crate::config::LayerError> {
                match name {
                    $( $name => {
                        if !instance
                            && matches!($crate::config::Scope::$scope, $crate::config::Scope::InstanceOnly)
                        {
                            return Err($crate::config::LayerError::InstanceOnly);
                        }
                        let parsed = <$ty as $crate::config::PropertyType>::parse(value)
                            .map_err($crate::config::LayerError::Invalid)?;
                        let check: $crate::config::Check<$ty> = $check;
                        check(&parsed).map_err($crate::config::LayerError::Invalid)?;
                        self.$field = Some(parsed);
                        Ok(())
                    } )*
                    _ => Err($crate::config::LayerError::Unknown),
                }
            }

            /// The value this layer holds under `name`; `None` if it says nothing (or the name
            /// is unknown).
            pub(crate) fn get(&self, name: &str) -> Option<$crate::config::PropertyValue> {
                match name {
                    $( $name => self.$field.as_ref().and_then($crate::config::PropertyType::to_value), )*
                    _ => None,
                }
            }

            /// This layer over `lower`: each property takes this layer's value if it has one,
            /// else `lower`'s.
            pub(crate) fn over(&self, lower: &Self) -> Self {
                Self {
                    $( $field: self.$field.clone().or_else(|| lower.$field.clone()), )*
                }
            }

            /// Removes the value under `name`; `Ok(true)` if there was one.
            pub(crate) fn unset(&mut self, name: &str) -> Result<bool, $crate::config::LayerError> {
                match name {
                    $( $name => Ok(self.$field.take().is_some()), )*
                    _ => Err($crate::config::LayerError::Unknown),
                }
            }

            /// This layer with `other`'s values added: a property set in only one keeps that
            /// value; one set in both to different values is a conflict, returned as
            /// (name, value here, value there).
            pub(crate) fn merge(&self, other: &Self) -> Result<Self, (&'static str, String, String)> {
                fn show(v: Option<$crate::config::PropertyValue>) -> String {
                    v.map_or_else(|| "unset".to_owned(), |v| v.to_string())
                }
                let mut merged = self.clone();
                $(
                    match (&self.$field, &other.$field) {
                        (Some(here), Some(there)) if here != there => {
                            return Err((
                                $name,
                                show($crate::config::PropertyType::to_value(here)),
                                show($crate::config::PropertyType::to_value(there)),
                            ));
                        }
                        (None, Some(there)) => merged.$field = Some(there.clone()),
                        _ => {}
                    }
                )*
                Ok(merged)
            }

            /// Resolves the four layers: per-key value, else builder value, else
            /// global default, else the default in code.
            pub(crate) fn resolve(global: &Self, builder: &Self, instance: &Self) -> $Props {
                $Props {
                    $( $field: instance.$field.clone()
                        .or_else(|| builder.$field.clone())
                        .or_else(|| global.$field.clone())
                        .unwrap_or_else(|| $default), )*
                }
            }
        }
    };
}
pub(crate) use property_table;
