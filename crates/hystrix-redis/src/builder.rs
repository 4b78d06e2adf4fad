//! [`RedisStateStoreBuilder`]: the store's options, checked when it is built.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hystrix::ConfigError;
use parking_lot::Mutex;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::runtime::Handle;

use crate::backoff::Backoff;
use crate::keys;
use crate::pubsub::{Hub, Subscriber};
use crate::scripts::{Layout, Scripts};
use crate::store::{Inner, RedisStateStore};

/// Attempts of one reconnection by the `ConnectionManager` before it gives up until the next
/// call (each waits a jittered exponential delay between the backoff's minimum and maximum).
const RECONNECT_RETRIES: usize = 3;

/// Builds a [`RedisStateStore`] (from [`RedisStateStore::builder`]). Every duration is
/// rounded up to whole milliseconds.
///
/// | option | default |
/// |---|---|
/// | [`connect_timeout`](Self::connect_timeout) | 50 ms |
/// | [`response_timeout`](Self::response_timeout) | 40 ms |
/// | [`window`](Self::window) | 10 000 ms in 10 buckets |
/// | [`state_ttl`](Self::state_ttl) | 24 h |
/// | [`key_ttl_slack`](Self::key_ttl_slack) | 5 000 ms |
/// | [`probe_ttl_slack`](Self::probe_ttl_slack) | 0 ms |
/// | [`reconnect_backoff`](Self::reconnect_backoff) | 50 ms to 2 000 ms |
/// | [`pubsub`](Self::pubsub) | on, pinged every 5 000 ms |
/// | [`runtime`](Self::runtime) | the runtime `build` is called in |
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisStateStoreBuilder {
    url: String,
    service: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    window: Duration,
    buckets: u32,
    state_ttl: Duration,
    key_ttl_slack: Duration,
    probe_ttl_slack: Duration,
    reconnect_min: Duration,
    reconnect_max: Duration,
    pubsub: bool,
    ping_interval: Duration,
    runtime: Option<Handle>,
}

fn ms(duration: Duration) -> u64 {
    let whole = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if Duration::from_millis(whole) < duration {
        whole.saturating_add(1)
    } else {
        whole
    }
}

fn invalid(option: &str, value: impl ToString, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        name: format!("RedisStateStoreBuilder::{option}"),
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl RedisStateStoreBuilder {
    pub(crate) fn new(url: String, service: String) -> Self {
        RedisStateStoreBuilder {
            url,
            service,
            connect_timeout: Duration::from_millis(50),
            response_timeout: Duration::from_millis(40),
            window: Duration::from_secs(10),
            buckets: 10,
            state_ttl: Duration::from_secs(24 * 3600),
            key_ttl_slack: Duration::from_secs(5),
            probe_ttl_slack: Duration::ZERO,
            reconnect_min: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(2),
            pubsub: true,
            ping_interval: Duration::from_secs(5),
            runtime: None,
        }
    }

    /// How long one connection attempt may take (default 50 ms). A call that must wait for a
    /// connection takes at most this plus the response timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command or script (default 40 ms). Keep it at or
    /// under the registry's
    /// [`state_store_timeout`](hystrix::RegistryBuilder::state_store_timeout) (50 ms by
    /// default), so that the client gives up (and reconnects) no later than the registry.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The shared rolling window of published counts: `window` long, in `buckets` buckets
    /// (default 10 000 ms in 10, as Hystrix's `metrics.rollingStats.*`). Buckets are keyed by
    /// Redis's clock, so every instance counts into the same ones.
    pub fn window(mut self, window: Duration, buckets: u32) -> Self {
        self.window = window;
        self.buckets = buckets;
        self
    }

    /// The TTL of a command's state hash (its generation and whether it is tripped), set again
    /// by every trip (plus the open period) and close (default 24 h). A command nobody trips
    /// or closes for that long is forgotten: it reads Closed at generation 0 again, as after a
    /// `FLUSHALL`, and a HALF_OPEN that nobody closes ends that way too.
    pub fn state_ttl(mut self, ttl: Duration) -> Self {
        self.state_ttl = ttl;
        self
    }

    /// Added to the window to make a bucket hash's TTL (default 5000 ms): a bucket lives a
    /// little past the window, for fetches on the edge of it.
    pub fn key_ttl_slack(mut self, slack: Duration) -> Self {
        self.key_ttl_slack = slack;
        self
    }

    /// Added to every probe permit's TTL (default 0: the permit lasts what the registry asks,
    /// max(sleep window, execution timeout)). Raise it towards the registry's sync interval
    /// so that a trial's close is published before another instance may probe.
    pub fn probe_ttl_slack(mut self, slack: Duration) -> Self {
        self.probe_ttl_slack = slack;
        self
    }

    /// The exponential backoff after a connection failure or a timeout (default 50 ms,
    /// doubling up to 2000 ms): the delay between the `ConnectionManager`'s reconnection
    /// attempts and the subscriber's, and the time the store refuses calls at once
    /// ([`StateStoreError::Unavailable`](hystrix::circuit::store::StateStoreError)) before
    /// trying Redis again. A success resets it.
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Whether to subscribe to the service's transition channel (default true): other
    /// instances' trips and closes then make the registries sync at once, not at their next
    /// sync interval. Without it, polling alone propagates them.
    pub fn pubsub(mut self, enabled: bool) -> Self {
        self.pubsub = enabled;
        self
    }

    /// How often the subscriber pings Redis to notice a dead connection (default 5000 ms).
    pub fn pubsub_ping_interval(mut self, interval: Duration) -> Self {
        self.ping_interval = interval;
        self
    }

    /// The tokio runtime the store's connection, calls and subscriber run on (default: the
    /// runtime [`build`](Self::build) is called in). It must have IO and time enabled
    /// (`enable_all`) and outlive the store.
    pub fn runtime(mut self, runtime: Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Builds the store. It connects lazily: no I/O happens here, so a service starts even
    /// while Redis is down (its breakers then decide on local state).
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming the option (`RedisStateStoreBuilder::<option>`):
    /// an empty service; a URL the `redis` crate refuses (the URL itself is not repeated, as
    /// it may hold a password); a zero timeout, window, bucket count, state TTL or ping
    /// interval; buckets that do not divide the window in whole milliseconds; a backoff
    /// minimum of zero or above its maximum; or no runtime (neither given nor current).
    pub fn build(self) -> Result<RedisStateStore, ConfigError> {
        if self.service.is_empty() {
            return Err(invalid("service", "", "must not be empty"));
        }
        let client = redis::Client::open(self.url.as_str()).map_err(|err| {
            invalid(
                "url",
                "(not shown: it may hold a password)",
                err.to_string(),
            )
        })?;
        for (option, value) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("window", self.window),
            ("state_ttl", self.state_ttl),
            ("pubsub_ping_interval", self.ping_interval),
        ] {
            if value.is_zero() {
                return Err(invalid(option, "0 ms", "must be at least 1 ms"));
            }
        }
        let window_ms = ms(self.window);
        if self.buckets == 0 || window_ms % u64::from(self.buckets) != 0 {
            return Err(invalid(
                "window",
                format!("{window_ms} ms in {} buckets", self.buckets),
                "the bucket count must be at least 1 and divide the window evenly",
            ));
        }
        if self.reconnect_min.is_zero() || self.reconnect_min > self.reconnect_max {
            return Err(invalid(
                "reconnect_backoff",
                format!("{:?} to {:?}", self.reconnect_min, self.reconnect_max),
                "the minimum must be at least 1 ms and at most the maximum",
            ));
        }
        let runtime = self
            .runtime
            .or_else(|| Handle::try_current().ok())
            .ok_or_else(|| {
                invalid(
                    "runtime",
                    "none",
                    "build inside a tokio runtime, or give one with .runtime(handle)",
                )
            })?;

        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_min_delay(self.reconnect_min)
            .set_max_delay(self.reconnect_max)
            .set_exponent_base(2.0)
            .set_number_of_retries(RECONNECT_RETRIES);
        let manager = {
            // The manager spawns its reconnection work on the current runtime.
            let _entered = runtime.enter();
            ConnectionManager::new_lazy_with_config(client.clone(), config)
        }
        .map_err(|err| {
            invalid(
                "url",
                "(not shown: it may hold a password)",
                err.to_string(),
            )
        })?;

        let channel = keys::channel(&self.service);
        let hub = Arc::new(Hub::default());
        let backoff = Backoff::new(self.reconnect_min, self.reconnect_max);
        let subscriber = self.pubsub.then(|| {
            let subscriber = Subscriber {
                client,
                channel: channel.clone(),
                setup_timeout: self.connect_timeout + self.response_timeout,
                response_timeout: self.response_timeout,
                ping_interval: self.ping_interval,
                backoff: backoff.clone(),
            };
            runtime.spawn(subscriber.run(Arc::clone(&hub)))
        });
        Ok(RedisStateStore::from_inner(Inner {
            manager,
            runtime,
            layout: Layout {
                bucket_ms: window_ms / u64::from(self.buckets),
                buckets: self.buckets,
                bucket_ttl_ms: window_ms.saturating_add(ms(self.key_ttl_slack)),
                state_ttl_ms: ms(self.state_ttl),
                probe_slack_ms: ms(self.probe_ttl_slack),
                channel,
            },
            service: self.service,
            scripts: Scripts::new(),
            call_timeout: self.connect_timeout + self.response_timeout,
            backoff: parking_lot::Mutex::new(backoff),
            hub,
            subscriber,
            fingerprints: Mutex::new(HashMap::new()),
            mismatches: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(builder: RedisStateStoreBuilder) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _entered = runtime.enter();
        match builder.build() {
            Err(ConfigError::InvalidValue { name, .. }) => name,
            Err(other) => panic!("expected InvalidValue, got {other}"),
            Ok(store) => panic!("expected an error, got {store:?}"),
        }
    }

    fn builder() -> RedisStateStoreBuilder {
        RedisStateStore::builder("redis://127.0.0.1:1/", "svc")
    }

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        assert_eq!(ms(Duration::from_micros(1)), 1);
        assert_eq!(ms(Duration::from_millis(40)), 40);
        assert_eq!(ms(Duration::from_micros(40_001)), 41);
        assert_eq!(ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn each_bad_option_is_named() {
        let zero = Duration::ZERO;
        let second = Duration::from_secs(1);
        assert_eq!(
            refused(RedisStateStore::builder("redis://127.0.0.1/", "")),
            "RedisStateStoreBuilder::service"
        );
        assert_eq!(
            refused(RedisStateStore::builder("nope://x", "svc")),
            "RedisStateStoreBuilder::url"
        );
        assert_eq!(
            refused(builder().connect_timeout(zero)),
            "RedisStateStoreBuilder::connect_timeout"
        );
        assert_eq!(
            refused(builder().response_timeout(zero)),
            "RedisStateStoreBuilder::response_timeout"
        );
        assert_eq!(
            refused(builder().window(zero, 10)),
            "RedisStateStoreBuilder::window"
        );
        assert_eq!(
            refused(builder().window(second, 0)),
            "RedisStateStoreBuilder::window"
        );
        assert_eq!(
            refused(builder().window(second, 3)),
            "RedisStateStoreBuilder::window"
        );
        assert_eq!(
            refused(builder().state_ttl(zero)),
            "RedisStateStoreBuilder::state_ttl"
        );
        assert_eq!(
            refused(builder().reconnect_backoff(zero, second)),
            "RedisStateStoreBuilder::reconnect_backoff"
        );
        assert_eq!(
            refused(builder().reconnect_backoff(second * 2, second)),
            "RedisStateStoreBuilder::reconnect_backoff"
        );
        assert_eq!(
            refused(builder().pubsub_ping_interval(zero)),
            "RedisStateStoreBuilder::pubsub_ping_interval"
        );
    }

    #[test]
    fn without_a_runtime_the_builder_says_how_to_give_one() {
        match builder().build() {
            Err(ConfigError::InvalidValue { name, reason, .. }) => {
                assert_eq!(name, "RedisStateStoreBuilder::runtime");
                assert!(reason.contains(".runtime(handle)"), "{reason}");
            }
            other => panic!("expected InvalidValue, got {other:?}"),
        }
    }

    #[test]
    fn a_url_with_a_password_is_not_repeated_in_the_error() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let err = RedisStateStore::builder("nope://user:secret@x", "svc")
            .runtime(runtime.handle().clone())
            .build()
            .expect_err("a bad scheme");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn the_layout_follows_the_options() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let store = builder()
            .window(Duration::from_millis(2_000), 4)
            .key_ttl_slack(Duration::from_millis(300))
            .state_ttl(Duration::from_secs(60))
            .probe_ttl_slack(Duration::from_millis(7))
            .pubsub(false)
            .runtime(runtime.handle().clone())
            .build()
            .expect("valid options");
        let text = format!("{store:?}");
        for part in [
            "bucket_ms: 500",
            "buckets: 4",
            "bucket_ttl_ms: 2300",
            "state_ttl_ms: 60000",
            "probe_slack_ms: 7",
            "channel: \"hystrix:{svc}:transitions\"",
            "call_timeout: 90ms",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(!store.pubsub_connected());
    }
}
