//! Configuration files: Java `.properties` (as Hystrix and Archaius read them) and TOML.

use std::borrow::Cow;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use crate::config::source::{Entry, Leaf, joined};
use crate::config::store::SourceId;
use crate::config::{LoadError, LoadReport, Origin, Properties, PropertyValue};

/// The format of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileFormat {
    /// A Java `.properties` file: `name = value`, `name: value` or `name value` lines, `#` and
    /// `!` comments, `\` line continuations and escapes (`\uXXXX`, `\t`, `\=`, ...), as
    /// `java.util.Properties` reads them.
    ///
    /// Encoding: a file that is valid UTF-8 is read as UTF-8 (a byte-order mark is skipped);
    /// any other file is read as ISO-8859-1 (Latin-1, one byte one character), as Java's
    /// `Properties.load(InputStream)` reads every file, and as Java 9's resource bundles fall
    /// back to. So ASCII files, and so Hystrix's, read the same either way, and a file saved in
    /// Latin-1 (`# café` as the byte `0xE9`) loads as Java loads it. A file that begins with a
    /// UTF-8 byte-order mark but is not valid UTF-8 is refused ([`LoadError::Syntax`] naming
    /// the line of the first invalid byte): its mark says UTF-8, so Latin-1 would be a guess.
    Properties,
    /// A TOML file: each value's full name is the path of keys leading to it, joined with dots
    /// (see the [module docs](crate::config) for an example).
    Toml,
}

impl FileFormat {
    /// The format a file's extension names: `.properties` or `.toml` (in any case).
    pub fn from_path(path: &Path) -> Option<FileFormat> {
        let extension = path.extension()?.to_str()?;
        if extension.eq_ignore_ascii_case("properties") {
            Some(FileFormat::Properties)
        } else if extension.eq_ignore_ascii_case("toml") {
            Some(FileFormat::Toml)
        } else {
            None
        }
    }
}

impl Properties {
    /// Loads a configuration file, its format named by its extension (`.properties` or
    /// `.toml`), as a file source: its values enter the dynamic layers (global default, per
    /// key) their names give, above the values of files loaded before it and below the
    /// environment's and run-time values. Loading the same path again
    /// replaces the values it gave before (a reload); run-time and environment values stay.
    ///
    /// ```
    /// use hystrix::Registry;
    ///
    /// let dir = std::env::temp_dir().join(format!("hystrix-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("hystrix.properties");
    /// std::fs::write(&path, "\
    /// hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds=500
    /// hystrix.threadpool.UserService.coreSize=20
    /// ribbon.ReadTimeout=3000
    /// ")?;
    /// let registry = Registry::new();
    /// let report = registry.properties().load_file(&path)?;
    /// assert_eq!((report.applied, report.skipped), (2, 1)); // ribbon.* is not ours
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Names that are not properties are warnings in the report, with a did-you-mean
    /// suggestion when one is close; names outside `hystrix.*` that are close to none are
    /// skipped quietly (another library's keys).
    ///
    /// # Errors
    /// - [`LoadError::UnknownFormat`] for another extension (see
    ///   [`load_file_as`](Properties::load_file_as));
    /// - [`LoadError::Read`] if the file cannot be read;
    /// - [`LoadError::Syntax`] naming the line (and the property, when it can be read;
    ///   for a TOML value that is not TOML, such as an unquoted `THREAD`, the full property
    ///   name);
    /// - [`LoadError::Internal`] if the file's parser panicked on it (caught: a bug in the
    ///   parser, met on unusual input);
    /// - [`LoadError::Invalid`] naming the line and the property, for a value that does not
    ///   parse, is out of range or breaks a rule tying properties together (below), or a
    ///   per-key change of a fixed property of a key in use; [`LoadError::Removal`] if
    ///   dropping a value the file gave before leaves such a rule broken (a value set at run
    ///   time relied on it, say).
    ///
    /// The rules tying properties together, each stated with its property in the field docs of
    /// [`CommandProperties`](crate::CommandProperties),
    /// [`ThreadPoolProperties`](crate::ThreadPoolProperties) and
    /// [`CollapserProperties`](crate::config::CollapserProperties): a `numBuckets` divides its
    /// window (`metrics.rollingStats.*`, `metrics.rollingPercentile.*`, `execution.throttle.*`);
    /// `metrics.healthSnapshot.intervalInMilliseconds` divides
    /// `metrics.rollingStats.timeInMilliseconds` into at most 1000 buckets;
    /// `circuitBreaker.halfOpen.successThreshold` is at most `permittedRequests`;
    /// `retry.backoff.maxInMilliseconds` is at least `initialInMilliseconds`;
    /// `execution.isolation.adaptive.initialLimit` lies within `minLimit` and `maxLimit`; the
    /// CRITICAL and NORMAL `execution.isolation.priority.*.reservedPercentage` add up to at most
    /// 100; `chaos.fault.ratePercentage` and `chaos.hang.ratePercentage` add up to at most 100,
    /// a hang rate above 0 needs `execution.timeout.enabled`, and `chaos.enabled` needs a
    /// registry that allows chaos. A thread pool also needs at least one thread (`coreSize`, or
    /// `maximumSize` with `allowMaximumSizeToDivergeFromCoreSize`).
    ///
    /// On error nothing changes: the values loaded before stay.
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<LoadReport, LoadError> {
        let path = path.as_ref();
        let format = FileFormat::from_path(path).ok_or_else(|| LoadError::UnknownFormat {
            path: path.to_owned(),
        })?;
        self.load_file_as(path, format)
    }

    /// [`load_file`](Properties::load_file) with the format given, whatever the extension.
    ///
    /// # Errors
    /// As [`load_file`](Properties::load_file).
    pub fn load_file_as(
        &self,
        path: impl AsRef<Path>,
        format: FileFormat,
    ) -> Result<LoadReport, LoadError> {
        let path = absolute(path.as_ref())?;
        let bytes = std::fs::read(&path).map_err(|err| LoadError::Read {
            path: path.clone(),
            reason: err.to_string(),
        })?;
        let entries = parse(&path, format, &bytes)?;
        self.load_entries(SourceId::File(path), &entries)
    }

    /// Loads `text` as if it were the file `path` (which is not read): for configuration
    /// embedded in the program (`include_str!`) or fetched elsewhere. Loading text under the
    /// same path again replaces the values it gave before.
    ///
    /// # Errors
    /// As [`load_file`](Properties::load_file), without the reading.
    pub fn load_text(
        &self,
        path: impl AsRef<Path>,
        format: FileFormat,
        text: &str,
    ) -> Result<LoadReport, LoadError> {
        let path = path.as_ref().to_owned();
        let entries = parse(&path, format, text.as_bytes())?;
        self.load_entries(SourceId::File(path), &entries)
    }
}

/// The absolute path, with `.` and `..` resolved by name (not by following links, so a
/// Kubernetes `..data` link keeps its name across updates): `dir/sub/../h.properties` and
/// `dir/h.properties` are one source.
fn absolute(path: &Path) -> Result<PathBuf, LoadError> {
    let absolute = std::path::absolute(path).map_err(|err| LoadError::Read {
        path: path.to_owned(),
        reason: err.to_string(),
    })?;
    let mut normal = PathBuf::new();
    for component in absolute.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    Ok(normal)
}

/// The values of a file, in the order written.
///
/// The parsers are other crates' code reading input from outside: a panic in one (a bug met on
/// unusual input) is caught here and refuses the file with [`LoadError::Internal`], so it
/// cannot end the caller's thread (a file watcher's, say). The default panic hook still
/// reports it on standard error.
pub(crate) fn parse(
    path: &Path,
    format: FileFormat,
    bytes: &[u8],
) -> Result<Vec<Entry>, LoadError> {
    match format {
        FileFormat::Properties => caught(path, "the .properties parser", || {
            parse_properties(path, bytes)
        }),
        FileFormat::Toml => caught(path, "the TOML parser", || parse_toml(path, bytes)),
    }
}

/// Runs `load` (of the file `path`); a panic in it is caught and returned as
/// [`LoadError::Internal`], saying that `what` panicked and why.
pub(crate) fn caught<T>(
    path: &Path,
    what: &str,
    load: impl FnOnce() -> Result<T, LoadError>,
) -> Result<T, LoadError> {
    catch_unwind(AssertUnwindSafe(load)).unwrap_or_else(|panic| {
        Err(LoadError::Internal {
            path: path.to_owned(),
            message: format!("{what} panicked: {}", crate::command::panic_message(panic)),
        })
    })
}

/// The UTF-8 byte-order mark.
const BOM: &str = "\u{feff}";

/// The text of a `.properties` file: the bytes as UTF-8 if they are valid UTF-8, else as
/// ISO-8859-1 (see [`FileFormat::Properties`]).
fn properties_text<'a>(path: &Path, bytes: &'a [u8]) -> Result<Cow<'a, str>, LoadError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(Cow::Borrowed(text)),
        Err(err) if bytes.starts_with(BOM.as_bytes()) => {
            let line = line_at(bytes, err.valid_up_to());
            Err(LoadError::Syntax {
                path: path.to_owned(),
                line,
                property: raw_key(&String::from_utf8_lossy(bytes), line),
                message: "not valid UTF-8, though the file begins with a UTF-8 byte-order mark"
                    .into(),
            })
        }
        // ISO-8859-1 maps each byte to the character of the same number.
        Err(_) => Ok(Cow::Owned(
            bytes.iter().map(|&byte| char::from(byte)).collect(),
        )),
    }
}

fn parse_properties(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>, LoadError> {
    // Valid UTF-8 from here on: the parser's decoder never meets a byte it cannot decode (its
    // replacement of a last, incomplete character used to panic).
    let text = properties_text(path, bytes)?;
    let bytes = text.as_bytes();
    // A last line continued by a backslash at the end of the file: Java's `Properties.load`
    // keeps the line and drops the dangling backslash; the parser would drop the line.
    let end = bytes.len()
        - bytes
            .iter()
            .rev()
            .take_while(|&&b| matches!(b, b'\n' | b'\r'))
            .count();
    let backslashes = bytes[..end]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    let bytes = if backslashes % 2 == 1 {
        &bytes[..end - 1]
    } else {
        bytes
    };
    let lines = java_properties::PropertiesIter::new_with_encoding(bytes, encoding_rs::UTF_8);
    let mut entries = Vec::new();
    for line in lines {
        let line = line.map_err(|err| {
            let line = err.line_number().unwrap_or(1);
            // The crate adds "(line_number = N)" to its message; we say the line ourselves.
            let message = err.to_string();
            let message = message
                .split(" (line_number")
                .next()
                .unwrap_or_default()
                .to_owned();
            LoadError::Syntax {
                path: path.to_owned(),
                line,
                property: raw_key(&text, line),
                message,
            }
        })?;
        let number = line.line_number();
        if let java_properties::LineContent::KVPair(name, value) = line.consume_content() {
            let origin = Origin::File {
                path: path.to_owned(),
                line: number,
            };
            entries.push(Entry::new(name, PropertyValue::Str(value), origin));
        }
    }
    Ok(entries)
}

/// The key written on a `.properties` line (up to its separator), escapes left as written;
/// `None` on a comment line.
fn raw_key(text: &str, line: usize) -> Option<String> {
    let text = text.strip_prefix(BOM).unwrap_or(text);
    // Lines end in `\n`, `\r\n` or a lone `\r`, as Java's (and the parser's) line numbers go.
    let text = text.replace("\r\n", "\n");
    let physical = text
        .split(['\n', '\r'])
        .nth(line.checked_sub(1)?)?
        .trim_start();
    if physical.starts_with(['#', '!']) {
        return None;
    }
    let mut escaped = false;
    let end = physical
        .char_indices()
        .find(|&(_, c)| {
            let ends = !escaped && matches!(c, '=' | ':' | ' ' | '\t' | '\x0c');
            escaped = !escaped && c == '\\';
            ends
        })
        .map_or(physical.len(), |(at, _)| at);
    let key = &physical[..end];
    (!key.is_empty()).then(|| key.to_owned())
}

fn parse_toml(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>, LoadError> {
    let text = std::str::from_utf8(bytes).map_err(|err| LoadError::Syntax {
        path: path.to_owned(),
        line: line_at(bytes, err.valid_up_to()),
        property: None,
        message: "not valid UTF-8 (TOML files are UTF-8)".into(),
    })?;
    // A byte-order mark is not TOML; it takes no line, so line numbers stay.
    let text = text.strip_prefix(BOM).unwrap_or(text);
    // Parsed with recovery, so that an error in a value can name the property it is for.
    let (table, errors) = DeTable::parse_recoverable(text);
    if let Some(err) = errors.first() {
        return Err(toml_error(path, text, table.get_ref(), err));
    }
    let mut entries = Vec::new();
    walk(
        path,
        text,
        &LineIndex::new(text),
        "",
        table.get_ref(),
        &mut entries,
    );
    // Tables are kept in key order; sort by line so the later of two spellings of one name
    // wins, as in a .properties file.
    entries.sort_by_key(|entry| match entry.origin {
        Origin::File { line, .. } => line,
        _ => 0,
    });
    Ok(entries)
}

/// Collects the values of `table`, whose keys continue the name `prefix`; `lines` finds each
/// key's line (an index made once: a scan from the start per key took time quadratic in the
/// number of keys, 92 s for 100 000).
fn walk(
    path: &Path,
    text: &str,
    lines: &LineIndex,
    prefix: &str,
    table: &DeTable<'_>,
    entries: &mut Vec<Entry>,
) {
    for (key, value) in table {
        let name = joined(prefix, key.get_ref());
        let raw = || text.get(value.span()).unwrap_or_default().trim().to_owned();
        let leaf = match value.get_ref() {
            DeValue::Table(inner) => {
                walk(path, text, lines, &name, inner, entries);
                continue;
            }
            DeValue::Integer(int) => i128::from_str_radix(int.as_str(), int.radix())
                .ok()
                .and_then(|i| i64::try_from(i).ok())
                .map_or_else(|| Leaf::Text(raw()), Leaf::Int),
            DeValue::Boolean(flag) => Leaf::Bool(*flag),
            DeValue::String(s) => Leaf::Str(s.to_string()),
            DeValue::Float(_) | DeValue::Datetime(_) => Leaf::Text(raw()),
            DeValue::Array(_) => Leaf::Array(raw()),
        };
        let origin = Origin::File {
            path: path.to_owned(),
            line: lines.line_at(key.span().start),
        };
        entries.push(Entry::of_leaf(name, leaf, origin));
    }
}

/// A TOML syntax error as a [`LoadError::Syntax`]: the line, and for an error in a value the
/// property's full name (when it has one), as for a `.properties` file.
fn toml_error(path: &Path, text: &str, table: &DeTable<'_>, err: &toml::de::Error) -> LoadError {
    let offset = err.span().map_or(0, |span| span.start);
    let value = value_at(table, "", offset);
    let (raw, whole) = value.as_ref().map_or(("", false), |(_, span)| {
        let raw = text.get(span.clone()).unwrap_or_default().trim();
        (raw, err.span().as_ref() == Some(span))
    });
    let bare = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | ':');
    let message = match &value {
        Some(_) if raw.is_empty() => "no value after `=`".to_owned(),
        // An unquoted word, refused whole: TOML read it as a number, a boolean or a date. The
        // parser's guess (`invalid boolean, expected `true`` for `THREAD`) only misleads.
        Some(_) if whole && raw.chars().all(bare) => {
            format!("`{raw}` is not a TOML value; a string is written in quotes: \"{raw}\"")
        }
        // The parser names no key: name the one it points at (a key's last part, or a table).
        _ if err.message() == "duplicate key" => match err.span().and_then(|span| text.get(span)) {
            Some(key) if !key.is_empty() => {
                format!(
                    "duplicate key `{}`: a key or table is defined once",
                    key.escape_debug()
                )
            }
            _ => err.message().to_owned(),
        },
        _ => err.message().to_owned(),
    };
    LoadError::Syntax {
        path: path.to_owned(),
        line: line_at(text.as_bytes(), offset),
        // An empty top-level key (`= 1`, `"" = 1`) has the empty name: no property.
        property: value.map(|(name, _)| name).filter(|name| !name.is_empty()),
        message,
    }
}

/// The full name and the span of the value (not a table) in which byte `offset` lies, in a
/// table whose keys continue the name `prefix`.
fn value_at(table: &DeTable<'_>, prefix: &str, offset: usize) -> Option<(String, Range<usize>)> {
    table.iter().find_map(|(key, value)| {
        let name = joined(prefix, key.get_ref());
        match value.get_ref() {
            DeValue::Table(inner) => value_at(inner, &name, offset),
            _ => {
                let span = value.span();
                (span.start <= offset && offset <= span.end).then_some((name, span))
            }
        }
    })
}

/// Where the lines of a text start: the 1-based line of any byte offset by a binary search.
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> Self {
        LineIndex(newline_offsets(text.as_bytes()))
    }

    /// The 1-based line of byte `offset`, as [`line_at`] counts it.
    fn line_at(&self, offset: usize) -> usize {
        self.0.partition_point(|&newline| newline < offset) + 1
    }
}

/// The offsets of the text's newlines, in order.
fn newline_offsets(text: &[u8]) -> Vec<usize> {
    text.iter()
        .enumerate()
        .filter_map(|(at, &b)| (b == b'\n').then_some(at))
        .collect()
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &[u8], offset: usize) -> usize {
    let end = offset.min(text.len());
    text[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_keys_stop_at_the_first_unescaped_separator() {
        let text = "a.b=1\n  c\\=d : 2\n\\u00zz.x 3\n";
        assert_eq!(raw_key(text, 1).as_deref(), Some("a.b"));
        assert_eq!(raw_key(text, 2).as_deref(), Some("c\\=d"));
        assert_eq!(raw_key(text, 3).as_deref(), Some("\\u00zz.x"));
        assert_eq!(raw_key(text, 9), None);
        assert_eq!(raw_key("a=1\n  # b=2\n!c=3", 2), None);
        assert_eq!(raw_key("a=1\n  # b=2\n!c=3", 3), None);
        // Old Mac line ends, and Windows ones.
        assert_eq!(raw_key("a=1\rb:2\rc 3", 3).as_deref(), Some("c"));
        assert_eq!(raw_key("a=1\r\nb:2\r\nc 3", 2).as_deref(), Some("b"));
    }

    #[test]
    fn a_syntax_error_after_lone_cr_line_ends_names_its_line_and_property() {
        let err =
            parse_properties(Path::new("x.properties"), b"a=1\rb=2\rbad\\u00zz=3\r").unwrap_err();
        // Shown as written in the file: the backslash once.
        assert!(
            err.to_string()
                .starts_with("x.properties:3: `bad\\u00zz`: "),
            "{err}"
        );
        match err {
            LoadError::Syntax { line, property, .. } => {
                assert_eq!((line, property.as_deref()), (3, Some("bad\\u00zz")));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_duplicate_toml_key_or_table_is_named() {
        let message = |text: &str| {
            parse_toml(Path::new("d.toml"), text.as_bytes())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message("[hystrix.command.A]\nfallback.enabled = true\nfallback.enabled = false\n"),
            "d.toml:3: duplicate key `enabled`: a key or table is defined once"
        );
        assert_eq!(
            message("[hystrix.command.A]\n[hystrix.command.A]\n"),
            "d.toml:2: duplicate key `A`: a key or table is defined once"
        );
    }

    #[test]
    fn a_backslash_at_the_end_of_the_file_keeps_the_last_line_as_java_does() {
        let names = |text: &[u8]| -> Vec<(String, String)> {
            parse_properties(Path::new("x.properties"), text)
                .unwrap()
                .into_iter()
                .map(|entry| (entry.name.clone(), entry.value.to_string()))
                .collect()
        };
        for text in [
            &b"a=1\nb=false\\"[..],
            b"a=1\nb=false\\\n",
            b"a=1\r\nb=false\\\r\n",
        ] {
            assert_eq!(
                names(text),
                [("a".into(), "1".into()), ("b".into(), "false".into())],
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        // An escaped backslash is a value, not a continuation.
        assert_eq!(names(b"p=C:\\\\"), [("p".into(), "C:\\".into())]);
    }

    #[test]
    fn a_panic_while_loading_is_an_error_naming_the_file() {
        let path = Path::new("/etc/app/hystrix.properties");
        let err = caught::<()>(path, "the .properties parser", || {
            panic!("Must not use a decoder that has finished")
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot load /etc/app/hystrix.properties: the .properties parser panicked: Must not \
             use a decoder that has finished (a bug: nothing was changed; please report it with \
             the file)"
        );
        assert_eq!(caught(path, "x", || Ok(7)), Ok(7));
    }

    #[test]
    fn the_same_file_under_two_spellings_is_one_source() {
        assert_eq!(
            absolute(Path::new("/etc/app/sub/../h.properties")).unwrap(),
            absolute(Path::new("/etc/app/./h.properties")).unwrap()
        );
    }

    #[test]
    fn line_numbers_count_from_one() {
        assert_eq!(line_at(b"a\nb\nc", 0), 1);
        assert_eq!(line_at(b"a\nb\nc", 2), 2);
        assert_eq!(line_at(b"a\nb\nc", 99), 3);
        let text = "a\nbb\n\nc";
        let index = LineIndex::new(text);
        for offset in 0..=text.len() + 1 {
            assert_eq!(
                index.line_at(offset),
                line_at(text.as_bytes(), offset),
                "{offset}"
            );
        }
    }
}
