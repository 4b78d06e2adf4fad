//! One instance's stream message, parsed into a compact record: its numbers in one array,
//! its other values in another, and its field names as ids into a process-wide table, with
//! the layout (the names in order) shared by every record that has the same one.
//!
//! A command message of our own stream takes about 900 bytes this way (the JSON text is about
//! 2 KB), and parsing it allocates three times: see the aggregation figures in BENCHMARKS.md.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Field names the process-wide table holds at most; past it, a message's fields with new
/// names are dropped (bounded memory whatever the instances send).
const MAX_FIELD_NAMES: usize = 4096;

/// Fields of one message kept at most (a Hystrix command message has about 90).
pub(crate) const MAX_FIELDS: usize = 512;

/// The longest `name` or string value a message may have, in bytes; a message with a longer
/// one is refused (command keys and groups are short; this keeps merged messages small).
pub(crate) const MAX_TEXT: usize = 1024;

/// The longest field name kept, in bytes; a longer field is dropped.
const MAX_FIELD_NAME: usize = 256;

/// New names one instance may add to the process-wide table; past it, its fields with names
/// nobody sent before are dropped, so that one instance cannot fill the table for the others.
const MAX_NEW_NAMES_PER_INSTANCE: usize = 512;

/// What a message is about: Hystrix's three kinds, or another one, named.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Command,
    ThreadPool,
    Collapser,
    Other(Arc<str>),
}

impl Kind {
    fn from_str(text: &str) -> Kind {
        match text {
            "HystrixCommand" => Kind::Command,
            "HystrixThreadPool" => Kind::ThreadPool,
            "HystrixCollapser" => Kind::Collapser,
            other => Kind::Other(other.into()),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            Kind::Command => "HystrixCommand",
            Kind::ThreadPool => "HystrixThreadPool",
            Kind::Collapser => "HystrixCollapser",
            Kind::Other(name) => name,
        }
    }

    /// Whether this kind's `propertyValue_*` numbers are summed across hosts: only thread
    /// pools', whose dashboard code divides them by `reportingHosts`.
    fn sums_properties(&self) -> bool {
        matches!(self, Kind::ThreadPool)
    }
}

/// How a field merges across hosts (see the module docs of `turbine` for why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Summed.
    Sum,
    /// Kept when every host agrees, else counted by value.
    Agree,
    /// `reportingHosts`: summed, 1 for a host that does not send it.
    Hosts,
    /// `currentTime`: the latest.
    Latest,
    /// `isCircuitBreakerOpen`: open hosts counted.
    Open,
}

/// A field's id: its name's index in the table, and for an entry of a nested object (a
/// percentile) its key's index plus one in the high half; 0 there for a top-level field.
pub(crate) type FieldId = u32;

pub(crate) fn field_id(name: u16, entry: Option<u16>) -> FieldId {
    u32::from(name) | entry.map_or(0, |entry| (u32::from(entry) + 1) << 16)
}

/// The name part of a field id.
pub(crate) fn name_of(id: FieldId) -> u16 {
    (id & 0xFFFF) as u16
}

/// The nested object entry part of a field id, if it is one.
pub(crate) fn entry_of(id: FieldId) -> Option<u16> {
    match id >> 16 {
        0 => None,
        entry => Some((entry - 1) as u16),
    }
}

/// The process-wide table of field names (and nested keys, such as "99.5").
struct Names {
    ids: HashMap<Box<str>, u16>,
    /// Each name as JSON text, quoted and escaped.
    json: Vec<Arc<str>>,
}

fn names() -> &'static RwLock<Names> {
    static NAMES: OnceLock<RwLock<Names>> = OnceLock::new();
    NAMES.get_or_init(|| {
        RwLock::new(Names {
            ids: HashMap::new(),
            json: Vec::new(),
        })
    })
}

/// The id of `name`, added to the table if new, `may_add` and there is room; and whether it
/// was added.
fn intern(name: &str, may_add: bool) -> Option<(u16, bool)> {
    if name.len() > MAX_FIELD_NAME {
        return None;
    }
    let table = names();
    if let Some(id) = table
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .ids
        .get(name)
    {
        return Some((*id, false));
    }
    if !may_add {
        return None;
    }
    let mut table = table.write().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = table.ids.get(name) {
        return Some((*id, false));
    }
    if table.json.len() >= MAX_FIELD_NAMES {
        return None;
    }
    let id = table.json.len() as u16;
    let json = serde_json::to_string(name).unwrap_or_else(|_| "\"\"".to_owned());
    table.json.push(json.into());
    table.ids.insert(name.into(), id);
    Some((id, true))
}

/// The JSON text (quoted) of name `id`.
pub(crate) fn json_name(id: u16) -> Arc<str> {
    let table = names().read().unwrap_or_else(|p| p.into_inner());
    table
        .json
        .get(usize::from(id))
        .cloned()
        .unwrap_or_else(|| Arc::from("\"\""))
}

/// A value that is not summed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Text {
    Null,
    Bool(bool),
    Num(f64),
    Str(Arc<str>),
}

impl Text {
    /// As a key of Turbine's object of counts by value.
    pub(crate) fn key(&self) -> Cow<'_, str> {
        match self {
            Text::Null => Cow::Borrowed("null"),
            Text::Bool(true) => Cow::Borrowed("true"),
            Text::Bool(false) => Cow::Borrowed("false"),
            Text::Num(n) => Cow::Owned(format_number(*n)),
            Text::Str(s) => Cow::Borrowed(s),
        }
    }
}

/// A number as JSON: an integer without a fraction when it is one (within f64's exact
/// integers), `null` for a sum that overflowed.
pub(crate) fn format_number(n: f64) -> String {
    if !n.is_finite() {
        "null".to_owned()
    } else if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A shared empty string: the place of a string until it is read from the line.
fn empty() -> Arc<str> {
    static EMPTY: OnceLock<Arc<str>> = OnceLock::new();
    Arc::clone(EMPTY.get_or_init(|| Arc::from("")))
}

/// What JSON a field holds: a string (in [`Record::texts`]) or a number, boolean (1 or 0) or
/// null (0), in [`Record::numbers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Number,
    Bool,
    Null,
    Str,
}

impl Shape {
    /// The value of a non-string slot holding `value`, as compared across hosts.
    pub(crate) fn text(self, value: f64) -> Text {
        match self {
            Shape::Bool => Text::Bool(value != 0.0),
            Shape::Null | Shape::Str => Text::Null,
            Shape::Number => Text::Num(value),
        }
    }
}

/// A field of a layout: its id, its merge rule and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) id: FieldId,
    pub(crate) rule: Rule,
    pub(crate) shape: Shape,
}

/// The fields of a record in order, shared by the records that have the same.
pub(crate) type Layout = Arc<[Slot]>;

/// One instance's latest message for one (type, name).
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) name: Arc<str>,
    pub(crate) layout: Layout,
    /// The values of the layout's slots that are not strings, in order.
    pub(crate) numbers: Box<[f64]>,
    /// The values of its string slots, in order.
    pub(crate) texts: Box<[Arc<str>]>,
}

impl Record {
    /// Heap and inline bytes this record holds alone (its layout and name are shared with
    /// the instance's earlier records and the other instances' when equal).
    pub(crate) fn own_bytes(&self) -> usize {
        std::mem::size_of::<Record>()
            + std::mem::size_of_val(&*self.numbers)
            + std::mem::size_of_val(&*self.texts)
            + self.texts.iter().map(|s| s.len() + 16).sum::<usize>()
    }
}

/// What a line of an instance's stream said.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A message: the latest for its (type, name).
    Record(Kind, Record),
    /// `deleteData: "true"` for (type, name): the instance no longer reports it.
    Delete(Kind, Arc<str>),
    /// Not a message we can merge (no `type` or `name`, not an object).
    Skip,
}

/// Why a message was refused.
#[derive(Debug)]
pub(crate) enum ParseError {
    /// Not a JSON object.
    Json(serde_json::Error),
    /// A name or string value of this many bytes, past [`MAX_TEXT`].
    TooLong(usize),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Json(err) => write!(f, "not a JSON object: {err}"),
            ParseError::TooLong(len) => write!(
                f,
                "a name or string of {len} bytes (at most {MAX_TEXT}): message refused"
            ),
        }
    }
}

/// What one reader keeps between messages so that parsing the next is cheap: per kind, the
/// layout it saw last and the field names in the order they came (each compared with the
/// name at the same place of the next message before the shared table is asked).
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// The last layout per kind (commands, pools and collapsers alternate).
    last: Vec<(Kind, Layout)>,
    /// The names met in order per kind, with their ids.
    hints: Vec<(Kind, Vec<Hint>)>,
    slots: Vec<Slot>,
    numbers: Vec<f64>,
    texts: Vec<Arc<str>>,
    /// Strings borrowed from the line: (index in `texts`, byte range in the line).
    borrowed: Vec<(usize, usize, usize)>,
    /// Names this parser's instance added to the shared table.
    added: usize,
}

/// A name met at some place of a message, and its id (`None`: the table was full).
type Hint = (Box<str>, Option<u16>);

/// Kinds a parser keeps hints and layouts for at most.
const MAX_KINDS: usize = 8;

impl Parser {
    /// Parses one message (the JSON after `data:`). `previous` finds the instance's record
    /// for a (type, name), whose name and strings are reused when equal.
    pub(crate) fn parse<'p>(
        &mut self,
        json: &str,
        previous: impl Fn(&Kind, &str) -> Option<&'p Record>,
    ) -> Result<Parsed, ParseError> {
        self.slots.clear();
        self.numbers.clear();
        self.texts.clear();
        self.borrowed.clear();
        let mut fields = Fields {
            parser: self,
            line: json.as_ptr() as usize,
            kind: None,
            name: None,
            delete: false,
            hint: None,
            cursor: 0,
            refused: None,
        };
        let mut de = serde_json::Deserializer::from_str(json);
        (&mut de)
            .deserialize_map(FieldsVisitor(&mut fields))
            .map_err(ParseError::Json)?;
        de.end().map_err(ParseError::Json)?;
        if let Some(len) = fields.refused {
            return Err(ParseError::TooLong(len));
        }
        let (Some(kind), Some(name)) = (fields.kind.take(), fields.name.take()) else {
            return Ok(Parsed::Skip);
        };
        let delete = fields.delete;
        let previous = previous(&kind, &name);
        let name: Arc<str> = match previous {
            Some(record) if *record.name == *name => Arc::clone(&record.name),
            _ => name.into(),
        };
        if delete {
            return Ok(Parsed::Delete(kind, name));
        }
        let layout = self.layout(&kind, previous);
        for &(index, start, end) in &self.borrowed {
            let text = json.get(start..end).unwrap_or_default();
            // The previous message's string when equal (the same group, pool, status, ...).
            let old = previous.and_then(|record| match record.texts.get(index) {
                Some(old) if **old == *text => Some(Arc::clone(old)),
                _ => None,
            });
            if let Some(slot) = self.texts.get_mut(index) {
                *slot = old.unwrap_or_else(|| text.into());
            }
        }
        Ok(Parsed::Record(
            kind,
            Record {
                name,
                layout,
                numbers: self.numbers.as_slice().into(),
                texts: self.texts.as_slice().into(),
            },
        ))
    }

    /// The layout of the message just parsed: the previous record's, or the last one of its
    /// kind, when equal, else a new one (then remembered for the kind).
    fn layout(&mut self, kind: &Kind, previous: Option<&Record>) -> Layout {
        if let Some(record) = previous
            && *record.layout == *self.slots
        {
            return Arc::clone(&record.layout);
        }
        if let Some((_, layout)) = self.last.iter().find(|(k, _)| k == kind)
            && **layout == *self.slots
        {
            return Arc::clone(layout);
        }
        let layout: Layout = self.slots.as_slice().into();
        if let Some(last) = self.last.iter_mut().find(|(k, _)| k == kind) {
            last.1 = Arc::clone(&layout);
        } else if self.last.len() < MAX_KINDS {
            self.last.push((kind.clone(), Arc::clone(&layout)));
        }
        layout
    }
}

/// The state of one message being visited.
struct Fields<'a, 'de> {
    parser: &'a mut Parser,
    /// Where the line starts, to tell a borrowed string's place in it.
    line: usize,
    kind: Option<Kind>,
    name: Option<Cow<'de, str>>,
    delete: bool,
    /// The kind's names in order (an index into the parser's hints), once `type` is read.
    hint: Option<usize>,
    /// Names met so far after `type`.
    cursor: usize,
    /// The length of a string past [`MAX_TEXT`], if one came.
    refused: Option<usize>,
}

impl Fields<'_, '_> {
    /// A field that is not a string (a boolean as 1 or 0, null as 0).
    fn push_number(&mut self, id: FieldId, rule: Rule, shape: Shape, value: f64) {
        if self.parser.slots.len() < MAX_FIELDS {
            self.parser.slots.push(Slot { id, rule, shape });
            self.parser.numbers.push(value);
        }
    }

    /// A string field; returns its index in the texts.
    fn push_str(&mut self, id: FieldId, value: Arc<str>) -> Option<usize> {
        if self.parser.slots.len() < MAX_FIELDS {
            self.parser.slots.push(Slot {
                id,
                rule: Rule::Agree,
                shape: Shape::Str,
            });
            self.parser.texts.push(value);
            return Some(self.parser.texts.len() - 1);
        }
        None
    }

    /// The id of the next name met, `key`: from the kind's hints when the name at this place
    /// of the last message was the same, else from the shared table.
    fn id(&mut self, key: &str) -> Option<u16> {
        let cursor = self.cursor;
        self.cursor += 1;
        let Some(hint) = self.hint else {
            return self.intern(key);
        };
        let names = &mut self.parser.hints[hint].1;
        if let Some((name, id)) = names.get(cursor)
            && **name == *key
        {
            return *id;
        }
        let id = self.intern(key);
        let names = &mut self.parser.hints[hint].1;
        if let Some(place) = names.get_mut(cursor) {
            *place = (key.into(), id);
        } else if names.len() == cursor && cursor < 2 * MAX_FIELDS {
            names.push((key.into(), id));
        }
        id
    }

    /// The shared table's id of `key`, added within this instance's budget.
    fn intern(&mut self, key: &str) -> Option<u16> {
        let may_add = self.parser.added < MAX_NEW_NAMES_PER_INSTANCE;
        let (id, added) = intern(key, may_add)?;
        self.parser.added += usize::from(added);
        Some(id)
    }

    /// A string longer than [`MAX_TEXT`]: the message is refused.
    fn too_long(&mut self, len: usize) -> bool {
        if len > MAX_TEXT {
            self.refused = Some(len);
        }
        len > MAX_TEXT
    }

    /// `type` was read: the kind, and its hints from here on.
    fn set_kind(&mut self, kind: Kind) {
        let hints = &mut self.parser.hints;
        self.hint = match hints.iter().position(|(k, _)| *k == kind) {
            Some(at) => Some(at),
            None if hints.len() < MAX_KINDS => {
                hints.push((kind.clone(), Vec::new()));
                Some(hints.len() - 1)
            }
            None => None,
        };
        self.cursor = 0;
        self.kind = Some(kind);
    }

    /// The rule of top-level field `name` holding a number.
    fn number_rule(&self, name: &str) -> Rule {
        match name {
            "reportingHosts" => Rule::Hosts,
            "currentTime" => Rule::Latest,
            _ if name.starts_with("propertyValue_")
                && !self.kind.as_ref().is_some_and(Kind::sums_properties) =>
            {
                Rule::Agree
            }
            _ => Rule::Sum,
        }
    }
}

struct FieldsVisitor<'a, 'b, 'de>(&'a mut Fields<'b, 'de>);

impl<'de> Visitor<'de> for FieldsVisitor<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Hystrix stream message (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let fields = self.0;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let key = key.0;
            match &*key {
                "type" => {
                    let value = map.next_value::<Key<'de>>()?;
                    if !fields.too_long(value.0.len()) {
                        fields.set_kind(Kind::from_str(&value.0));
                    }
                    continue;
                }
                "name" => {
                    let name = map.next_value::<Key<'de>>()?.0;
                    if !fields.too_long(name.len()) {
                        fields.name = Some(name);
                    }
                    continue;
                }
                _ => {}
            }
            let Some(name) = fields.id(&key) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            map.next_value_seed(ValueSeed {
                fields: &mut *fields,
                name,
                key: &key,
            })?;
        }
        Ok(())
    }
}

/// A string (a key or a value), borrowed from the line when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A top-level field's value.
struct ValueSeed<'a, 'b, 'k, 'de> {
    fields: &'a mut Fields<'b, 'de>,
    name: u16,
    key: &'k str,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_, '_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl ValueSeed<'_, '_, '_, '_> {
    fn number(self, value: f64) {
        let id = field_id(self.name, None);
        let rule = self.fields.number_rule(self.key);
        self.fields.push_number(id, rule, Shape::Number, value);
    }

    fn boolean(self, value: bool) {
        let id = field_id(self.name, None);
        if self.key == "deleteData" {
            self.fields.delete = value;
            return;
        }
        let rule = if self.key == "isCircuitBreakerOpen" {
            Rule::Open
        } else {
            Rule::Agree
        };
        let value = if value { 1.0 } else { 0.0 };
        self.fields.push_number(id, rule, Shape::Bool, value);
    }

    fn null(self) {
        let id = field_id(self.name, None);
        self.fields.push_number(id, Rule::Agree, Shape::Null, 0.0);
    }

    fn string(self, value: &str) {
        if self.fields.too_long(value.len()) {
            return;
        }
        if self.key == "deleteData" {
            self.fields.delete = value == "true";
            return;
        }
        let id = field_id(self.name, None);
        self.fields.push_str(id, value.into());
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.number(v as f64);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.number(v as f64);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.number(v);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.boolean(v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.null();
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.null();
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.string(v);
        Ok(())
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        if self.key == "deleteData" || v.len() > MAX_TEXT {
            self.string(v);
            return Ok(());
        }
        // Kept as its place in the line until the previous message's string can be reused.
        let start = (v.as_ptr() as usize).saturating_sub(self.fields.line);
        let id = field_id(self.name, None);
        if let Some(index) = self.fields.push_str(id, empty()) {
            self.fields
                .parser
                .borrowed
                .push((index, start, start + v.len()));
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // Arrays are not merged (Hystrix's messages have none).
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // An object of numbers (percentiles): each entry summed; other entries dropped.
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let entry = self.fields.id(&key.0);
            let value = map.next_value::<Number>()?;
            if let (Some(entry), Some(value)) = (entry, value.0) {
                self.fields.push_number(
                    field_id(self.name, Some(entry)),
                    Rule::Sum,
                    Shape::Number,
                    value,
                );
            }
        }
        Ok(())
    }
}

/// A nested object's entry: its value when a number.
struct Number(Option<f64>);

impl<'de> de::Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl<'de> Visitor<'de> for NumberVisitor {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(Some(v as f64)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(Some(v)))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Number, E> {
                Ok(Number(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Number, E> {
                Ok(Number(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Number, E> {
                Ok(Number(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Number, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Number(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Number, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Number(None))
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Parsed {
        Parser::default().parse(json, |_, _| None).expect("parses")
    }

    #[test]
    fn a_command_message_becomes_numbers_and_texts_by_rule() {
        let Parsed::Record(kind, record) = parse(
            r#"{"type":"HystrixCommand","name":"A","group":"G","currentTime":5,"isCircuitBreakerOpen":true,"errorPercentage":50,"latencyExecute":{"0":1,"99.5":7},"propertyValue_metricsRollingStatisticalWindowInMilliseconds":10000,"propertyValue_circuitBreakerForceOpen":false,"reportingHosts":1}"#,
        ) else {
            panic!("a record")
        };
        assert_eq!(kind, Kind::Command);
        assert_eq!(&*record.name, "A");
        let rules: Vec<Rule> = record.layout.iter().map(|s| s.rule).collect();
        assert_eq!(
            rules,
            [
                Rule::Agree,  // group
                Rule::Latest, // currentTime
                Rule::Open,
                Rule::Sum, // errorPercentage
                Rule::Sum, // latencyExecute "0"
                Rule::Sum, // latencyExecute "99.5"
                Rule::Agree,
                Rule::Agree,
                Rule::Hosts,
            ]
        );
        let shapes: Vec<Shape> = record.layout.iter().map(|s| s.shape).collect();
        assert_eq!(
            shapes,
            [
                Shape::Str,
                Shape::Number,
                Shape::Bool,
                Shape::Number,
                Shape::Number,
                Shape::Number,
                Shape::Number,
                Shape::Bool,
                Shape::Number,
            ]
        );
        // Booleans are 1 or 0 among the numbers.
        assert_eq!(
            &*record.numbers,
            &[5.0, 1.0, 50.0, 1.0, 7.0, 10000.0, 0.0, 1.0]
        );
        assert_eq!(&*record.texts, &[Arc::from("G")]);
        let id = |name| intern(name, true).map(|(id, _)| id);
        assert_eq!(entry_of(record.layout[4].id), id("0"));
        assert_eq!(entry_of(record.layout[5].id), id("99.5"));
        assert_eq!(
            name_of(record.layout[5].id),
            id("latencyExecute").expect("room")
        );
    }

    #[test]
    fn thread_pool_properties_are_summed() {
        let Parsed::Record(_, record) = parse(
            r#"{"type":"HystrixThreadPool","name":"P","propertyValue_queueSizeRejectionThreshold":5}"#,
        ) else {
            panic!("a record")
        };
        assert_eq!(record.layout[0].rule, Rule::Sum);
        assert_eq!(&*record.numbers, &[5.0]);
    }

    #[test]
    fn lines_without_type_or_name_are_skipped_and_delete_data_is_read() {
        assert!(matches!(parse(r#"{"name":"A","x":1}"#), Parsed::Skip));
        assert!(matches!(
            parse(r#"{"type":"HystrixCommand","name":"A","deleteData":"true"}"#),
            Parsed::Delete(Kind::Command, name) if &*name == "A"
        ));
        assert!(Parser::default().parse("[1,2]", |_, _| None).is_err());
        assert!(
            Parser::default()
                .parse(r#"{"type":"HystrixCommand""#, |_, _| None)
                .is_err()
        );
    }

    #[test]
    fn layouts_and_names_are_shared_with_the_previous_record() {
        let mut parser = Parser::default();
        let line = r#"{"type":"HystrixCommand","name":"A","group":"G","requestCount":3}"#;
        let Ok(Parsed::Record(_, first)) = parser.parse(line, |_, _| None) else {
            panic!("a record")
        };
        let Ok(Parsed::Record(_, second)) = parser.parse(line, |_, _| Some(&first)) else {
            panic!("a record")
        };
        assert!(Arc::ptr_eq(&first.layout, &second.layout));
        assert!(Arc::ptr_eq(&first.name, &second.name));
        assert!(Arc::ptr_eq(&first.texts[0], &second.texts[0]));
        // Another command with the same fields shares the layout too.
        let Ok(Parsed::Record(_, other)) = parser.parse(
            r#"{"type":"HystrixCommand","name":"B","group":"G","requestCount":3}"#,
            |_, _| None,
        ) else {
            panic!("a record")
        };
        assert!(Arc::ptr_eq(&first.layout, &other.layout));
    }

    #[test]
    fn long_names_and_strings_are_refused_and_an_instance_adds_few_names() {
        let long = "x".repeat(MAX_TEXT + 1);
        for line in [
            format!(r#"{{"type":"HystrixCommand","name":"{long}"}}"#),
            format!(r#"{{"type":"HystrixCommand","name":"A","group":"{long}"}}"#),
            format!(r#"{{"type":"{long}","name":"A"}}"#),
        ] {
            let err = Parser::default()
                .parse(&line, |_, _| None)
                .expect_err("refused");
            assert_eq!(
                err.to_string(),
                "a name or string of 1025 bytes (at most 1024): message refused"
            );
        }
        // A field name past 256 bytes is dropped, the message kept.
        let line = format!(
            r#"{{"type":"HystrixCommand","name":"A","{}":1,"requestCount":2}}"#,
            "k".repeat(257)
        );
        let Ok(Parsed::Record(_, record)) = Parser::default().parse(&line, |_, _| None) else {
            panic!("a record")
        };
        assert_eq!(&*record.numbers, &[2.0]);
        // One instance adds at most 512 new names to the shared table.
        assert!(intern("requestCount", true).is_some());
        let mut parser = Parser::default();
        let fields: String = (0..600)
            .map(|n| format!(r#","budget-test-{n}":1"#))
            .collect();
        let line = format!(r#"{{"type":"HystrixCommand","name":"A"{fields}}}"#);
        let Ok(Parsed::Record(_, record)) = parser.parse(&line, |_, _| None) else {
            panic!("a record")
        };
        assert_eq!(record.numbers.len(), MAX_NEW_NAMES_PER_INSTANCE);
        // Names already in the table are still read.
        let Ok(Parsed::Record(_, record)) = parser.parse(
            r#"{"type":"HystrixCommand","name":"A","requestCount":2}"#,
            |_, _| None,
        ) else {
            panic!("a record")
        };
        assert_eq!(&*record.numbers, &[2.0]);
    }

    #[test]
    fn numbers_print_as_integers_when_they_are() {
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(-2.0), "-2");
        assert_eq!(format_number(0.25), "0.25");
        assert_eq!(format_number(f64::INFINITY), "null");
    }
}
