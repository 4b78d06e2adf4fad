//! What a simulated load run produced, and its table.

use std::fmt::{self, Write as _};

use hdrhistogram::Histogram;

use super::SimOutcome;
use super::backend::BackendStats;

/// What one run of a load produced: the requests' outcomes and latencies, and (once added with
/// [`with_backend`](Report::with_backend)) what the backend saw. `Display` prints it as a
/// one-row [`table`].
#[derive(Debug, Clone)]
pub struct Report {
    name: String,
    offered: u64,
    answered: u64,
    fallback: u64,
    failed: u64,
    latency: Histogram<u64>,
    started_ms: u64,
    ended_ms: u64,
    backend: Option<BackendStats>,
    measures: Vec<(String, f64)>,
}

/// Latency percentiles of a run's requests, in whole ms of virtual time, from a request's
/// arrival to its outcome (queueing, every attempt and any fallback included).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LatencySummary {
    /// The median.
    pub p50_ms: u64,
    /// The 95th percentile.
    pub p95_ms: u64,
    /// The 99th percentile.
    pub p99_ms: u64,
    /// The 99.9th percentile.
    pub p999_ms: u64,
    /// The longest.
    pub max_ms: u64,
    /// The mean.
    pub mean_ms: f64,
}

impl Report {
    pub(super) fn new(started_ms: u64) -> Self {
        Report {
            name: String::new(),
            offered: 0,
            answered: 0,
            fallback: 0,
            failed: 0,
            // Auto-resizing, 3 significant figures: exact below 2048 ms, within 0.1 % above.
            latency: Histogram::new(3).unwrap_or_else(|_| unreachable!("3 figures is valid")),
            started_ms,
            ended_ms: started_ms,
            backend: None,
            measures: Vec::new(),
        }
    }

    pub(super) fn offer(&mut self) {
        self.offered += 1;
    }

    pub(super) fn record(&mut self, outcome: SimOutcome, latency_ms: u64, now_ms: u64) {
        match outcome {
            SimOutcome::Answered => self.answered += 1,
            SimOutcome::Fallback => self.fallback += 1,
            SimOutcome::Failed => self.failed += 1,
        }
        self.latency.saturating_record(latency_ms);
        self.ended_ms = self.ended_ms.max(now_ms);
    }

    /// This report named `name` (the first column of its [`table`]).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// This report with what the backend saw (its [`Backend::stats`](super::Backend::stats)
    /// after the run), for the backend columns of the [`table`].
    #[must_use]
    pub fn with_backend(mut self, stats: BackendStats) -> Self {
        self.backend = Some(stats);
        self
    }

    /// This report with one more measure: a number the run measured beyond the [`table`]'s
    /// columns, e.g. the hedging delay a command settled on; `name` says what it is and its
    /// unit ("hedge delay, median (ms)"). [`measures`] prints them.
    #[must_use]
    pub fn with_measure(mut self, name: impl Into<String>, value: f64) -> Self {
        self.measures.push((name.into(), value));
        self
    }

    /// The measures added with [`with_measure`](Report::with_measure), in that order.
    pub fn measures(&self) -> &[(String, f64)] {
        &self.measures
    }

    /// The value of the measure called `name`, if added (the first of that name).
    pub fn measure(&self, name: &str) -> Option<f64> {
        self.measures
            .iter()
            .find(|(measure, _)| measure == name)
            .map(|(_, value)| *value)
    }

    /// Its name (empty unless set).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests the load offered (each one finished: a run returns once all have).
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// Requests answered by the backend ([`SimOutcome::Answered`]).
    pub fn answered(&self) -> u64 {
        self.answered
    }

    /// Requests answered by a fallback ([`SimOutcome::Fallback`]).
    pub fn fallback(&self) -> u64 {
        self.fallback
    }

    /// Requests that got no answer ([`SimOutcome::Failed`]).
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// `answered / offered`, from 0.0 to 1.0 (0.0 with no request).
    pub fn answered_share(&self) -> f64 {
        share(self.answered, self.offered)
    }

    /// `fallback / offered`, from 0.0 to 1.0.
    pub fn fallback_share(&self) -> f64 {
        share(self.fallback, self.offered)
    }

    /// `failed / offered`, from 0.0 to 1.0.
    pub fn failed_share(&self) -> f64 {
        share(self.failed, self.offered)
    }

    /// What the backend saw, if added with [`with_backend`](Report::with_backend).
    pub fn backend(&self) -> Option<&BackendStats> {
        self.backend.as_ref()
    }

    /// Backend calls per offered request: 1.0 for one call each, 3.0 when every request made
    /// three, near 0 when a breaker answers for the backend. `None` without backend stats or
    /// requests.
    pub fn backend_calls_per_request(&self) -> Option<f64> {
        let stats = self.backend.as_ref()?;
        (self.offered > 0).then(|| stats.calls as f64 / self.offered as f64)
    }

    /// The requests' latency percentiles (all outcomes together), in ms.
    pub fn latency(&self) -> LatencySummary {
        let h = &self.latency;
        LatencySummary {
            p50_ms: h.value_at_quantile(0.5),
            p95_ms: h.value_at_quantile(0.95),
            p99_ms: h.value_at_quantile(0.99),
            p999_ms: h.value_at_quantile(0.999),
            max_ms: h.max(),
            mean_ms: h.mean(),
        }
    }

    /// Virtual time from the run's start to its last request's outcome, in ms.
    pub fn elapsed_ms(&self) -> u64 {
        self.ended_ms - self.started_ms
    }
}

/// `part / whole`, 0.0 for no `whole`.
pub(super) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The column headers of [`table`].
const HEADERS: [&str; 11] = [
    "scenario",
    "offered",
    "answered",
    "fallback",
    "failed",
    "backend calls",
    "calls/request",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
];

/// A plain-text table of `reports`, one row each: the shares of requests answered by the
/// backend, by a fallback and not at all (in %), the backend's calls in total and per offered
/// request ("-" without backend stats), and the latency percentiles in ms.
///
/// ```text
/// scenario            offered  answered  fallback  failed  backend calls  calls/request  p50 ms  p99 ms  p99.9 ms  max ms
/// baseline-transient    10000   70.32 %   29.68 %  0.00 %          10000           1.00      20     103       171     320
/// ```
pub fn table(reports: &[Report]) -> String {
    let rows: Vec<[String; 11]> = reports.iter().map(row).collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String; 11]| {
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            // Left-aligned names, right-aligned numbers.
            let _ = if i == 0 {
                write!(out, "{sep}{cell:<width$}")
            } else {
                write!(out, "{sep}{cell:>width$}")
            };
        }
        // No trailing spaces after a short last cell.
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(&HEADERS.map(String::from));
    for row in &rows {
        line(row);
    }
    out
}

/// A report's name in the first column: "-" without one.
fn shown_name(report: &Report) -> String {
    if report.name.is_empty() {
        "-".to_string()
    } else {
        report.name.clone()
    }
}

fn row(report: &Report) -> [String; 11] {
    let percent = |share: f64| format!("{:.2} %", share * 100.0);
    let latency = report.latency();
    [
        shown_name(report),
        report.offered.to_string(),
        percent(report.answered_share()),
        percent(report.fallback_share()),
        percent(report.failed_share()),
        report
            .backend
            .map_or_else(|| "-".to_string(), |stats| stats.calls.to_string()),
        report
            .backend_calls_per_request()
            .map_or_else(|| "-".to_string(), |calls| format!("{calls:.2}")),
        latency.p50_ms.to_string(),
        latency.p99_ms.to_string(),
        latency.p999_ms.to_string(),
        latency.max_ms.to_string(),
    ]
}

/// The [`measures`](Report::measures) of `reports`, one line each: the report's name ("-"
/// without one), the measure's name and its value (a whole number as such, else to 3
/// decimals); empty when none has a measure.
///
/// ```text
/// hedge-adaptive-p95  hedging delay once computed, median (ms): 25
/// ```
pub fn measures(reports: &[Report]) -> String {
    let width = reports
        .iter()
        .filter(|report| !report.measures.is_empty())
        .map(|report| shown_name(report).len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for report in reports {
        for (measure, value) in &report.measures {
            let value = if value.fract() == 0.0 && value.abs() < 1e15 {
                format!("{value:.0}")
            } else {
                format!("{value:.3}")
            };
            let _ = writeln!(out, "{:<width$}  {measure}: {value}", shown_name(report));
        }
    }
    out
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&table(std::slice::from_ref(self)))
    }
}
