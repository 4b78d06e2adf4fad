//! Keys naming commands, groups, thread pools and collapsers (Hystrix's `HystrixCommandKey`,
//! `HystrixCommandGroupKey`, `HystrixThreadPoolKey`, `HystrixCollapserKey`).
//!
//! Keys are cheap to clone (a shared string) and compare by name.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use crate::error::{ConfigError, shown};

/// The longest key name, in bytes: keys appear in property names, metric labels and logs.
const MAX_KEY_LEN: usize = 200;

macro_rules! key_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Creates a key.
            ///
            /// # Errors
            /// [`ConfigError::InvalidKey`] if `name` is empty, longer than 200 bytes, has
            /// surrounding whitespace or a control character (a line break would let a key
            /// forge log lines), or is `default` (reserved by the property names
            /// `hystrix.<kind>.default.*`).
            pub fn new(name: impl AsRef<str>) -> Result<Self, ConfigError> {
                let name = name.as_ref();
                let reason = if name.is_empty() {
                    Some("must not be empty")
                } else if name.len() > MAX_KEY_LEN {
                    Some("must be at most 200 bytes long")
                } else if name.chars().any(char::is_control) {
                    Some("must not contain control characters (line breaks, tabs, NUL, ...)")
                } else if name.trim() != name {
                    Some("must not start or end with whitespace")
                } else if name == "default" {
                    Some("`default` is reserved for the global default properties")
                } else {
                    None
                };
                match reason {
                    Some(reason) => Err(ConfigError::InvalidKey {
                        kind: $what,
                        key: shown(name, 64),
                        reason,
                    }),
                    None => Ok(Self(Arc::from(name))),
                }
            }

            /// The key's name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", &*self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

key_type!(
    /// Names a command: the unit of circuit breaking, metrics and properties
    /// (`hystrix.command.<CommandKey>.*`).
    CommandKey,
    "command key"
);
key_type!(
    /// Groups commands for reporting; the default thread-pool key (Hystrix's
    /// `HystrixCommandGroupKey`, required).
    GroupKey,
    "group key"
);
key_type!(
    /// Names a thread pool (bulkhead), shared by every command that names it
    /// (`hystrix.threadpool.<ThreadPoolKey>.*`).
    ThreadPoolKey,
    "thread-pool key"
);
key_type!(
    /// Names a request collapser: the unit of its properties and metrics
    /// (`hystrix.collapser.<CollapserKey>.*`, Hystrix's `HystrixCollapserKey`).
    CollapserKey,
    "collapser key"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_refuse_empty_padded_and_reserved_names() {
        assert!(CommandKey::new("GetUser").is_ok());
        for bad in ["", " GetUser", "GetUser\n", "default"] {
            let err = CommandKey::new(bad).unwrap_err();
            assert!(err.to_string().starts_with("invalid command key"), "{err}");
        }
    }

    #[test]
    fn keys_refuse_control_characters_and_long_names_and_show_them_escaped() {
        let err = CommandKey::new("X\n2026-11-30 INFO forged").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid command key `X\\n2026-11-30 INFO forged`: must not contain control \
             characters (line breaks, tabs, NUL, ...)"
        );
        assert!(ThreadPoolKey::new("P\0").is_err());
        assert!(CollapserKey::new("C\tD").is_err());
        let long = "k".repeat(201);
        let err = GroupKey::new(&long).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid group key `{}...`: must be at most 200 bytes long",
                "k".repeat(64)
            )
        );
        assert!(GroupKey::new("k".repeat(200)).is_ok());
        assert!(CommandKey::new("Café.Lookup").is_ok());
    }

    #[test]
    fn keys_compare_by_name() {
        let a = ThreadPoolKey::new("Users").unwrap();
        assert_eq!(a, ThreadPoolKey::new("Users").unwrap());
        assert_eq!(a.as_str(), "Users");
        assert_eq!(format!("{a} {a:?}"), "Users \"Users\"");
    }
}
