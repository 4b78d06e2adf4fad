//! The merge: each instance's latest record per (type, name), summed into one message per
//! (type, name) by the rules of [`Rule`], written as JSON.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use super::message::{
    Kind, Layout, Parsed, Parser, Record, Rule, Shape, Slot, Text, entry_of, format_number,
    json_name, name_of,
};

/// (type, name) of a message.
pub(crate) type MessageKey = (Kind, Arc<str>);

/// (type, name) kept per instance at most, and merged per cluster at most; a new one past it
/// is ignored (bounded memory and merged messages).
pub(crate) const MAX_RECORDS: usize = 10_000;

/// One instance's latest records, by kind then name (so that a line's record is found from
/// its borrowed name, without building a key).
#[derive(Debug, Default)]
pub(crate) struct InstanceRecords {
    records: HashMap<Kind, HashMap<Arc<str>, Record>>,
    count: usize,
    parser: Parser,
}

/// What [`InstanceRecords::ingest`] made of a line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ingested {
    Kept,
    Deleted,
    Skipped,
}

impl InstanceRecords {
    /// Takes one message (the JSON after `data:`) as the instance's latest for its key.
    ///
    /// # Errors
    /// The text is not a JSON object.
    pub(crate) fn ingest(&mut self, json: &str) -> Result<Ingested, super::message::ParseError> {
        let records = &self.records;
        let parsed = self
            .parser
            .parse(json, |kind, name| records.get(kind)?.get(name))?;
        Ok(match parsed {
            Parsed::Record(kind, record) => {
                let full = self.count >= MAX_RECORDS;
                let names = self.records.entry(kind).or_default();
                match names.get_mut(&*record.name) {
                    Some(old) => *old = record,
                    None if full => return Ok(Ingested::Skipped),
                    None => {
                        names.insert(Arc::clone(&record.name), record);
                        self.count += 1;
                    }
                }
                Ingested::Kept
            }
            Parsed::Delete(kind, name) => {
                if let Some(names) = self.records.get_mut(&kind)
                    && names.remove(&*name).is_some()
                {
                    self.count -= 1;
                }
                Ingested::Deleted
            }
            Parsed::Skip => Ingested::Skipped,
        })
    }

    /// Forgets every record (the instance went away).
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.count = 0;
    }

    /// Records held.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Every record, with its kind.
    fn iter(&self) -> impl Iterator<Item = (&Kind, &Record)> {
        self.records
            .iter()
            .flat_map(|(kind, names)| names.values().map(move |record| (kind, record)))
    }

    /// Bytes the records hold, not counting what they share.
    pub(crate) fn own_bytes(&self) -> usize {
        self.iter()
            .map(|(_, r)| r.own_bytes() + std::mem::size_of::<Arc<str>>())
            .sum()
    }
}

/// One (type, name)'s sums across instances.
#[derive(Debug)]
struct Sum {
    /// The layout sums are kept in: the first record's, extended by fields others add.
    layout: Vec<Slot>,
    /// The first record's layout, to add records that share it without a lookup.
    first: Layout,
    /// Per layout slot: the sum (number slots) ...
    numbers: Vec<f64>,
    /// ... or the values seen with their counts, first seen first (other slots).
    texts: Vec<Vec<(Text, u32)>>,
    /// Per layout slot: how many records had it.
    seen: Vec<u32>,
    /// `reportingHosts` of records without the field: 1 each.
    hosts_missing: u32,
}

impl Sum {
    fn new(record: &Record) -> Sum {
        let mut sum = Sum {
            layout: record.layout.to_vec(),
            first: Arc::clone(&record.layout),
            numbers: vec![0.0; record.layout.len()],
            texts: vec![Vec::new(); record.layout.len()],
            seen: vec![0; record.layout.len()],
            hosts_missing: 0,
        };
        sum.add(record);
        sum
    }

    fn add(&mut self, record: &Record) {
        let mut numbers = record.numbers.iter();
        let mut texts = record.texts.iter();
        let same = Arc::ptr_eq(&record.layout, &self.first);
        let mut has_hosts = false;
        for (i, slot) in record.layout.iter().enumerate() {
            // The record's value first, so that a slot skipped below still moves past it.
            let value = if slot.shape == Shape::Str {
                match texts.next() {
                    Some(text) => Text::Str(Arc::clone(text)),
                    None => break,
                }
            } else {
                match numbers.next() {
                    Some(&number) => Text::Num(number),
                    None => break,
                }
            };
            let at = if same {
                i
            } else {
                match self.layout.iter().position(|s| s.id == slot.id) {
                    Some(at) if mergeable(&self.layout[at], slot) => at,
                    // A string on one host, a number summed on another: not merged.
                    Some(_) => continue,
                    None => {
                        self.layout.push(*slot);
                        self.numbers.push(0.0);
                        self.texts.push(Vec::new());
                        self.seen.push(0);
                        self.layout.len() - 1
                    }
                }
            };
            has_hosts |= slot.rule == Rule::Hosts;
            self.seen[at] += 1;
            match value {
                Text::Num(value) => {
                    let total = &mut self.numbers[at];
                    match slot.rule {
                        Rule::Latest => *total = total.max(value),
                        Rule::Agree => count(&mut self.texts[at], slot.shape.text(value)),
                        // A host counts once at least (the dashboard divides by the sum).
                        Rule::Hosts => *total += value.max(1.0),
                        Rule::Sum | Rule::Open => *total += value,
                    }
                }
                text => count(&mut self.texts[at], text),
            }
        }
        if !has_hosts {
            self.hosts_missing += 1;
        }
    }

    /// The merged message as JSON.
    fn write(&self, kind: &Kind, name: &str, out: &mut String, names: &mut NameCache) {
        out.push_str("{\"type\":");
        push_json_str(out, kind.as_str());
        out.push_str(",\"name\":");
        push_json_str(out, name);
        let mut open_object: Option<u16> = None;
        let mut wrote_hosts = false;
        for (i, slot) in self.layout.iter().enumerate() {
            let entry = entry_of(slot.id);
            let parent = name_of(slot.id);
            if open_object.is_some_and(|p| entry.is_none() || p != parent) {
                out.push('}');
                open_object = None;
            }
            if let Some(entry) = entry {
                if open_object.is_none() {
                    out.push(',');
                    out.push_str(names.get(parent));
                    out.push_str(":{");
                    open_object = Some(parent);
                } else {
                    out.push(',');
                }
                out.push_str(names.get(entry));
                out.push(':');
                out.push_str(&format_number(self.numbers[i]));
                continue;
            }
            out.push(',');
            out.push_str(names.get(parent));
            out.push(':');
            match slot.rule {
                Rule::Hosts => {
                    wrote_hosts = true;
                    out.push_str(&format_number(
                        self.numbers[i] + f64::from(self.hosts_missing),
                    ));
                }
                Rule::Open => {
                    let open = self.numbers[i];
                    let closed = f64::from(self.seen[i]) - open;
                    if open == 0.0 || closed <= 0.0 {
                        out.push_str(&format_number(open));
                    } else {
                        let _ = write!(
                            out,
                            "{{\"true\":{},\"false\":{}}}",
                            format_number(open),
                            format_number(closed)
                        );
                    }
                }
                Rule::Sum | Rule::Latest => out.push_str(&format_number(self.numbers[i])),
                Rule::Agree => write_agreed(out, &self.texts[i]),
            }
        }
        if open_object.is_some() {
            out.push('}');
        }
        if !wrote_hosts {
            let _ = write!(out, ",\"reportingHosts\":{}", self.hosts_missing);
        }
        out.push('}');
    }
}

/// Whether a field of one host merges with the same field of another: both counted by value
/// (whatever their JSON: `null` on one, a string on another), or both strings, or both not.
fn mergeable(a: &Slot, b: &Slot) -> bool {
    (a.rule == Rule::Agree && b.rule == Rule::Agree)
        || (a.shape == Shape::Str) == (b.shape == Shape::Str)
}

/// Counts one more host with `value`.
fn count(counts: &mut Vec<(Text, u32)>, value: Text) {
    match counts.iter_mut().find(|(v, _)| *v == value) {
        Some((_, n)) => *n += 1,
        None => counts.push((value, 1)),
    }
}

/// A value every host agrees on, or Turbine's object of counts by value.
fn write_agreed(out: &mut String, counts: &[(Text, u32)]) {
    match counts {
        [(value, _)] => match value {
            Text::Null => out.push_str("null"),
            Text::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Text::Num(n) => out.push_str(&format_number(*n)),
            Text::Str(s) => push_json_str(out, s),
        },
        _ => {
            out.push('{');
            for (i, (value, count)) in counts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_str(out, &value.key());
                let _ = write!(out, ":{count}");
            }
            out.push('}');
        }
    }
}

fn push_json_str(out: &mut String, text: &str) {
    match serde_json::to_string(text) {
        Ok(json) => out.push_str(&json),
        Err(_) => out.push_str("\"\""),
    }
}

/// Field names as JSON, fetched from the shared table once per merge.
#[derive(Default)]
struct NameCache(HashMap<u16, Arc<str>>);

impl NameCache {
    fn get(&mut self, id: u16) -> &str {
        self.0.entry(id).or_insert_with(|| json_name(id))
    }
}

/// Sums instances' records, one instance at a time (so that each instance's lock is held
/// only while its own records are added).
#[derive(Debug, Default)]
pub(crate) struct Merger {
    sums: BTreeMap<Kind, BTreeMap<Arc<str>, Sum>>,
    /// Keys in `sums`.
    keys: usize,
}

impl Merger {
    /// Adds one instance's records.
    pub(crate) fn add(&mut self, instance: &InstanceRecords) {
        for (kind, record) in instance.iter() {
            let names = match self.sums.get_mut(kind) {
                Some(names) => names,
                None => self.sums.entry(kind.clone()).or_default(),
            };
            match names.get_mut(&*record.name) {
                Some(sum) => sum.add(record),
                None if self.keys >= MAX_RECORDS => {}
                None => {
                    names.insert(Arc::clone(&record.name), Sum::new(record));
                    self.keys += 1;
                }
            }
        }
    }

    fn has(&self, (kind, name): &MessageKey) -> bool {
        self.sums
            .get(kind)
            .is_some_and(|names| names.contains_key(&**name))
    }

    /// One message per (type, name) added, ordered by type then name; then a
    /// `{"type":..,"name":..,"deleteData":"true"}` for each key `last` merged that no instance
    /// has now (Turbine's removal, which the dashboard reads to drop the tile), repeated on
    /// [`DELETE_TICKS`] merges so that a client that skipped a few frames still gets it.
    pub(crate) fn finish(self, last: &mut Deletions) -> Vec<String> {
        let mut names = NameCache::default();
        let mut messages = Vec::new();
        for (kind, sums) in &self.sums {
            for (name, sum) in sums {
                let mut out = String::with_capacity(2048);
                sum.write(kind, name, &mut out, &mut names);
                messages.push(out);
            }
        }
        for key in last.merged.drain(..) {
            if !self.has(&key) && !last.pending.iter().any(|(k, _)| *k == key) {
                last.pending.push((key, DELETE_TICKS));
            }
        }
        last.pending.retain_mut(|(key, ticks)| {
            if self.has(key) || *ticks == 0 {
                return false;
            }
            *ticks -= 1;
            let mut out = String::from("{\"type\":");
            push_json_str(&mut out, key.0.as_str());
            out.push_str(",\"name\":");
            push_json_str(&mut out, &key.1);
            out.push_str(",\"deleteData\":\"true\"}");
            messages.push(out);
            true
        });
        last.merged = self
            .sums
            .into_iter()
            .flat_map(|(kind, names)| names.into_keys().map(move |name| (kind.clone(), name)))
            .collect();
        messages
    }
}

/// Merges a deleted key is announced on: more than the frames a stream client may skip
/// (it keeps 4).
pub(crate) const DELETE_TICKS: u8 = 8;

/// What a stream's merges remember: the keys merged last, the deletions still to announce.
#[derive(Debug, Default)]
pub(crate) struct Deletions {
    merged: Vec<MessageKey>,
    pending: Vec<(MessageKey, u8)>,
}

/// [`Merger`] over `instances` at once.
#[cfg(test)]
pub(crate) fn merge<'a>(
    instances: impl IntoIterator<Item = &'a InstanceRecords>,
    last: &mut Deletions,
) -> Vec<String> {
    let mut merger = Merger::default();
    for instance in instances {
        merger.add(instance);
    }
    merger.finish(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn instance(lines: &[&str]) -> InstanceRecords {
        let mut records = InstanceRecords::default();
        for line in lines {
            assert_eq!(records.ingest(line).expect("JSON"), Ingested::Kept);
        }
        records
    }

    fn merged(instances: &[&InstanceRecords]) -> Vec<Value> {
        let messages = merge(instances.iter().copied(), &mut Deletions::default());
        messages
            .iter()
            .map(|m| serde_json::from_str(m).expect("merged JSON parses"))
            .collect()
    }

    const A1: &str = r#"{"type":"HystrixCommand","name":"A","group":"G","currentTime":100,"isCircuitBreakerOpen":true,"errorPercentage":40,"requestCount":10,"latencyExecute_mean":7,"latencyExecute":{"0":1,"50":5,"99.5":9},"propertyValue_metricsRollingStatisticalWindowInMilliseconds":10000,"propertyValue_executionIsolationStrategy":"THREAD","propertyValue_circuitBreakerForceOpen":false,"reportingHosts":1,"threadPool":"G"}"#;
    const A2: &str = r#"{"type":"HystrixCommand","name":"A","group":"G","currentTime":300,"isCircuitBreakerOpen":false,"errorPercentage":10,"requestCount":30,"latencyExecute_mean":3,"latencyExecute":{"0":0,"50":2,"99.5":4},"propertyValue_metricsRollingStatisticalWindowInMilliseconds":10000,"propertyValue_executionIsolationStrategy":"SEMAPHORE","propertyValue_circuitBreakerForceOpen":false,"reportingHosts":1,"threadPool":"G"}"#;

    #[test]
    fn commands_merge_field_by_field() {
        let one = instance(&[A1]);
        let two = instance(&[A2]);
        let three = instance(&[A2]);
        let got = merged(&[&one, &two, &three]);
        assert_eq!(
            got,
            [json!({
                "type": "HystrixCommand", "name": "A", "group": "G",
                "currentTime": 300,
                "isCircuitBreakerOpen": {"true": 1, "false": 2},
                "errorPercentage": 60, "requestCount": 70, "latencyExecute_mean": 13,
                "latencyExecute": {"0": 1, "50": 9, "99.5": 17},
                "propertyValue_metricsRollingStatisticalWindowInMilliseconds": 10000,
                "propertyValue_executionIsolationStrategy": {"THREAD": 1, "SEMAPHORE": 2},
                "propertyValue_circuitBreakerForceOpen": false,
                "reportingHosts": 3, "threadPool": "G"
            })]
        );
    }

    #[test]
    fn the_breaker_reads_as_a_count_when_the_hosts_agree() {
        let open = instance(&[A1]);
        let closed = instance(&[A2]);
        let all_open = merged(&[&open, &open]);
        assert_eq!(all_open[0]["isCircuitBreakerOpen"], json!(2));
        assert_eq!(all_open[0]["reportingHosts"], json!(2));
        let all_closed = merged(&[&closed, &closed, &closed]);
        assert_eq!(all_closed[0]["isCircuitBreakerOpen"], json!(0));
    }

    #[test]
    fn thread_pool_properties_are_summed_and_missing_hosts_count_one() {
        let pool = r#"{"type":"HystrixThreadPool","name":"P","currentQueueSize":2,"propertyValue_queueSizeRejectionThreshold":5,"propertyValue_metricsRollingStatisticalWindowInMilliseconds":10000}"#;
        let one = instance(&[pool]);
        let two = instance(&[pool]);
        assert_eq!(
            merged(&[&one, &two]),
            [json!({
                "type": "HystrixThreadPool", "name": "P", "currentQueueSize": 4,
                "propertyValue_queueSizeRejectionThreshold": 10,
                "propertyValue_metricsRollingStatisticalWindowInMilliseconds": 20000,
                "reportingHosts": 2
            })]
        );
    }

    #[test]
    fn fields_only_some_hosts_send_are_merged_over_those_hosts() {
        let one = instance(&[
            r#"{"type":"HystrixCommand","name":"A","requestCount":1,"reportingHosts":1}"#,
        ]);
        let two = instance(&[
            r#"{"type":"HystrixCommand","name":"A","requestCount":2,"slowCallCount":5,"reportingHosts":1}"#,
        ]);
        assert_eq!(
            merged(&[&one, &two]),
            [
                json!({"type": "HystrixCommand", "name": "A", "requestCount": 3, "reportingHosts": 2, "slowCallCount": 5})
            ]
        );
    }

    #[test]
    fn a_field_that_is_a_string_on_one_host_does_not_shift_that_hosts_other_fields() {
        let one = instance(&[
            r#"{"type":"HystrixCommand","name":"S","group":"G","requestCount":10,"errorCount":1,"reportingHosts":1}"#,
        ]);
        let two = instance(&[
            r#"{"type":"HystrixCommand","name":"S","group":7,"requestCount":20,"errorCount":2,"reportingHosts":1}"#,
        ]);
        assert_eq!(
            merged(&[&one, &two]),
            [
                json!({"type": "HystrixCommand", "name": "S", "group": "G", "requestCount": 30, "errorCount": 3, "reportingHosts": 2})
            ]
        );
        let null_here = instance(&[
            r#"{"type":"HystrixCommand","name":"S","propertyValue_executionIsolationThreadPoolKeyOverride":null,"requestCount":1,"reportingHosts":1}"#,
        ]);
        let text_there = instance(&[
            r#"{"type":"HystrixCommand","name":"S","propertyValue_executionIsolationThreadPoolKeyOverride":"P","requestCount":2,"reportingHosts":1}"#,
        ]);
        // Counted by value whatever the JSON: null on one host, a string on the other.
        assert_eq!(
            merged(&[&null_here, &text_there]),
            [json!({
                "type": "HystrixCommand", "name": "S",
                "propertyValue_executionIsolationThreadPoolKeyOverride": {"null": 1, "P": 1},
                "requestCount": 3, "reportingHosts": 2
            })]
        );
    }

    #[test]
    fn a_host_sending_reporting_hosts_below_one_counts_as_one() {
        let one = instance(&[r#"{"type":"HystrixCommand","name":"A","reportingHosts":-1}"#]);
        let two = instance(&[r#"{"type":"HystrixCommand","name":"A","reportingHosts":1}"#]);
        assert_eq!(merged(&[&one, &two])[0]["reportingHosts"], json!(2));
    }

    #[test]
    fn keys_no_instance_reports_any_more_are_deleted_for_some_ticks() {
        let mut one = instance(&[A1]);
        let mut last = Deletions::default();
        assert_eq!(merge([&one], &mut last).len(), 1);
        assert_eq!(
            one.ingest(r#"{"type":"HystrixCommand","name":"A","deleteData":"true"}"#)
                .expect("JSON"),
            Ingested::Deleted
        );
        for _ in 0..DELETE_TICKS {
            assert_eq!(
                merge([&one], &mut last),
                [r#"{"type":"HystrixCommand","name":"A","deleteData":"true"}"#]
            );
        }
        assert!(merge([&one], &mut last).is_empty());
        // A key that comes back is merged again, and deleted again when it goes.
        let two = instance(&[A1]);
        assert_eq!(merge([&two], &mut last).len(), 1);
        assert_eq!(merge([&one], &mut last).len(), 1);
    }

    #[test]
    fn one_instance_merges_to_its_own_message() {
        let one = instance(&[A1]);
        let mut want: Value = serde_json::from_str(A1).expect("JSON");
        want["isCircuitBreakerOpen"] = json!(1);
        assert_eq!(merged(&[&one]), [want]);
    }

    #[test]
    fn a_command_record_holds_less_than_a_kibibyte() {
        let test = hystrix::testing::TestRegistry::new();
        let command = hystrix::Command::builder("Sized")
            .group("Sizing")
            .isolation(hystrix::IsolationStrategy::Semaphore)
            .build_in(test.registry())
            .expect("command");
        let value = command
            .run(|| Ok::<_, std::io::Error>(1))
            .execute()
            .expect("runs");
        assert_eq!(value, 1);
        let registry = test.registry();
        let line = crate::stream::command_json(registry, "Sized").expect("message");
        let mut records = InstanceRecords::default();
        records.ingest(&line).expect("JSON");
        records.ingest(&line).expect("JSON");
        let bytes = records.own_bytes();
        assert!(
            bytes <= 1024,
            "{bytes} bytes for a {} byte message",
            line.len()
        );
    }
}
