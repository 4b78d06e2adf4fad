//! Prometheus text exposition (format 0.0.4) rendered from registry snapshots, with the names in
//! the table below.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `hystrix_command_events_total` | counter (cumulative) | `command`, `group`, `event` (snake_case event type, our extensions included: `ignored`, `would_short_circuit`, `retry`, `retry_budget_exhausted`, `hedge`, `hedge_cancelled`, `limit_rejected`, `throttled`, `slow_call`, `chaos_injected`) |
//! | `hystrix_command_latency_execute_seconds` | summary | `command`, `group`, `quantile` |
//! | `hystrix_command_latency_total_seconds` | summary | `command`, `group`, `quantile` |
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
//! | `hystrix_collapser_batch_size` | summary | `collapser`, `quantile` |
//! | `hystrix_state_store_errors_total` | counter | none (only with a shared state store) |
//! | `hystrix_state_store_degraded` | gauge 0/1 | none (only with a shared state store) |
//!
//! Latency summaries: the quantiles are the rolling percentiles (`metrics.rollingPercentile.*`
//! window, whole ms, as seconds; absent when percentiles are disabled, `NaN` while the window holds no latency). `_count` is the
//! cumulative number of runs of user code (SUCCESS, FAILURE, TIMEOUT, BAD_REQUEST, IGNORED):
//! one per execution, and one per attempt that ran for a retried execution (as the events
//! count them), while the quantiles take one sample per execution. An attempt whose run chaos
//! replaced (an injected fault, a FAILURE, or a hang, a TIMEOUT) is counted too, as its event
//! is, though no user code ran: `chaos_injected` events bound how many such attempts there
//! were. There is no `_sum`: the library keeps no cumulative latency sum, and an estimate
//! from rolling means read as zero for bursts (a fresh user's trial showed it), so the summary
//! is honest quantiles and a count. The collapser's batch-size `_sum` and `_count` are exact
//! (requests batched, batches).
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

use std::fmt::Write as _;

use hystrix::Status;
use hystrix::collapser::CollapserEvent;
use hystrix::{EventType, LatencyPercentiles, Registry};

/// Events that are never counted (so never exported).
const NOT_COUNTED: [EventType; 2] = [EventType::FallbackDisabled, EventType::CommandMaxActive];

/// Executions whose execution latency is measured.
const RAN: [EventType; 5] = [
    EventType::Success,
    EventType::Failure,
    EventType::Timeout,
    EventType::BadRequest,
    EventType::Ignored,
];

const QUANTILES: [&str; 9] = [
    "0", "0.25", "0.5", "0.75", "0.9", "0.95", "0.99", "0.995", "1",
];

/// Escapes a label value: backslash, double quote and newline.
pub(crate) fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A metric family being written: its header once, then samples.
struct Out {
    text: String,
}

impl Out {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// A gauge read from a part `S` of a command's metrics: name, help, value.
type Gauge<S> = (&'static str, &'static str, fn(&S) -> f64);

/// Writes each of `list`'s gauges for the commands that have the part (`pick`): a command
/// without it has no series (not a 0).
fn gauges<S>(
    out: &mut Out,
    commands: &[Command],
    list: &[Gauge<S>],
    pick: impl Fn(&Command) -> Option<S>,
) {
    for (name, help, value) in list {
        out.header(name, "gauge", help);
        for c in commands {
            if let Some(part) = pick(c) {
                out.sample(
                    name,
                    &[("command", &c.key), ("group", &c.group)],
                    value(&part),
                );
            }
        }
    }
}

struct Command {
    key: String,
    group: String,
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

/// Renders the registry as Prometheus text.
pub(crate) fn render(registry: &Registry) -> String {
    let commands: Vec<Command> = registry
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
                key: key.as_str().to_owned(),
                group: info.group.as_str().to_owned(),
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
        .collect();
    let mut out = Out {
        text: String::new(),
    };

    out.header(
        "hystrix_command_events_total",
        "counter",
        "Command execution events since the key was created, by Hystrix event type.",
    );
    for c in &commands {
        for event in EventType::ALL {
            if NOT_COUNTED.contains(&event) {
                continue;
            }
            let name = event.name().to_ascii_lowercase();
            out.sample(
                "hystrix_command_events_total",
                &[("command", &c.key), ("group", &c.group), ("event", &name)],
                c.metrics.cumulative_count(event),
            );
        }
    }

    for (summary, help, pick) in [
        (
            "hystrix_command_latency_execute_seconds",
            "Execution latency: rolling percentiles and the count of executions (no _sum).",
            hystrix::CommandMetrics::execution_latency as fn(&hystrix::CommandMetrics) -> _,
        ),
        (
            "hystrix_command_latency_total_seconds",
            "Total latency (fallback included): rolling percentiles and the count (no _sum).",
            hystrix::CommandMetrics::total_latency,
        ),
    ] {
        out.header(summary, "summary", help);
        for c in &commands {
            let latency: LatencyPercentiles = pick(&c.metrics);
            let labels = [("command", c.key.as_str()), ("group", c.group.as_str())];
            if latency.mean >= 0 {
                for (quantile, (_, ms)) in QUANTILES.iter().zip(latency.named()) {
                    // No latency in the window: NaN (no value), as Prometheus clients write
                    // it, not a misleading 0 s.
                    let value = if latency.samples == 0 {
                        f64::NAN
                    } else {
                        seconds(ms)
                    };
                    out.sample(
                        summary,
                        &[labels[0], labels[1], ("quantile", quantile)],
                        value,
                    );
                }
            }
            let count: u64 = RAN.iter().map(|e| c.metrics.cumulative_count(*e)).sum();
            out.sample(&format!("{summary}_count"), &labels, count);
        }
    }

    out.header(
        "hystrix_command_concurrent_executions",
        "gauge",
        "Executions whose user code is running now.",
    );
    for c in &commands {
        out.sample(
            "hystrix_command_concurrent_executions",
            &[("command", &c.key), ("group", &c.group)],
            c.metrics.current_concurrent_execution_count(),
        );
    }

    out.header(
        "hystrix_command_error_ratio",
        "gauge",
        "Errors / requests over the breaker's rolling health window (0 with no requests); with \
         a breaker per key, over the rolling window of all keys.",
    );
    for c in &commands {
        out.sample(
            "hystrix_command_error_ratio",
            &[("command", &c.key), ("group", &c.group)],
            ratio(c.health.error_count, c.health.total_requests),
        );
    }
    let slow_calls: [Gauge<hystrix::HealthCounts>; 1] = [(
        "hystrix_command_slow_call_ratio",
        "Commands with slow calls: slow calls / requests over the breaker's rolling health \
         window (0 with no requests); with a breaker per key, over the rolling window of all \
         keys.",
        |h| ratio(h.slow_call_count, h.total_requests),
    )];
    gauges(&mut out, &commands, &slow_calls, |c| {
        c.slow_calls.then_some(c.health)
    });

    let chaos: [Gauge<bool>; 1] = [(
        "hystrix_command_chaos_enabled",
        "Commands whose chaos is on (chaos.enabled): 1 while a chaos rate injects faults, \
         delays or hangs into its attempts, 0 while none does.",
        |injects| f64::from(u8::from(*injects)),
    )];
    gauges(&mut out, &commands, &chaos, |c| c.chaos);

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
    gauges(&mut out, &commands, &adaptive, |c| {
        c.metrics.adaptive_limit()
    });
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
    gauges(&mut out, &commands, &throttle, |c| c.metrics.throttle());

    type ClassValue = fn(&hystrix::ClassCounts) -> u64;
    let by_class: [(&str, &str, &str, ClassValue); 3] = [
        (
            "hystrix_command_priority_in_flight",
            "gauge",
            "Commands with a priority reserve: executions of the class holding a permit.",
            |c| u64::from(c.in_flight),
        ),
        (
            "hystrix_command_priority_admitted_total",
            "counter",
            "Commands with a priority reserve: executions of the class admitted (counted while \
             a reserve is set).",
            |c| c.admitted,
        ),
        (
            "hystrix_command_priority_refused_total",
            "counter",
            "Commands with a priority reserve: executions of the class refused a permit \
             (counted while a reserve is set).",
            |c| c.refused,
        ),
    ];
    for (name, kind, help, value) in by_class {
        out.header(name, kind, help);
        for c in &commands {
            if let Some(priorities) = c.metrics.priorities() {
                for class in hystrix::Priority::ALL {
                    out.sample(
                        name,
                        &[
                            ("command", &c.key),
                            ("group", &c.group),
                            ("class", &class.name().to_ascii_lowercase()),
                        ],
                        value(&priorities.class(class)),
                    );
                }
            }
        }
    }

    out.header(
        "hystrix_circuit_breaker_open_keys",
        "gauge",
        "Commands with a breaker per key: how many keys' breakers are open (OPEN or HALF_OPEN).",
    );
    for c in &commands {
        if let Some(open) = c.open_keys {
            out.sample(
                "hystrix_circuit_breaker_open_keys",
                &[("command", &c.key), ("group", &c.group)],
                open,
            );
        }
    }

    out.header(
        "hystrix_circuit_breaker_state",
        "gauge",
        "1 for the circuit breaker's current state, 0 for the others.",
    );
    for c in &commands {
        for state in [
            "closed",
            "open",
            "half_open",
            "forced_open",
            "forced_closed",
            "disabled",
        ] {
            out.sample(
                "hystrix_circuit_breaker_state",
                &[("command", &c.key), ("group", &c.group), ("state", state)],
                u8::from(c.state == state),
            );
        }
    }

    let pools: Vec<_> = registry
        .thread_pool_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.thread_pool_metrics(key.as_str())?;
            let props = registry.properties().thread_pool(key);
            Some((key.as_str().to_owned(), metrics, props))
        })
        .collect();
    type PoolGauge = fn(&hystrix::ThreadPoolMetrics, &hystrix::ThreadPoolProperties) -> i64;
    let gauges: [(&str, &str, PoolGauge); 5] = [
        ("active_threads", "Tasks running now.", |m, _| {
            i64::from(m.current_active_count)
        }),
        ("queue_size", "Tasks waiting in the queue.", |m, _| {
            i64::from(m.current_queue_size)
        }),
        ("pool_size", "Pool threads alive.", |m, _| {
            i64::from(m.current_pool_size)
        }),
        ("max_pool_size", "The pool's maximum size now.", |m, _| {
            i64::from(m.current_maximum_pool_size)
        }),
        (
            "queue_capacity",
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
    for (suffix, help, value) in gauges {
        let name = format!("hystrix_thread_pool_{suffix}");
        out.header(&name, "gauge", help);
        for (key, metrics, props) in &pools {
            out.sample(&name, &[("thread_pool", key)], value(metrics, props));
        }
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
        out.header(name, "counter", help);
        for (key, metrics, _) in &pools {
            out.sample(name, &[("thread_pool", key)], value(metrics));
        }
    }

    let collapsers: Vec<_> = registry
        .collapser_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.collapser_metrics(key.as_str())?;
            Some((key.as_str().to_owned(), metrics))
        })
        .collect();
    for (suffix, help, event) in [
        (
            "batches_total",
            "Batches executed.",
            CollapserEvent::BatchExecuted,
        ),
        (
            "requests_batched_total",
            "Requests added to a batch.",
            CollapserEvent::AddedToBatch,
        ),
        (
            "responses_from_cache_total",
            "Requests answered from the collapser's request cache.",
            CollapserEvent::ResponseFromCache,
        ),
    ] {
        let name = format!("hystrix_collapser_{suffix}");
        out.header(&name, "counter", help);
        for (key, metrics) in &collapsers {
            out.sample(
                &name,
                &[("collapser", key)],
                metrics.cumulative_count(event),
            );
        }
    }
    out.header(
        "hystrix_collapser_batch_size",
        "summary",
        "Requests per batch: rolling percentiles; _sum and _count since creation.",
    );
    for (key, metrics) in &collapsers {
        let sizes = metrics.batch_size();
        if sizes.mean >= 0 {
            for (quantile, (_, size)) in QUANTILES.iter().zip(sizes.named()) {
                out.sample(
                    "hystrix_collapser_batch_size",
                    &[("collapser", key), ("quantile", quantile)],
                    size,
                );
            }
        }
        out.sample(
            "hystrix_collapser_batch_size_sum",
            &[("collapser", key)],
            metrics.cumulative_count(CollapserEvent::AddedToBatch),
        );
        out.sample(
            "hystrix_collapser_batch_size_count",
            &[("collapser", key)],
            metrics.cumulative_count(CollapserEvent::BatchExecuted),
        );
    }
    // The shared state store (Registry::state_store_status): absent without one.
    if let Some(store) = registry.state_store_status() {
        out.header(
            "hystrix_state_store_errors_total",
            "counter",
            "State store calls that failed or outlived the store timeout.",
        );
        out.sample("hystrix_state_store_errors_total", &[], store.errors_total);
        out.header(
            "hystrix_state_store_degraded",
            "gauge",
            "1 while the latest sync round failed: breakers decide on local state alone.",
        );
        out.sample(
            "hystrix_state_store_degraded",
            &[],
            u8::from(store.degraded),
        );
    }
    out.text
}
