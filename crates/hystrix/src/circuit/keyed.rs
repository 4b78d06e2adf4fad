//! Keyed breakers (the cloud pattern's resource differentiation): one breaker per shard, host
//! or tenant of a command, made on demand in a bounded map (SPEC Part A 35). The command's
//! metrics, bulkhead, timeout and fallback stay shared; only the decision to short-circuit is
//! per key. A keyed breaker has its own compact health window and the command's breaker
//! properties and backoff; health probes, the journal and the shared state store apply to the
//! command's own breaker only.

use std::num::NonZeroUsize;
use std::sync::Arc;

use super::CircuitBreaker;
use crate::clock::Clock;
use crate::config::CommandProperties;
use crate::keyed::KeyedMap;
use crate::metrics::health_ring::HealthRing;

/// One keyed breaker.
#[derive(Debug)]
pub(crate) struct KeyedBreaker {
    pub(crate) key: Arc<str>,
    pub(crate) breaker: CircuitBreaker,
    pub(crate) health: HealthRing,
}

/// A command's keyed breakers.
pub(crate) struct KeyedBreakers {
    map: KeyedMap<Arc<KeyedBreaker>>,
    /// As defined: at most this many keys, evicted after this many idle ms.
    pub(crate) limits: (NonZeroUsize, Option<u64>),
    bucket_ms: u64,
    buckets: u32,
}

impl KeyedBreakers {
    /// At most `max_keys` breakers, those unused for longer than `idle_ms` evicted; health
    /// windows as the command's (`metrics.rollingStats.timeInMilliseconds` in buckets of
    /// `metrics.healthSnapshot.intervalInMilliseconds`).
    pub(crate) fn new(
        max_keys: NonZeroUsize,
        idle_ms: Option<u64>,
        clock: Arc<dyn Clock>,
        props: &CommandProperties,
    ) -> Self {
        let bucket_ms = props
            .metrics_health_snapshot_interval_in_milliseconds
            .max(1);
        let buckets = u32::try_from(props.metrics_rolling_stats_time_in_milliseconds / bucket_ms)
            .unwrap_or(u32::MAX)
            .max(1);
        KeyedBreakers {
            map: KeyedMap::new(max_keys, idle_ms, clock),
            limits: (max_keys, idle_ms),
            bucket_ms,
            buckets,
        }
    }

    /// The breaker of `key`, made CLOSED if absent. To make room, CLOSED breakers go first (the
    /// least recently used of them), so that churn of new keys does not forget a sick host.
    pub(crate) fn get(&self, key: &str) -> Arc<KeyedBreaker> {
        let made = self.map.get_or_try_insert(
            key,
            |shared_key| {
                Ok::<_, std::convert::Infallible>(Arc::new(KeyedBreaker {
                    key: Arc::clone(shared_key),
                    breaker: CircuitBreaker::default(),
                    health: HealthRing::new(self.bucket_ms, self.buckets),
                }))
            },
            |breaker| breaker.breaker.status() != super::Status::Closed,
            |_, _| {},
        );
        match made {
            Ok(breaker) => breaker,
            Err(never) => match never {},
        }
    }

    /// The breaker of `key`, if it exists (not made, not marked used).
    pub(crate) fn find(&self, key: &str) -> Option<Arc<KeyedBreaker>> {
        self.map.peek(key)
    }

    /// Keyed breakers now.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Their keys, most recently used first.
    pub(crate) fn keys(&self) -> Vec<Arc<str>> {
        self.map.keys()
    }
}
