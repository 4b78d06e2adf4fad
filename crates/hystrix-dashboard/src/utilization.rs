//! The message of Hystrix's utilization stream (`/hystrix/utilization.stream`): how
//! busy each command and thread pool is right now, as Hystrix 1.5's
//! `HystrixUtilizationJsonStream` writes it.
//!
//! ```json
//! {"type":"HystrixUtilization",
//!  "commands":{"GetUser":{"activeCount":2}},
//!  "threadpools":{"Users":{"activeCount":2,"queueSize":0,"corePoolSize":10,"poolSize":3}}}
//! ```
//!
//! (one line on the wire). Every value is a live gauge read when the message is made, not a
//! rolling count.

use hystrix::Registry;

use crate::stream::{Keyed, to_json};

#[derive(serde::Serialize)]
struct UtilizationMessage {
    #[serde(rename = "type")]
    kind: &'static str,
    commands: Keyed<CommandUtilization>,
    threadpools: Keyed<ThreadPoolUtilization>,
}

#[derive(serde::Serialize)]
struct CommandUtilization {
    #[serde(rename = "activeCount")]
    active_count: u32,
}

#[derive(serde::Serialize)]
struct ThreadPoolUtilization {
    #[serde(rename = "activeCount")]
    active_count: u32,
    #[serde(rename = "queueSize")]
    queue_size: u32,
    #[serde(rename = "corePoolSize")]
    core_pool_size: u32,
    #[serde(rename = "poolSize")]
    pool_size: u32,
}

/// The `HystrixUtilization` message of `registry` now (compact, single-line JSON).
///
/// `commands` has every command key with state, sorted: `activeCount` is its executions
/// running now (the stream's `currentConcurrentExecutionCount`). `threadpools` has every thread
/// pool, sorted: `activeCount` its tasks running now, `queueSize` its tasks waiting,
/// `corePoolSize` its configured `coreSize` and `poolSize` its threads alive (the dashboard
/// stream's `currentActiveCount`, `currentQueueSize`, `currentCorePoolSize` and
/// `currentPoolSize`).
pub fn utilization_json(registry: &Registry) -> String {
    to_json(&UtilizationMessage {
        kind: "HystrixUtilization",
        commands: Keyed::of(registry.command_keys(), |key| {
            let metrics = registry.command_metrics(key.as_str())?;
            Some(CommandUtilization {
                active_count: metrics.current_concurrent_execution_count(),
            })
        }),
        threadpools: Keyed::of(registry.thread_pool_keys(), |key| {
            let pool = registry.thread_pool_metrics(key.as_str())?;
            Some(ThreadPoolUtilization {
                active_count: pool.current_active_count,
                queue_size: pool.current_queue_size,
                core_pool_size: pool.current_core_pool_size,
                pool_size: pool.current_pool_size,
            })
        }),
    })
}
