//! Prometheus text exposition (format 0.0.4) rendered from registry snapshots, with the names in
//! the table below. The text is written by the `prometheus-client` crate (its custom-collector
//! API: each scrape reads the registry's snapshots), which also escapes label values.
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
//! library measures them; see [`CumulativeHistogram`](hystrix::CumulativeHistogram)). Being
//! cumulative counts, they sum across instances: `histogram_quantile(0.99, sum by (command,
//! le) (rate(hystrix_command_latency_execute_seconds_bucket[1m])))` is a fleet's p99. The
//! execution histogram takes one value per execution whose user code started (a retried
//! execution counts once; each attempt is an event of `hystrix_command_events_total`), as the
//! rolling percentiles take them, the total histogram one per execution not refused before
//! any run, its fallback included. A command has no histogram series until it has a latency,
//! and none while `metrics.rollingPercentile.enabled` is false (nothing is measured): no series
//! is ever `NaN`. The rolling percentiles are in the `/hystrix.stream`, as Hystrix's dashboard
//! shows them.
//!
//! Collapsers: `hystrix_collapser_batch_size` counts batches by size (in requests, the bounds
//! of [`BATCH_SIZE_BUCKET_BOUNDS`](hystrix::metrics::BATCH_SIZE_BUCKET_BOUNDS)), since the key
//! was first used; no series while `metrics.rollingPercentile.enabled` is false. The rolling
//! batch-size percentiles are in the `/hystrix.stream`.
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

use std::fmt;

use hystrix::Status;
use hystrix::collapser::CollapserEvent;
use hystrix::metrics::CumulativeHistogram;
use hystrix::{EventType, Registry};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;

/// Events that are never counted (so never exported).
const NOT_COUNTED: [EventType; 2] = [EventType::FallbackDisabled, EventType::CommandMaxActive];

/// The labels of a command's series.
type CommandLabels<'a> = [(&'static str, &'a str); 2];

/// A gauge read from a part `S` of a command's metrics: name, help, value.
type Gauge<S> = (&'static str, &'static str, fn(&S) -> f64);

#[derive(Debug)]
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

impl Command {
    fn labels(&self) -> CommandLabels<'_> {
        [("command", &self.key), ("group", &self.group)]
    }
}

/// The families being written, through prometheus-client's encoder.
struct Families<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl Families<'_> {
    /// Starts the family `name` (a counter's name without its `_total`, which the encoder
    /// adds) and writes a sample for each of `items` that `sample` encodes.
    fn family<T>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        items: impl IntoIterator<Item = T>,
        mut sample: impl FnMut(&mut MetricEncoder<'_>, T) -> fmt::Result,
    ) -> fmt::Result {
        let mut family = self.encoder.encode_descriptor(name, help, None, kind)?;
        for item in items {
            sample(&mut family, item)?;
        }
        Ok(())
    }
}

/// One gauge sample of `labels`.
fn gauge(
    family: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    family.encode_family(labels)?.encode_gauge(&value)
}

/// One counter sample of `labels`.
fn counter(
    family: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    value: u64,
) -> fmt::Result {
    family
        .encode_family(labels)?
        .encode_counter::<NoLabelSet, _, f64>(&value, None)
}

/// One histogram of `labels`, its bounds and sum divided by `unit` (1000 for ms as seconds).
fn histogram(
    family: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    histogram: &CumulativeHistogram,
    unit: f64,
) -> fmt::Result {
    // The encoder takes each bucket's own count and adds them up.
    let mut below = 0;
    let buckets: Vec<(f64, u64)> = histogram
        .buckets()
        .map(|(bound, at_most)| {
            let own = at_most - below;
            below = at_most;
            (bound as f64 / unit, own)
        })
        .collect();
    family
        .encode_family(labels)?
        .encode_histogram::<NoLabelSet>(
            histogram.sum() as f64 / unit,
            histogram.count(),
            &buckets,
            None,
        )
}

/// Writes each of `list`'s gauges for the commands that have the part (`pick`): a command
/// without it has no series (not a 0).
fn gauges<S>(
    out: &mut Families<'_>,
    commands: &[Command],
    list: &[Gauge<S>],
    pick: impl Fn(&Command) -> Option<S>,
) -> fmt::Result {
    for (name, help, value) in list {
        out.family(
            name,
            help,
            MetricType::Gauge,
            commands,
            |family, c| match pick(c) {
                Some(part) => gauge(family, &c.labels(), value(&part)),
                None => Ok(()),
            },
        )?;
    }
    Ok(())
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
        .collect()
}

/// One scrape of a registry as a prometheus-client collector: the commands' snapshots, read
/// before, and the registry for the rest.
#[derive(Debug)]
struct Scrape {
    registry: Registry,
    commands: Vec<Command>,
}

impl Collector for Scrape {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut out = Families { encoder };
        write_commands(&mut out, &self.commands)?;
        write_thread_pools(&mut out, &self.registry)?;
        write_collapsers(&mut out, &self.registry)?;
        write_state_store(&mut out, &self.registry)
    }
}

/// Bytes of text per command, about (a command with none of the optional series writes about
/// 7 KiB): the text is made this large at once rather than grown while written.
const BYTES_PER_COMMAND: usize = 8 * 1024;

/// Renders the registry as Prometheus text (format 0.0.4).
pub(crate) fn render(registry: &Registry) -> String {
    let commands = commands(registry);
    let mut text = String::with_capacity(4096 + commands.len() * BYTES_PER_COMMAND);
    let mut exporter = prometheus_client::registry::Registry::default();
    exporter.register_collector(Box::new(Scrape {
        registry: registry.clone(),
        commands,
    }));
    // Writing to a String cannot fail, nor can our collector.
    if let Err(err) = prometheus_client::encoding::prometheus_text::encode(&mut text, &exporter) {
        tracing::error!(%err, "rendering /metrics failed");
    }
    text
}

fn write_commands(out: &mut Families<'_>, commands: &[Command]) -> fmt::Result {
    let events: Vec<(EventType, String)> = EventType::ALL
        .into_iter()
        .filter(|event| !NOT_COUNTED.contains(event))
        .map(|event| (event, event.name().to_ascii_lowercase()))
        .collect();
    out.family(
        "hystrix_command_events",
        "Command execution events since the key was created, by Hystrix event type.",
        MetricType::Counter,
        commands,
        |family, c| {
            for (event, name) in &events {
                let labels = [("command", &*c.key), ("group", &c.group), ("event", name)];
                counter(family, &labels, c.metrics.cumulative_count(*event))?;
            }
            Ok(())
        },
    )?;

    type Pick = fn(&hystrix::CommandMetrics) -> Option<CumulativeHistogram>;
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
    for (name, help, pick) in latencies {
        out.family(name, help, MetricType::Histogram, commands, |family, c| {
            // No series until the command has a latency (and none with latencies off).
            match pick(&c.metrics).filter(|h| h.count() > 0) {
                Some(h) => histogram(family, &c.labels(), &h, 1000.0),
                None => Ok(()),
            }
        })?;
    }

    out.family(
        "hystrix_command_concurrent_executions",
        "Executions whose user code is running now.",
        MetricType::Gauge,
        commands,
        |family, c| {
            let running = c.metrics.current_concurrent_execution_count();
            gauge(family, &c.labels(), running)
        },
    )?;
    out.family(
        "hystrix_command_error_ratio",
        "Errors / requests over the breaker's rolling health window (0 with no requests); with \
         a breaker per key, over the rolling window of all keys.",
        MetricType::Gauge,
        commands,
        |family, c| {
            let health = c.health;
            gauge(
                family,
                &c.labels(),
                ratio(health.error_count, health.total_requests),
            )
        },
    )?;
    let slow_calls: [Gauge<hystrix::HealthCounts>; 1] = [(
        "hystrix_command_slow_call_ratio",
        "Commands with slow calls: slow calls / requests over the breaker's rolling health \
         window (0 with no requests); with a breaker per key, over the rolling window of all \
         keys.",
        |h| ratio(h.slow_call_count, h.total_requests),
    )];
    gauges(out, commands, &slow_calls, |c| {
        c.slow_calls.then_some(c.health)
    })?;

    let chaos: [Gauge<bool>; 1] = [(
        "hystrix_command_chaos_enabled",
        "Commands whose chaos is on (chaos.enabled): 1 while a chaos rate injects faults, \
         delays or hangs into its attempts, 0 while none does.",
        |injects| f64::from(u8::from(*injects)),
    )];
    gauges(out, commands, &chaos, |c| c.chaos)?;

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
    gauges(out, commands, &adaptive, |c| c.metrics.adaptive_limit())?;
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
    gauges(out, commands, &throttle, |c| c.metrics.throttle())?;

    type ClassValue = fn(&hystrix::ClassCounts) -> u64;
    let by_class: [(&str, MetricType, &str, ClassValue); 3] = [
        (
            "hystrix_command_priority_in_flight",
            MetricType::Gauge,
            "Commands with a priority reserve: executions of the class holding a permit.",
            |c| u64::from(c.in_flight),
        ),
        (
            "hystrix_command_priority_admitted",
            MetricType::Counter,
            "Commands with a priority reserve: executions of the class admitted (counted while \
             a reserve is set).",
            |c| c.admitted,
        ),
        (
            "hystrix_command_priority_refused",
            MetricType::Counter,
            "Commands with a priority reserve: executions of the class refused a permit \
             (counted while a reserve is set).",
            |c| c.refused,
        ),
    ];
    for (name, kind, help, value) in by_class {
        out.family(name, help, kind, commands, |family, c| {
            let Some(priorities) = c.metrics.priorities() else {
                return Ok(());
            };
            for class in hystrix::Priority::ALL {
                let class_name = class.name().to_ascii_lowercase();
                let labels = [
                    ("command", &*c.key),
                    ("group", &c.group),
                    ("class", &class_name),
                ];
                let v = value(&priorities.class(class));
                if kind == MetricType::Counter {
                    counter(family, &labels, v)?;
                } else {
                    gauge(family, &labels, v)?;
                }
            }
            Ok(())
        })?;
    }

    out.family(
        "hystrix_circuit_breaker_open_keys",
        "Commands with a breaker per key: how many keys' breakers are open (OPEN or HALF_OPEN).",
        MetricType::Gauge,
        commands,
        |family, c| match c.open_keys {
            Some(open) => gauge(family, &c.labels(), open),
            None => Ok(()),
        },
    )?;
    out.family(
        "hystrix_circuit_breaker_state",
        "1 for the circuit breaker's current state, 0 for the others.",
        MetricType::Gauge,
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
                let labels = [("command", &*c.key), ("group", &c.group), ("state", state)];
                gauge(family, &labels, u32::from(c.state == state))?;
            }
            Ok(())
        },
    )
}

fn write_thread_pools(out: &mut Families<'_>, registry: &Registry) -> fmt::Result {
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
        out.family(
            name,
            help,
            MetricType::Gauge,
            &pools,
            |family, (key, m, p)| gauge(family, &[("thread_pool", key)], value(m, p)),
        )?;
    }
    type PoolCounter = fn(&hystrix::ThreadPoolMetrics) -> u64;
    let counters: [(&str, &str, PoolCounter); 2] = [
        (
            "hystrix_thread_pool_executions",
            "Commands executed on the pool since it was created.",
            |m| m.cumulative_count_threads_executed,
        ),
        (
            "hystrix_thread_pool_rejections",
            "Commands the pool refused since it was created.",
            |m| m.cumulative_count_command_rejections,
        ),
    ];
    for (name, help, value) in counters {
        out.family(
            name,
            help,
            MetricType::Counter,
            &pools,
            |family, (key, m, _)| counter(family, &[("thread_pool", key)], value(m)),
        )?;
    }
    Ok(())
}

fn write_collapsers(out: &mut Families<'_>, registry: &Registry) -> fmt::Result {
    let collapsers: Vec<_> = registry
        .collapser_keys()
        .iter()
        .filter_map(|key| {
            let metrics = registry.collapser_metrics(key.as_str())?;
            Some((key.as_str().to_owned(), metrics))
        })
        .collect();
    for (name, help, event) in [
        (
            "hystrix_collapser_batches",
            "Batches executed.",
            CollapserEvent::BatchExecuted,
        ),
        (
            "hystrix_collapser_requests_batched",
            "Requests added to a batch.",
            CollapserEvent::AddedToBatch,
        ),
        (
            "hystrix_collapser_responses_from_cache",
            "Requests answered from the collapser's request cache.",
            CollapserEvent::ResponseFromCache,
        ),
    ] {
        out.family(
            name,
            help,
            MetricType::Counter,
            &collapsers,
            |family, (key, m)| counter(family, &[("collapser", key)], m.cumulative_count(event)),
        )?;
    }
    out.family(
        "hystrix_collapser_batch_size",
        "Requests per batch, since the collapser key was first used.",
        MetricType::Histogram,
        &collapsers,
        |family, (key, m)| match m.batch_size_histogram() {
            Some(sizes) => histogram(family, &[("collapser", key)], &sizes, 1.0),
            None => Ok(()),
        },
    )
}

/// The shared state store (`Registry::state_store_status`): absent without one.
fn write_state_store(out: &mut Families<'_>, registry: &Registry) -> fmt::Result {
    let Some(store) = registry.state_store_status() else {
        return Ok(());
    };
    out.family(
        "hystrix_state_store_errors",
        "State store calls that failed or outlived the store timeout.",
        MetricType::Counter,
        [store.errors_total],
        |family, errors| family.encode_counter::<NoLabelSet, _, f64>(&errors, None),
    )?;
    out.family(
        "hystrix_state_store_degraded",
        "1 while the latest sync round failed: breakers decide on local state alone.",
        MetricType::Gauge,
        [store.degraded],
        |family, degraded| family.encode_gauge(&u32::from(degraded)),
    )
}
