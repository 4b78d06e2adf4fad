//! Prometheus text exposition (format 0.0.4) rendered from registry snapshots, with the names in
//! the table below. Each scrape reads the registry's snapshots; every series' labels are
//! escaped once (backslash, double quote, newline) and reused for its lines.
//!
//! The text is written here rather than by `prometheus-client` (its custom-collector API does
//! the same job): a scrape of 1 000 commands took 12 ms through it and takes 4 ms this way, on
//! the 2-core machine of BENCHMARKS.md ("Metrics a fleet can aggregate"), where the goal is
//! 10 ms. Its encoder re-encodes and re-checks every label of every line.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `hystrix_command_events_total` | counter (cumulative) | `command`, `group`, `event` (snake_case event type, our extensions included: `ignored`, `would_short_circuit`, `retry`, `retry_budget_exhausted`, `hedge`, `hedge_cancelled`, `limit_rejected`, `throttled`, `slow_call`, `chaos_injected`) |
//! | `hystrix_command_latency_execute_seconds` | histogram (cumulative) | `command`, `group`, `le` |
//! | `hystrix_command_latency_total_seconds` | histogram (cumulative) | `command`, `group`, `le` |
//! | `hystrix_command_concurrent_executions` | gauge | `command`, `group` |
//! | `hystrix_command_error_ratio` | gauge 0-1 (rolling health window) | `command`, `group` |
//! | `hystrix_command_slow_call_ratio` | gauge 0-1 (rolling health window; commands with slow calls on) | `command`, `group` |
//! | `hystrix_command_chaos_enabled` | gauge 0/1 (commands whose chaos is on) | `command`, `group` |
//! | `hystrix_command_adaptive_limit` | gauge, executions (commands with adaptive limits on) | `command`, `group` |
//! | `hystrix_command_adaptive_limit_in_flight` | gauge, executions (commands with adaptive limits on) | `command`, `group` |
//! | `hystrix_command_adaptive_limit_queue_size` | gauge, executions (commands with adaptive limits on) | `command`, `group` |
//! | `hystrix_command_priority_in_flight` | gauge, executions (commands with a priority reserve) | `command`, `group`, `class` (`critical`, `normal`, `sheddable`) |
//! | `hystrix_command_priority_admitted_total` | counter (while a reserve is set) | `command`, `group`, `class` |
//! | `hystrix_command_priority_refused_total` | counter (while a reserve is set) | `command`, `group`, `class` |
//! | `hystrix_command_throttle_probability` | gauge 0-1 (commands with adaptive throttling on) | `command`, `group` |
//! | `hystrix_command_throttle_requests` | gauge, attempts in the throttling window (commands with adaptive throttling on) | `command`, `group` |
//! | `hystrix_command_throttle_accepts` | gauge, attempts in the throttling window the backend did not refuse as overloaded (commands with adaptive throttling on) | `command`, `group` |
//! | `hystrix_circuit_breaker_state` | gauge 0/1 per state | `command`, `group`, `state` |
//! | `hystrix_circuit_breaker_open_keys` | gauge (commands with a breaker per key) | `command`, `group` |
//! | `hystrix_thread_pool_{active_threads,queue_size,pool_size,max_pool_size,queue_capacity}` | gauge | `thread_pool` |
//! | `hystrix_thread_pool_{executions_total,rejections_total}` | counter | `thread_pool` |
//! | `hystrix_collapser_{batches_total,requests_batched_total,responses_from_cache_total}` | counter | `collapser` |
//! | `hystrix_collapser_batch_size` | histogram (cumulative), requests | `collapser`, `le` (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000, `+Inf`) |
//! | `hystrix_state_store_errors_total` | counter | none (only with a shared state store) |
//! | `hystrix_state_store_degraded` | gauge 0/1 | none (only with a shared state store) |
//!
//! Latency histograms: `_bucket` counts, for each bound of
//! [`LATENCY_BUCKET_BOUNDS_SECONDS`](hystrix::metrics::LATENCY_BUCKET_BOUNDS_SECONDS) (`le`
//! 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 and `+Inf`: Prometheus's default
//! buckets), the executions whose latency was at most it; `_sum` is their latencies in
//! seconds and `_count` their number, all since the command key was created (whole ms, as the
//! library measures them; see [`hystrix::metrics::CumulativeHistogram`]). Being
//! cumulative counts, they sum across instances: `histogram_quantile(0.99, sum by (command,
//! le) (rate(hystrix_command_latency_execute_seconds_bucket[1m])))` is a fleet's p99. The
//! execution histogram takes one value per execution whose user code started (a retried
//! execution counts once; each attempt is an event of `hystrix_command_events_total`), as the
//! rolling percentiles take them, the total histogram one per execution not refused before
//! any run, its fallback included. A command has no histogram series until it has a latency
//! (no series is ever `NaN`). `metrics.rollingPercentile.enabled` false turns the rolling
//! percentiles off, not the histograms. The rolling percentiles are in the `/hystrix.stream`,
//! as Hystrix's dashboard shows them.
//!
//! Collapsers: `hystrix_collapser_batch_size` counts batches by size (in requests, the bounds
//! of [`hystrix::metrics::BATCH_SIZE_BUCKET_BOUNDS`]), since the key was first used (no series before its
//! first batch). The rolling batch-size percentiles are in the `/hystrix.stream`.
//!
//! Adaptive concurrency limits (`execution.isolation.adaptive.enabled`): the three
//! `hystrix_command_adaptive_limit*` gauges are the limit in force (the algorithm's, capped by
//! `execution.isolation.semaphore.maxConcurrentRequests`), the executions it admitted that have
//! not ended and the executions waiting for a place, read at the scrape; a command without
//! adaptive limits has no series (not a 0, which would read as "refuses everything"). Its
//! refusals are the `limit_rejected` events of `hystrix_command_events_total`.
//!
//! Client-side adaptive throttling (`execution.throttle.enabled`; Google SRE book, Handling
//! Overload): `hystrix_command_throttle_probability` is the probability with which the next
//! attempt is throttled, max(0, (requests − K × accepts) / (requests + 1)), and
//! `hystrix_command_throttle_requests` / `_accepts` the counts of the throttling window
//! (`execution.throttle.windowInMilliseconds`, the bucket filling included) it comes from,
//! read at the scrape; a command without throttling has no series. Its refusals are the
//! `throttled` events of `hystrix_command_events_total`.
//!
//! Slow calls (`circuitBreaker.slowCall.durationThresholdInMilliseconds` above 0; resilience4j's
//! slow-call rate): `hystrix_command_slow_call_ratio` is the slow calls among the requests of
//! the health window that `hystrix_command_error_ratio` reads (0 with no requests), the rate
//! the breaker compares with `circuitBreaker.slowCall.rateThresholdPercentage`; a command with
//! slow calls off has no series. Each slow attempt is a `slow_call` event of
//! `hystrix_command_events_total`, beside its outcome's event.
//!
//! Chaos injection (`chaos.enabled`, allowed only by a registry built with
//! `RegistryBuilder::allow_chaos(true)`): `hystrix_command_chaos_enabled` has a series for
//! each command whose chaos is on, read at the scrape: 1 while one of its rates injects
//! (`chaos.fault.ratePercentage` or `chaos.hang.ratePercentage` above 0, or
//! `chaos.latency.ratePercentage` above 0 with a `chaos.latency.inMilliseconds` above 0), 0
//! while it is on with nothing to inject. A command with chaos off has no series, so an alert
//! on `hystrix_command_chaos_enabled == 1` names exactly the commands being injected into.
//! Each injected attempt is one `chaos_injected` event of `hystrix_command_events_total`
//! (whatever it injected), beside its outcome's event (an injected fault is a `failure`).

use std::fmt::{Display, Write as _};

use hystrix::Status;
use hystrix::collapser::CollapserEvent;
use hystrix::metrics::{BATCH_SIZE_BUCKET_BOUNDS, CumulativeHistogram, LATENCY_BUCKET_BOUNDS_MS};
use hystrix::{EventType, Registry};

/// Events that are never counted (so never exported).
const NOT_COUNTED: [EventType; 2] = [EventType::FallbackDisabled, EventType::CommandMaxActive];

/// A gauge read from a part `S` of a command's metrics: name, help, value.
type Gauge<S> = (&'static str, &'static str, fn(&S) -> f64);

struct Command {
    /// `command="...",group="..."`, escaped: the labels of its series.
    labels: String,
    metrics: hystrix::CommandMetrics,
    state: &'static str,
    /// The health the error ratio shows: the breaker's, or, with a breaker per key, the
    /// rolling counts'.
    health: hystrix::HealthCounts,
    /// With a breaker per key: how many are open.
    open_keys: Option<usize>,
    /// Whether slow calls are on (a slow-call threshold above 0).
    slow_calls: bool,
    /// While chaos is on: whether one of its rates injects anything.
    chaos: Option<bool>,
}

/// Appends `value` to `out` escaped as a label value: backslash, double quote and newline.
fn escape_into(out: &mut String, value: &str) {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `name="value",...` with the values escaped: a series' labels, rendered once.
fn labels(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_into(&mut out, value);
        out.push('"');
    }
    out
}

/// The kind of a metric family, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The exposition being written (text format 0.0.4).
struct Text {
    out: String,
}

impl Text {
    /// Starts the family `name` (`# HELP`, `# TYPE`) and writes what `sample` writes for each
    /// of `items`.
    fn family<T>(
        &mut self,
        name: &str,
        help: &str,
        kind: Kind,
        items: impl IntoIterator<Item = T>,
        mut sample: impl FnMut(&mut Family<'_>, T),
    ) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        // HELP text escapes backslash and newline; ours are constants without either.
        debug_assert!(!help.contains(['\\', '\n']), "{help}");
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
        let mut family = Family {
            out: &mut self.out,
            name,
        };
        for item in items {
            sample(&mut family, item);
        }
    }
}

/// The samples of one family.
struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

impl Family<'_> {
    /// `<name><suffix>{<labels>,<extra>} <value>`: `labels` rendered already, `extra` one more
    /// label whose value is escaped here.
    fn line(
        &mut self,
        suffix: &str,
        labels: &str,
        extra: Option<(&str, &str)>,
        value: impl Display,
    ) {
        self.out.push_str(self.name);
        self.out.push_str(suffix);
        if !labels.is_empty() || extra.is_some() {
            self.out.push('{');
            self.out.push_str(labels);
            if let Some((name, value)) = extra {
                if !labels.is_empty() {
                    self.out.push(',');
                }
                self.out.push_str(name);
                self.out.push_str("=\"");
                escape_into(self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// One sample (a gauge's or a counter's).
    fn sample(&mut self, labels: &str, extra: Option<(&str, &str)>, value: impl Display) {
        self.line("", labels, extra, value);
    }

    /// One histogram: a `_bucket` per bound of `le` (rendered already, with `+Inf` last),
    /// `_sum` divided by `unit` (1000 for ms as seconds) and `_count`.
    fn histogram(
        &mut self,
        labels: &str,
        histogram: &CumulativeHistogram,
        le: &LeValues,
        unit: f64,
    ) {
        for (le, (_, at_most)) in le.iter().zip(histogram.buckets()) {
            self.line("_bucket", labels, Some(("le", le)), at_most);
        }
        self.line("_bucket", labels, Some(("le", "+Inf")), histogram.count());
        self.line("_sum", labels, None, histogram.sum() as f64 / unit);
        self.line("_count", labels, None, histogram.count());
    }
}

/// A histogram's `le` values, as Prometheus writes them (`0.005`, `1`, `10000`).
type LeValues = Vec<String>;

/// `bounds` divided by `unit`, as `le` values.
fn le_values(bounds: &[u64], unit: f64) -> LeValues {
    bounds
        .iter()
        .map(|&bound| (bound as f64 / unit).to_string())
        .collect()
}

/// Writes each of `list`'s gauges for the commands that have the part (`pick`): a command
/// without it has no series (not a 0).
fn gauges<S>(
    out: &mut Text,
    commands: &[Command],
    list: &[Gauge<S>],
    pick: impl Fn(&Command) -> Option<S>,
) {
    for (name, help, value) in list {
        out.family(name, help, Kind::Gauge, commands, |family, c| {
            if let Some(part) = pick(c) {
                family.sample(&c.labels, None, value(&part));
            }
        });
    }
}

/// Whether a command's chaos, on, injects anything: a fault or hang rate above 0, or a
/// latency rate above 0 with a delay above 0.
fn chaos_injects(props: &hystrix::config::CommandProperties) -> bool {
    props.chaos_fault_rate_percentage > 0.0
        || props.chaos_hang_rate_percentage > 0.0
        || (props.chaos_latency_rate_percentage > 0.0 && props.chaos_latency_in_milliseconds > 0)
}

/// `part / whole`, 0 of nothing.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The registry's commands as exported.
fn commands(registry: &Registry) -> Vec<Command> {
    registry
        .command_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.command_metrics(key.as_str())?;
            let info = registry.command_info(key.as_str())?;
            let props = registry.properties().command(key);
            let status = registry.circuit_breaker(key.as_str())?.status();
            // A disabled breaker lets everything through, whatever the force flags say.
            let state = if !props.circuit_breaker_enabled {
                "disabled"
            } else if props.circuit_breaker_force_open {
                "forced_open"
            } else if props.circuit_breaker_force_closed {
                "forced_closed"
            } else {
                match status {
                    Status::Closed => "closed",
                    Status::Open => "open",
                    Status::HalfOpen => "half_open",
                }
            };
            let health = if info.keyed_breakers {
                crate::stream::rolling_health(&metrics)
            } else {
                metrics.health_counts()
            };
            Some(Command {
                labels: labels(&[("command", key.as_str()), ("group", info.group.as_str())]),
                metrics,
                state,
                health,
                open_keys: registry
                    .open_breaker_keys(key.as_str())
                    .map(|keys| keys.len()),
                slow_calls: props.circuit_breaker_slow_call_duration_threshold_in_milliseconds > 0,
                chaos: props.chaos_enabled.then(|| chaos_injects(&props)),
            })
        })
        .collect()
}

/// Bytes of text per command, a little more than a command that has run writes with none of
/// the optional series (about 5.5 KiB): the text is made this large at once rather than grown
/// while written.
const BYTES_PER_COMMAND: usize = 6 * 1024;

/// Renders the registry as Prometheus text (format 0.0.4).
pub(crate) fn render(registry: &Registry) -> String {
    let commands = commands(registry);
    let mut out = Text {
        out: String::with_capacity(4096 + commands.len() * BYTES_PER_COMMAND),
    };
    write_commands(&mut out, &commands);
    write_thread_pools(&mut out, registry);
    write_collapsers(&mut out, registry);
    write_state_store(&mut out, registry);
    out.out
}

fn write_commands(out: &mut Text, commands: &[Command]) {
    let events: Vec<(EventType, String)> = EventType::ALL
        .into_iter()
        .filter(|event| !NOT_COUNTED.contains(event))
        .map(|event| (event, event.name().to_ascii_lowercase()))
        .collect();
    out.family(
        "hystrix_command_events_total",
        "Command execution events since the key was created, by Hystrix event type.",
        Kind::Counter,
        commands,
        |family, c| {
            for (event, name) in &events {
                let count = c.metrics.cumulative_count(*event);
                family.sample(&c.labels, Some(("event", name)), count);
            }
        },
    );

    type Pick = fn(&hystrix::CommandMetrics) -> CumulativeHistogram;
    let latencies: [(&str, &str, Pick); 2] = [
        (
            "hystrix_command_latency_execute_seconds",
            "Execution latency (from the start to the run's end or timeout, queue wait \
             included) of executions whose user code started, since the key was created.",
            hystrix::CommandMetrics::execution_histogram,
        ),
        (
            "hystrix_command_latency_total_seconds",
            "Total latency (what the caller waited, fallback included) of executions not \
             refused before any run, since the key was created.",
            hystrix::CommandMetrics::total_histogram,
        ),
    ];
    let le = le_values(&LATENCY_BUCKET_BOUNDS_MS, 1000.0);
    for (name, help, pick) in latencies {
        out.family(name, help, Kind::Histogram, commands, |family, c| {
            // No series until the command has a latency.
            let h = pick(&c.metrics);
            if h.count() > 0 {
                family.histogram(&c.labels, &h, &le, 1000.0);
            }
        });
    }

    out.family(
        "hystrix_command_concurrent_executions",
        "Executions whose user code is running now.",
        Kind::Gauge,
        commands,
        |family, c| {
            let running = c.metrics.current_concurrent_execution_count();
            family.sample(&c.labels, None, running);
        },
    );
    out.family(
        "hystrix_command_error_ratio",
        "Errors / requests over the breaker's rolling health window (0 with no requests); with \
         a breaker per key, over the rolling window of all keys.",
        Kind::Gauge,
        commands,
        |family, c| {
            let health = c.health;
            let errors = ratio(health.error_count, health.total_requests);
            family.sample(&c.labels, None, errors);
        },
    );
    let slow_calls: [Gauge<hystrix::HealthCounts>; 1] = [(
        "hystrix_command_slow_call_ratio",
        "Commands with slow calls: slow calls / requests over the breaker's rolling health \
         window (0 with no requests); with a breaker per key, over the rolling window of all \
         keys.",
        |h| ratio(h.slow_call_count, h.total_requests),
    )];
    gauges(out, commands, &slow_calls, |c| {
        c.slow_calls.then_some(c.health)
    });

    let chaos: [Gauge<bool>; 1] = [(
        "hystrix_command_chaos_enabled",
        "Commands whose chaos is on (chaos.enabled): 1 while a chaos rate injects faults, \
         delays or hangs into its attempts, 0 while none does.",
        |injects| f64::from(u8::from(*injects)),
    )];
    gauges(out, commands, &chaos, |c| c.chaos);

    let adaptive: [Gauge<hystrix::AdaptiveLimitSnapshot>; 3] = [
        (
            "hystrix_command_adaptive_limit",
            "Commands with adaptive concurrency limits: the limit in force (executions).",
            |a| f64::from(a.limit),
        ),
        (
            "hystrix_command_adaptive_limit_in_flight",
            "Commands with adaptive concurrency limits: executions admitted by the limit, not \
             yet ended.",
            |a| f64::from(a.in_flight),
        ),
        (
            "hystrix_command_adaptive_limit_queue_size",
            "Commands with adaptive concurrency limits: executions waiting for a place.",
            |a| f64::from(a.queued),
        ),
    ];
    gauges(out, commands, &adaptive, |c| c.metrics.adaptive_limit());
    let throttle: [Gauge<hystrix::ThrottleSnapshot>; 3] = [
        (
            "hystrix_command_throttle_probability",
            "Commands with adaptive throttling: the probability (0-1) with which the next \
             attempt is refused locally.",
            |t| t.probability,
        ),
        (
            "hystrix_command_throttle_requests",
            "Commands with adaptive throttling: attempts that ran or were throttled in the \
             throttling window.",
            |t| t.requests as f64,
        ),
        (
            "hystrix_command_throttle_accepts",
            "Commands with adaptive throttling: attempts in the throttling window that the \
             backend did not reject as overloaded.",
            |t| t.accepts as f64,
        ),
    ];
    gauges(out, commands, &throttle, |c| c.metrics.throttle());

    type ClassValue = fn(&hystrix::ClassCounts) -> u64;
    let by_class: [(&str, Kind, &str, ClassValue); 3] = [
        (
            "hystrix_command_priority_in_flight",
            Kind::Gauge,
            "Commands with a priority reserve: executions of the class holding a permit.",
            |c| u64::from(c.in_flight),
        ),
        (
            "hystrix_command_priority_admitted_total",
            Kind::Counter,
            "Commands with a priority reserve: executions of the class admitted (counted while \
             a reserve is set).",
            |c| c.admitted,
        ),
        (
            "hystrix_command_priority_refused_total",
            Kind::Counter,
            "Commands with a priority reserve: executions of the class refused a permit \
             (counted while a reserve is set).",
            |c| c.refused,
        ),
    ];
    let classes: Vec<(hystrix::Priority, String)> = hystrix::Priority::ALL
        .into_iter()
        .map(|class| (class, class.name().to_ascii_lowercase()))
        .collect();
    for (name, kind, help, value) in by_class {
        out.family(name, help, kind, commands, |family, c| {
            if let Some(priorities) = c.metrics.priorities() {
                for (class, class_name) in &classes {
                    let count = value(&priorities.class(*class));
                    family.sample(&c.labels, Some(("class", class_name)), count);
                }
            }
        });
    }

    out.family(
        "hystrix_circuit_breaker_open_keys",
        "Commands with a breaker per key: how many keys' breakers are open (OPEN or HALF_OPEN).",
        Kind::Gauge,
        commands,
        |family, c| {
            if let Some(open) = c.open_keys {
                family.sample(&c.labels, None, open);
            }
        },
    );
    out.family(
        "hystrix_circuit_breaker_state",
        "1 for the circuit breaker's current state, 0 for the others.",
        Kind::Gauge,
        commands,
        |family, c| {
            for state in [
                "closed",
                "open",
                "half_open",
                "forced_open",
                "forced_closed",
                "disabled",
            ] {
                family.sample(
                    &c.labels,
                    Some(("state", state)),
                    u8::from(c.state == state),
                );
            }
        },
    );
}

fn write_thread_pools(out: &mut Text, registry: &Registry) {
    let pools: Vec<_> = registry
        .thread_pool_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.thread_pool_metrics(key.as_str())?;
            let props = registry.properties().thread_pool(key);
            Some((labels(&[("thread_pool", key.as_str())]), metrics, props))
        })
        .collect();
    type PoolGauge = fn(&hystrix::ThreadPoolMetrics, &hystrix::ThreadPoolProperties) -> i64;
    let gauges: [(&str, &str, PoolGauge); 5] = [
        (
            "hystrix_thread_pool_active_threads",
            "Tasks running now.",
            |m, _| i64::from(m.current_active_count),
        ),
        (
            "hystrix_thread_pool_queue_size",
            "Tasks waiting in the queue.",
            |m, _| i64::from(m.current_queue_size),
        ),
        (
            "hystrix_thread_pool_pool_size",
            "Pool threads alive.",
            |m, _| i64::from(m.current_pool_size),
        ),
        (
            "hystrix_thread_pool_max_pool_size",
            "The pool's maximum size now.",
            |m, _| i64::from(m.current_maximum_pool_size),
        ),
        (
            "hystrix_thread_pool_queue_capacity",
            "Tasks that may wait in the queue: 0 for hand-off (maxQueueSize <= 0), else \
             min(maxQueueSize, queueSizeRejectionThreshold).",
            |_, p| {
                if p.max_queue_size <= 0 {
                    0
                } else {
                    i64::from(p.max_queue_size).min(i64::from(p.queue_size_rejection_threshold))
                }
            },
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, help, Kind::Gauge, &pools, |family, (labels, m, p)| {
            family.sample(labels, None, value(m, p));
        });
    }
    type PoolCounter = fn(&hystrix::ThreadPoolMetrics) -> u64;
    let counters: [(&str, &str, PoolCounter); 2] = [
        (
            "hystrix_thread_pool_executions_total",
            "Commands executed on the pool since it was created.",
            |m| m.cumulative_count_threads_executed,
        ),
        (
            "hystrix_thread_pool_rejections_total",
            "Commands the pool refused since it was created.",
            |m| m.cumulative_count_command_rejections,
        ),
    ];
    for (name, help, value) in counters {
        out.family(
            name,
            help,
            Kind::Counter,
            &pools,
            |family, (labels, m, _)| {
                family.sample(labels, None, value(m));
            },
        );
    }
}

fn write_collapsers(out: &mut Text, registry: &Registry) {
    let collapsers: Vec<_> = registry
        .collapser_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.collapser_metrics(key.as_str())?;
            Some((labels(&[("collapser", key.as_str())]), metrics))
        })
        .collect();
    for (name, help, event) in [
        (
            "hystrix_collapser_batches_total",
            "Batches executed.",
            CollapserEvent::BatchExecuted,
        ),
        (
            "hystrix_collapser_requests_batched_total",
            "Requests added to a batch.",
            CollapserEvent::AddedToBatch,
        ),
        (
            "hystrix_collapser_responses_from_cache_total",
            "Requests answered from the collapser's request cache.",
            CollapserEvent::ResponseFromCache,
        ),
    ] {
        out.family(
            name,
            help,
            Kind::Counter,
            &collapsers,
            |family, (labels, m)| {
                family.sample(labels, None, m.cumulative_count(event));
            },
        );
    }
    let le = le_values(&BATCH_SIZE_BUCKET_BOUNDS, 1.0);
    out.family(
        "hystrix_collapser_batch_size",
        "Requests per batch, since the collapser key was first used.",
        Kind::Histogram,
        &collapsers,
        |family, (labels, m)| {
            let sizes = m.batch_size_histogram();
            if sizes.count() > 0 {
                family.histogram(labels, &sizes, &le, 1.0);
            }
        },
    );
}

/// The shared state store (`Registry::state_store_status`): absent without one.
fn write_state_store(out: &mut Text, registry: &Registry) {
    let Some(store) = registry.state_store_status() else {
        return;
    };
    out.family(
        "hystrix_state_store_errors_total",
        "State store calls that failed or outlived the store timeout.",
        Kind::Counter,
        [store.errors_total],
        |family, errors| family.sample("", None, errors),
    );
    out.family(
        "hystrix_state_store_degraded",
        "1 while the latest sync round failed: breakers decide on local state alone.",
        Kind::Gauge,
        [store.degraded],
        |family, degraded| family.sample("", None, u8::from(degraded)),
    );
}
