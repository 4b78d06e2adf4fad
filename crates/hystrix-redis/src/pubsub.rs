//! The Pub/Sub subscriber: trips and closes pushed by other instances.
//!
//! A subscribed connection can issue no other commands, so it is a connection of its own,
//! apart from the [`ConnectionManager`](redis::aio::ConnectionManager). It pings the server
//! every ping interval (a silent, half-dead connection is noticed) and, when the connection is
//! lost, reconnects and resubscribes with exponential backoff. Pushes are hints: after every
//! (re)subscription the listeners are told to sync, since transitions may have been missed
//! while it was away; polling remains the backstop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hystrix::circuit::store::ChangeListener;
use parking_lot::Mutex;

use crate::backoff::Backoff;
use crate::keys::Transition;

/// What the subscriber shares with the store: the registries' listeners and its counters.
#[derive(Default)]
pub(crate) struct Hub {
    listeners: Mutex<Vec<ChangeListener>>,
    pub(crate) connected: AtomicBool,
    pub(crate) subscriptions: AtomicU64,
    pub(crate) heard: AtomicU64,
}

impl Hub {
    pub(crate) fn add(&self, listener: ChangeListener) {
        self.listeners.lock().push(listener);
    }

    /// Tells every listener to sync; forgets those whose registry is gone.
    pub(crate) fn notify(&self) {
        // A listener only schedules a round (it never calls back into the store).
        self.listeners.lock().retain(|listener| listener());
    }

    #[cfg(test)]
    pub(crate) fn listeners(&self) -> usize {
        self.listeners.lock().len()
    }
}

/// How the subscriber connects.
pub(crate) struct Subscriber {
    pub(crate) client: redis::Client,
    pub(crate) channel: String,
    /// Bounds connecting and subscribing (connect + response timeouts).
    pub(crate) setup_timeout: Duration,
    /// Bounds a ping's answer.
    pub(crate) response_timeout: Duration,
    pub(crate) ping_interval: Duration,
    pub(crate) backoff: Backoff,
}

impl Subscriber {
    /// Runs until its task is aborted (when the last clone of the store is dropped).
    pub(crate) async fn run(mut self, hub: std::sync::Arc<Hub>) {
        loop {
            match self.subscribe().await {
                Ok(pubsub) => {
                    self.backoff.succeeded();
                    hub.connected.store(true, Ordering::Release);
                    hub.subscriptions.fetch_add(1, Ordering::AcqRel);
                    tracing::debug!(channel = %self.channel, "hystrix-redis: subscribed");
                    hub.notify();
                    self.listen(pubsub, &hub).await;
                    hub.connected.store(false, Ordering::Release);
                    tracing::debug!(channel = %self.channel, "hystrix-redis: subscription lost");
                }
                Err(err) => {
                    tracing::debug!(channel = %self.channel, error = %err, "hystrix-redis: cannot subscribe");
                }
            }
            let delay = self.backoff.failed(Instant::now());
            tokio::time::sleep(delay).await;
        }
    }

    async fn subscribe(&self) -> redis::RedisResult<redis::aio::PubSub> {
        let setup = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&self.channel).await?;
            Ok(pubsub)
        };
        match tokio::time::timeout(self.setup_timeout, setup).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        }
    }

    /// Hands every transition heard to the listeners; returns when the connection is lost.
    async fn listen(&self, pubsub: redis::aio::PubSub, hub: &Hub) {
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(self.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await; // the first tick is now
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { return };
                    let payload: String = message.get_payload().unwrap_or_default();
                    match Transition::parse(&payload) {
                        Some(transition) => {
                            hub.heard.fetch_add(1, Ordering::AcqRel);
                            tracing::debug!(
                                command = %transition.command,
                                opened = transition.opened,
                                generation = transition.generation,
                                "hystrix-redis: transition heard"
                            );
                            hub.notify();
                        }
                        None => tracing::debug!(%payload, "hystrix-redis: unknown message ignored"),
                    }
                }
                _ = ping.tick() => {
                    let answered = tokio::time::timeout(self.response_timeout, sink.ping::<String>()).await;
                    if !matches!(answered, Ok(Ok(_))) {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[test]
    fn notify_tells_every_listener_and_forgets_the_gone() {
        let hub = Hub::default();
        let calls = Arc::new(AtomicU32::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        for _ in 0..2 {
            let calls = Arc::clone(&calls);
            hub.add(Arc::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                true
            }));
        }
        let flag = Arc::clone(&alive);
        hub.add(Arc::new(move || flag.load(Ordering::SeqCst)));
        hub.notify();
        assert_eq!((calls.load(Ordering::SeqCst), hub.listeners()), (2, 3));
        alive.store(false, Ordering::SeqCst);
        hub.notify();
        assert_eq!((calls.load(Ordering::SeqCst), hub.listeners()), (4, 2));
    }
}
