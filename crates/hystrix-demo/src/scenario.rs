//! Scenarios: phases of faults on the backends, read from TOML and scaled to the run's length.
//!
//! A scenario is a list of phases, each with a name, a weight (its share of `--duration`), the
//! faults of each backend during it (`catalog`, `ratings`, `recommendations`, `availability`,
//! `prices`, `prices-fixed`; a backend a phase does not name is healthy), and the chaos
//! injected in-process into a backend's command while the backend itself stays healthy. The
//! built-in scenarios are TOML files in `scenarios/`, read with the same parser as a user's
//! file. [`Scenario::schedule`] turns the weights into start times and lengths for a given
//! duration.
//!
//! ```toml
//! name = "my-outage"
//!
//! [[phase]]
//! name = "warm-up"
//! weight = 1
//!
//! [[phase]]
//! name = "outage"
//! weight = 2
//! [phase.faults.recommendations]
//! outage = "refused"          # or "unavailable": 503 without Retry-After
//!
//! [[phase]]
//! name = "recovery"
//! weight = 2
//! [phase.faults.catalog]
//! latency = { base_ms = 50, median_ms = 20, sigma = 0.5 }  # base + log-normal
//! error_rate = 0.1            # fraction of calls answered 500
//! hang_rate = 0.01            # fraction of calls never answered in time
//! # retry_after_s = 1         # every call answered 503 with Retry-After: 1
//! tail = { rate = 0.1, delay_ms = 250 }  # 10% of calls 250 ms slower still
//! [phase.faults.prices]
//! capacity = 2                # serves 2 calls at once (64 when left out); the others queue
//!
//! [[phase]]
//! name = "chaos"
//! weight = 1
//! # Injected by hystrix-rs into GetRatings's attempts; the ratings backend stays healthy.
//! [phase.chaos.ratings]
//! fault_rate = 0.5            # fraction of attempts whose run is replaced by a fault
//! hang_rate = 0.1             # fraction of attempts that hang until their timeout
//! latency_rate = 0.2          # fraction of attempts delayed by latency_ms before their run
//! latency_ms = 100
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use serde::{Deserialize, Serialize};

/// The shortest a phase may be: a breaker needs a few health intervals (250 ms) and a sleep
/// window (500 ms) to be seen opening.
pub const MIN_PHASE: Duration = Duration::from_millis(500);

/// The longest delay a latency distribution may give (also the bound of its parameters).
pub const MAX_LATENCY: Duration = Duration::from_secs(10);

/// The built-in scenarios: name and TOML text.
pub const BUILTINS: [(&str, &str); 6] = [
    ("tour", include_str!("../scenarios/tour.toml")),
    ("outage", include_str!("../scenarios/outage.toml")),
    ("latency", include_str!("../scenarios/latency.toml")),
    ("retry-after", include_str!("../scenarios/retry-after.toml")),
    ("chaos", include_str!("../scenarios/chaos.toml")),
    ("calm", include_str!("../scenarios/calm.toml")),
];

/// One of the demo's backend services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Titles and details of movies (`GET /titles/{id}`), called with a blocking client under
    /// THREAD isolation.
    Catalog,
    /// Star ratings (`GET /ratings/{id,id,...}`), called by the collapser in batches.
    Ratings,
    /// Movies like this one (`GET /recommendations/{id}`), async through the tower layer.
    Recommendations,
    /// Where a movie can be streamed (`GET /availability/{id}`), async through the tower layer.
    Availability,
    /// Prices of a movie (`GET /prices/{id}`), a slower service of limited capacity (see
    /// [`Backend::healthy_latency`] and [`Fault::capacity`]), called under an adaptive
    /// concurrency limit.
    Prices,
    /// A second instance of the prices service, called under a fixed limit (a semaphore of
    /// [`FIXED_PRICES_LIMIT`]) only to compare with [`Backend::Prices`]: its answer is not shown.
    PricesFixed,
}

/// The fixed concurrency limit of `GetPricesFixed` (its semaphore's permits).
pub const FIXED_PRICES_LIMIT: u32 = 20;

/// How many calls a backend serves at once when its fault sets no [`Fault::capacity`]; more
/// wait for a place.
pub const DEFAULT_CAPACITY: u32 = 64;

impl Backend {
    /// Every backend, in display order.
    pub const ALL: [Backend; 6] = [
        Backend::Catalog,
        Backend::Ratings,
        Backend::Recommendations,
        Backend::Availability,
        Backend::Prices,
        Backend::PricesFixed,
    ];

    /// Its name in scenario files and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Backend::Catalog => "catalog",
            Backend::Ratings => "ratings",
            Backend::Recommendations => "recommendations",
            Backend::Availability => "availability",
            Backend::Prices => "prices",
            Backend::PricesFixed => "prices-fixed",
        }
    }

    /// Its column header in the report's tables: its name, `recommend.` for recommendations
    /// (at most 12 characters, so that six columns fit in 100).
    pub const fn column(self) -> &'static str {
        match self {
            Backend::Recommendations => "recommend.",
            _ => self.name(),
        }
    }

    /// The key of the gateway's command that calls it.
    pub const fn command_key(self) -> &'static str {
        match self {
            Backend::Catalog => "GetTitle",
            Backend::Ratings => "GetRatings",
            Backend::Recommendations => "GetRecommendations",
            Backend::Availability => "GetAvailability",
            Backend::Prices => "GetPrices",
            Backend::PricesFixed => "GetPricesFixed",
        }
    }

    /// How long it takes to answer when its fault sets no latency: [`Latency::HEALTHY`], but
    /// [`Latency::PRICES`] for the two prices services.
    pub const fn healthy_latency(self) -> Latency {
        match self {
            Backend::Prices | Backend::PricesFixed => Latency::PRICES,
            _ => Latency::HEALTHY,
        }
    }

    /// The timeout of the gateway's command that calls it, in ms: 250 for the catalog's
    /// thread pool, 500 for the prices services (five times their service time of about
    /// 100 ms: a call may wait for four ahead of it at a capacity of 1), 300 for the others.
    pub const fn timeout_ms(self) -> u64 {
        match self {
            Backend::Catalog => 250,
            Backend::Prices | Backend::PricesFixed => 500,
            _ => 300,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a backend's answers are delayed: `base_ms` plus a log-normal tail whose median is
/// `median_ms` and whose shape is `sigma` (0: always `base_ms + median_ms`; 1: a long tail).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// The least delay, in ms.
    pub base_ms: f64,
    /// The median of the tail added to it, in ms (more than 0).
    pub median_ms: f64,
    /// The spread of the tail (the log-normal's σ), from 0 to 3.
    pub sigma: f64,
}

impl Latency {
    /// A healthy backend on loopback: 2 ms plus a tail of median 3 ms (p99 about 14 ms).
    pub const HEALTHY: Latency = Latency {
        base_ms: 2.0,
        median_ms: 3.0,
        sigma: 0.5,
    };

    /// The prices services: 90 ms plus a tail of median 10 ms (about 100 ms; p99 about
    /// 120 ms), so that 50 calls a second keep 5 in service, and a capacity of 2 serves at
    /// most 20 a second.
    pub const PRICES: Latency = Latency {
        base_ms: 90.0,
        median_ms: 10.0,
        sigma: 0.3,
    };

    /// One delay from the distribution, at most [`MAX_LATENCY`].
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let tail = match LogNormal::new(self.median_ms.ln(), self.sigma) {
            Ok(tail) => tail.sample(rng),
            Err(_) => self.median_ms,
        };
        let ms = self.base_ms + tail;
        if ms.is_finite() {
            Duration::from_secs_f64(ms.max(0.0) / 1000.0).min(MAX_LATENCY)
        } else {
            MAX_LATENCY
        }
    }
}

/// How a backend is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outage {
    /// Its port is closed: connections are refused.
    Refused,
    /// It answers every call `503 Service Unavailable` at once (no Retry-After).
    Unavailable,
}

/// What is wrong with one backend during one phase. Every field left out is healthy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The delay of its answers; [`Latency::HEALTHY`] when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    /// The fraction of calls answered `500 Internal Server Error` (0 to 1).
    #[serde(default)]
    pub error_rate: f64,
    /// The fraction of calls that hang (answered only after [`HANG`]) (0 to 1).
    #[serde(default)]
    pub hang_rate: f64,
    /// Down altogether.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outage: Option<Outage>,
    /// Every call answered `503` with `Retry-After: <seconds>` (1 to 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u32>,
    /// A long tail: a share of the calls delayed by a fixed time more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<Tail>,
    /// How many calls it serves at once (1 to 1000; [`DEFAULT_CAPACITY`] when left out): the
    /// others wait for a place, first come first served, so its answers slow down once more
    /// calls arrive than it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
}

/// A long tail of latency: `rate` of the calls are delayed `delay_ms` more than the latency
/// distribution says (a slow replica, a garbage collection).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tail {
    /// The fraction of calls delayed (0 to 1).
    pub rate: f64,
    /// The delay added to them, in ms (1 to 10000).
    pub delay_ms: u64,
}

/// How long a hanging call takes to be answered: longer than any of the gateway's timeouts
/// and its blocking client's own limit.
pub const HANG: Duration = Duration::from_secs(5);

/// What a backend does with one call, drawn from its [`Fault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// `503` at once, with `Retry-After` when given.
    Unavailable {
        /// The `Retry-After` seconds.
        retry_after_s: Option<u32>,
    },
    /// No answer for [`HANG`].
    Hang,
    /// An answer after `delay`: `500` if `fail`, else the data.
    Answer {
        /// How long before answering.
        delay: Duration,
        /// Whether the answer is a `500`.
        fail: bool,
    },
}

impl Fault {
    /// Whether this is no fault at all (a healthy backend).
    pub fn is_healthy(&self) -> bool {
        self.latency
            .is_none_or(|latency| latency == Latency::HEALTHY)
            && self.error_rate == 0.0
            && self.hang_rate == 0.0
            && self.outage.is_none()
            && self.retry_after_s.is_none()
            && self.tail.is_none_or(|tail| tail.rate == 0.0)
            && self.capacity.is_none()
    }

    /// Whether the backend's port is closed.
    pub fn refuses_connections(&self) -> bool {
        self.outage == Some(Outage::Refused)
    }

    /// Whether the backend is down (an outage of either kind, or a Retry-After storm): its
    /// breaker must open, and close once a later phase brings it back.
    pub fn is_down(&self) -> bool {
        self.outage.is_some() || self.retry_after_s.is_some()
    }

    /// What the backend does with one call.
    pub fn react(&self, rng: &mut impl Rng) -> Reaction {
        if self.outage.is_some() {
            // A call that reached a refusing backend got in just before its port closed.
            return Reaction::Unavailable {
                retry_after_s: None,
            };
        }
        if let Some(seconds) = self.retry_after_s {
            return Reaction::Unavailable {
                retry_after_s: Some(seconds),
            };
        }
        if rng.random::<f64>() < self.hang_rate {
            return Reaction::Hang;
        }
        let mut delay = self.latency.unwrap_or(Latency::HEALTHY).sample(rng);
        // Drawn only with a tail, so a fault without one draws as before.
        if let Some(tail) = self.tail
            && rng.random::<f64>() < tail.rate
        {
            delay = (delay + Duration::from_millis(tail.delay_ms)).min(MAX_LATENCY);
        }
        let fail = rng.random::<f64>() < self.error_rate;
        Reaction::Answer { delay, fail }
    }

    /// A short description for reports, e.g. `latency 120+100ms σ0.8, 5% hang`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match self.outage {
            Some(Outage::Refused) => parts.push("down (connection refused)".to_owned()),
            Some(Outage::Unavailable) => parts.push("down (503)".to_owned()),
            None => {}
        }
        if let Some(seconds) = self.retry_after_s {
            parts.push(format!("503 Retry-After: {seconds}"));
        }
        if let Some(latency) = self.latency.filter(|l| *l != Latency::HEALTHY) {
            parts.push(format!(
                "latency {}+{}ms σ{}",
                latency.base_ms, latency.median_ms, latency.sigma
            ));
        }
        if let Some(tail) = self.tail.filter(|tail| tail.rate > 0.0) {
            parts.push(format!(
                "{}% delayed {} ms more",
                percent(tail.rate),
                tail.delay_ms
            ));
        }
        if let Some(capacity) = self.capacity {
            parts.push(format!("serves {capacity} at once"));
        }
        if self.error_rate > 0.0 {
            parts.push(format!("{}% errors", percent(self.error_rate)));
        }
        if self.hang_rate > 0.0 {
            parts.push(format!("{}% hang", percent(self.hang_rate)));
        }
        if parts.is_empty() {
            parts.push("healthy".to_owned());
        }
        parts.join(", ")
    }
}

/// Chaos injected in-process into the attempts of one backend's command (hystrix-rs's
/// `chaos.*` properties) during one phase, while the backend itself stays healthy. Every field
/// left out injects nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Chaos {
    /// The fraction of attempts whose run is replaced by an injected fault (0 to 1).
    #[serde(default)]
    pub fault_rate: f64,
    /// The fraction of attempts whose run hangs until the command's timeout (0 to 1; with
    /// `fault_rate`, at most 1: one draw picks a hang, a fault or the run).
    #[serde(default)]
    pub hang_rate: f64,
    /// The fraction of attempts delayed by `latency_ms` before their run (0 to 1, drawn apart).
    #[serde(default)]
    pub latency_rate: f64,
    /// The injected delay, in ms (at most 10000); a delay that reaches the command's timeout
    /// ends the attempt there, as a TIMEOUT.
    #[serde(default)]
    pub latency_ms: u64,
}

impl Chaos {
    /// Whether it injects nothing.
    pub fn is_off(&self) -> bool {
        self.fault_rate == 0.0
            && self.hang_rate == 0.0
            && (self.latency_rate == 0.0 || self.latency_ms == 0)
    }

    /// The share of attempts it makes fail or time out, for a command whose timeout is
    /// `timeout_ms`: a fault or a hang, or a delay that reaches the timeout (drawn apart).
    pub fn error_share(&self, timeout_ms: u64) -> f64 {
        let fault_or_hang = self.fault_rate + self.hang_rate;
        let late = if self.latency_ms >= timeout_ms {
            self.latency_rate
        } else {
            0.0
        };
        1.0 - (1.0 - fault_or_hang) * (1.0 - late)
    }

    /// The hystrix-rs properties that set it for command `key`, as run-time values: every
    /// `chaos.*` property, so that setting [`Chaos::default`] turns chaos off.
    pub fn properties(&self, key: &str) -> [(String, hystrix::PropertyValue); 5] {
        let name = |property: &str| format!("hystrix.command.{key}.chaos.{property}");
        // Percentages to 1e-9, and the hang's cut so that with the fault's it stays within 100
        // whatever the rounding.
        let percent = |fraction: f64| (fraction * 1e11).round() / 1e9;
        let fault = percent(self.fault_rate);
        let hang = percent(self.hang_rate).min(100.0 - fault);
        [
            (name("enabled"), (!self.is_off()).into()),
            (name("fault.ratePercentage"), fault.into()),
            (name("hang.ratePercentage"), hang.into()),
            (
                name("latency.ratePercentage"),
                percent(self.latency_rate).into(),
            ),
            (name("latency.inMilliseconds"), self.latency_ms.into()),
        ]
    }

    /// A short description for reports, e.g. `80% injected faults` or `90% delayed 400 ms`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.fault_rate > 0.0 {
            parts.push(format!("{}% injected faults", percent(self.fault_rate)));
        }
        if self.hang_rate > 0.0 {
            parts.push(format!("{}% injected hangs", percent(self.hang_rate)));
        }
        if self.latency_rate > 0.0 && self.latency_ms > 0 {
            parts.push(format!(
                "{}% delayed {} ms",
                percent(self.latency_rate),
                self.latency_ms
            ));
        }
        if parts.is_empty() {
            parts.push("off".to_owned());
        }
        parts.join(", ")
    }
}

fn percent(fraction: f64) -> f64 {
    (fraction * 1000.0).round() / 10.0
}

/// One phase as written in a scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    /// Its name, unique in the scenario.
    pub name: String,
    /// Its share of the run: its length is `duration × weight / (sum of weights)`.
    pub weight: f64,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// The faults of the backends it names (the others are healthy).
    #[serde(default)]
    pub faults: BTreeMap<Backend, Fault>,
    /// The chaos injected into the commands of the backends it names (the others get none).
    #[serde(default)]
    pub chaos: BTreeMap<Backend, Chaos>,
}

/// A scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default, rename = "phase")]
    phases: Vec<PhaseSpec>,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Its name (the file's `name`, or the file name without `.toml`).
    pub name: String,
    /// What it shows.
    pub description: String,
    /// Its phases, in order.
    pub phases: Vec<PhaseSpec>,
}

/// Why a scenario cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioError {
    /// `--scenario` is neither a built-in name nor a `.toml` path.
    #[error(
        "unknown scenario `{0}` given to --scenario: use a built-in one ({names}) or the path of a .toml file",
        names = builtin_names()
    )]
    Unknown(String),
    /// The file could not be read.
    #[error("cannot read the scenario file {path}: {message}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// The TOML is malformed or has an unknown or mistyped field (the message has the line).
    #[error("scenario {origin}: {message}")]
    Toml {
        /// The built-in name or the path.
        origin: String,
        /// The parser's message, naming the field and its line.
        message: String,
    },
    /// A value is out of range, or the phases do not fit together.
    #[error("scenario {origin}: {message}")]
    Invalid {
        /// The built-in name or the path.
        origin: String,
        /// What is wrong, naming the phase and the field.
        message: String,
    },
    /// `--duration` leaves a phase too little time.
    #[error(
        "--duration {duration} is too short for scenario `{scenario}`: phase `{phase}` would last \
         {phase_ms} ms, and each phase needs at least {min_ms} ms; use --duration {needed} or more",
        duration = humantime::format_duration(*.duration),
        min_ms = MIN_PHASE.as_millis(),
        needed = humantime::format_duration(*.needed)
    )]
    TooShort {
        /// The scenario's name.
        scenario: String,
        /// The duration asked for.
        duration: Duration,
        /// The shortest phase.
        phase: String,
        /// Its length at that duration, in ms.
        phase_ms: u64,
        /// The least duration that fits every phase (whole seconds).
        needed: Duration,
    },
}

fn builtin_names() -> String {
    BUILTINS.map(|(name, _)| name).join(", ")
}

impl Scenario {
    /// The scenario `arg` names: a built-in name, or the path of a TOML file (anything ending
    /// in `.toml` or containing a path separator).
    ///
    /// # Errors
    /// [`ScenarioError`] naming the option, file, phase and field at fault.
    pub fn load(arg: &str) -> Result<Scenario, ScenarioError> {
        if let Some((name, text)) = BUILTINS.iter().find(|(name, _)| *name == arg) {
            return Scenario::from_toml(text, &format!("`{name}`"), name);
        }
        let path = Path::new(arg);
        if arg.ends_with(".toml") || path.components().count() > 1 {
            let text = std::fs::read_to_string(path).map_err(|err| ScenarioError::Read {
                path: arg.to_owned(),
                message: err.to_string(),
            })?;
            let stem = path
                .file_stem()
                .map_or_else(|| arg.to_owned(), |s| s.to_string_lossy().into_owned());
            return Scenario::from_toml(&text, arg, &stem);
        }
        Err(ScenarioError::Unknown(arg.to_owned()))
    }

    /// Parses and validates a scenario's TOML text; `origin` names it in errors and
    /// `default_name` is its name when the file gives none.
    ///
    /// # Errors
    /// [`ScenarioError::Toml`] for malformed TOML, an unknown field or a wrong type;
    /// [`ScenarioError::Invalid`] for a value out of range or phases that do not fit together.
    pub fn from_toml(
        text: &str,
        origin: &str,
        default_name: &str,
    ) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|err| ScenarioError::Toml {
            origin: origin.to_owned(),
            message: err.to_string().trim_end().to_owned(),
        })?;
        let scenario = Scenario {
            name: file.name.unwrap_or_else(|| default_name.to_owned()),
            description: file.description,
            phases: file.phases,
        };
        scenario
            .validate()
            .map_err(|message| ScenarioError::Invalid {
                origin: origin.to_owned(),
                message,
            })?;
        Ok(scenario)
    }

    fn validate(&self) -> Result<(), String> {
        if self.phases.is_empty() {
            return Err(
                "no phases: add at least one [[phase]] with a name and a weight".to_owned(),
            );
        }
        for (index, phase) in self.phases.iter().enumerate() {
            let at = format!("phase {} (`{}`)", index + 1, phase.name);
            if phase.name.trim().is_empty() {
                return Err(format!("phase {}: name must not be empty", index + 1));
            }
            if let Some(first) = self.phases[..index]
                .iter()
                .position(|p| p.name == phase.name)
            {
                return Err(format!(
                    "{at}: name is the same as phase {}'s; phase names must differ",
                    first + 1
                ));
            }
            if !(phase.weight.is_finite() && phase.weight > 0.0) {
                return Err(format!(
                    "{at}: weight = {}: must be a positive number (the phase's share of --duration)",
                    phase.weight
                ));
            }
            for (backend, fault) in &phase.faults {
                validate_fault(fault).map_err(|(field, value, rule)| {
                    format!("{at}: faults.{backend}.{field} = {value}: {rule}")
                })?;
            }
            for (backend, chaos) in &phase.chaos {
                validate_chaos(chaos).map_err(|(field, value, rule)| {
                    format!("{at}: chaos.{backend}.{field} = {value}: {rule}")
                })?;
            }
        }
        // A backend taken down must come back, or its breaker could not be seen closing.
        for (index, phase) in self.phases.iter().enumerate() {
            for (backend, fault) in phase.faults.iter().filter(|(_, f)| f.is_down()) {
                let recovers = self.phases[index + 1..]
                    .iter()
                    .any(|later| later.faults.get(backend).is_none_or(|f| !f.is_down()));
                if !recovers {
                    return Err(format!(
                        "phase {} (`{}`): {backend} is down ({}) and no later phase brings it \
                         back; add a phase after it where {backend} is not down (the demo checks \
                         that its breaker closes again)",
                        index + 1,
                        phase.name,
                        fault.describe()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Start times and lengths of the phases for a run of `duration`: each phase gets its
    /// weight's share, rounded to whole ms, and the last one ends exactly at `duration`.
    ///
    /// # Errors
    /// [`ScenarioError::TooShort`] when a phase would be shorter than [`MIN_PHASE`].
    pub fn schedule(&self, duration: Duration) -> Result<Schedule, ScenarioError> {
        let schedule = self.scale(duration);
        let Some(shortest) = schedule.phases.iter().min_by_key(|p| p.duration) else {
            return Ok(schedule);
        };
        if shortest.duration >= MIN_PHASE {
            return Ok(schedule);
        }
        Err(ScenarioError::TooShort {
            scenario: self.name.clone(),
            duration,
            phase: shortest.name.clone(),
            phase_ms: millis(shortest.duration),
            needed: self.least_duration(),
        })
    }

    /// The least whole number of seconds in which every phase lasts [`MIN_PHASE`].
    fn least_duration(&self) -> Duration {
        let total: f64 = self.phases.iter().map(|p| p.weight).sum();
        let lightest = self
            .phases
            .iter()
            .map(|p| p.weight)
            .fold(f64::INFINITY, f64::min);
        let mut seconds = (MIN_PHASE.as_secs_f64() * total / lightest).ceil().max(1.0) as u64;
        // Rounding each phase to whole ms may take one below the minimum: one more second.
        while self
            .scale(Duration::from_secs(seconds))
            .phases
            .iter()
            .any(|p| p.duration < MIN_PHASE)
        {
            seconds += 1;
        }
        Duration::from_secs(seconds)
    }

    fn scale(&self, duration: Duration) -> Schedule {
        let total_ms = millis(duration);
        let total_weight: f64 = self.phases.iter().map(|p| p.weight).sum();
        let mut phases = Vec::with_capacity(self.phases.len());
        let (mut weight_so_far, mut start_ms) = (0.0, 0);
        for (index, spec) in self.phases.iter().enumerate() {
            weight_so_far += spec.weight;
            let end_ms = if index + 1 == self.phases.len() {
                total_ms
            } else {
                ((total_ms as f64) * weight_so_far / total_weight).round() as u64
            };
            phases.push(Phase {
                name: spec.name.clone(),
                description: spec.description.clone(),
                start: Duration::from_millis(start_ms),
                duration: Duration::from_millis(end_ms.saturating_sub(start_ms)),
                faults: spec.faults.clone(),
                chaos: spec.chaos.clone(),
            });
            start_ms = end_ms.max(start_ms);
        }
        Schedule { phases }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A field out of range: its name, its value and the rule.
type FieldError = (&'static str, String, &'static str);

/// `value` of `field` is a fraction from 0 to 1.
fn fraction(field: &'static str, value: f64) -> Result<(), FieldError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err((field, value.to_string(), "must be a fraction from 0 to 1"))
    }
}

fn validate_chaos(chaos: &Chaos) -> Result<(), FieldError> {
    fraction("fault_rate", chaos.fault_rate)?;
    fraction("hang_rate", chaos.hang_rate)?;
    fraction("latency_rate", chaos.latency_rate)?;
    // A little slack for sums such as 0.7 + 0.3 written in decimals.
    if chaos.hang_rate + chaos.fault_rate > 1.0 + 1e-9 {
        let rule = "must be at most 1 with fault_rate: one draw picks a hang, a fault or the run";
        return Err(("hang_rate", chaos.hang_rate.to_string(), rule));
    }
    if chaos.latency_ms > millis(MAX_LATENCY) {
        let rule = "must be at most 10000 (ms)";
        return Err(("latency_ms", chaos.latency_ms.to_string(), rule));
    }
    if chaos.latency_rate > 0.0 && chaos.latency_ms == 0 {
        let rule = "must be more than 0 with latency_rate (the delay it injects)";
        return Err(("latency_ms", "0".to_owned(), rule));
    }
    Ok(())
}

fn validate_fault(fault: &Fault) -> Result<(), FieldError> {
    fraction("error_rate", fault.error_rate)?;
    fraction("hang_rate", fault.hang_rate)?;
    if let Some(latency) = fault.latency {
        let max_ms = millis(MAX_LATENCY) as f64;
        if !(0.0..=max_ms).contains(&latency.base_ms) {
            let rule = "must be from 0 to 10000 (ms)";
            return Err(("latency.base_ms", latency.base_ms.to_string(), rule));
        }
        if !(latency.median_ms > 0.0 && latency.median_ms <= max_ms) {
            let rule = "must be more than 0 and at most 10000 (ms)";
            return Err(("latency.median_ms", latency.median_ms.to_string(), rule));
        }
        if !(0.0..=3.0).contains(&latency.sigma) {
            let rule = "must be from 0 (no spread) to 3";
            return Err(("latency.sigma", latency.sigma.to_string(), rule));
        }
    }
    if let Some(tail) = fault.tail {
        fraction("tail.rate", tail.rate)?;
        if !(1..=millis(MAX_LATENCY)).contains(&tail.delay_ms) {
            let rule = "must be from 1 to 10000 (ms)";
            return Err(("tail.delay_ms", tail.delay_ms.to_string(), rule));
        }
    }
    if let Some(capacity) = fault.capacity
        && !(1..=1000).contains(&capacity)
    {
        let rule = "must be from 1 to 1000 (calls served at once)";
        return Err(("capacity", capacity.to_string(), rule));
    }
    if let Some(seconds) = fault.retry_after_s {
        if !(1..=60).contains(&seconds) {
            return Err((
                "retry_after_s",
                seconds.to_string(),
                "must be from 1 to 60 (seconds)",
            ));
        }
        if let Some(outage) = fault.outage {
            let rule =
                "cannot be set with retry_after_s (a backend that is down sends no Retry-After)";
            return Err(("outage", format!("{outage:?}").to_lowercase(), rule));
        }
    }
    Ok(())
}

/// One phase placed in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Its name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// When it starts, from the start of the run.
    pub start: Duration,
    /// How long it lasts.
    pub duration: Duration,
    /// The faults of the backends it names.
    pub faults: BTreeMap<Backend, Fault>,
    /// The chaos injected into the commands of the backends it names.
    pub chaos: BTreeMap<Backend, Chaos>,
}

impl Phase {
    /// When it ends, from the start of the run.
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }

    /// The fault of `backend` in this phase (healthy if it names none).
    pub fn fault(&self, backend: Backend) -> Fault {
        self.faults.get(&backend).cloned().unwrap_or_default()
    }

    /// The backends with a fault in this phase.
    pub fn faulty(&self) -> impl Iterator<Item = Backend> + '_ {
        self.faults
            .iter()
            .filter(|(_, fault)| !fault.is_healthy())
            .map(|(backend, _)| *backend)
    }

    /// The chaos injected into `backend`'s command in this phase (off if it names none).
    pub fn chaos(&self, backend: Backend) -> Chaos {
        self.chaos.get(&backend).copied().unwrap_or_default()
    }

    /// The backends whose commands get chaos in this phase.
    pub fn chaotic(&self) -> impl Iterator<Item = Backend> + '_ {
        self.chaos
            .iter()
            .filter(|(_, chaos)| !chaos.is_off())
            .map(|(backend, _)| *backend)
    }

    /// The backends whose commands see trouble in this phase: a fault of the backend, or
    /// chaos injected into the command.
    pub fn disturbed(&self) -> Vec<Backend> {
        let mut backends: Vec<Backend> = self.faulty().chain(self.chaotic()).collect();
        backends.sort_unstable();
        backends.dedup();
        backends
    }
}

/// The phases of a run, placed in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// In order; each starts where the one before ends.
    pub phases: Vec<Phase>,
}

impl Schedule {
    /// The length of the run.
    pub fn total(&self) -> Duration {
        self.phases.last().map_or(Duration::ZERO, Phase::end)
    }

    /// The index of the phase running `elapsed` after the start; `None` once the run is over.
    pub fn phase_at(&self, elapsed: Duration) -> Option<usize> {
        self.phases
            .iter()
            .position(|phase| phase.start <= elapsed && elapsed < phase.end())
    }

    /// The backends that are healthy and whose commands get no chaos in phase `index` and in
    /// the phase before it, so their commands are expected to keep a low error rate there (a
    /// breaker may still be closing in the phase after a fault).
    pub fn settled_healthy(&self, index: usize) -> Vec<Backend> {
        let faulty_in = |i: usize| -> Vec<Backend> {
            self.phases.get(i).map_or_else(Vec::new, Phase::disturbed)
        };
        let mut faulty = faulty_in(index);
        if index > 0 {
            faulty.extend(faulty_in(index - 1));
        }
        Backend::ALL
            .into_iter()
            .filter(|backend| !faulty.contains(backend))
            .collect()
    }
}

/// The one phase of the built-in `calm` scenario (every backend healthy), for tests.
#[cfg(test)]
pub fn calm_phase() -> Phase {
    Scenario::load("calm")
        .unwrap()
        .schedule(Duration::from_secs(1))
        .unwrap()
        .phases
        .remove(0)
}

/// The built-in `chaos` scenario placed over 6 s (the demo tier's run), for tests.
#[cfg(test)]
pub fn chaos_6s() -> Schedule {
    Scenario::load("chaos")
        .unwrap()
        .schedule(Duration::from_secs(6))
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    const THREE_EQUAL_PHASES: &str = "[[phase]]\nname = \"a\"\nweight = 1\n\
        [[phase]]\nname = \"b\"\nweight = 1\n[[phase]]\nname = \"c\"\nweight = 1\n";

    fn tour_10s() -> Schedule {
        Scenario::load("tour")
            .unwrap()
            .schedule(Duration::from_secs(10))
            .unwrap()
    }

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(text, "test.toml", "test")
    }

    fn invalid(text: &str) -> String {
        match parse(text) {
            Err(ScenarioError::Invalid { message, .. }) => message,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    fn toml_error(text: &str) -> String {
        match parse(text) {
            Err(ScenarioError::Toml { message, .. }) => message,
            other => panic!("expected a Toml error, got {other:?}"),
        }
    }

    #[test]
    fn every_builtin_parses_and_fits_ten_seconds() {
        for (name, _) in BUILTINS {
            let scenario = Scenario::load(name).expect(name);
            assert_eq!(scenario.name, name);
            let schedule = scenario.schedule(Duration::from_secs(10)).expect(name);
            assert_eq!(schedule.total(), Duration::from_secs(10), "{name}");
        }
    }

    #[test]
    fn tour_phases_scale_with_the_duration() {
        let tour = Scenario::load("tour").unwrap();
        let lengths = |secs| -> Vec<(String, u64, u64)> {
            tour.schedule(Duration::from_secs(secs))
                .unwrap()
                .phases
                .iter()
                .map(|p| (p.name.clone(), millis(p.start), millis(p.duration)))
                .collect()
        };
        let expected = |scale: u64| -> Vec<(String, u64, u64)> {
            [
                ("warm-up", 0, 6),
                ("latency-spike", 6, 9),
                ("error-burst", 15, 9),
                ("outage", 24, 9),
                ("recovery", 33, 7),
                ("retry-after-storm", 40, 8),
                ("transient-errors", 48, 9),
                ("long-tail", 57, 9),
                ("capacity-drop", 66, 12),
                ("chaos", 78, 8),
                ("cool-down", 86, 14),
            ]
            .map(|(name, start, length)| (name.to_owned(), start * scale, length * scale))
            .to_vec()
        };
        assert_eq!(lengths(10), expected(100));
        assert_eq!(lengths(40), expected(400));
        assert_eq!(lengths(60), expected(600));
    }

    #[test]
    fn rounding_keeps_phases_contiguous_and_the_last_ends_at_the_duration() {
        let scenario = parse(THREE_EQUAL_PHASES).unwrap();
        let schedule = scenario.schedule(ms(2000)).unwrap();
        let placed: Vec<_> = schedule
            .phases
            .iter()
            .map(|p| (millis(p.start), millis(p.duration)))
            .collect();
        // 2000 / 3 = 666.67: boundaries at 667 and 1333, the last phase takes the rest.
        assert_eq!(placed, [(0, 667), (667, 666), (1333, 667)]);
    }

    #[test]
    fn phase_at_finds_the_running_phase_and_none_after_the_end() {
        let schedule = Scenario::load("outage")
            .unwrap()
            .schedule(ms(10_000))
            .unwrap();
        assert_eq!(schedule.phase_at(ms(0)), Some(0));
        assert_eq!(schedule.phase_at(ms(2499)), Some(0));
        assert_eq!(schedule.phase_at(ms(2500)), Some(1));
        assert_eq!(schedule.phase_at(ms(5999)), Some(1));
        assert_eq!(schedule.phase_at(ms(6000)), Some(2));
        assert_eq!(schedule.phase_at(ms(9999)), Some(2));
        assert_eq!(schedule.phase_at(ms(10_000)), None);
    }

    #[test]
    fn a_duration_too_short_names_the_phase_and_the_least_duration() {
        let tour = Scenario::load("tour").unwrap();
        let err = tour.schedule(ms(3000)).unwrap_err();
        assert_eq!(
            err,
            ScenarioError::TooShort {
                scenario: "tour".into(),
                duration: ms(3000),
                phase: "warm-up".into(),
                phase_ms: 180,
                needed: Duration::from_secs(9),
            }
        );
        assert_eq!(
            err.to_string(),
            "--duration 3s is too short for scenario `tour`: phase `warm-up` would last 180 ms, \
             and each phase needs at least 500 ms; use --duration 9s or more"
        );
        assert!(tour.schedule(Duration::from_secs(8)).is_err());
        assert!(tour.schedule(Duration::from_secs(9)).is_ok());
    }

    #[test]
    fn the_least_duration_allows_for_rounding() {
        // Weights 1, 1, 1: 1.5 s would give 500, 500, 500 exactly; whole seconds: 2 s.
        let scenario = parse(THREE_EQUAL_PHASES).unwrap();
        match scenario.schedule(ms(1000)) {
            Err(ScenarioError::TooShort {
                needed, phase_ms, ..
            }) => {
                assert_eq!((needed, phase_ms), (Duration::from_secs(2), 333));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn faults_parse_with_defaults_for_what_is_left_out() {
        let scenario = parse(
            r#"
            name = "custom"
            [[phase]]
            name = "slow"
            weight = 2.5
            [phase.faults.catalog]
            latency = { base_ms = 50, median_ms = 20, sigma = 0.5 }
            error_rate = 0.25
            [[phase]]
            name = "back"
            weight = 1
            [phase.faults.ratings]
            outage = "unavailable"
            [[phase]]
            name = "end"
            weight = 1
            "#,
        )
        .unwrap();
        assert_eq!(scenario.name, "custom");
        assert_eq!(scenario.phases[0].weight, 2.5);
        assert_eq!(
            scenario.phases[0].faults[&Backend::Catalog],
            Fault {
                latency: Some(Latency {
                    base_ms: 50.0,
                    median_ms: 20.0,
                    sigma: 0.5
                }),
                error_rate: 0.25,
                ..Fault::default()
            }
        );
        assert_eq!(
            scenario.phases[1].faults[&Backend::Ratings].outage,
            Some(Outage::Unavailable)
        );
        assert!(scenario.phases[2].faults.is_empty());
    }

    #[test]
    fn the_name_defaults_to_the_file_name() {
        let scenario = parse("[[phase]]\nname = \"a\"\nweight = 1\n").unwrap();
        assert_eq!(scenario.name, "test");
    }

    #[test]
    fn toml_errors_name_the_field_and_its_line() {
        let phase = "[[phase]]\nname = \"a\"\nweight = 1\n";
        let cases: [(String, &[&str]); 5] = [
            (
                format!("{phase}[phase.faults.catalog]\nerror_rat = 0.5\n"),
                &["line 5", "unknown field `error_rat`", "`error_rate`"],
            ),
            (
                format!("{phase}[phase.faults.reviews]\nerror_rate = 1\n"),
                &["line 4", "unknown variant `reviews`", "`recommendations`"],
            ),
            (
                "[[phase]]\nname = \"a\"\n".to_owned(),
                &["missing field `weight`"],
            ),
            (
                "[[phase]]\nname = \"a\"\nweight = \"half\"\n".to_owned(),
                &["line 3", "invalid type: string \"half\""],
            ),
            (
                format!("{phase}[phase.faults.catalog]\noutage = \"gone\"\n"),
                &[
                    "line 5",
                    "unknown variant `gone`, expected `refused` or `unavailable`",
                ],
            ),
        ];
        for (text, fragments) in cases {
            let message = toml_error(&text);
            for fragment in fragments {
                assert!(message.contains(fragment), "`{fragment}` not in: {message}");
            }
        }
    }

    #[test]
    fn values_out_of_range_name_the_phase_and_the_field() {
        let phase = "[[phase]]\nname = \"slow\"\nweight = 1\n[phase.faults.catalog]\n";
        let recovery = "[[phase]]\nname = \"end\"\nweight = 1\n";
        let cases = [
            (
                "error_rate = 1.5\n",
                "faults.catalog.error_rate = 1.5: must be a fraction from 0 to 1",
            ),
            (
                "hang_rate = -0.1\n",
                "faults.catalog.hang_rate = -0.1: must be a fraction from 0 to 1",
            ),
            (
                "latency = { base_ms = -1, median_ms = 1, sigma = 0 }\n",
                "faults.catalog.latency.base_ms = -1: must be from 0 to 10000 (ms)",
            ),
            (
                "latency = { base_ms = 1, median_ms = 0, sigma = 0 }\n",
                "faults.catalog.latency.median_ms = 0: must be more than 0 and at most 10000 (ms)",
            ),
            (
                "latency = { base_ms = 1, median_ms = 1, sigma = 4 }\n",
                "faults.catalog.latency.sigma = 4: must be from 0 (no spread) to 3",
            ),
            (
                "retry_after_s = 0\n",
                "faults.catalog.retry_after_s = 0: must be from 1 to 60 (seconds)",
            ),
            (
                "tail = { rate = 1.5, delay_ms = 100 }\n",
                "faults.catalog.tail.rate = 1.5: must be a fraction from 0 to 1",
            ),
            (
                "tail = { rate = 0.1, delay_ms = 0 }\n",
                "faults.catalog.tail.delay_ms = 0: must be from 1 to 10000 (ms)",
            ),
            (
                "capacity = 0\n",
                "faults.catalog.capacity = 0: must be from 1 to 1000 (calls served at once)",
            ),
            (
                "retry_after_s = 1\noutage = \"refused\"\n",
                "faults.catalog.outage = refused: cannot be set with retry_after_s (a backend that \
                 is down sends no Retry-After)",
            ),
        ];
        for (fault, expected) in cases {
            assert_eq!(
                invalid(&format!("{phase}{fault}{recovery}")),
                format!("phase 1 (`slow`): {expected}")
            );
        }
    }

    #[test]
    fn chaos_parses_per_backend_with_defaults_for_what_is_left_out() {
        let scenario = parse(
            "[[phase]]\nname = \"chaos\"\nweight = 1\n[phase.chaos.ratings]\nfault_rate = 0.5\n\
             [phase.chaos.catalog]\nlatency_rate = 0.25\nlatency_ms = 400\nhang_rate = 0.1\n",
        )
        .unwrap();
        let chaos = &scenario.phases[0].chaos;
        assert_eq!(
            chaos[&Backend::Ratings],
            Chaos {
                fault_rate: 0.5,
                ..Chaos::default()
            }
        );
        assert_eq!(
            chaos[&Backend::Catalog],
            Chaos {
                fault_rate: 0.0,
                hang_rate: 0.1,
                latency_rate: 0.25,
                latency_ms: 400,
            }
        );
        assert!(scenario.phases[0].faults.is_empty());
        let phase = &scenario.schedule(ms(1000)).unwrap().phases[0];
        assert_eq!(
            phase.chaotic().collect::<Vec<_>>(),
            [Backend::Catalog, Backend::Ratings]
        );
        assert!(phase.chaos(Backend::Availability).is_off());
        assert_eq!(phase.faulty().count(), 0);
        assert_eq!(phase.disturbed(), [Backend::Catalog, Backend::Ratings]);
    }

    #[test]
    fn chaos_errors_name_the_phase_the_backend_and_the_field() {
        let phase = "[[phase]]\nname = \"chaos\"\nweight = 1\n[phase.chaos.catalog]\n";
        let cases = [
            (
                "fault_rate = 1.5\n",
                "chaos.catalog.fault_rate = 1.5: must be a fraction from 0 to 1",
            ),
            (
                "hang_rate = -0.5\n",
                "chaos.catalog.hang_rate = -0.5: must be a fraction from 0 to 1",
            ),
            (
                "latency_rate = 2\nlatency_ms = 100\n",
                "chaos.catalog.latency_rate = 2: must be a fraction from 0 to 1",
            ),
            (
                "fault_rate = 0.75\nhang_rate = 0.5\n",
                "chaos.catalog.hang_rate = 0.5: must be at most 1 with fault_rate: one draw \
                 picks a hang, a fault or the run",
            ),
            (
                "latency_rate = 0.5\nlatency_ms = 10001\n",
                "chaos.catalog.latency_ms = 10001: must be at most 10000 (ms)",
            ),
            (
                "latency_rate = 0.5\n",
                "chaos.catalog.latency_ms = 0: must be more than 0 with latency_rate (the delay \
                 it injects)",
            ),
        ];
        for (chaos, expected) in cases {
            assert_eq!(
                invalid(&format!("{phase}{chaos}")),
                format!("phase 1 (`chaos`): {expected}")
            );
        }
        // Together at most 1, decimals allowing.
        assert!(parse(&format!("{phase}fault_rate = 0.7\nhang_rate = 0.3\n")).is_ok());
        let cases: [(String, &[&str]); 3] = [
            (
                format!("{phase}fault_rat = 0.5\n"),
                &["line 5", "unknown field `fault_rat`", "`fault_rate`"],
            ),
            (
                "[[phase]]\nname = \"a\"\nweight = 1\n[phase.chaos.reviews]\nfault_rate = 1\n"
                    .to_owned(),
                &["line 4", "unknown variant `reviews`", "`recommendations`"],
            ),
            (
                format!("{phase}latency_ms = -5\n"),
                &["line 5", "invalid value: integer `-5`"],
            ),
        ];
        for (text, fragments) in cases {
            let message = toml_error(&text);
            for fragment in fragments {
                assert!(message.contains(fragment), "`{fragment}` not in: {message}");
            }
        }
    }

    #[test]
    fn chaos_becomes_every_chaos_property_of_the_command_and_off_clears_them() {
        let chaos = Chaos {
            fault_rate: 0.7,
            hang_rate: 0.3,
            latency_rate: 0.9,
            latency_ms: 400,
        };
        let properties: Vec<(String, String)> = chaos
            .properties("GetTitle")
            .into_iter()
            .map(|(name, value)| (name, value.to_string()))
            .collect();
        let expected = [
            ("enabled", "true"),
            ("fault.ratePercentage", "70"),
            ("hang.ratePercentage", "30"),
            ("latency.ratePercentage", "90"),
            ("latency.inMilliseconds", "400"),
        ]
        .map(|(name, value)| {
            (
                format!("hystrix.command.GetTitle.chaos.{name}"),
                value.to_owned(),
            )
        });
        assert_eq!(properties, expected);
        let off: Vec<String> = Chaos::default()
            .properties("GetTitle")
            .into_iter()
            .map(|(_, value)| value.to_string())
            .collect();
        assert_eq!(off, ["false", "0", "0", "0", "0"]);
        assert_eq!(
            chaos.describe(),
            "70% injected faults, 30% injected hangs, 90% delayed 400 ms"
        );
        assert_eq!(Chaos::default().describe(), "off");
    }

    #[test]
    fn chaos_error_share_counts_delays_only_past_the_timeout() {
        let late = Chaos {
            latency_rate: 0.9,
            latency_ms: 400,
            ..Chaos::default()
        };
        assert_eq!(late.error_share(250), 0.9);
        assert_eq!(late.error_share(500), 0.0);
        let both = Chaos {
            fault_rate: 0.5,
            latency_rate: 0.5,
            latency_ms: 300,
            ..Chaos::default()
        };
        assert_eq!(both.error_share(300), 0.75);
    }

    #[test]
    fn the_chaos_scenario_injects_on_healthy_backends_then_turns_chaos_off() {
        let schedule = crate::scenario::chaos_6s();
        let described: Vec<(String, u64, Vec<String>, Vec<String>)> = schedule
            .phases
            .iter()
            .map(|p| {
                let chaos = p
                    .chaotic()
                    .map(|b| format!("{b}: {}", p.chaos(b).describe()))
                    .collect();
                let faults = p.faulty().map(|b| b.to_string()).collect();
                (p.name.clone(), millis(p.duration), chaos, faults)
            })
            .collect();
        let none = Vec::<String>::new;
        assert_eq!(
            described,
            [
                ("warm-up".to_owned(), 1200, none(), none()),
                (
                    "injected-faults".to_owned(),
                    1800,
                    vec!["recommendations: 80% injected faults".to_owned()],
                    none()
                ),
                (
                    "injected-latency".to_owned(),
                    1800,
                    vec!["catalog: 80% delayed 400 ms".to_owned()],
                    none()
                ),
                ("recovery".to_owned(), 1200, none(), none()),
            ]
        );
        // The catalog's delay is past its command's timeout.
        assert!(400 > Backend::Catalog.timeout_ms());
        use Backend::*;
        let settled: Vec<Vec<Backend>> = (0..4).map(|i| schedule.settled_healthy(i)).collect();
        assert_eq!(
            settled,
            [
                vec![
                    Catalog,
                    Ratings,
                    Recommendations,
                    Availability,
                    Prices,
                    PricesFixed
                ],
                vec![Catalog, Ratings, Availability, Prices, PricesFixed],
                vec![Ratings, Availability, Prices, PricesFixed],
                vec![Ratings, Recommendations, Availability, Prices, PricesFixed],
            ]
        );
    }

    #[test]
    fn phases_must_have_names_weights_and_differ() {
        assert_eq!(
            invalid("name = \"x\"\n"),
            "no phases: add at least one [[phase]] with a name and a weight"
        );
        assert_eq!(
            invalid("[[phase]]\nname = \"a\"\nweight = 0\n"),
            "phase 1 (`a`): weight = 0: must be a positive number (the phase's share of --duration)"
        );
        assert_eq!(
            invalid("[[phase]]\nname = \" \"\nweight = 1\n"),
            "phase 1: name must not be empty"
        );
        assert_eq!(
            invalid("[[phase]]\nname = \"a\"\nweight = 1\n[[phase]]\nname = \"a\"\nweight = 1\n"),
            "phase 2 (`a`): name is the same as phase 1's; phase names must differ"
        );
    }

    #[test]
    fn a_backend_taken_down_must_come_back() {
        let message = invalid(
            "[[phase]]\nname = \"up\"\nweight = 1\n[[phase]]\nname = \"down\"\nweight = 1\n\
             [phase.faults.availability]\nretry_after_s = 2\n",
        );
        assert_eq!(
            message,
            "phase 2 (`down`): availability is down (503 Retry-After: 2) and no later phase brings \
             it back; add a phase after it where availability is not down (the demo checks that \
             its breaker closes again)"
        );
    }

    #[test]
    fn unknown_names_and_missing_files_say_what_to_give() {
        assert_eq!(
            Scenario::load("tuor").unwrap_err().to_string(),
            "unknown scenario `tuor` given to --scenario: use a built-in one (tour, outage, \
             latency, retry-after, chaos, calm) or the path of a .toml file"
        );
        match Scenario::load("/no/such/scenario.toml") {
            Err(ScenarioError::Read { path, .. }) => assert_eq!(path, "/no/such/scenario.toml"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn settled_healthy_leaves_out_the_faulty_backend_and_the_phase_after_it() {
        let schedule = tour_10s();
        use Backend::*;
        let settled: Vec<Vec<Backend>> = (0..11).map(|i| schedule.settled_healthy(i)).collect();
        let prices = [Prices, PricesFixed];
        let with_prices = |backends: &[Backend]| [backends, &prices].concat();
        assert_eq!(
            settled,
            [
                with_prices(&[Catalog, Ratings, Recommendations, Availability]),
                with_prices(&[Ratings, Recommendations, Availability]),
                with_prices(&[Recommendations, Availability]),
                with_prices(&[Catalog, Availability]),
                with_prices(&[Catalog, Ratings, Availability]),
                with_prices(&[Catalog, Ratings, Recommendations]),
                // transient-errors, then long-tail
                with_prices(&[Catalog, Ratings]),
                with_prices(&[Catalog, Ratings]),
                // capacity-drop, chaos (in ratings), then cool-down
                vec![Catalog, Ratings, Recommendations],
                vec![Catalog, Recommendations, Availability],
                vec![Catalog, Recommendations, Availability, Prices, PricesFixed],
            ]
        );
    }

    #[test]
    fn a_phase_lists_its_faulty_backends_and_faults_default_to_healthy() {
        let schedule = tour_10s();
        let storm = &schedule.phases[5];
        assert_eq!(storm.faulty().collect::<Vec<_>>(), [Backend::Availability]);
        assert_eq!(storm.fault(Backend::Availability).retry_after_s, Some(1));
        assert!(storm.fault(Backend::Catalog).is_healthy());
        assert!(
            schedule.phases[3]
                .fault(Backend::Recommendations)
                .refuses_connections()
        );
    }

    #[test]
    fn reactions_follow_the_fault() {
        let mut rng = SmallRng::seed_from_u64(7);
        let fixed = Some(Latency {
            base_ms: 40.0,
            median_ms: 10.0,
            sigma: 0.0,
        });
        let answer = |fail| Reaction::Answer {
            delay: ms(50),
            fail,
        };
        let cases = [
            (
                Fault {
                    latency: fixed,
                    error_rate: 1.0,
                    ..Fault::default()
                },
                answer(true),
            ),
            (
                Fault {
                    latency: fixed,
                    ..Fault::default()
                },
                answer(false),
            ),
            (
                Fault {
                    hang_rate: 1.0,
                    ..Fault::default()
                },
                Reaction::Hang,
            ),
            (
                Fault {
                    retry_after_s: Some(3),
                    ..Fault::default()
                },
                Reaction::Unavailable {
                    retry_after_s: Some(3),
                },
            ),
            (
                Fault {
                    outage: Some(Outage::Unavailable),
                    ..Fault::default()
                },
                Reaction::Unavailable {
                    retry_after_s: None,
                },
            ),
        ];
        for (fault, reaction) in cases {
            assert_eq!(fault.react(&mut rng), reaction, "{fault:?}");
        }
    }

    #[test]
    fn rates_draw_about_their_fraction() {
        let mut rng = SmallRng::seed_from_u64(42);
        let fault = Fault {
            error_rate: 0.3,
            ..Fault::default()
        };
        let failed = (0..10_000)
            .filter(|_| matches!(fault.react(&mut rng), Reaction::Answer { fail: true, .. }))
            .count();
        assert!((2800..3200).contains(&failed), "{failed} of 10000");
    }

    #[test]
    fn a_tail_delays_its_share_of_calls_and_capacity_is_kept_for_the_servers() {
        let scenario = parse(
            "[[phase]]\nname = \"p\"\nweight = 1\n[phase.faults.availability]\n\
             tail = { rate = 0.25, delay_ms = 250 }\n[phase.faults.prices-fixed]\ncapacity = 2\n",
        )
        .unwrap();
        let faults = &scenario.phases[0].faults;
        let tail = faults[&Backend::Availability].clone();
        assert_eq!(
            tail.tail,
            Some(Tail {
                rate: 0.25,
                delay_ms: 250
            })
        );
        assert_eq!(faults[&Backend::PricesFixed].capacity, Some(2));
        assert!(!tail.is_healthy() && !faults[&Backend::PricesFixed].is_healthy());
        assert_eq!(tail.describe(), "25% delayed 250 ms more");
        // Healthy latency is at most 2 + 3 × e^(0.5 × 4.5) ≈ 30 ms in 10 000 draws (σ 4.5):
        // every delay of 250 ms or more is the tail's.
        let mut rng = SmallRng::seed_from_u64(7);
        let delayed = (0..10_000)
            .filter(|_| {
                matches!(tail.react(&mut rng), Reaction::Answer { delay, .. }
                    if delay >= Duration::from_millis(250))
            })
            .count();
        // About a quarter of 10 000, exactly as the seeded draws fall (SmallRng, 64-bit).
        assert_eq!(delayed, 2467);
        assert_eq!(Backend::Prices.healthy_latency(), Latency::PRICES);
        assert_eq!(Backend::Catalog.healthy_latency(), Latency::HEALTHY);
        assert_eq!(Backend::PricesFixed.timeout_ms(), 500);
    }

    #[test]
    fn latency_has_its_base_as_floor_and_its_median_above_it() {
        let mut rng = SmallRng::seed_from_u64(1);
        let latency = Latency {
            base_ms: 100.0,
            median_ms: 50.0,
            sigma: 0.8,
        };
        let mut samples: Vec<Duration> = (0..2001).map(|_| latency.sample(&mut rng)).collect();
        samples.sort();
        assert!(samples[0] >= ms(100));
        let median = samples[1000].as_secs_f64() * 1000.0;
        assert!((140.0..160.0).contains(&median), "median {median} ms");
        assert!(samples[2000] <= MAX_LATENCY);
    }

    #[test]
    fn descriptions_name_each_fault() {
        let schedule = tour_10s();
        let described: Vec<String> = schedule
            .phases
            .iter()
            .flat_map(|p| {
                p.faults
                    .iter()
                    .map(|(b, f)| format!("{b}: {}", f.describe()))
            })
            .collect();
        assert_eq!(
            described,
            [
                "catalog: latency 120+100ms σ0.8, 5% hang",
                "ratings: 70% errors",
                "recommendations: down (connection refused)",
                "availability: 503 Retry-After: 1",
                "recommendations: 30% errors",
                "availability: 10% delayed 250 ms more",
                "prices: serves 2 at once",
                "prices-fixed: serves 2 at once",
            ]
        );
        assert_eq!(Fault::default().describe(), "healthy");
    }
}
