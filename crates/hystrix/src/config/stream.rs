//! Stream properties: global values, no per-key form, read once by whoever serves
//! the streams (the `hystrix-dashboard` crate reads them when a dashboard is built).

use crate::config::{no_check, positive_ms, property_table};

property_table! {
    /// The metrics streams' settings, set by their full names (`hystrix.stream.*`,
    /// `hystrix.config.stream.*`) with [`Properties::set`](crate::config::Properties::set).
    ///
    /// Obtain a snapshot with [`Properties::stream`](crate::config::Properties::stream).
    pub struct StreamProperties;
    layer StreamLayer;
    info STREAM_PROPERTIES;

    /// `hystrix.stream.dashboard.intervalInMilliseconds`: how often `/hystrix.stream` sends
    /// a sample, in ms. Default 500. Read when the stream server is built.
    dashboard_interval_in_milliseconds: u64 = 500;
        "stream.dashboard.intervalInMilliseconds", Fixed, Any, positive_ms;
    /// `hystrix.stream.utilization.intervalInMilliseconds`: how often the utilization stream
    /// sends a sample, in ms. Default 500. Read when the stream server is built.
    utilization_interval_in_milliseconds: u64 = 500;
        "stream.utilization.intervalInMilliseconds", Fixed, Any, positive_ms;
    /// `hystrix.stream.config.intervalInMilliseconds`: how often the configuration stream
    /// sends a sample, in ms. Default 5000. Read when the stream server is built.
    config_interval_in_milliseconds: u64 = 5_000;
        "stream.config.intervalInMilliseconds", Fixed, Any, positive_ms;
    /// `hystrix.config.stream.maxConcurrentConnections`: clients each stream serves at once;
    /// the next one gets 503; 0 refuses every client. Default 5 (Hystrix uses this one name for
    /// all its streams).
    /// Read when the stream server is built.
    max_concurrent_connections: u32 = 5;
        "config.stream.maxConcurrentConnections", Fixed, Any, no_check;
    /// `hystrix.stream.writeTimeoutInMilliseconds`: how long a write to a client may stay
    /// blocked, in ms, before the server drops the connection (and, for a stream client, its
    /// slot): a client that stops reading, or falls behind until the socket's buffers are
    /// full, blocks the writes, and only this notices it. It bounds a stall, not a response: a
    /// client that keeps up with its stream keeps it however long. At least 1. Default 1500
    /// (three heartbeats of 500 ms). Not a Hystrix property (its servlet container had its own
    /// write timeout); read when the stream server is built, applied by the server that
    /// `hystrix-dashboard` runs.
    write_timeout_in_milliseconds: u64 = 1_500;
        "stream.writeTimeoutInMilliseconds", Fixed, Any, positive_ms;
}

impl StreamProperties {
    /// No rule ties the stream properties together: each is checked on its own when set.
    pub(crate) fn validate(
        &self,
        _prefix: &str,
        _rules: &crate::config::Rules,
    ) -> Result<(), crate::error::ConfigError> {
        Ok(())
    }
}
