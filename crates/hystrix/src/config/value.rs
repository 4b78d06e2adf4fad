//! Property values: what callers pass to `set` and how each property type parses them.

use std::fmt;

/// A property value as given by a caller or a configuration source, before it is parsed into the
/// property's own type. Strings are parsed (`"500"` for a number, `"true"` for a flag), so values
/// read from files and environment variables can be passed unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyValue {
    /// A flag.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// Text, parsed by the property's type.
    Str(String),
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropertyValue::Bool(b) => write!(f, "{b}"),
            PropertyValue::Int(i) => write!(f, "{i}"),
            PropertyValue::Str(s) => f.write_str(s),
        }
    }
}

impl From<bool> for PropertyValue {
    fn from(v: bool) -> Self {
        PropertyValue::Bool(v)
    }
}

macro_rules! int_into_value {
    ($($t:ty),*) => {$(
        impl From<$t> for PropertyValue {
            fn from(v: $t) -> Self {
                PropertyValue::Int(i64::from(v))
            }
        }
    )*};
}
int_into_value!(i8, i16, i32, i64, u8, u16, u32);

impl From<u64> for PropertyValue {
    fn from(v: u64) -> Self {
        i64::try_from(v).map_or_else(|_| PropertyValue::Str(v.to_string()), PropertyValue::Int)
    }
}

impl From<usize> for PropertyValue {
    fn from(v: usize) -> Self {
        PropertyValue::from(v as u64)
    }
}

impl From<f64> for PropertyValue {
    /// As text (`1.5` → `"1.5"`), which number properties such as `retry.backoff.multiplier`
    /// parse.
    fn from(v: f64) -> Self {
        PropertyValue::Str(v.to_string())
    }
}

impl From<&str> for PropertyValue {
    fn from(v: &str) -> Self {
        PropertyValue::Str(v.to_owned())
    }
}

impl From<String> for PropertyValue {
    fn from(v: String) -> Self {
        PropertyValue::Str(v)
    }
}

impl From<std::time::Duration> for PropertyValue {
    /// A duration as whole milliseconds (the unit of every `...InMilliseconds` property), rounded
    /// up so a limit is never shorter than asked: 1.2 ms becomes 2 ms.
    fn from(v: std::time::Duration) -> Self {
        PropertyValue::from(ceil_millis(v))
    }
}

/// Whole milliseconds in `d`, rounded up (saturating at `u64::MAX`).
pub(crate) fn ceil_millis(d: std::time::Duration) -> u64 {
    let millis = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).unwrap_or(u64::MAX)
}

/// A Rust type a property can have: parsed from a [`PropertyValue`] and shown as one.
pub(crate) trait PropertyType: Sized + Clone + PartialEq {
    /// Parses `value`; the error is the reason shown to the user.
    fn parse(value: &PropertyValue) -> Result<Self, String>;
    /// The value as shown by `get`; `None` for an optional property that is not set.
    fn to_value(&self) -> Option<PropertyValue>;
}

impl PropertyType for bool {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        match value {
            PropertyValue::Bool(b) => Ok(*b),
            // Archaius' words, any case: a Hystrix property file loads unchanged.
            PropertyValue::Str(s) => {
                let word = s.trim().to_ascii_lowercase();
                match word.as_str() {
                    "true" | "t" | "yes" | "y" | "on" => Ok(true),
                    "false" | "f" | "no" | "n" | "off" => Ok(false),
                    _ => {
                        Err("expected true or false (or Archaius' yes/no, on/off, y/n, t/f)".into())
                    }
                }
            }
            PropertyValue::Int(_) => Err("expected true or false".into()),
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Bool(*self))
    }
}

/// A whole number; one beyond i128 saturates, so the type's range check says "out of range"
/// rather than "expected a whole number".
fn parse_int(value: &PropertyValue) -> Result<i128, String> {
    use std::num::IntErrorKind;
    match value {
        PropertyValue::Int(i) => Ok(i128::from(*i)),
        PropertyValue::Str(s) => match s.trim().parse::<i128>() {
            Ok(i) => Ok(i),
            Err(err) if *err.kind() == IntErrorKind::PosOverflow => Ok(i128::MAX),
            Err(err) if *err.kind() == IntErrorKind::NegOverflow => Ok(i128::MIN),
            Err(_) => Err("expected a whole number".to_owned()),
        },
        PropertyValue::Bool(_) => Err("expected a whole number".into()),
    }
}

macro_rules! int_property_type {
    ($($t:ty),*) => {$(
        impl PropertyType for $t {
            fn parse(value: &PropertyValue) -> Result<Self, String> {
                let i = parse_int(value)?;
                if i < 0 && <$t>::MIN == 0 {
                    return Err("must not be negative".into());
                }
                <$t>::try_from(i).map_err(|_| format!("out of range (at most {})", <$t>::MAX))
            }

            fn to_value(&self) -> Option<PropertyValue> {
                Some(PropertyValue::from(*self))
            }
        }
    )*};
}
int_property_type!(u32, u64, i32);

impl PropertyType for f64 {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        let number = match value {
            PropertyValue::Int(i) => *i as f64,
            PropertyValue::Str(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| "expected a number such as 1.5".to_owned())?,
            PropertyValue::Bool(_) => return Err("expected a number such as 1.5".into()),
        };
        if number.is_finite() {
            Ok(number)
        } else {
            Err("expected a finite number".into())
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Str(self.to_string()))
    }
}

impl PropertyType for String {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        match value {
            PropertyValue::Str(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            PropertyValue::Str(_) => Err("must not be empty".into()),
            other => Ok(other.to_string()),
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Str(self.clone()))
    }
}

impl<T: PropertyType> PropertyType for Option<T> {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        T::parse(value).map(Some)
    }

    fn to_value(&self) -> Option<PropertyValue> {
        self.as_ref().and_then(T::to_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_archaius_words_in_any_case() {
        for (word, flag) in [
            ("true", true),
            ("Yes", true),
            (" ON ", true),
            ("y", true),
            ("T", true),
            ("false", false),
            ("no", false),
            ("OFF", false),
            ("n", false),
            ("f", false),
        ] {
            assert_eq!(bool::parse(&PropertyValue::from(word)), Ok(flag), "{word}");
        }
        assert_eq!(
            bool::parse(&PropertyValue::from("1")),
            Err("expected true or false (or Archaius' yes/no, on/off, y/n, t/f)".to_owned())
        );
        assert!(bool::parse(&PropertyValue::Int(1)).is_err());
    }
}
