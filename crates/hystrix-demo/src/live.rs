//! The live view, refreshed each second, in two forms.
//!
//! **TUI** (a terminal, without `--no-tui`): a table above a progress bar (indicatif) at the
//! bottom of standard error, with phase changes and breaker transitions scrolling above it.
//! The table has the phase and the time; a row per gateway, `protected` (the gateway with its
//! commands) and, when one runs, `unprotected` (a twin that calls the same kinds of backends
//! with no resilience): requests sent and answered per second, the answered share, the share
//! degraded by fallbacks, p50/p99 of the last second's answers, requests in flight, and
//! backend connections and threads held now; then a row per command: calls per second, the
//! error percentage its breaker sees, calls short-circuited and attempts chaos was injected
//! into per second, the circuit state (the worst of the last second: OPEN, then HALF_OPEN,
//! then CLOSED, so an episode between two samples is not missed; FORCED_OPEN /
//! FORCED_CLOSED while an operator holds it), p50/p99 (rolling 5 s) and bulkhead use; and the
//! collapser's batches.
//!
//! **Plain** (`--no-tui`, or standard error not a terminal): per second one gateway line,
//! `[  4.0 s] phase  gateway 50/s sent, 43/s answered, 86% degraded, p99 251 ms, 3 in flight`
//! (`protected` and a second line `unprotected ...` when the twin runs), then one line per
//! command worth noting (its breaker not CLOSED, or errors, short-circuits or chaos):
//! `GetTitle OPEN, 42 calls/s, 72% errors, 23/s short-circuited`. A calm second is one line.
//!
//! **Breaker transitions** are folded per command per second: at most one line per command
//! for each second (two when a phase starts within it: one before the phase line, one after),
//! the states entered in order, e.g.
//! `   4.0 s  GetTitle  OPEN → HALF_OPEN → OPEN  (trial: TIMEOUT)`. The first opening of a run
//! of openings (from CLOSED) shows its cause in full (the error threshold with its numbers,
//! or trip-now); re-openings by failed trials show the trial's outcome only, as the report's
//! `breakers:` section folds them. An operator's action reads
//! `  12.3 s  GetTitle  FORCED_OPEN by operator (circuitBreaker.forceOpen=true)`.
//!
//! **Width**: every line is at most [`WIDTH`] columns (colour codes not counted); a longer
//! one (a long phase description, a cause) wraps, its continuation indented.
//!
//! **Colour**, only on a terminal and never with `NO_COLOR` set (or `CLICOLOR=0`;
//! `CLICOLOR_FORCE=1` forces it), as the `console` crate decides: the circuit state (bold red
//! OPEN and FORCED_OPEN, yellow HALF_OPEN and FORCED_CLOSED, green CLOSED); the error
//! percentage and the degraded share green under [`WARN_PERCENT`], yellow from it, red from
//! [`BAD_PERCENT`] (the breakers' error threshold); the answered share by its shortfall, with
//! the same thresholds.
//!
//! The error percentage is Hystrix's: short-circuited calls are not requests, so an open
//! breaker reads near 0 %. The short-circuited rate beside it and the state say what the
//! percentage cannot.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use console::Style;
use hystrix::IsolationStrategy;
use hystrix::collapser::CollapserEvent;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::gateway::Gateway;
use crate::load::LoadGenerator;
use crate::scenario::{Backend, FIXED_PRICES_LIMIT, Schedule};
use crate::stats::{
    BreakerLog, BreakerRecord, Change, ChaosLog, CommandCounts, Held, Trigger, percent, percentile,
    shown_state,
};
use crate::twin::TwinGauges;

/// The widest line the live view prints, in columns, colour codes not counted.
pub const WIDTH: usize = 100;

/// How far a wrapped line's continuation is indented, in columns.
const INDENT: usize = 10;

/// An error percentage or a degraded share at or above this is yellow (below it, green).
pub const WARN_PERCENT: f64 = 5.0;

/// An error percentage or a degraded share at or above this is red: the breakers' error
/// threshold (`circuitBreaker.errorThresholdPercentage`).
pub const BAD_PERCENT: f64 = 50.0;

/// Where the human-readable text goes: standard output, or standard error when standard
/// output carries the JSON report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Console {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Console {
    /// Writes `text` and a newline.
    pub fn line(self, text: &str) {
        // A closed pipe is not worth failing the run over.
        let _ = match self {
            Console::Stdout => writeln!(std::io::stdout(), "{text}"),
            Console::Stderr => writeln!(std::io::stderr(), "{text}"),
        };
    }

    /// Whether text written here may be coloured: a terminal, and neither `NO_COLOR` nor
    /// `CLICOLOR=0` set (`CLICOLOR_FORCE=1` forces colour).
    pub fn colours(self) -> bool {
        match self {
            Console::Stdout => console::colors_enabled(),
            Console::Stderr => console::colors_enabled_stderr(),
        }
    }
}

/// `text` in `style` when `colour`, else as it is.
fn paint(text: &str, style: Style, colour: bool) -> String {
    style.force_styling(colour).apply_to(text).to_string()
}

/// The style of a circuit state: OPEN and FORCED_OPEN bold red, HALF_OPEN and FORCED_CLOSED
/// yellow, CLOSED green; anything else plain.
fn state_style(state: &str) -> Style {
    match state {
        "OPEN" | "FORCED_OPEN" => Style::new().red().bold(),
        "HALF_OPEN" | "FORCED_CLOSED" => Style::new().yellow(),
        "CLOSED" => Style::new().green(),
        _ => Style::new(),
    }
}

/// A circuit state in its colour when `colour`, padded with spaces to `width` columns (the
/// padding uncoloured).
fn circuit_cell(state: &str, width: usize, colour: bool) -> String {
    let pad = width.saturating_sub(state.len());
    format!("{}{:pad$}", paint(state, state_style(state), colour), "")
}

/// The style of a share of bad outcomes, in percent: green under [`WARN_PERCENT`], yellow
/// from it, red from [`BAD_PERCENT`].
fn share_style(percent: f64) -> Style {
    if percent >= BAD_PERCENT {
        Style::new().red()
    } else if percent >= WARN_PERCENT {
        Style::new().yellow()
    } else {
        Style::new().green()
    }
}

/// `text` right-aligned in `width` columns (colour codes not counted).
fn right(text: &str, width: usize) -> String {
    let pad = width.saturating_sub(console::measure_text_width(text));
    format!("{:pad$}{text}", "")
}

/// `text` with each line longer than `width` columns (colour codes not counted) broken at
/// spaces, the continuations indented by `indent` spaces; a word too long for a line is cut.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let indent = indent.min(width / 2);
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut current = String::new();
        let mut started = false;
        for word in line.split(' ') {
            let joined = if started {
                format!("{current} {word}")
            } else {
                word.to_owned()
            };
            if console::measure_text_width(&joined) <= width {
                current = joined;
                started = true;
                continue;
            }
            if started && !current.trim().is_empty() {
                out.push(current.trim_end().to_owned());
                current = " ".repeat(indent);
            }
            if word.is_empty() {
                continue;
            }
            let mut rest = word;
            while console::measure_text_width(&current) + console::measure_text_width(rest) > width
            {
                let room = width
                    .saturating_sub(console::measure_text_width(&current))
                    .max(1);
                let cut = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
                current.push_str(&rest[..cut]);
                out.push(std::mem::replace(&mut current, " ".repeat(indent)));
                rest = &rest[cut..];
            }
            current.push_str(rest);
            started = true;
        }
        out.push(current.trim_end().to_owned());
    }
    out.join("\n")
}

/// `n` and its unit, plural unless `n` is 1: `1 thread`, `3 threads`.
fn count(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("{n} {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// One gateway's numbers for the last second: the protected gateway, or the unprotected twin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SideRow {
    /// Requests sent in the last second.
    pub sent: u64,
    /// Answered 200 in the last second.
    pub answered: u64,
    /// Given up on in the last second: answered other than `200`, or not within the client's
    /// timeout.
    pub unanswered: u64,
    /// Of those, with a part from a fallback (the twin has none).
    pub degraded: u64,
    /// Median latency of the last second's answers, in ms.
    pub p50_ms: f64,
    /// 99th percentile latency of the last second's answers, in ms.
    pub p99_ms: f64,
    /// Requests sent and not answered yet, now.
    pub in_flight: u64,
    /// Backend connections held now (backend calls in flight).
    pub held: u64,
    /// Threads held now in blocking backend calls.
    pub threads: u64,
}

impl SideRow {
    /// Answered in percent of the requests that ended in the last second (answered, or given
    /// up on: not answered `200` within the client's timeout); 100 when none ended. Requests
    /// still in flight are not counted: a slow second is not a lost one.
    pub fn answered_percent(&self) -> f64 {
        let ended = self.answered + self.unanswered;
        if ended == 0 {
            return 100.0;
        }
        percent(self.answered, ended)
    }

    /// A latency of the last second's answers, `-` when there were none.
    fn latency(&self, ms: f64) -> String {
        if self.answered == 0 {
            "-".to_owned()
        } else {
            format!("{ms:.0} ms")
        }
    }

    /// Degraded in percent of answered.
    pub fn degraded_percent(&self) -> f64 {
        percent(self.degraded, self.answered)
    }

    /// The TUI row, headed `name`.
    fn table_row(&self, name: &str, fallbacks: bool, colour: bool) -> String {
        let answered = self.answered_percent();
        let degraded = self.degraded_percent();
        let degraded = if fallbacks {
            paint(&format!("{degraded}%"), share_style(degraded), colour)
        } else {
            "-".to_owned()
        };
        format!(
            "{:<11} {:>7} {:>7} {} {} {:>8} {:>8} {:>13}  {}, {}",
            name,
            format!("{}/s", self.sent),
            format!("{}/s", self.answered),
            right(
                &paint(
                    &format!("{answered}%"),
                    share_style(100.0 - answered),
                    colour
                ),
                5
            ),
            right(&degraded, 9),
            self.latency(self.p50_ms),
            self.latency(self.p99_ms),
            count(self.in_flight, "request"),
            count(self.held, "conn"),
            count(self.threads, "thread")
        )
    }

    /// The plain entry, e.g. `43/s answered, 86% degraded, p99 251 ms, 3 in flight, 2 conns,
    /// 1 thread`; without the degraded share when the gateway has no `fallbacks` (the twin).
    fn plain(&self, fallbacks: bool, colour: bool) -> String {
        let degraded = self.degraded_percent();
        let degraded = if fallbacks {
            format!(
                ", {} degraded",
                paint(&format!("{degraded}%"), share_style(degraded), colour)
            )
        } else {
            String::new()
        };
        format!(
            "{}/s answered{degraded}, p99 {}, {} in flight, {}, {}",
            self.answered,
            self.latency(self.p99_ms),
            self.in_flight,
            count(self.held, "conn"),
            count(self.threads, "thread")
        )
    }
}

/// One gateway instance's numbers for the last second (`--instances` above 1).
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRow {
    /// Its number, from 1.
    pub instance: u32,
    /// Requests the load sent it in the last second.
    pub sent: u64,
    /// Its command executions that failed, timed out or were rejected in the last second.
    pub errors: u64,
    /// Its command executions short-circuited in the last second.
    pub short_circuited: u64,
    /// Its commands with errors or short-circuits in the last second: key, errors,
    /// short-circuits.
    pub notable: Vec<(&'static str, u64, u64)>,
}

impl InstanceRow {
    /// E.g. `#2 17 req/s, 0 errors/s, 5 short-circuited/s (GetRecommendations 0e/5sc)`.
    fn plain(&self) -> String {
        let mut line = format!(
            "#{} {} req/s, {} errors/s, {} short-circuited/s",
            self.instance, self.sent, self.errors, self.short_circuited
        );
        if !self.notable.is_empty() {
            let notable: Vec<String> = self
                .notable
                .iter()
                .map(|(key, errors, short)| format!("{key} {errors}e/{short}sc"))
                .collect();
            line.push_str(&format!(" ({})", notable.join(", ")));
        }
        line
    }
}

/// One command's row of a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    /// The command key.
    pub key: &'static str,
    /// THREAD, SEMAPHORE, or ADAPTIVE (a semaphore under an adaptive concurrency limit).
    pub isolation: &'static str,
    /// Executions in the last second.
    pub rate: u64,
    /// The error percentage the breaker sees (rolling 10 s): short-circuited calls are not
    /// requests, so an open breaker reads near 0.
    pub errors: u32,
    /// Calls short-circuited in the last second (counted in `rate`).
    pub short_circuited: u64,
    /// Attempts chaos was injected into in the last second (CHAOS_INJECTED).
    pub chaos: u64,
    /// Calls its adaptive concurrency limit refused in the last second (LIMIT_REJECTED): shed
    /// at once to the fallback. Not in `errors`: a shed call is not a failure of the
    /// dependency, and the breaker does not count it.
    pub shed: u64,
    /// The worst of CLOSED, HALF_OPEN and OPEN the breaker was in during the last second (so
    /// a short OPEN episode between two samples still shows), or FORCED_OPEN / FORCED_CLOSED.
    pub state: &'static str,
    /// Median and 99th percentile execution latency (rolling 5 s), in ms.
    pub p50: i64,
    /// See `p50`.
    pub p99: i64,
    /// Pool threads, semaphore permits or places of the adaptive limit in use.
    pub in_use: u32,
    /// Pool threads or semaphore permits in all, or the adaptive limit now.
    pub capacity: u32,
}

impl CommandRow {
    /// Whether the plain output shows it: its breaker not CLOSED, or errors, short-circuits,
    /// chaos or shed calls, or an adaptive limit below the one it starts from (the fixed limit beside it,
    /// [`FIXED_PRICES_LIMIT`]).
    pub fn worth_noting(&self) -> bool {
        self.state != "CLOSED"
            || self.errors > 0
            || self.short_circuited > 0
            || self.chaos > 0
            || self.shed > 0
            || (self.isolation == "ADAPTIVE" && self.capacity < FIXED_PRICES_LIMIT)
    }

    /// `threads` under THREAD isolation, `limit` under an adaptive limit, else `permits`.
    fn unit(&self) -> &'static str {
        match self.isolation {
            "THREAD" => "threads",
            "ADAPTIVE" => "limit",
            _ => "permits",
        }
    }

    /// The error percentage in its colour when `colour`.
    fn errors_cell(&self, colour: bool) -> String {
        let errors = f64::from(self.errors);
        paint(&format!("{}%", self.errors), share_style(errors), colour)
    }
}

/// What one second looked like.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Since the start of the run.
    pub elapsed: Duration,
    /// The run's length.
    pub total: Duration,
    /// The phase running: its number (from 1), the count of phases, its name.
    pub phase: Option<(usize, usize, String)>,
    /// The commands the running phase injects chaos into.
    pub chaos_in: Vec<&'static str>,
    /// The protected gateway's numbers.
    pub gateway: SideRow,
    /// The unprotected twin's numbers, when one runs.
    pub twin: Option<SideRow>,
    /// Each gateway instance's numbers, with `--instances` above 1 (then `gateway` is the
    /// fleet's and `commands` instance 1's).
    pub fleet: Vec<InstanceRow>,
    /// One row per command.
    pub commands: Vec<CommandRow>,
    /// Collapser batches in the last second, and the ratings they carried.
    pub batches: (u64, u64),
}

impl Tick {
    /// The TUI table, every line at most [`WIDTH`] columns; coloured when `colour`.
    pub fn table(&self, colour: bool) -> String {
        let mut lines = Vec::new();
        let phase = match &self.phase {
            Some((number, count, name)) => format!("phase {number}/{count} {name}"),
            None => "draining".to_owned(),
        };
        let phase = if self.chaos_in.is_empty() {
            phase
        } else {
            format!("{phase} (chaos in {})", self.chaos_in.join(", "))
        };
        lines.push(format!(
            "{phase}   {:.0} s of {:.0} s",
            self.elapsed.as_secs_f64(),
            self.total.as_secs_f64()
        ));
        lines.push(format!(
            "{:<11} {:>7} {:>13} {:>9} {:>8} {:>8} {:>13}  {}",
            "gateway", "sent", "answered", "degraded", "p50", "p99", "in flight", "held"
        ));
        lines.push(self.gateway.table_row("protected", true, colour));
        if let Some(twin) = &self.twin {
            lines.push(twin.table_row("unprotected", false, colour));
        }
        for row in &self.fleet {
            lines.push(format!("  instance {}", row.plain()));
        }
        let heading = if self.fleet.is_empty() {
            "command"
        } else {
            "command (#1)"
        };
        lines.push(format!(
            "{:<18} {:>7} {:>6} {:>7} {:>7}  {:<13} {:>7} {:>7}  {}",
            heading, "calls", "errors", "short", "chaos", "circuit", "p50", "p99", "in use"
        ));
        for row in &self.commands {
            lines.push(format!(
                "{:<18} {:>7} {} {:>7} {:>7}  {} {:>7} {:>7}  {}/{} {}",
                row.key,
                format!("{}/s", row.rate),
                right(&row.errors_cell(colour), 6),
                format!("{}/s", row.short_circuited),
                format!("{}/s", row.chaos),
                circuit_cell(row.state, 13, colour),
                format!("{} ms", row.p50),
                format!("{} ms", row.p99),
                row.in_use,
                row.capacity,
                row.unit()
            ));
        }
        for row in self
            .commands
            .iter()
            .filter(|row| row.isolation == "ADAPTIVE")
        {
            lines.push(format!(
                "adaptive limit {}: {} now, {}/s shed (fixed limit beside it: {FIXED_PRICES_LIMIT})",
                row.key, row.capacity, row.shed
            ));
        }
        let (batches, ratings) = self.batches;
        lines.push(format!(
            "collapser GetRating: {batches} batches/s, {:.1} ratings per batch",
            if batches == 0 {
                0.0
            } else {
                ratings as f64 / batches as f64
            }
        ));
        wrap(&lines.join("\n"), WIDTH, INDENT)
    }

    /// The plain lines of `--no-tui`, every one at most [`WIDTH`] columns: the gateway line
    /// (the phase marked `(chaos)` when it injects any), the twin's line when it runs, and a
    /// line per command worth noting ([`CommandRow::worth_noting`]); coloured when `colour`.
    pub fn lines(&self, colour: bool) -> String {
        let phase = self
            .phase
            .as_ref()
            .map_or("draining", |(_, _, name)| name.as_str());
        let chaos = if self.chaos_in.is_empty() {
            ""
        } else {
            " (chaos)"
        };
        let mut lines = vec![format!(
            "[{:>5.1} s] {phase}{chaos}",
            self.elapsed.as_secs_f64()
        )];
        let label = if self.twin.is_some() {
            "protected"
        } else {
            "gateway"
        };
        lines.push(format!(
            "{:INDENT$}{label:<12} {}",
            "",
            self.gateway.plain(true, colour)
        ));
        if let Some(twin) = &self.twin {
            lines.push(format!(
                "{:INDENT$}{:<12} {}",
                "",
                "unprotected",
                twin.plain(false, colour)
            ));
        }
        for row in &self.fleet {
            lines.push(format!("{:INDENT$}{:<12} {}", "", "instance", row.plain()));
        }
        for row in self.commands.iter().filter(|row| row.worth_noting()) {
            let mut entry = format!(
                "{:INDENT$}{} {}, {} calls/s, {} errors",
                "",
                row.key,
                circuit_cell(row.state, 0, colour),
                row.rate,
                row.errors_cell(colour)
            );
            if row.short_circuited > 0 {
                entry.push_str(&format!(", {}/s short-circuited", row.short_circuited));
            }
            if row.chaos > 0 {
                entry.push_str(&format!(", {}/s chaos", row.chaos));
            }
            if row.isolation == "ADAPTIVE" {
                entry.push_str(&format!(", limit {}", row.capacity));
            }
            if row.shed > 0 {
                entry.push_str(&format!(", {}/s shed", row.shed));
            }
            lines.push(entry);
        }
        wrap(&lines.join("\n"), WIDTH, INDENT)
    }
}

/// Folds breaker transitions into lines: one per command per second, the states it entered in
/// order, then the notes (an opening's cause, failed trials).
#[derive(Debug, Default)]
pub struct Transitions {
    /// Per command, whether its breaker is in a run of openings: opened and not closed since
    /// (a re-opening then shows its trial's outcome only, not the cause again).
    opened: BTreeMap<String, bool>,
}

impl Transitions {
    /// The lines of `records`, one per command and second in which it had any (in the order
    /// of their first record), each at most [`WIDTH`] columns; the states coloured when
    /// `colour`.
    pub fn fold(&mut self, records: &[BreakerRecord], colour: bool) -> Vec<String> {
        let mut groups: Vec<(u64, &str, Vec<&BreakerRecord>)> = Vec::new();
        for record in records {
            let second = record.at_ms / 1000;
            let found = groups
                .iter_mut()
                .find(|(s, command, _)| *s == second && *command == record.command);
            match found {
                Some((_, _, list)) => list.push(record),
                None => groups.push((second, &record.command, vec![record])),
            }
        }
        groups
            .into_iter()
            .map(|(_, command, list)| self.line(command, &list, colour))
            .collect()
    }

    fn line(&mut self, command: &str, records: &[&BreakerRecord], colour: bool) -> String {
        let opened = self.opened.entry(command.to_owned()).or_insert(false);
        let mut states = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        let mut trials: Vec<(String, usize)> = Vec::new();
        for record in records {
            let state = paint(
                record.change.state(),
                state_style(record.change.state()),
                colour,
            );
            match record.operator_note() {
                Some(note) => states.push(format!("{state} {note}")),
                None => states.push(state),
            }
            match record.change {
                Change::Opened if *opened => {
                    let outcome = match (record.trigger, &record.cause) {
                        (Some(Trigger::TrialFailed), Some(cause)) => cause
                            .strip_prefix("the half-open trial ended in ")
                            .unwrap_or(cause)
                            .to_owned(),
                        (Some(trigger), _) => trigger.describe().to_owned(),
                        (None, _) => "failed".to_owned(),
                    };
                    match trials.iter_mut().find(|(seen, _)| *seen == outcome) {
                        Some((_, count)) => *count += 1,
                        None => trials.push((outcome, 1)),
                    }
                }
                Change::Opened => {
                    *opened = true;
                    let mut note = record
                        .trigger
                        .map_or("opened", |trigger| trigger.describe())
                        .to_owned();
                    if let Some(cause) = &record.cause {
                        note.push_str(&format!(": {cause}"));
                    }
                    if let Some(open_ms) = record.open_ms {
                        note.push_str(&format!("; open {open_ms} ms"));
                    }
                    notes.push(note);
                }
                Change::ForcedOpen => *opened = true,
                Change::Closed | Change::ForcedClosed | Change::Reset => *opened = false,
                _ => {}
            }
        }
        for (outcome, count) in trials {
            notes.push(if count == 1 {
                format!("trial: {outcome}")
            } else {
                format!("{count} trials: {outcome}")
            });
        }
        // Cut, not rounded, to the tenth: 2.97 s is in the second from 2 s, and reads 2.9 s.
        let at_ms = records.first().map_or(0, |r| r.at_ms);
        let at = format!("{}.{}", at_ms / 1000, at_ms % 1000 / 100);
        let mut line = format!("{at:>6} s  {command}  {}", states.join(" → "));
        if !notes.is_empty() {
            line.push_str(&format!("  ({})", notes.join("; ")));
        }
        wrap(&line, WIDTH, INDENT)
    }
}

/// One gateway's load counts at the previous tick, to take differences from.
#[derive(Debug, Default)]
struct SideCounts {
    sent: u64,
    answered: u64,
    degraded: u64,
    unanswered: u64,
}

impl SideCounts {
    /// The gateway's row for the second since the last call, from the cumulative counts and
    /// the latencies of `load` (which it takes) and what the gateway holds now (`held`).
    fn sample(&mut self, load: &LoadGenerator, held: Held) -> SideRow {
        let (now, mut recent) = {
            let mut stats = load.stats();
            let sum = |field: fn(&crate::load::PhaseLoad) -> u64| {
                stats.phases.iter().map(field).sum::<u64>()
            };
            let now = SideCounts {
                sent: sum(|p| p.sent),
                answered: sum(|p| p.answered),
                degraded: sum(|p| p.degraded),
                unanswered: sum(|p| p.unanswered),
            };
            (now, std::mem::take(&mut stats.recent))
        };
        recent.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let row = SideRow {
            sent: now.sent.saturating_sub(self.sent),
            answered: now.answered.saturating_sub(self.answered),
            degraded: now.degraded.saturating_sub(self.degraded),
            unanswered: now.unanswered.saturating_sub(self.unanswered),
            p50_ms: ms(percentile(&recent, 50.0)),
            p99_ms: ms(percentile(&recent, 99.0)),
            in_flight: held.requests,
            held: held.connections,
            threads: held.threads,
        };
        *self = now;
        row
    }
}

/// What the previous tick saw, to take differences from.
#[derive(Debug, Default)]
struct Last {
    counts: BTreeMap<Backend, CommandCounts>,
    gateway: SideCounts,
    twin: SideCounts,
    batches: (u64, u64),
    chaos: BTreeMap<Backend, u64>,
    /// Per instance: its commands' counts and the requests sent to it so far.
    fleet: Vec<(BTreeMap<Backend, CommandCounts>, u64)>,
}

/// Samples the run each second and shows it.
#[derive(Debug)]
pub struct LiveView {
    bar: Option<ProgressBar>,
    console: Console,
    /// Whether the table or the lines are coloured.
    colour: bool,
    gateway: Arc<Gateway>,
    load: LoadGenerator,
    breakers: BreakerLog,
    chaos: ChaosLog,
    schedule: Schedule,
    /// The unprotected twin's load and gauges, when it runs.
    twin: Option<TwinGauges>,
    /// Every gateway instance (instance 1 first), with `--instances` above 1.
    fleet: Vec<Arc<Gateway>>,
    last: Last,
    /// Breaker records taken from the log so far.
    transitions_seen: usize,
    /// Of those, the ones not shown yet: their second is not over.
    pending: Vec<BreakerRecord>,
    /// The folding of the shown ones.
    transitions: Transitions,
}

/// A view dropped unfinished (the run was interrupted) clears its bar now, before the caller
/// prints why, not later when the last clone of the bar goes.
impl Drop for LiveView {
    fn drop(&mut self) {
        self.finish();
    }
}

impl LiveView {
    /// A view of the run; `tui` draws the table and a progress bar of the requests the load
    /// plans for the schedule on standard error, otherwise lines go to `console`.
    pub fn new(
        tui: bool,
        console: Console,
        gateway: Arc<Gateway>,
        load: LoadGenerator,
        breakers: BreakerLog,
        chaos: ChaosLog,
        schedule: Schedule,
    ) -> LiveView {
        let bar = tui.then(|| {
            let planned = load.planned(&schedule);
            let bar = ProgressBar::with_draw_target(Some(planned), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg}\n[{elapsed_precise}] {bar:40} {pos}/{len} requests",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        // The table goes to standard error with the bar; the lines to `console`.
        let colour = if bar.is_some() {
            Console::Stderr.colours()
        } else {
            console.colours()
        };
        LiveView {
            bar,
            console,
            colour,
            gateway,
            load,
            breakers,
            chaos,
            schedule,
            twin: None,
            fleet: Vec::new(),
            last: Last::default(),
            transitions_seen: 0,
            pending: Vec::new(),
            transitions: Transitions::default(),
        }
    }

    /// The same view, showing `twin`'s row under the protected gateway's.
    pub fn compare_with(mut self, twin: TwinGauges) -> LiveView {
        self.twin = Some(twin);
        self
    }

    /// The same view, showing each of the gateway instances `fleet` (instance 1 first) and
    /// the fleet's totals.
    pub fn with_fleet(mut self, fleet: Vec<Arc<Gateway>>) -> LiveView {
        self.fleet = fleet;
        self
    }

    /// The progress bar the load generator advances (hidden without the TUI).
    pub fn progress(&self) -> ProgressBar {
        self.bar.clone().unwrap_or_else(ProgressBar::hidden)
    }

    /// Shows a line above the live view (or in the plain output), wrapped to [`WIDTH`].
    pub fn announce(&self, text: &str) {
        let text = wrap(text, WIDTH, INDENT);
        match &self.bar {
            Some(bar) => bar.println(text),
            None => self.console.line(&text),
        }
    }

    /// Shows the breaker transitions of the seconds that are over, folded per command per
    /// second (see [`Transitions`]).
    pub fn show_transitions(&mut self) {
        let now_second = self.breakers.elapsed_ms() / 1000;
        self.show_transitions_before(Some(now_second));
    }

    /// Shows a phase's start line: first every transition waiting (so they stay in time
    /// order; a second a phase starts in may then have a line before the phase and one after).
    pub fn announce_phase(&mut self, text: &str) {
        self.show_transitions_before(None);
        self.announce(text);
    }

    /// Shows the transitions waiting, of seconds before `second` (all without one).
    fn show_transitions_before(&mut self, second: Option<u64>) {
        let new = self.breakers.since(self.transitions_seen);
        self.transitions_seen += new.len();
        self.pending.extend(new);
        let due = match second {
            Some(second) => self
                .pending
                .iter()
                .take_while(|record| record.at_ms / 1000 < second)
                .count(),
            None => self.pending.len(),
        };
        let ready: Vec<BreakerRecord> = self.pending.drain(..due).collect();
        for line in self.transitions.fold(&ready, self.colour) {
            self.announce(&line);
        }
    }

    /// Samples and shows one second, `elapsed` into the run.
    pub fn tick(&mut self, elapsed: Duration) {
        let tick = self.sample(elapsed);
        match &self.bar {
            Some(bar) => bar.set_message(tick.table(self.colour)),
            None => self.console.line(&tick.lines(self.colour)),
        }
    }

    /// Shows the transitions still waiting and clears the view (the report follows).
    pub fn finish(&mut self) {
        self.show_transitions_before(None);
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    /// Each instance's row for the second since the last call (none with one instance).
    fn sample_fleet(&mut self) -> Vec<InstanceRow> {
        let sent = self.load.stats().instance_totals();
        if self.last.fleet.len() != self.fleet.len() {
            self.last.fleet = vec![(BTreeMap::new(), 0); self.fleet.len()];
        }
        let mut rows = Vec::with_capacity(self.fleet.len());
        for (k, gateway) in self.fleet.iter().enumerate() {
            let (last_counts, last_sent) = &mut self.last.fleet[k];
            let now_sent = sent.get(k).map_or(0, |load| load.sent);
            let mut row = InstanceRow {
                instance: k as u32 + 1,
                sent: now_sent.saturating_sub(*last_sent),
                errors: 0,
                short_circuited: 0,
                notable: Vec::new(),
            };
            *last_sent = now_sent;
            for backend in Backend::ALL {
                let counts = CommandCounts::read(&gateway.command(backend).metrics());
                let before = last_counts.insert(backend, counts).unwrap_or_default();
                let second = counts.since(&before);
                let errors = second.failures + second.timeouts + second.rejections;
                row.errors += errors;
                row.short_circuited += second.short_circuits;
                if errors > 0 || second.short_circuits > 0 {
                    row.notable
                        .push((backend.command_key(), errors, second.short_circuits));
                }
            }
            rows.push(row);
        }
        rows
    }

    fn sample(&mut self, elapsed: Duration) -> Tick {
        let held = if self.fleet.is_empty() {
            Held::protected(&self.gateway, &self.load)
        } else {
            let gateways: Vec<&Gateway> = self.fleet.iter().map(|g| &**g).collect();
            Held::fleet(&gateways, &self.load)
        };
        let gateway = self.last.gateway.sample(&self.load, held);
        let fleet = self.sample_fleet();
        let twin = match (&self.twin, &mut self.last.twin) {
            (Some(twin), last) => Some(last.sample(twin.load(), twin.held())),
            (None, _) => None,
        };

        let mut all_counts = BTreeMap::new();
        let mut commands = Vec::new();
        for backend in Backend::ALL {
            let command = self.gateway.command(backend);
            let metrics = command.metrics();
            let counts = CommandCounts::read(&metrics);
            let before = self.last.counts.get(&backend).copied().unwrap_or_default();
            let last_second = counts.since(&before);
            all_counts.insert(backend, counts);
            let injected = self.chaos.injected(backend.command_key());
            let last_injected = self.last.chaos.insert(backend, injected).unwrap_or(0);
            let latency = metrics.execution_latency();
            let thread = command.properties().execution_isolation_strategy
                != Some(IsolationStrategy::Semaphore);
            let adaptive = metrics.adaptive_limit();
            let (in_use, capacity) = match command.thread_pool_metrics() {
                Some(pool) if thread => (pool.current_active_count, pool.current_core_pool_size),
                _ if adaptive.is_some() => {
                    adaptive.map_or((0, 0), |limit| (limit.in_flight, limit.limit))
                }
                _ => (
                    metrics.current_concurrent_execution_count(),
                    command
                        .properties()
                        .execution_isolation_semaphore_max_concurrent_requests,
                ),
            };
            commands.push(CommandRow {
                key: backend.command_key(),
                isolation: match (thread, adaptive) {
                    (true, _) => "THREAD",
                    (false, Some(_)) => "ADAPTIVE",
                    (false, None) => "SEMAPHORE",
                },
                rate: last_second.executions(),
                errors: metrics.health_counts().error_percentage,
                short_circuited: last_second.short_circuits,
                chaos: injected.saturating_sub(last_injected),
                shed: last_second.limit_rejections,
                state: shown_state(command, &self.breakers),
                p50: latency.p50,
                p99: latency.p99,
                in_use,
                capacity,
            });
        }
        let collapser = self.gateway.collapser_metrics();
        let batches = (
            collapser.cumulative_count(CollapserEvent::BatchExecuted),
            collapser.cumulative_count(CollapserEvent::AddedToBatch),
        );
        let running = self.schedule.phase_at(elapsed);
        let tick = Tick {
            elapsed,
            total: self.schedule.total(),
            phase: running.map(|index| {
                let name = self.schedule.phases[index].name.clone();
                (index + 1, self.schedule.phases.len(), name)
            }),
            chaos_in: running.map_or_else(Vec::new, |index| {
                let phase = &self.schedule.phases[index];
                phase.chaotic().map(Backend::command_key).collect()
            }),
            gateway,
            twin,
            fleet,
            commands,
            batches: (
                batches.0.saturating_sub(self.last.batches.0),
                batches.1.saturating_sub(self.last.batches.1),
            ),
        };
        self.last.counts = all_counts;
        self.last.batches = batches;
        tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GetTitle CLOSED; GetRatings OPEN, every call short-circuited, so its error percentage
    /// is 0; GetAvailability HALF_OPEN.
    fn tick() -> Tick {
        Tick {
            elapsed: Duration::from_millis(4200),
            total: Duration::from_secs(10),
            phase: Some((3, 7, "error-burst".into())),
            chaos_in: vec![],
            gateway: SideRow {
                sent: 50,
                answered: 50,
                unanswered: 0,
                degraded: 12,
                p50_ms: 6.2,
                p99_ms: 31.4,
                in_flight: 3,
                held: 2,
                threads: 1,
            },
            twin: None,
            fleet: vec![],
            commands: vec![
                CommandRow {
                    key: "GetTitle",
                    isolation: "THREAD",
                    rate: 50,
                    errors: 0,
                    short_circuited: 0,
                    chaos: 0,
                    shed: 0,
                    state: "CLOSED",
                    p50: 3,
                    p99: 8,
                    in_use: 1,
                    capacity: 8,
                },
                CommandRow {
                    key: "GetRatings",
                    isolation: "SEMAPHORE",
                    rate: 12,
                    errors: 0,
                    short_circuited: 12,
                    chaos: 0,
                    shed: 0,
                    state: "OPEN",
                    p50: 4,
                    p99: 9,
                    in_use: 0,
                    capacity: 20,
                },
                CommandRow {
                    key: "GetAvailability",
                    isolation: "SEMAPHORE",
                    rate: 5,
                    errors: 40,
                    short_circuited: 4,
                    chaos: 0,
                    shed: 0,
                    state: "HALF_OPEN",
                    p50: 2,
                    p99: 6,
                    in_use: 1,
                    capacity: 20,
                },
            ],
            batches: (12, 48),
        }
    }

    /// The unprotected twin of [`tick`]'s second: a third of its requests answered, slowly,
    /// every thread and many connections held.
    fn twin() -> SideRow {
        SideRow {
            sent: 50,
            answered: 17,
            unanswered: 33,
            degraded: 0,
            p50_ms: 480.0,
            p99_ms: 4870.6,
            in_flight: 183,
            held: 140,
            threads: 8,
        }
    }

    #[test]
    fn the_table_shows_phase_gateway_commands_and_collapser_with_units() {
        assert_eq!(
            tick().table(false),
            "phase 3/7 error-burst   4 s of 10 s\n\
             gateway        sent      answered  degraded      p50      p99     in flight  held\n\
             protected      50/s    50/s  100%       24%     6 ms    31 ms    3 requests  2 conns, 1 thread\n\
             command              calls errors   short   chaos  circuit           p50     p99  in use\n\
             GetTitle              50/s     0%     0/s     0/s  CLOSED           3 ms    8 ms  1/8 threads\n\
             GetRatings            12/s     0%    12/s     0/s  OPEN             4 ms    9 ms  0/20 permits\n\
             GetAvailability        5/s    40%     4/s     0/s  HALF_OPEN        2 ms    6 ms  1/20 permits\n\
             collapser GetRating: 12 batches/s, 4.0 ratings per batch"
        );
    }

    #[test]
    fn the_table_shows_the_unprotected_twin_under_the_protected_gateway() {
        let tick = Tick {
            twin: Some(twin()),
            ..tick()
        };
        assert_eq!(
            tick.table(false)
                .lines()
                .skip(1)
                .take(4)
                .collect::<Vec<_>>(),
            [
                "gateway        sent      answered  degraded      p50      p99     in flight  held",
                "protected      50/s    50/s  100%       24%     6 ms    31 ms    3 requests  2 conns, 1 thread",
                "unprotected    50/s    17/s   34%         -   480 ms  4871 ms  183 requests  140 conns, 8 threads",
                "command              calls errors   short   chaos  circuit           p50     p99  in use",
            ]
        );
    }

    /// Green under 5 %, yellow from 5 %, red from 50 %: the error percentage, the degraded
    /// share, and the answered share by what it misses.
    #[test]
    fn the_table_colours_states_and_shares_by_their_thresholds() {
        let tick = Tick {
            twin: Some(twin()),
            ..tick()
        };
        let table = tick.table(true);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            rows[..2],
            [
                "protected      50/s    50/s  \x1b[32m100%\x1b[0m       \x1b[33m24%\x1b[0m     6 ms    31 ms    3 requests  2 conns, 1 thread",
                "unprotected    50/s    17/s   \x1b[31m34%\x1b[0m         -   480 ms  4871 ms  183 requests  140 conns, 8 threads",
            ]
        );
        assert_eq!(
            rows[3..6],
            [
                "GetTitle              50/s     \x1b[32m0%\x1b[0m     0/s     0/s  \x1b[32mCLOSED\x1b[0m           3 ms    8 ms  1/8 threads",
                "GetRatings            12/s     \x1b[32m0%\x1b[0m    12/s     0/s  \x1b[31m\x1b[1mOPEN\x1b[0m             4 ms    9 ms  0/20 permits",
                "GetAvailability        5/s    \x1b[33m40%\x1b[0m     4/s     0/s  \x1b[33mHALF_OPEN\x1b[0m        2 ms    6 ms  1/20 permits",
            ]
        );
        // The thresholds' edges.
        let style = |percent| {
            share_style(percent)
                .force_styling(true)
                .apply_to("x")
                .to_string()
        };
        assert_eq!(
            [4.9, 5.0, 49.9, 50.0].map(style),
            [
                "\x1b[32mx\x1b[0m",
                "\x1b[33mx\x1b[0m",
                "\x1b[33mx\x1b[0m",
                "\x1b[31mx\x1b[0m"
            ]
        );
    }

    /// The answered share counts the requests that ended in the second, not those still in
    /// flight; a gateway that answered nothing has no latency to show.
    #[test]
    fn the_answered_share_is_of_the_requests_that_ended() {
        let row = |answered, unanswered| SideRow {
            sent: 50,
            answered,
            unanswered,
            ..SideRow::default()
        };
        assert_eq!(row(46, 0).answered_percent(), 100.0);
        assert_eq!(row(3, 1).answered_percent(), 75.0);
        assert_eq!(row(0, 0).answered_percent(), 100.0);
        assert_eq!(row(0, 50).answered_percent(), 0.0);
        assert_eq!(
            row(0, 50).plain(false, false),
            "0/s answered, p99 -, 0 in flight, 0 conns, 0 threads"
        );
    }

    #[test]
    fn the_plain_output_is_a_gateway_line_and_the_commands_worth_noting() {
        assert_eq!(
            tick().lines(false),
            "[  4.2 s] error-burst\n          \
             gateway      50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread\n          \
             GetRatings OPEN, 12 calls/s, 0% errors, 12/s short-circuited\n          \
             GetAvailability HALF_OPEN, 5 calls/s, 40% errors, 4/s short-circuited"
        );
        // A calm second is two lines; draining has no phase.
        let calm = Tick {
            phase: None,
            commands: tick().commands[..1].to_vec(),
            ..tick()
        };
        assert_eq!(
            calm.lines(false),
            "[  4.2 s] draining\n          \
             gateway      50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread"
        );
    }

    #[test]
    fn the_plain_output_puts_the_twin_on_a_second_line() {
        let tick = Tick {
            twin: Some(twin()),
            commands: vec![],
            ..tick()
        };
        assert_eq!(
            tick.lines(false),
            "[  4.2 s] error-burst\n          \
             protected    50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread\n          \
             unprotected  17/s answered, p99 4871 ms, 183 in flight, 140 conns, 8 threads"
        );
    }

    #[test]
    fn an_adaptive_limit_shows_its_places_in_use_of_the_limit_now() {
        let mut shedding = tick();
        shedding.commands = vec![CommandRow {
            key: "GetPrices",
            isolation: "ADAPTIVE",
            rate: 50,
            errors: 6,
            short_circuited: 0,
            chaos: 0,
            shed: 30,
            state: "CLOSED",
            p50: 160,
            p99: 460,
            in_use: 3,
            capacity: 3,
        }];
        let table = shedding.table(false);
        assert_eq!(
            table.lines().skip(4).collect::<Vec<_>>(),
            [
                "GetPrices             50/s     6%     0/s     0/s  CLOSED         160 ms  460 ms  \
                 3/3 limit",
                "adaptive limit GetPrices: 3 now, 30/s shed (fixed limit beside it: 20)",
                "collapser GetRating: 12 batches/s, 4.0 ratings per batch",
            ]
        );
        // The shed calls are not errors: the plain line says them apart.
        assert_eq!(
            shedding.lines(false),
            "[  4.2 s] error-burst\n          \
             gateway      50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread\n          \
             GetPrices CLOSED, 50 calls/s, 6% errors, limit 3, 30/s shed"
        );
        // Without errors or shed calls, a limit below where it started is still worth a line.
        shedding.commands[0].shed = 0;
        shedding.commands[0].errors = 0;
        assert!(
            shedding
                .lines(false)
                .ends_with("GetPrices CLOSED, 50 calls/s, 0% errors, limit 3")
        );
        shedding.commands[0].capacity = FIXED_PRICES_LIMIT;
        assert!(!shedding.lines(false).contains("GetPrices"));
    }

    #[test]
    fn a_chaos_phase_is_marked_and_each_command_shows_its_injections() {
        let mut chaotic = tick();
        chaotic.phase = Some((2, 4, "injected-faults".into()));
        chaotic.chaos_in = vec!["GetRatings"];
        chaotic.commands.truncate(2);
        chaotic.commands[1].chaos = 9;
        assert_eq!(
            chaotic.table(false).lines().take(1).collect::<Vec<_>>(),
            ["phase 2/4 injected-faults (chaos in GetRatings)   4 s of 10 s"]
        );
        assert_eq!(
            chaotic.table(false).lines().nth(5),
            Some(
                "GetRatings            12/s     0%    12/s     9/s  OPEN             4 ms    9 ms  0/20 permits"
            )
        );
        assert_eq!(
            chaotic.lines(false),
            "[  4.2 s] injected-faults (chaos)\n          \
             gateway      50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread\n          \
             GetRatings OPEN, 12 calls/s, 0% errors, 12/s short-circuited, 9/s chaos"
        );
    }

    #[test]
    fn the_plain_output_colours_states_and_shares_when_asked() {
        assert_eq!(
            tick().lines(true),
            "[  4.2 s] error-burst\n          \
             gateway      50/s answered, \x1b[33m24%\x1b[0m degraded, p99 31 ms, 3 in flight, \
             2 conns, 1 thread\n          \
             GetRatings \x1b[31m\x1b[1mOPEN\x1b[0m, 12 calls/s, \x1b[32m0%\x1b[0m errors, \
             12/s short-circuited\n          \
             GetAvailability \x1b[33mHALF_OPEN\x1b[0m, 5 calls/s, \x1b[33m40%\x1b[0m errors, \
             4/s short-circuited"
        );
    }

    #[test]
    fn forced_states_are_coloured_as_what_they_force() {
        assert_eq!(
            circuit_cell("FORCED_OPEN", 0, true),
            "\x1b[31m\x1b[1mFORCED_OPEN\x1b[0m"
        );
        assert_eq!(
            circuit_cell("FORCED_CLOSED", 0, true),
            "\x1b[33mFORCED_CLOSED\x1b[0m"
        );
        assert_eq!(circuit_cell("OPEN", 9, false), "OPEN     ");
    }

    #[test]
    fn a_fleet_shows_a_line_per_instance_with_its_notable_commands() {
        let fleet = vec![
            InstanceRow {
                instance: 1,
                sent: 48,
                errors: 12,
                short_circuited: 30,
                notable: vec![("GetRecommendations", 12, 30)],
            },
            InstanceRow {
                instance: 2,
                sent: 1,
                errors: 0,
                short_circuited: 1,
                notable: vec![("GetRecommendations", 0, 1)],
            },
            InstanceRow {
                instance: 3,
                sent: 1,
                errors: 0,
                short_circuited: 0,
                notable: vec![],
            },
        ];
        let tick = Tick {
            phase: None,
            commands: vec![],
            fleet,
            ..tick()
        };
        assert_eq!(
            tick.lines(false),
            "[  4.2 s] draining\n          \
             gateway      50/s answered, 24% degraded, p99 31 ms, 3 in flight, 2 conns, 1 thread\n          \
             instance     #1 48 req/s, 12 errors/s, 30 short-circuited/s (GetRecommendations 12e/30sc)\n          \
             instance     #2 1 req/s, 0 errors/s, 1 short-circuited/s (GetRecommendations 0e/1sc)\n          \
             instance     #3 1 req/s, 0 errors/s, 0 short-circuited/s"
        );
        let table = tick.table(false);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[3],
            "  instance #1 48 req/s, 12 errors/s, 30 short-circuited/s (GetRecommendations 12e/30sc)"
        );
        assert!(lines[6].starts_with("command (#1) "), "{table}");
        assert!(lines.iter().all(|line| line.len() <= WIDTH), "{table}");
    }

    #[test]
    fn counts_take_the_plural_unless_one() {
        assert_eq!(
            [count(0, "thread"), count(1, "thread"), count(3, "request")],
            ["0 threads", "1 thread", "3 requests"]
        );
    }

    #[test]
    fn wrap_breaks_at_spaces_indents_and_cuts_words_too_long() {
        assert_eq!(wrap("  a bb  ccc", 20, 4), "  a bb  ccc");
        assert_eq!(wrap("aaa bbb ccc ddd", 8, 2), "aaa bbb\n  ccc\n  ddd");
        assert_eq!(wrap("aaaaaaaaaaaa b", 5, 1), "aaaaa\n aaaa\n aaa\n b");
        // Colour codes take no room.
        let red = paint("ccc", Style::new().red(), true);
        assert_eq!(wrap(&format!("aaa {red}"), 7, 0), format!("aaa {red}"));
        assert_eq!(wrap("one\ntwo three", 6, 1), "one\ntwo\n three");
    }

    /// Every line the view prints, measured without colour codes, on the widest ticks it can
    /// meet: a long phase name with chaos, every command worth noting with large numbers and
    /// the widest states, the twin; transitions with a long cause; a long phase line.
    #[test]
    fn every_line_is_at_most_100_columns() {
        let mut wide = Tick {
            phase: Some((12, 12, "a-very-long-phase-name-from-a-scenario-file".into())),
            chaos_in: vec!["GetRecommendations", "GetAvailability", "GetTitle"],
            twin: Some(SideRow {
                sent: 2000,
                answered: 1999,
                unanswered: 1,
                degraded: 0,
                p50_ms: 4999.0,
                p99_ms: 5000.0,
                in_flight: 10_000,
                held: 10_000,
                threads: 8,
            }),
            elapsed: Duration::from_secs(86_399),
            total: Duration::from_secs(86_400),
            ..tick()
        };
        wide.gateway.sent = 2000;
        wide.gateway.answered = 1999;
        wide.gateway.degraded = 1333;
        wide.gateway.in_flight = 10_000;
        for (row, state) in
            wide.commands
                .iter_mut()
                .zip(["FORCED_CLOSED", "FORCED_OPEN", "HALF_OPEN"])
        {
            row.key = "GetRecommendations";
            row.state = state;
            row.rate = 2000;
            row.errors = 100;
            row.short_circuited = 2000;
            row.chaos = 2000;
            row.p50 = 10_000;
            row.p99 = 10_000;
            row.in_use = 200;
            row.capacity = 200;
        }
        let cause = "54% of 42 requests failed in the last 1000 ms \
                     (circuitBreaker.errorThresholdPercentage 50%); last failure: TIMEOUT";
        let opened = BreakerRecord {
            at_ms: 86_398_100,
            command: "GetRecommendations".into(),
            change: Change::Opened,
            trigger: Some(Trigger::Health),
            open_ms: Some(500),
            cause: Some(cause.into()),
        };
        let transitions = Transitions::default().fold(&[opened], true);
        let phase = "==   2.0 s  phase 2/7 latency-spike: The catalog slows down and sometimes \
                     hangs: GetTitle times out, its thread pool fills and rejects, its breaker \
                     opens; titles come stale from memory [catalog: latency 120+100ms σ0.8, 5% \
                     hang]";
        let mut printed = vec![
            wide.table(true),
            wide.lines(true),
            tick().table(true),
            tick().lines(true),
            wrap(phase, WIDTH, INDENT),
        ];
        printed.extend(transitions);
        let lines: Vec<&str> = printed.iter().flat_map(|text| text.lines()).collect();
        let too_wide: Vec<(usize, &str)> = lines
            .iter()
            .map(|line| (console::measure_text_width(line), *line))
            .filter(|(width, _)| *width > WIDTH)
            .collect();
        assert_eq!(too_wide, []);
        // The widest were wrapped, not left out: the wide table's phase line took two lines,
        // each of its plain command lines two (the gateways' one each, under the phase's own);
        // the phase line three, the cause two.
        assert_eq!(
            printed
                .iter()
                .map(|text| text.lines().count())
                .collect::<Vec<_>>(),
            [10, 10, 8, 4, 3, 2]
        );
    }

    /// Breaker records from `(at_ms, change, trigger, cause)` for GetTitle.
    fn title_records(list: &[(u64, Change, Option<Trigger>, &str)]) -> Vec<BreakerRecord> {
        list.iter()
            .map(|&(at_ms, change, trigger, cause)| BreakerRecord {
                at_ms,
                command: "GetTitle".into(),
                change,
                trigger,
                open_ms: trigger.map(|_| 500),
                cause: (!cause.is_empty()).then(|| cause.to_owned()),
            })
            .collect()
    }

    /// One line per command per second; the first opening of a run with its cause, the failed
    /// trials after it with their outcome only; an operator's hold with its property.
    #[test]
    fn transitions_fold_per_command_per_second() {
        use Change::*;
        let trial = "the half-open trial ended in TIMEOUT";
        let mut records = title_records(&[
            (
                2760,
                Opened,
                Some(Trigger::Health),
                "54% of 42 requests failed",
            ),
            (3280, HalfOpened, None, ""),
            (3290, Opened, Some(Trigger::TrialFailed), trial),
            (3800, HalfOpened, None, ""),
            (3810, Opened, Some(Trigger::TrialFailed), trial),
            (4020, HalfOpened, None, ""),
            (4020, Closed, None, ""),
            (12_300, HeldOpen, None, "circuitBreaker.forceOpen=true"),
            (15_100, Released, None, "circuitBreaker.forceOpen removed"),
        ]);
        records.insert(
            1,
            BreakerRecord {
                command: "GetRatings".into(),
                ..records[0].clone()
            },
        );
        let mut folding = Transitions::default();
        assert_eq!(
            folding.fold(&records[..4], false),
            [
                "   2.7 s  GetTitle  OPEN  (error threshold: 54% of 42 requests failed; open 500 ms)",
                "   2.7 s  GetRatings  OPEN  (error threshold: 54% of 42 requests failed; open 500 ms)",
                "   3.2 s  GetTitle  HALF_OPEN → OPEN  (trial: TIMEOUT)",
            ]
        );
        // The run goes on across calls: the next second's re-opening is a trial again.
        assert_eq!(
            folding.fold(&records[4..], false),
            [
                "   3.8 s  GetTitle  HALF_OPEN → OPEN  (trial: TIMEOUT)",
                "   4.0 s  GetTitle  HALF_OPEN → CLOSED",
                "  12.3 s  GetTitle  FORCED_OPEN by operator (circuitBreaker.forceOpen=true)",
                "  15.1 s  GetTitle  released by operator (circuitBreaker.forceOpen removed)",
            ]
        );
        // Two failed trials in one second are counted; after a close, an opening is a run's
        // first again.
        let again = title_records(&[
            (20_100, HalfOpened, None, ""),
            (20_150, Opened, Some(Trigger::TrialFailed), trial),
            (20_700, HalfOpened, None, ""),
            (20_710, Opened, Some(Trigger::TrialFailed), trial),
        ]);
        let mut reopening = Transitions::default();
        reopening.opened.insert("GetTitle".into(), true);
        assert_eq!(
            reopening.fold(&again, true),
            [
                "  20.1 s  GetTitle  \x1b[33mHALF_OPEN\x1b[0m → \x1b[31m\x1b[1mOPEN\x1b[0m → \
                 \x1b[33mHALF_OPEN\x1b[0m → \x1b[31m\x1b[1mOPEN\x1b[0m  (2 trials: TIMEOUT)"
            ]
        );
        let trip_now = title_records(&[(21_000, Opened, Some(Trigger::TripNow), "")]);
        assert_eq!(
            Transitions::default().fold(&trip_now, false),
            ["  21.0 s  GetTitle  OPEN  (trip now; open 500 ms)"]
        );
    }

    /// Both sides of a sample, from their loads' counts: the last second's differences,
    /// latencies of the answers since the last sample, and what is in flight now (nothing
    /// reaches the backends here, so no connection or thread is held).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_protected_side_is_filled_from_the_load_and_the_commands() {
        use crate::load::PhaseLoad;

        let backends = crate::backends::Backends::start_seeded(0).await.unwrap();
        let registry = hystrix::Registry::builder()
            .executor(tokio::runtime::Handle::current())
            .build();
        let gateway = Arc::new(Gateway::new(&registry, |b| backends.addr(b), 10).unwrap());
        let schedule = crate::scenario::chaos_6s();
        let load = LoadGenerator::new("http://127.0.0.1:9".into(), 50.0, schedule.phases.len(), 0);
        let ms = |list: &[u64]| list.iter().map(|&v| Duration::from_millis(v)).collect();
        {
            let mut stats = load.stats();
            stats.phases[0] = PhaseLoad {
                sent: 10,
                answered: 7,
                degraded: 2,
                unanswered: 1,
                ..PhaseLoad::default()
            };
            stats.phases[1].sent = 5;
            stats.recent = ms(&[500, 125, 250]);
        }
        let view = LiveView::new(
            false,
            Console::Stdout,
            gateway,
            load.clone(),
            BreakerLog::default(),
            ChaosLog::default(),
            schedule,
        );
        // The twin: 10 sent, 3 answered (slowly), 2 given up on.
        let twin = crate::twin::Twin::start(0, 50.0, 4).await.unwrap();
        {
            let mut stats = twin.load().stats();
            stats.phases[0] = PhaseLoad {
                sent: 10,
                answered: 3,
                unanswered: 2,
                ..PhaseLoad::default()
            };
            stats.recent = ms(&[4800, 900, 30]);
        }
        let mut view = view.compare_with(twin.gauges());
        let first = view.sample(Duration::from_secs(1));
        assert_eq!(
            (first.gateway, first.twin),
            (
                SideRow {
                    sent: 15,
                    answered: 7,
                    unanswered: 1,
                    degraded: 2,
                    p50_ms: 250.0,
                    p99_ms: 500.0,
                    in_flight: 7,
                    held: 0,
                    threads: 0,
                },
                Some(SideRow {
                    sent: 10,
                    answered: 3,
                    unanswered: 2,
                    degraded: 0,
                    p50_ms: 900.0,
                    p99_ms: 4800.0,
                    in_flight: 5,
                    held: 0,
                    threads: 0,
                })
            )
        );
        {
            let mut stats = load.stats();
            stats.phases[1].answered = 4;
            stats.phases[1].degraded = 4;
            stats.recent = ms(&[1000]);
        }
        let second = view.sample(Duration::from_secs(2));
        assert_eq!(
            second.gateway,
            SideRow {
                sent: 0,
                answered: 4,
                unanswered: 0,
                degraded: 4,
                p50_ms: 1000.0,
                p99_ms: 1000.0,
                in_flight: 3,
                held: 0,
                threads: 0,
            }
        );
        assert_eq!(second.phase, Some((2, 4, "injected-faults".to_owned())));
    }

    /// A breaker that opened and closed again between two samples shows OPEN for that
    /// interval, and CLOSED for the next.
    #[test]
    fn an_episode_between_two_samples_shows_its_worst_state() {
        use hystrix::clock::ManualClock;
        use hystrix::{Command, Registry};

        let breakers = BreakerLog::default();
        let clock = ManualClock::new();
        let registry = Registry::builder()
            .clock(clock.clone())
            .circuit_breaker_listener(breakers.clone())
            .build();
        let command = Command::builder("GetTitle")
            .group("G")
            .isolation(IsolationStrategy::Semaphore)
            .circuit_breaker_sleep_window(Duration::from_millis(500))
            .classify(|_: &std::io::Error| hystrix::Class::TripNow { min_open: None })
            .build_in(&registry)
            .unwrap();
        let line = |state| {
            let row = CommandRow {
                state,
                ..tick().commands[0].clone()
            };
            let tick = Tick {
                commands: vec![row],
                ..tick()
            };
            tick.table(true)
                .lines()
                .nth(4)
                .unwrap_or_default()
                .to_owned()
        };
        let row = |state: &str| {
            format!(
                "GetTitle              50/s     \x1b[32m0%\x1b[0m     0/s     0/s  {state}{}3 ms    \
                 8 ms  1/8 threads",
                " ".repeat(13 - console::measure_text_width(state) + 4)
            )
        };

        assert_eq!(
            line(shown_state(&command, &breakers)),
            row("\x1b[32mCLOSED\x1b[0m")
        );
        // Within one interval: opened by a failure, half-open after the sleep window, closed
        // by a successful trial.
        let _ = command
            .run(|| Err::<u32, _>(std::io::Error::other("503")))
            .execute();
        clock.advance_ms(501);
        command
            .run(|| Ok::<_, std::io::Error>(1))
            .execute()
            .unwrap();
        assert_eq!(command.circuit_breaker().status(), hystrix::Status::Closed);
        assert_eq!(
            line(shown_state(&command, &breakers)),
            row("\x1b[31m\x1b[1mOPEN\x1b[0m")
        );
        assert_eq!(
            line(shown_state(&command, &breakers)),
            row("\x1b[32mCLOSED\x1b[0m")
        );
    }
}
