//! The scenarios of BENCH_PLAN §8, one function per implementation, with each peer configured
//! as in the plan's table. Semantic differences that make a row not like-for-like are noted
//! next to the configuration that has them.
//!
//! The inner operation is the same everywhere: a closure or ready future returning `u64`
//! (`Ok::<u64, Never>`), or the tower service [`echo`]. nasa hystrix is the exception: its
//! commands only run futures of an axum `Response`, so its inner operation builds one, and the
//! "axum Response future" baseline in D gives that cost to subtract.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use tower::{Layer, ServiceBuilder, service_fn};

use super::{
    HANG, Never, Runner, Scenario, VALUE, WindowFill, Workers, async_runner, echo, echo_or_hang,
    leak, park, runtime, sync_runner, tower_call, tower_runner,
};

pub const A: &str = "A sync closed success";
pub const B: &str = "B async closed success";
pub const C: &str = "C open reject";
pub const C2: &str = "C' open reject + fallback";
pub const D: &str = "D bulkhead permit free";
pub const D2: &str = "D' bulkhead full reject";
pub const E: &str = "E full command success";
pub const F: &str = "F scaling closed success";
pub const H: &str = "H calls in window";

/// A unique suffix for command keys and names (nasa hystrix keeps a process-wide table).
fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A registry of its own for each scenario (keys, breakers and metrics stay apart), kept for the
/// rest of the process.
fn registry() -> &'static hystrix::Registry {
    leak(hystrix::Registry::new())
}

fn ok() -> Result<u64, Never> {
    Ok(black_box(VALUE))
}

/// hystrix-rs configurations.
mod ours {
    use std::time::Duration;

    use hystrix::{Command, IsolationStrategy, Registry};

    /// A, B, F, H: Hystrix's breaker defaults written out (10 s window in 10 buckets, volume 20,
    /// 50 %, sleep 5 s), SEMAPHORE isolation with 10 permits, timeout off, no listeners.
    /// Latency percentiles stay on (the default).
    pub fn closed(registry: &Registry, key: &str) -> Command {
        base(key)
            .timeout_enabled(false)
            .build_in(registry)
            .expect("a valid command")
    }

    /// A with retry on: as [`closed`], with `retry.maxAttempts` 3 and the default budget (a
    /// retryable run that succeeds at once: the cost of having retry enabled).
    pub fn retrying(registry: &Registry, key: &str) -> Command {
        base(key)
            .timeout_enabled(false)
            .property("retry.maxAttempts", 3)
            .build_in(registry)
            .expect("a valid command")
    }

    /// A, B with hedging on: up to 2 attempts, the second after 100 ms (a run that succeeds
    /// at once never hedges; this measures what arming the race costs).
    pub fn hedging(registry: &Registry, key: &str) -> Command {
        base(key)
            .timeout_enabled(false)
            .property("hedging.maxAttempts", 2)
            .property("hedging.delayInMilliseconds", 100)
            .build_in(registry)
            .expect("a valid command")
    }

    /// C, C': tripped by errors, as recloser and failsafe are (state OPEN for a 1 h sleep
    /// window): failing runs until the health check (every 500 ms by default) sees 20 calls
    /// and 50 % errors. Not `force_open()` and not the forceOpen flag: a manual opening has
    /// no failure to report, so its rejections skip cloning the trip cause (an `Arc`).
    pub fn open(registry: &Registry, key: &str) -> Command {
        let command = base(key)
            .timeout_enabled(false)
            .circuit_breaker_sleep_window(Duration::from_secs(3600))
            .build_in(registry)
            .expect("a valid command");
        trip_by_errors(&command);
        command
    }

    /// Fails executions of `command` until its breaker opens (at most 10 s).
    pub fn trip_by_errors(command: &Command) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !command.is_circuit_breaker_open() {
            assert!(
                std::time::Instant::now() < deadline,
                "ours: failures did not trip the breaker"
            );
            for _ in 0..25 {
                let _ = command.run(|| Err::<u64, &str>("down")).execute();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            matches!(
                command.circuit_breaker().trip_cause(),
                Some(hystrix::TripCause::Message(_) | hystrix::TripCause::Failure(_))
            ),
            "ours: the breaker was tripped by failures"
        );
    }

    /// D, D': the semaphore bulkhead alone (10 permits, timeout off). The breaker is disabled
    /// (`circuitBreaker.enabled = false`): the peers compared here have no breaker, and D's
    /// rejections would otherwise trip it and turn D' into short-circuits.
    pub fn bulkhead(registry: &Registry, key: &str) -> Command {
        base(key)
            .timeout_enabled(false)
            .circuit_breaker_enabled(false)
            .build_in(registry)
            .expect("a valid command")
    }

    /// D with an adaptive concurrency limit (`algorithm`, initial limit 20) capped by the same
    /// 10 permits: what adaptive admission, release and the sample add to the fixed semaphore.
    pub fn adaptive(registry: &Registry, key: &str, algorithm: &str) -> Command {
        base(key)
            .timeout_enabled(false)
            .circuit_breaker_enabled(false)
            .property("execution.isolation.adaptive.enabled", true)
            .property("execution.isolation.adaptive.algorithm", algorithm)
            .build_in(registry)
            .expect("a valid command")
    }

    /// A with a richer breaker (issue 25): as [`closed`], with what `with` adds (a window
    /// kind, slow calls).
    pub fn closed_with(
        registry: &Registry,
        key: &str,
        with: fn(hystrix::CommandBuilder) -> hystrix::CommandBuilder,
    ) -> Command {
        with(base(key).timeout_enabled(false))
            .build_in(registry)
            .expect("a valid command")
    }

    /// E: breaker (defaults) + semaphore 10 + timeout 1 s; the fallback is given per call.
    pub fn full(registry: &Registry, key: &str) -> Command {
        base(key)
            .timeout_enabled(true)
            .timeout(Duration::from_secs(1))
            .build_in(registry)
            .expect("a valid command")
    }

    fn base(key: &str) -> hystrix::CommandBuilder {
        Command::builder(key)
            .group("Peers")
            .isolation(IsolationStrategy::Semaphore)
            .semaphore_max_concurrent_requests(10)
            .circuit_breaker_request_volume_threshold(20)
            .circuit_breaker_error_threshold_percentage(50)
            .circuit_breaker_sleep_window(Duration::from_secs(5))
            .property("metrics.rollingStats.timeInMilliseconds", 10_000u32)
            .property("metrics.rollingStats.numBuckets", 10u32)
    }
}

/// tower-resilience 0.14 configurations (features `metrics`/`tracing` off, no listeners).
///
/// Semantics: its count-based window is cumulative (a count since the last state change, not
/// the last 100 calls), and its time-based window keeps one record per call and rescans them
/// all on every call (O(calls in the window), see H).
mod tr {
    use std::time::Duration;

    use tower_resilience_bulkhead::BulkheadLayer;
    use tower_resilience_circuitbreaker::{CircuitBreakerLayer, SlidingWindowType};
    use tower_resilience_timelimiter::TimeLimiterLayer;

    /// B, E, F: count-based, 100 calls, 50 %, at least 20 calls, 5 s open, 1 half-open permit.
    pub fn cb_count() -> CircuitBreakerLayer {
        CircuitBreakerLayer::builder()
            .failure_rate_threshold(0.5)
            .sliding_window_type(SlidingWindowType::CountBased)
            .sliding_window_size(100)
            .minimum_number_of_calls(20)
            .wait_duration_in_open(Duration::from_secs(5))
            .permitted_calls_in_half_open(1)
            .build()
            .expect("a valid breaker")
    }

    /// H: time-based window, otherwise as [`cb_count`].
    pub fn cb_time(window: Duration) -> CircuitBreakerLayer {
        CircuitBreakerLayer::builder()
            .failure_rate_threshold(0.5)
            .sliding_window_type(SlidingWindowType::TimeBased)
            .sliding_window_duration(window)
            .minimum_number_of_calls(20)
            .wait_duration_in_open(Duration::from_secs(5))
            .permitted_calls_in_half_open(1)
            .build()
            .expect("a valid breaker")
    }

    /// C, C': `build_with_handle` + `force_open`, with a 1 h open wait (as ours).
    pub fn cb_forced_open(rt: &tokio::runtime::Runtime) -> CircuitBreakerLayer {
        let (layer, handle) = CircuitBreakerLayer::builder()
            .failure_rate_threshold(0.5)
            .sliding_window_size(100)
            .minimum_number_of_calls(20)
            .wait_duration_in_open(Duration::from_secs(3600))
            .permitted_calls_in_half_open(1)
            .build_with_handle()
            .expect("a valid breaker");
        rt.block_on(handle.force_open());
        assert!(handle.is_open(), "tower-resilience: the breaker is open");
        layer
    }

    /// D, D', E (extra rows): 10 concurrent calls, `max_wait` 0 (`reject_when_full`). Its
    /// zero wait is a tokio timeout of zero around the permit acquisition: when full, the
    /// rejection comes when the timer driver next fires (about 1 ms later), not at once.
    pub fn bulkhead() -> BulkheadLayer {
        BulkheadLayer::builder()
            .max_concurrent_calls(10)
            .reject_when_full()
            .build()
            .expect("a valid bulkhead")
    }

    /// D, D', E: its best configuration for rejecting at once: 10 concurrent calls in
    /// backpressure mode (the permit is taken in `poll_ready`, which is pending while the
    /// bulkhead is full), under tower's `LoadShed` (which turns a pending `poll_ready` into an
    /// immediate `Overloaded` error): the standard tower composition for shedding at once,
    /// with no timer (its own docs point backpressure mode at `ready().await` callers).
    pub fn load_shed_bulkhead() -> tower::ServiceBuilder<
        tower::layer::util::Stack<
            BulkheadLayer,
            tower::layer::util::Stack<
                tower::load_shed::LoadShedLayer,
                tower::layer::util::Identity,
            >,
        >,
    > {
        tower::ServiceBuilder::new().load_shed().layer(
            BulkheadLayer::builder()
                .max_concurrent_calls(10)
                .backpressure()
                .build()
                .expect("a valid bulkhead"),
        )
    }

    /// E: 1 s, cancelling the call at the deadline (the default).
    pub fn time_limiter() -> TimeLimiterLayer {
        TimeLimiterLayer::builder()
            .timeout_duration(Duration::from_secs(1))
            .build()
    }
}

/// recloser 1.4 (feature `tracing` off). Semantics: its ring buffer keeps the last
/// `closed_len` outcomes (no time window), and a half-open recloser admits every call while it
/// fills its half-open ring (no trial budget).
mod recloser_cfg {
    use std::time::Duration;

    use recloser::Recloser;

    /// A, B, F: ring of 100 calls, 50 % error rate, 5 s open.
    pub fn closed() -> Recloser {
        Recloser::custom()
            .closed_len(100)
            .error_rate(0.5)
            .open_wait(Duration::from_secs(5))
            .build()
    }

    /// C: `closed_len(1)`, tripped by errors, open for 1 h.
    pub fn open() -> Recloser {
        let recloser = Recloser::custom()
            .closed_len(1)
            .error_rate(0.5)
            .open_wait(Duration::from_secs(3600))
            .build();
        for _ in 0..10 {
            if matches!(
                recloser.call(|| Ok::<u64, ()>(0)),
                Err(recloser::Error::Rejected)
            ) {
                return recloser;
            }
            let _ = recloser.call(|| Err::<u64, ()>(()));
        }
        panic!("recloser did not open");
    }
}

/// failsafe 1.3 (default feature `futures-support`; it has no metrics/tracing features).
/// Semantics: a half-open failsafe breaker admits every call, and one success closes it.
mod failsafe_cfg {
    use std::time::Duration;

    use failsafe::failure_policy::{ConsecutiveFailures, SuccessRateOverTimeWindow};
    use failsafe::{Config, StateMachine, backoff};

    pub type Consecutive = StateMachine<ConsecutiveFailures<backoff::Constant>, ()>;
    pub type Rate = StateMachine<SuccessRateOverTimeWindow<backoff::Constant>, ()>;

    /// A (a), B, F: 20 consecutive failures trip it, 5 s open.
    pub fn consecutive() -> Consecutive {
        Config::new()
            .failure_policy(failsafe::failure_policy::consecutive_failures(
                20,
                backoff::constant(Duration::from_secs(5)),
            ))
            .build()
    }

    /// A (b), B, F, H: success rate under 0.5 over a 10 s window (an EMA), at least 20 calls,
    /// 5 s open: the closest to Hystrix's rule.
    pub fn rate() -> Rate {
        Config::new()
            .failure_policy(failsafe::failure_policy::success_rate_over_time_window(
                0.5,
                20,
                Duration::from_secs(10),
                backoff::constant(Duration::from_secs(5)),
            ))
            .build()
    }

    /// C: one failure trips it, open for 1 h.
    pub fn open() -> Consecutive {
        let breaker = Config::new()
            .failure_policy(failsafe::failure_policy::consecutive_failures(
                1,
                backoff::constant(Duration::from_secs(3600)),
            ))
            .build();
        for _ in 0..10 {
            if matches!(
                failsafe::CircuitBreaker::call(&breaker, || Ok::<u64, ()>(0)),
                Err(failsafe::Error::Rejected)
            ) {
                return breaker;
            }
            let _ = failsafe::CircuitBreaker::call(&breaker, || Err::<u64, ()>(()));
        }
        panic!("failsafe did not open");
    }
}

/// nasa hystrix (crates.io `hystrix` 2.0): a semaphore bulkhead, a timeout and rolling metrics
/// per command, no circuit breaker (so E is a lower bound for it). Its commands run futures of
/// an axum `Response`.
mod nasa {
    use std::sync::Arc;
    use std::time::Duration;

    /// D, D': `Command::monitor(name, group, Some(10), None, None)`: 10 permits, no timeout.
    pub fn bulkhead(name: &str) -> Arc<nasa_hystrix::Command> {
        nasa_hystrix::Command::monitor(name, "Peers", Some(10), None, None)
    }

    /// E: `Command::new(name, group, 10, 1 s)`.
    pub fn full(name: &str) -> Arc<nasa_hystrix::Command> {
        nasa_hystrix::Command::new(name, "Peers", 10, Duration::from_secs(1))
    }
}

/// nasa hystrix's inner operation, and its baseline.
fn ok_response() -> Response {
    let _ = black_box(VALUE);
    axum::http::StatusCode::OK.into_response()
}

/// Every scenario, in report order.
pub fn all() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.extend(sync_closed());
    all.extend(async_closed());
    all.extend(open_reject());
    all.extend(open_fallback());
    all.extend(bulkhead_free());
    all.extend(bulkhead_full());
    all.extend(full_command());
    all.extend(scaling());
    all.extend(window());
    // Appended after every other row: `instructions run INDEX` keeps the indices above.
    all.extend(breaker_windows());
    all
}

fn sync_closed() -> Vec<Scenario> {
    vec![
        Scenario::new(A, "baseline: bare closure", || sync_runner(ok)),
        Scenario::new(A, "baseline: Instant::now()", || sync_runner(Instant::now)),
        Scenario::new(A, "ours: execute", || {
            let cmd = ours::closed(registry(), "A");
            sync_runner(move || cmd.run(ok).execute())
        })
        .zero_alloc(),
        Scenario::new(
            A,
            "ours: run_retryable execute (retry on, succeeds at once)",
            || {
                let cmd = ours::retrying(registry(), "ARetry");
                sync_runner(move || cmd.run_retryable(|| ok).execute())
            },
        ),
        Scenario::new(A, "recloser: closed_len(100)", || {
            let r = recloser_cfg::closed();
            sync_runner(move || r.call(ok))
        }),
        Scenario::new(A, "failsafe: consecutive_failures(20)", || {
            let cb = failsafe_cfg::consecutive();
            sync_runner(move || failsafe::CircuitBreaker::call(&cb, ok))
        }),
        Scenario::new(A, "failsafe: success_rate(0.5, 20, 10 s)", || {
            let cb = failsafe_cfg::rate();
            sync_runner(move || failsafe::CircuitBreaker::call(&cb, ok))
        }),
        // tower-resilience: async only (no sync call), so no A row.
    ]
}

fn async_closed() -> Vec<Scenario> {
    vec![
        Scenario::new(B, "baseline: bare ready future", || {
            async_runner(runtime(), || async { ok() })
        }),
        Scenario::new(B, "baseline: bare tower service", || {
            tower_runner(runtime(), service_fn(echo), VALUE)
        }),
        Scenario::new(B, "ours: execute_async", || {
            let cmd = leak(ours::closed(registry(), "B"));
            async_runner(runtime(), move || {
                cmd.run_async(async { ok() }).execute_async()
            })
        })
        .zero_alloc(),
        Scenario::new(
            B,
            "ours: run_async_retryable execute_async (hedging on, succeeds at once)",
            || {
                let cmd = leak(ours::hedging(registry(), "BHedge"));
                async_runner(runtime(), move || {
                    cmd.run_async_retryable(|| async { ok() }).execute_async()
                })
            },
        ),
        Scenario::new(B, "ours: HystrixLayer", || {
            let cmd = ours::closed(registry(), "BLayer");
            let svc = hystrix::tower::HystrixLayer::new(cmd).layer(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        })
        .zero_alloc(),
        // The time-based variant only has a cost per calls in the window, see H.
        Scenario::new(B, "tower-resilience: CB count(100)", || {
            tower_runner(runtime(), tr::cb_count().layer(service_fn(echo)), VALUE)
        }),
        // recloser and failsafe have no tower layer: their future wrappers are measured.
        Scenario::new(B, "recloser: AsyncRecloser closed_len(100)", || {
            let r = recloser::AsyncRecloser::from(recloser_cfg::closed());
            async_runner(runtime(), move || r.call(async { ok() }))
        }),
        Scenario::new(B, "failsafe: futures consecutive_failures(20)", || {
            let cb = failsafe_cfg::consecutive();
            async_runner(runtime(), move || {
                failsafe::futures::CircuitBreaker::call(&cb, async { ok() })
            })
        }),
        Scenario::new(B, "failsafe: futures success_rate(0.5, 20, 10 s)", || {
            let cb = failsafe_cfg::rate();
            async_runner(runtime(), move || {
                failsafe::futures::CircuitBreaker::call(&cb, async { ok() })
            })
        }),
    ]
}

fn open_reject() -> Vec<Scenario> {
    vec![
        Scenario::new(C, "ours: execute", || {
            let cmd = ours::open(registry(), "C");
            assert!(cmd.run(ok).execute().is_err(), "ours rejects");
            sync_runner(move || cmd.run(ok).execute())
        })
        .zero_alloc(),
        Scenario::new(C, "ours: HystrixLayer", || {
            let cmd = ours::open(registry(), "CLayer");
            let svc = hystrix::tower::HystrixLayer::new(cmd).layer(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        })
        .zero_alloc(),
        Scenario::new(C, "recloser: closed_len(1) tripped", || {
            let r = recloser_cfg::open();
            sync_runner(move || r.call(ok))
        }),
        Scenario::new(C, "recloser: AsyncRecloser tripped", || {
            let r = recloser::AsyncRecloser::from(recloser_cfg::open());
            async_runner(runtime(), move || r.call(async { ok() }))
        }),
        Scenario::new(C, "failsafe: consecutive_failures(1) tripped", || {
            let cb = failsafe_cfg::open();
            sync_runner(move || failsafe::CircuitBreaker::call(&cb, ok))
        }),
        Scenario::new(C, "tower-resilience: CB force_open", || {
            let rt = runtime();
            let mut svc = tr::cb_forced_open(&rt).layer(service_fn(echo));
            assert!(
                rt.block_on(tower_call(&mut svc, VALUE)).is_err(),
                "tower-resilience rejects"
            );
            tower_runner(rt, svc, VALUE)
        }),
    ]
}

fn open_fallback() -> Vec<Scenario> {
    vec![
        Scenario::new(C2, "ours: execute + fallback", || {
            let cmd = ours::open(registry(), "C2");
            sync_runner(move || cmd.run(ok).fallback(|_| Ok::<u64, Never>(0)).execute())
        }),
        Scenario::new(C2, "ours: HystrixLayer fallback_value", || {
            let cmd = ours::open(registry(), "C2Layer");
            let svc = hystrix::tower::HystrixLayer::new(cmd)
                .fallback_value(0u64)
                .layer(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        }),
        Scenario::new(
            C2,
            "tower-resilience: Fallback value over CB force_open",
            || {
                type Inner = tower_resilience_circuitbreaker::CircuitBreakerError<Never>;
                let rt = runtime();
                let mut svc = ServiceBuilder::new()
                    .layer(tower_resilience_fallback::FallbackLayer::<u64, u64, Inner>::value(0))
                    .layer(tr::cb_forced_open(&rt))
                    .service(service_fn(echo));
                assert_eq!(
                    rt.block_on(tower_call(&mut svc, VALUE)).ok(),
                    Some(0),
                    "fallback answers"
                );
                tower_runner(rt, svc, VALUE)
            },
        ),
        // Its best configuration: the breaker's own fallback (`with_fallback`, answering only
        // while open, from a boxed future), instead of a Fallback layer over the breaker's
        // error.
        Scenario::new(C2, "tower-resilience: CB force_open with_fallback", || {
            let rt = runtime();
            let mut svc = tr::cb_forced_open(&rt)
                .layer_fn(service_fn(echo))
                .with_fallback(|_: u64| -> BoxFuture<'static, Result<u64, Never>> {
                    Box::pin(async { Ok(0) })
                });
            assert_eq!(
                rt.block_on(tower_call(&mut svc, VALUE)).ok(),
                Some(0),
                "fallback answers"
            );
            tower_runner(rt, svc, VALUE)
        }),
        // recloser, failsafe: no fallback.
    ]
}

fn bulkhead_free() -> Vec<Scenario> {
    vec![
        Scenario::new(D, "baseline: tokio Semaphore::try_acquire", || {
            let sem = tokio::sync::Semaphore::new(10);
            sync_runner(move || sem.try_acquire().is_ok())
        }),
        Scenario::new(
            D,
            "baseline: axum Response future (nasa's inner op)",
            || async_runner(runtime(), || async { ok_response() }),
        ),
        Scenario::new(D, "ours: execute", || {
            let cmd = ours::bulkhead(registry(), "D");
            sync_runner(move || cmd.run(ok).execute())
        }),
        Scenario::new(D, "ours: execute (adaptive limit, AIMD)", || {
            let cmd = ours::adaptive(registry(), "DAimd", "AIMD");
            sync_runner(move || cmd.run(ok).execute())
        }),
        Scenario::new(D, "ours: execute (adaptive limit, GRADIENT2)", || {
            let cmd = ours::adaptive(registry(), "DGradient2", "GRADIENT2");
            sync_runner(move || cmd.run(ok).execute())
        }),
        Scenario::new(D, "ours: execute_async", || {
            let cmd = leak(ours::bulkhead(registry(), "DAsync"));
            async_runner(runtime(), move || {
                cmd.run_async(async { ok() }).execute_async()
            })
        }),
        Scenario::new(D, "ours: HystrixLayer", || {
            let cmd = ours::bulkhead(registry(), "DLayer");
            let svc = hystrix::tower::HystrixLayer::new(cmd).layer(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        }),
        Scenario::new(
            D,
            "tower-resilience: LoadShed + Bulkhead(10, backpressure)",
            || {
                let svc = tr::load_shed_bulkhead().service(service_fn(echo));
                tower_runner(runtime(), svc, VALUE)
            },
        ),
        Scenario::new(D, "tower-resilience: Bulkhead(10, max_wait 0)", || {
            tower_runner(runtime(), tr::bulkhead().layer(service_fn(echo)), VALUE)
        }),
        Scenario::new(D, "tower: LoadShed + GlobalConcurrencyLimit(10)", || {
            let svc = ServiceBuilder::new()
                .load_shed()
                .layer(tower::limit::GlobalConcurrencyLimitLayer::new(10))
                .service(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        }),
        Scenario::new(D, "nasa hystrix: monitor(Some(10), None)", || {
            let cmd = nasa::bulkhead(&unique("PeersD"));
            async_runner(runtime(), move || {
                Arc::clone(&cmd).run_fn(|| async { ok_response() })
            })
        }),
    ]
}

fn bulkhead_full() -> Vec<Scenario> {
    vec![
        Scenario::new(D2, "baseline: try_acquire on a full semaphore", || {
            let sem = tokio::sync::Semaphore::new(0);
            sync_runner(move || sem.try_acquire().is_ok())
        }),
        Scenario::new(D2, "ours: execute", || {
            let (cmd, holders) = ours_full_bulkhead("D2");
            sync_runner(move || {
                let _held = &holders;
                cmd.run(ok).execute()
            })
        }),
        Scenario::new(D2, "ours: execute_async", || {
            let (cmd, holders) = ours_full_bulkhead("D2Async");
            async_runner(runtime(), move || {
                let _held = &holders;
                cmd.run_async(async { ok() }).execute_async()
            })
        }),
        Scenario::new(D2, "ours: HystrixLayer", || {
            let (cmd, holders) = ours_full_bulkhead("D2Layer");
            let svc = hystrix::tower::HystrixLayer::new(cmd.clone()).layer(service_fn(echo));
            let run = tower_runner(runtime(), svc, VALUE);
            keep_alive(run, holders)
        }),
        Scenario::new(
            D2,
            "tower-resilience: LoadShed + Bulkhead(10, backpressure)",
            || full_tower_runner(tr::load_shed_bulkhead().service(service_fn(echo_or_hang))),
        ),
        // Not its best configuration: kept to show what `max_wait 0` costs when full.
        Scenario::new(
            D2,
            "tower-resilience: Bulkhead(10, max_wait 0), rejects on a ~1 ms timer",
            || full_tower_runner(tr::bulkhead().layer(service_fn(echo_or_hang))),
        )
        // Each rejection waits for its zero timeout to fire (~1 ms, see `tr::bulkhead`).
        .max_calls(1_000),
        Scenario::new(D2, "tower: LoadShed + GlobalConcurrencyLimit(10)", || {
            full_tower_runner(
                ServiceBuilder::new()
                    .load_shed()
                    .layer(tower::limit::GlobalConcurrencyLimitLayer::new(10))
                    .service(service_fn(echo_or_hang)),
            )
        }),
        Scenario::new(D2, "nasa hystrix: monitor(Some(10), None)", || {
            let rt = runtime();
            let cmd = nasa::bulkhead(&unique("PeersD2"));
            let holders: Vec<_> = (0..10)
                .map(|_| {
                    let holder =
                        Box::pin(Arc::clone(&cmd).run_fn(std::future::pending::<Response>));
                    park(holder, "nasa hystrix")
                })
                .collect();
            let rejected = rt.block_on(Arc::clone(&cmd).run_fn(|| async { ok_response() }));
            assert_eq!(rejected.status(), 429, "nasa hystrix rejects");
            let run = async_runner(rt, move || {
                Arc::clone(&cmd).run_fn(|| async { ok_response() })
            });
            keep_alive(run, holders)
        }),
    ]
}

/// Ours with all 10 permits held by async executions whose run never completes.
fn ours_full_bulkhead(key: &str) -> (&'static hystrix::Command, Vec<impl Sized + use<>>) {
    let cmd = leak(ours::bulkhead(registry(), key));
    let holders: Vec<_> = (0..10)
        .map(|_| {
            let holder = Box::pin(
                cmd.run_async(std::future::pending::<Result<u64, Never>>())
                    .execute_async(),
            );
            park(holder, "ours")
        })
        .collect();
    assert!(cmd.run(ok).execute().is_err(), "ours rejects");
    (cmd, holders)
}

/// Holds 10 permits of a tower bulkhead with calls that never complete.
fn hold_tower_permits<S>(
    rt: &tokio::runtime::Runtime,
    svc: &mut S,
) -> Vec<std::pin::Pin<Box<S::Future>>>
where
    S: tower::Service<u64>,
{
    let _entered = rt.enter();
    (0..10)
        .map(|_| {
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(svc.poll_ready(&mut cx).is_ready(), "a permit is free");
            park(Box::pin(svc.call(HANG)), "tower holder")
        })
        .collect()
}

/// D': a tower bulkhead service with its 10 permits held by calls that never complete, checked
/// to reject, then measured.
fn full_tower_runner<S>(mut svc: S) -> Runner
where
    S: tower::Service<u64> + 'static,
{
    let rt = runtime();
    let holders = hold_tower_permits(&rt, &mut svc);
    assert!(
        rt.block_on(tower_call(&mut svc, VALUE)).is_err(),
        "a full bulkhead rejects"
    );
    keep_alive(tower_runner(rt, svc, VALUE), holders)
}

/// A runner that keeps `held` alive as long as it lives.
fn keep_alive<T: 'static>(mut run: Runner, held: T) -> Runner {
    Box::new(move |iters| {
        let _held = &held;
        run(iters)
    })
}

fn full_command() -> Vec<Scenario> {
    vec![
        // Not like-for-like with the async peers: a blocking call, and its 1 s timeout arms no
        // timer (as Hystrix's SEMAPHORE commands, the deadline is checked when the run returns),
        // where the peers' time limiters wrap the call in a tokio timeout.
        Scenario::new(
            E,
            "ours: execute + fallback (sync; deadline checked after the run)",
            || {
                let cmd = ours::full(registry(), "E");
                sync_runner(move || cmd.run(ok).fallback(|_| Ok::<u64, Never>(0)).execute())
            },
        ),
        Scenario::new(E, "ours: execute_async + fallback", || {
            let cmd = leak(ours::full(registry(), "EAsync"));
            async_runner(runtime(), move || {
                cmd.run_async(async { ok() })
                    .fallback(|_| Ok::<u64, Never>(0))
                    .execute_async()
            })
        }),
        Scenario::new(E, "ours: HystrixLayer fallback_value", || {
            let cmd = ours::full(registry(), "ELayer");
            let svc = hystrix::tower::HystrixLayer::new(cmd)
                .fallback_value(0u64)
                .layer(service_fn(echo));
            tower_runner(runtime(), svc, VALUE)
        }),
        // Fallback(value 0) outermost, then CB count(100), the bulkhead (LoadShed over its
        // backpressure mode, as in D) and TimeLimiter(1 s) around the inner service: Hystrix's
        // order (the breaker sees rejections and timeouts; the fallback answers every
        // failure, so not the breaker's own `with_fallback`, which answers only while open).
        Scenario::new(
            E,
            "tower-resilience: Fallback+CB+LoadShed+Bulkhead+TimeLimiter",
            || {
                type Inner = tower_resilience_circuitbreaker::CircuitBreakerError<tower::BoxError>;
                let svc = ServiceBuilder::new()
                    .layer(tower_resilience_fallback::FallbackLayer::<u64, u64, Inner>::value(0))
                    .layer(tr::cb_count())
                    .layer(tr::load_shed_bulkhead())
                    .layer(tr::time_limiter())
                    .service(service_fn(echo));
                tower_runner(runtime(), svc, VALUE)
            },
        ),
        // The same with the `max_wait 0` bulkhead (the configuration of earlier runs).
        Scenario::new(
            E,
            "tower-resilience: Fallback+CB+Bulkhead(max_wait 0)+TimeLimiter",
            || {
                type Inner = tower_resilience_circuitbreaker::CircuitBreakerError<
                    tower_resilience_bulkhead::BulkheadServiceError<
                        tower_resilience_timelimiter::TimeLimiterError<Never>,
                    >,
                >;
                let svc = ServiceBuilder::new()
                    .layer(tower_resilience_fallback::FallbackLayer::<u64, u64, Inner>::value(0))
                    .layer(tr::cb_count())
                    .layer(tr::bulkhead())
                    .layer(tr::time_limiter())
                    .service(service_fn(echo));
                tower_runner(runtime(), svc, VALUE)
            },
        ),
        Scenario::new(E, "nasa hystrix: Command::new(10, 1 s), no breaker", || {
            let cmd = nasa::full(&unique("PeersE"));
            async_runner(runtime(), move || {
                Arc::clone(&cmd).run_fn(|| async { ok_response() })
            })
        }),
    ]
}

/// F: one shared breaker, 1 and 2 pre-spawned threads; one criterion iteration is one call
/// on every thread. Async rows run a current-thread runtime on each worker thread, so each
/// thread makes exactly its share of the calls; the "multi-thread runtime" rows run the same
/// calls as tasks of one tokio multi-thread runtime instead.
fn scaling() -> Vec<Scenario> {
    let mut all = Vec::new();
    for threads in [1usize, 2] {
        let param = if threads == 1 {
            "1 thread".to_string()
        } else {
            format!("{threads} threads")
        };
        let scenario = |name: &str, build: Box<dyn FnOnce() -> Workers>| {
            Scenario::new(F, name, move || {
                let workers = build();
                Box::new(move |iters| workers.run(iters)) as Runner
            })
            .multi(param.clone(), Some(threads as u64))
        };
        all.push(scenario(
            "baseline: bare closure",
            Box::new(move || Workers::spawn(threads, |_| move |iters| batch(iters, ok))),
        ));
        all.push(scenario(
            "ours: execute",
            Box::new(move || {
                let cmd = ours::closed(registry(), "F");
                Workers::spawn(threads, |_| {
                    let cmd = cmd.clone();
                    move |iters| batch(iters, || cmd.run(ok).execute())
                })
            }),
        ));
        // What an exact bulkhead costs by itself: every call takes and gives back a permit on
        // one shared counter (two atomic writes to one cache line shared by the threads), as
        // our SEMAPHORE isolation's execution permit does.
        all.push(scenario(
            "baseline: exact semaphore alone (one shared atomic, take + give back)",
            Box::new(move || {
                let in_use = Arc::new(std::sync::atomic::AtomicU32::new(0));
                Workers::spawn(threads, |_| {
                    let in_use = Arc::clone(&in_use);
                    move |iters| {
                        batch(iters, || {
                            let admitted = in_use.fetch_add(1, Ordering::AcqRel) < 10;
                            let value = if admitted { ok() } else { Ok(0) };
                            in_use.fetch_sub(1, Ordering::Release);
                            value
                        })
                    }
                })
            }),
        ));
        // Control: the same calls, each thread on a command of its own (own semaphore, event
        // counters and latency window, one registry): what the shared cache lines cost.
        all.push(scenario(
            "ours: execute, one command per thread",
            Box::new(move || {
                let registry = registry();
                Workers::spawn(threads, |i| {
                    let cmd = ours::closed(registry, &format!("FOwn{threads}_{i}"));
                    move |iters| batch(iters, || cmd.run(ok).execute())
                })
            }),
        ));
        all.push(scenario(
            "ours: execute_async",
            Box::new(move || {
                let cmd = ours::closed(registry(), "FAsync");
                Workers::spawn(threads, |_| {
                    let cmd = cmd.clone();
                    let rt = runtime();
                    move |iters| {
                        rt.block_on(async {
                            for _ in 0..iters {
                                let _ =
                                    black_box(cmd.run_async(async { ok() }).execute_async().await);
                            }
                        })
                    }
                })
            }),
        ));
        all.push(scenario(
            "recloser: closed_len(100)",
            Box::new(move || {
                let r = Arc::new(recloser_cfg::closed());
                Workers::spawn(threads, |_| {
                    let r = Arc::clone(&r);
                    move |iters| batch(iters, || r.call(ok))
                })
            }),
        ));
        all.push(scenario(
            "failsafe: consecutive_failures(20)",
            Box::new(move || {
                let cb = failsafe_cfg::consecutive();
                Workers::spawn(threads, |_| {
                    let cb = cb.clone();
                    move |iters| batch(iters, || failsafe::CircuitBreaker::call(&cb, ok))
                })
            }),
        ));
        all.push(scenario(
            "failsafe: success_rate(0.5, 20, 10 s)",
            Box::new(move || {
                let cb = failsafe_cfg::rate();
                Workers::spawn(threads, |_| {
                    let cb = cb.clone();
                    move |iters| batch(iters, || failsafe::CircuitBreaker::call(&cb, ok))
                })
            }),
        ));
        all.push(scenario(
            "tower-resilience: CB count(100)",
            Box::new(move || {
                // Clones of one service share its breaker.
                let svc = tr::cb_count().layer(service_fn(echo));
                Workers::spawn(threads, |_| {
                    let mut svc = svc.clone();
                    let rt = runtime();
                    move |iters| {
                        rt.block_on(async {
                            for _ in 0..iters {
                                let _ = black_box(tower_call(&mut svc, black_box(VALUE)).await);
                            }
                        })
                    }
                })
            }),
        ));
        // As BENCH_PLAN §8 has it for async: one multi-thread runtime with `threads` workers
        // (started before measuring), a task per worker spawned per sample, not per call.
        all.push(
            Scenario::new(F, "ours: execute_async, multi-thread runtime", move || {
                let cmd = ours::closed(registry(), "FMulti");
                spawn_runner(threads, move |iters| {
                    let cmd = cmd.clone();
                    async move {
                        for _ in 0..iters {
                            let _ = black_box(cmd.run_async(async { ok() }).execute_async().await);
                        }
                    }
                })
            })
            .multi(param.clone(), Some(threads as u64)),
        );
        all.push(
            Scenario::new(
                F,
                "tower-resilience: CB count(100), multi-thread runtime",
                move || {
                    let svc = tr::cb_count().layer(service_fn(echo));
                    spawn_runner(threads, move |iters| {
                        let mut svc = svc.clone();
                        async move {
                            for _ in 0..iters {
                                let _ = black_box(tower_call(&mut svc, black_box(VALUE)).await);
                            }
                        }
                    })
                },
            )
            .multi(param.clone(), Some(threads as u64)),
        );
    }
    all
}

/// `threads` tasks of `iters` calls each on a multi-thread runtime with `threads` workers; the
/// time until the last one ends.
fn spawn_runner<Fut>(threads: usize, mut task: impl FnMut(u64) -> Fut + 'static) -> Runner
where
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_time()
        .build()
        .expect("a multi-thread runtime");
    Box::new(move |iters| {
        rt.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..threads).map(|_| tokio::spawn(task(iters))).collect();
            for t in tasks {
                t.await.expect("a bench task");
            }
            start.elapsed()
        })
    })
}

fn batch<T>(iters: u64, mut op: impl FnMut() -> T) {
    for _ in 0..iters {
        black_box(op());
    }
}

/// H: the cost of one call with 1k, 100k or 1M calls already recorded inside the breaker's
/// 10 s window (between n and 2n while measuring: see [`WindowFill`]).
fn window() -> Vec<Scenario> {
    const WINDOW: Duration = Duration::from_secs(10);
    let sizes: [(u64, &str); 3] = [(1_000, "1k"), (100_000, "100k"), (1_000_000, "1M")];
    let mut all = Vec::new();
    for (n, label) in sizes {
        all.push(
            Scenario::new(H, "ours: execute (10 s, 10 buckets)", move || {
                WindowFill::new(
                    n,
                    WINDOW,
                    || {
                        let registry = hystrix::Registry::new();
                        let cmd = ours::closed(&registry, "H");
                        (registry, cmd)
                    },
                    |(_, cmd), k| {
                        let start = Instant::now();
                        batch(k, || cmd.run(ok).execute());
                        start.elapsed()
                    },
                )
                .into_runner()
            })
            .multi(label.to_string(), None),
        );
        all.push(
            Scenario::new(H, "failsafe: success_rate EMA (10 s)", move || {
                WindowFill::new(n, WINDOW, failsafe_cfg::rate, |cb, k| {
                    let cb = &*cb;
                    let start = Instant::now();
                    batch(k, || failsafe::CircuitBreaker::call(cb, ok));
                    start.elapsed()
                })
                .into_runner()
            })
            .multi(label.to_string(), None),
        );
        // 1M is left out for tower-resilience: each call rescans the window, so recording
        // 1M calls costs ~n²/2 record visits (many minutes), and one call ~1 ms.
        if n <= 100_000 {
            all.push(
                Scenario::new(H, "tower-resilience: CB time(10 s)", move || {
                    let rt = runtime();
                    WindowFill::new(
                        n,
                        WINDOW,
                        || tr::cb_time(WINDOW).layer(service_fn(echo)),
                        move |svc, k| {
                            rt.block_on(async {
                                let start = Instant::now();
                                for _ in 0..k {
                                    let _ = black_box(tower_call(svc, black_box(VALUE)).await);
                                }
                                start.elapsed()
                            })
                        },
                    )
                    .into_runner()
                })
                .multi(label.to_string(), None),
            );
        }
    }
    all
}

/// A with each richer breaker of issue 25 (a closed success, sync `execute`, SEMAPHORE, timeout
/// off), to compare with A's `ours: execute` row: the TIME window with slow calls on (a
/// threshold of 1 h, so no call is slow) counted in flight (the default) or not, a COUNT window
/// of the last 100 calls, a CONSECUTIVE window (the default 5 in a row).
fn breaker_windows() -> Vec<Scenario> {
    type With = fn(hystrix::CommandBuilder) -> hystrix::CommandBuilder;
    fn slow(b: hystrix::CommandBuilder) -> hystrix::CommandBuilder {
        b.property(
            "circuitBreaker.slowCall.durationThresholdInMilliseconds",
            3_600_000u32,
        )
        .property("circuitBreaker.slowCall.rateThresholdPercentage", 50u32)
    }
    let rows: [(&str, &str, With); 4] = [
        (
            "ours: execute, TIME window + slow calls (1 h threshold, counted in flight)",
            "ASlow",
            slow,
        ),
        (
            "ours: execute, TIME window + slow calls (1 h threshold, countInFlight false)",
            "ASlowEnded",
            |b| slow(b).property("circuitBreaker.slowCall.countInFlight", false),
        ),
        ("ours: execute, COUNT window (100 calls)", "ACount", |b| {
            b.property("circuitBreaker.window.type", "COUNT")
                .property("circuitBreaker.window.size", 100u32)
        }),
        ("ours: execute, CONSECUTIVE window", "AConsecutive", |b| {
            b.property("circuitBreaker.window.type", "CONSECUTIVE")
        }),
    ];
    rows.into_iter()
        .map(|(name, key, with)| {
            Scenario::new(A, name, move || {
                let cmd = ours::closed_with(registry(), key, with);
                sync_runner(move || cmd.run(ok).execute())
            })
        })
        .collect()
}
