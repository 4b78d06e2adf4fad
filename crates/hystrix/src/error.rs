//! Errors: [`HystrixError`] for executions, [`ConfigError`] for definitions and properties.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::key::CommandKey;

/// A boxed error, as produced by fallbacks and accepted by the conversion helpers.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a command definition or a property value was refused. Every variant names the key or the
/// full property name at fault, and says why.
///
/// The message shows values and property names as [`str::escape_debug`] does (`\n`, `\0`,
/// `\"`, ...), so that a line break or a NUL in a value cannot split a log line; the fields
/// hold them as given. A refused key is escaped (and cut short) in `key` itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key name that cannot be used.
    #[error("invalid {kind} `{key}`: {reason}")]
    InvalidKey {
        /// `"command key"`, `"group key"` or `"thread-pool key"`.
        kind: &'static str,
        /// The name given, escaped as [`str::escape_debug`] does and cut to 64 characters
        /// (then `...`).
        key: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A value that does not parse, is out of range, or breaks a rule between properties. The
    /// message shows the value and the name escaped and cut to 256 characters (then `...`);
    /// the fields keep them whole.
    #[error(
        "invalid value `{}` for `{}`: {reason}",
        shown(.value, SHOWN_CHARS),
        shown(.name, SHOWN_CHARS)
    )]
    InvalidValue {
        /// The full property name, e.g. `hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage`.
        name: String,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// [`Registry::set_global`](crate::Registry::set_global) after the global registry was
    /// set or first used.
    #[error(
        "the global registry is already in use: call Registry::set_global at the start of main, \
         before any command is built with .build() or Registry::global() is called"
    )]
    GlobalRegistryInUse,
    /// A name that is not a known property. The message suggests the closest property name
    /// when one is close (a typo, or the wrong case), else says what names look like; it shows
    /// the name escaped and cut to 256 characters (then `...`).
    #[error("unknown property `{}`{}", shown(.name, SHOWN_CHARS), unknown_property_hint(.suggestion.as_deref()))]
    UnknownProperty {
        /// The name given.
        name: String,
        /// The closest property name, the key kept as given, if one is close (within a
        /// quarter of its length in edits, at least 2).
        suggestion: Option<String>,
    },
    /// A command defined without a group key (Hystrix requires one).
    #[error("command `{key}` has no group key; Hystrix requires one: call .group(\"...\")")]
    MissingGroupKey {
        /// The command key.
        key: String,
    },
    /// A command key defined a second time with different settings.
    #[error(
        "command `{key}` is already defined with a different {what}: first `{}`, now `{}`",
        .existing.escape_debug(),
        .requested.escape_debug()
    )]
    ConflictingDefinition {
        /// The command key.
        key: String,
        /// What differs (a property's full name, the group key, ...).
        what: String,
        /// The first definition's value.
        existing: String,
        /// The new definition's value.
        requested: String,
    },
    /// A per-key change of a property that is fixed once the key is in use.
    #[error(
        "property `{name}` is fixed once its key is in use (a command was defined with it), so \
         it was not changed; set it before the key's first definition, or after \
         `Registry::remove` of the key"
    )]
    FixedAfterFirstUse {
        /// The full property name.
        name: String,
    },
}

/// What went wrong in an execution (Hystrix's `FailureType`, plus our usage errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureType {
    /// The run failed (error or panic) and the fallback failed or was missing, rejected or
    /// disabled.
    CommandException,
    /// The run did not complete before the timeout.
    Timeout,
    /// The circuit breaker was open.
    ShortCircuit,
    /// The thread pool or its queue was full.
    RejectedThreadExecution,
    /// The execution semaphore had no free permit.
    RejectedSemaphoreExecution,
    /// The command's adaptive concurrency limit, or a priority reserve, refused the execution
    /// (LIMIT_REJECTED).
    RejectedByLimit,
    /// Client-side adaptive throttling (`execution.throttle.enabled`) refused the attempt
    /// locally (THROTTLED).
    Throttled,
    /// A fallback was needed but the fallback semaphore had no free permit.
    RejectedSemaphoreFallback,
    /// The run's error was classified as a bad request: returned as is, no fallback.
    BadRequest,
    /// The run's error was classified as ignored: returned as is, no fallback, healthy.
    Ignored,
    /// The execution was cancelled before it ended.
    Cancelled,
    /// A request-scoped feature was used with no request context open.
    NoRequestContext,
    /// A collapser's batch gave no response for a request.
    CollapserMissingResponse,
    /// The API was used in a way that cannot work (the message says how to fix it).
    Misuse,
    /// Chaos injection replaced the run with a fault (`chaos.fault.ratePercentage`): the run
    /// was not called. Counted as a FAILURE (health, breaker, retry and fallback treat it as
    /// a run's error), with CHAOS_INJECTED; the fallback can tell it apart by this type (or
    /// [`HystrixError::is_injected_fault`]). It carries no run error, so classifiers are not
    /// asked about it.
    InjectedFault,
}

impl FailureType {
    /// Hystrix's name, e.g. `"SHORTCIRCUIT"`; ours for the extensions.
    pub const fn name(self) -> &'static str {
        match self {
            FailureType::CommandException => "COMMAND_EXCEPTION",
            FailureType::Timeout => "TIMEOUT",
            FailureType::ShortCircuit => "SHORTCIRCUIT",
            FailureType::RejectedThreadExecution => "REJECTED_THREAD_EXECUTION",
            FailureType::RejectedSemaphoreExecution => "REJECTED_SEMAPHORE_EXECUTION",
            FailureType::RejectedByLimit => "REJECTED_BY_LIMIT",
            FailureType::Throttled => "THROTTLED",
            FailureType::RejectedSemaphoreFallback => "REJECTED_SEMAPHORE_FALLBACK",
            FailureType::BadRequest => "BAD_REQUEST_EXCEPTION",
            FailureType::Ignored => "IGNORED",
            FailureType::Cancelled => "CANCELLED",
            FailureType::NoRequestContext => "NO_REQUEST_CONTEXT",
            FailureType::CollapserMissingResponse => "COLLAPSER_MISSING_RESPONSE",
            FailureType::Misuse => "MISUSE",
            FailureType::InjectedFault => "INJECTED_FAULT",
        }
    }
}

/// Writes [`name`](FailureType::name): Hystrix's name, e.g. `SHORTCIRCUIT`, `TIMEOUT`.
impl fmt::Display for FailureType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The failure that tripped a circuit breaker, kept type-erased so it can be shared across
/// callers and threads. New kinds of cause may be added (match with a `_` arm).
#[derive(Clone)]
#[non_exhaustive]
pub enum TripCause {
    /// The breaker is forced open by the property `circuitBreaker.forceOpen`.
    ForcedOpen,
    /// The breaker was opened by hand with
    /// [`CircuitBreakerHandle::force_open`](crate::CircuitBreakerHandle::force_open), for one
    /// sleep window.
    ManuallyOpened,
    /// A failure, as shared error or as text.
    Failure(Arc<dyn StdError + Send + Sync + 'static>),
    /// A failure described in words (e.g. the error percentage that tripped it).
    Message(Arc<str>),
}

impl fmt::Debug for TripCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for TripCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TripCause::ForcedOpen => f.write_str("forced open"),
            TripCause::ManuallyOpened => {
                f.write_str("forced open by force_open() until its sleep window passes")
            }
            TripCause::Failure(err) => fmt::Display::fmt(err, f),
            TripCause::Message(text) => f.write_str(text),
        }
    }
}

/// What happened to the fallback of a failed execution.
#[derive(Debug)]
#[non_exhaustive]
pub enum FallbackFailure {
    /// No fallback was given (FALLBACK_MISSING).
    Missing,
    /// `fallback.enabled` is false.
    Disabled,
    /// The fallback semaphore had no free permit (FALLBACK_REJECTION); holds the limit then.
    Rejected {
        /// `fallback.isolation.semaphore.maxConcurrentRequests` at the time.
        max_concurrent: u32,
    },
    /// The fallback returned an error (FALLBACK_FAILURE).
    Failed(BoxError),
    /// The fallback panicked (FALLBACK_FAILURE); holds the panic message.
    Panicked(String),
}

impl fmt::Display for FallbackFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackFailure::Missing => f.write_str("no fallback available"),
            FallbackFailure::Disabled => f.write_str("fallback disabled"),
            FallbackFailure::Rejected { max_concurrent } => write!(
                f,
                "fallback execution rejected (limit of {max_concurrent} concurrent fallbacks \
                 reached)"
            ),
            FallbackFailure::Failed(err) => write!(f, "fallback failed: {err}"),
            FallbackFailure::Panicked(msg) => write!(f, "fallback panicked: {msg}"),
        }
    }
}

/// Why the run produced no value, before any fallback.
#[derive(Debug)]
pub(crate) enum Cause<E> {
    /// The run returned this error.
    Error(E),
    /// The run panicked with this message.
    Panic(String),
    /// Nothing from the run (short-circuit, rejection, timeout, cancellation, misuse).
    None,
}

/// The error of an execution: which command, what happened, the run's error if any, and what
/// became of the fallback.
///
/// Its `Display` says which command failed, what happened and which property to tune, e.g.
/// `command GetUser timed out after 1000 ms and no fallback available (tune
/// hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds or add a fallback)`.
///
/// `HystrixError<E>` is a [`std::error::Error`] whenever `E` is `Debug + Display` (a
/// `std::error::Error`, `anyhow::Error`, `String`, ...), so `?` converts it into
/// `anyhow::Error` or `Box<dyn Error + Send + Sync>` (when `E: Send + Sync + 'static`).
pub struct HystrixError<E> {
    failure_type: FailureType,
    command_key: CommandKey,
    cause: Cause<E>,
    fallback: Option<FallbackFailure>,
    detail: Detail,
    /// Attempts made (more than 1 only for a retried execution).
    attempts: u8,
}

/// The numbers that explain a failure (the limit that was hit), captured when it happened.
#[derive(Debug, Clone, Default)]
pub(crate) enum Detail {
    #[default]
    None,
    /// `execution.isolation.thread.timeoutInMilliseconds` passed (ms).
    TimeoutMs(u64),
    /// A stream's first-value timeout given to the call by `.timeout(..)` passed (ms).
    CallTimeoutMs(u64),
    /// A stream's idle timeout passed: no next value for this long (ms).
    IdleTimeoutMs(u64),
    SemaphoreLimit(u32),
    /// The adaptive limit that refused the execution.
    AdaptiveLimit(u32),
    /// The bound (`bound` places) had room, but not for this class: the higher classes'
    /// unused reserves held the rest.
    PriorityReserve {
        priority: crate::isolation::priority::Priority,
        bound: u32,
        in_flight: u32,
    },
    /// The throttling probability (0 to 1) the attempt was refused with.
    Throttled(f64),
    /// Refused by an open breaker: why, looked up when asked.
    ShortCircuit(crate::circuit::Tripped),
    PoolRejected {
        pool: crate::key::ThreadPoolKey,
        rejection: crate::isolation::thread_pool::Rejection,
    },
    Message(Arc<str>),
}

impl<E> HystrixError<E> {
    #[inline]
    pub(crate) fn new(failure_type: FailureType, command_key: CommandKey, cause: Cause<E>) -> Self {
        HystrixError {
            failure_type,
            command_key,
            cause,
            fallback: None,
            detail: Detail::None,
            attempts: 1,
        }
    }

    /// The error of an execution an open breaker refused (`tripped` says why).
    #[inline]
    pub(crate) fn short_circuited(
        command_key: CommandKey,
        tripped: crate::circuit::Tripped,
    ) -> Self {
        HystrixError {
            failure_type: FailureType::ShortCircuit,
            command_key,
            cause: Cause::None,
            fallback: None,
            detail: Detail::ShortCircuit(tripped),
            attempts: 1,
        }
    }

    /// Sets how many attempts the execution made.
    pub(crate) fn set_attempts(&mut self, attempts: u8) {
        self.attempts = attempts;
    }

    /// How many attempts the execution made before this error: 1, except for a retryable run
    /// with `retry.maxAttempts` over 1 (see the [`retry`](crate::retry) module). An attempt
    /// the breaker or a bulkhead refused counts.
    pub fn attempts(&self) -> u32 {
        u32::from(self.attempts)
    }

    #[inline]
    pub(crate) fn with_detail(mut self, detail: Detail) -> Self {
        self.detail = detail;
        self
    }

    pub(crate) fn set_fallback_failure(&mut self, fallback: FallbackFailure) {
        if matches!(fallback, FallbackFailure::Rejected { .. }) {
            // Hystrix reports a fallback rejection as its own failure type, whatever the trigger.
            self.failure_type = FailureType::RejectedSemaphoreFallback;
        }
        self.fallback = Some(fallback);
    }

    /// An error for API misuse, with a message that says how to fix it.
    pub(crate) fn misuse(command_key: CommandKey, message: impl Into<Arc<str>>) -> Self {
        Self::new(FailureType::Misuse, command_key, Cause::None)
            .with_detail(Detail::Message(message.into()))
    }

    /// What went wrong.
    pub fn failure_type(&self) -> FailureType {
        self.failure_type
    }

    /// The command that failed.
    pub fn command_key(&self) -> &CommandKey {
        &self.command_key
    }

    /// The run's error, if the run returned one.
    pub fn cause(&self) -> Option<&E> {
        match &self.cause {
            Cause::Error(e) => Some(e),
            _ => None,
        }
    }

    /// Takes the run's error, if the run returned one.
    pub fn into_cause(self) -> Option<E> {
        match self.cause {
            Cause::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The panic message, if the run panicked (caught and treated as a failure).
    pub fn panic_message(&self) -> Option<&str> {
        match &self.cause {
            Cause::Panic(msg) => Some(msg),
            _ => None,
        }
    }

    /// What became of the fallback: `None` if no fallback was called for (success paths, bad
    /// requests, ignored errors) or if a fallback was attempted only to fail in a way recorded here.
    pub fn fallback_failure(&self) -> Option<&FallbackFailure> {
        self.fallback.as_ref()
    }

    /// The fallback's own error, if it returned one (kept beside the run's).
    pub fn fallback_error(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        match &self.fallback {
            Some(FallbackFailure::Failed(err)) => Some(err.as_ref()),
            _ => None,
        }
    }

    /// For [`FailureType::ShortCircuit`]: why the breaker was open (the failure that tripped
    /// it, `circuitBreaker.forceOpen`, a manual opening).
    ///
    /// Looked up when called, not copied at the rejection (which stays cheap): the breaker
    /// keeps the causes of its latest 8 openings, so this is `None` once the breaker was
    /// reset (`CircuitBreakerHandle::reset`) or opened 8 more times since the rejection.
    pub fn trip_cause(&self) -> Option<TripCause> {
        match &self.detail {
            Detail::ShortCircuit(tripped) => tripped.cause(),
            _ => None,
        }
    }

    /// For [`FailureType::Timeout`]: the timeout that passed, in ms (for a stream command, the
    /// first-value timeout or the idle timeout, whichever passed).
    pub fn timeout_ms(&self) -> Option<u64> {
        match self.detail {
            Detail::TimeoutMs(ms) | Detail::CallTimeoutMs(ms) | Detail::IdleTimeoutMs(ms) => {
                Some(ms)
            }
            _ => None,
        }
    }

    /// Whether the run's failure was a timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.detail,
            Detail::TimeoutMs(_) | Detail::CallTimeoutMs(_) | Detail::IdleTimeoutMs(_)
        )
    }

    /// Whether the run was replaced by a fault of chaos injection
    /// ([`FailureType::InjectedFault`], `chaos.fault.ratePercentage`).
    pub fn is_injected_fault(&self) -> bool {
        self.failure_type == FailureType::InjectedFault
    }

    /// Whether the execution was refused before running (short-circuit or a rejection).
    pub fn is_rejection(&self) -> bool {
        matches!(
            self.failure_type,
            FailureType::ShortCircuit
                | FailureType::RejectedSemaphoreExecution
                | FailureType::RejectedByLimit
                | FailureType::Throttled
                | FailureType::RejectedThreadExecution
        ) || matches!(
            self.detail,
            Detail::ShortCircuit(_)
                | Detail::SemaphoreLimit(_)
                | Detail::AdaptiveLimit(_)
                | Detail::PriorityReserve { .. }
                | Detail::Throttled(_)
                | Detail::PoolRejected { .. }
        )
    }

    /// Converts the run's error with `f`, keeping everything else.
    pub fn map_cause<F, E2>(self, f: F) -> HystrixError<E2>
    where
        F: FnOnce(E) -> E2,
    {
        match self.try_map_cause(|e| Ok::<_, std::convert::Infallible>(f(e))) {
            Ok(error) => error,
            Err(never) => match never {},
        }
    }

    /// Converts the run's error with `f`, keeping everything else, or gives what `f` took out
    /// of it instead (`Err`), the rest of the error dropped.
    pub(crate) fn try_map_cause<F, E2, T>(self, f: F) -> Result<HystrixError<E2>, T>
    where
        F: FnOnce(E) -> Result<E2, T>,
    {
        Ok(HystrixError {
            failure_type: self.failure_type,
            command_key: self.command_key,
            cause: match self.cause {
                Cause::Error(e) => Cause::Error(f(e)?),
                Cause::Panic(msg) => Cause::Panic(msg),
                Cause::None => Cause::None,
            },
            fallback: self.fallback,
            detail: self.detail,
            attempts: self.attempts,
        })
    }

    /// Boxes the run's error, so errors of commands with different error types share one type.
    pub fn into_boxed(self) -> HystrixError<BoxError>
    where
        E: Into<BoxError>,
    {
        self.map_cause(Into::into)
    }

    fn what_happened(&self) -> String {
        match (&self.detail, self.failure_type) {
            (Detail::TimeoutMs(ms), _) => format!("timed out after {ms} ms"),
            (Detail::CallTimeoutMs(ms), _) => {
                format!("timed out after {ms} ms (the timeout given to this call)")
            }
            (Detail::IdleTimeoutMs(ms), _) => {
                format!("timed out waiting {ms} ms for its next value (idle timeout)")
            }
            (Detail::ShortCircuit(tripped), _) => match tripped.cause() {
                Some(cause) => format!("short-circuited (circuit open: {cause})"),
                None => "short-circuited (circuit open)".into(),
            },
            (Detail::SemaphoreLimit(max), _) => format!(
                "could not acquire a semaphore for execution (limit of {max} concurrent \
                 executions reached)"
            ),
            (Detail::AdaptiveLimit(limit), _) => format!(
                "was refused by its adaptive concurrency limit ({limit} concurrent executions reached)"
            ),
            (
                Detail::PriorityReserve {
                    priority,
                    bound,
                    in_flight,
                },
                _,
            ) => format!(
                "was refused as a {priority} execution ({in_flight} of {bound} places in use; \
                 the rest is reserved for higher priorities)"
            ),
            (Detail::Throttled(probability), _) => format!(
                "was throttled: refused locally by adaptive throttling, with probability {:.3} \
                 (the backend rejected too many recent requests as overloaded)",
                probability
            ),
            (Detail::PoolRejected { pool, rejection }, _) => {
                format!("could not be queued for execution on thread pool {pool} ({rejection})")
            }
            (Detail::Message(msg), _) => msg.to_string(),
            (Detail::None, FailureType::RejectedThreadExecution) => {
                "could not be queued for execution".into()
            }
            (Detail::None, FailureType::BadRequest) => "rejected the request as bad".into(),
            (Detail::None, FailureType::Ignored) => "returned an ignored error".into(),
            (Detail::None, FailureType::Cancelled) => "was cancelled".into(),
            (Detail::None, FailureType::InjectedFault) => {
                "failed with a fault injected by chaos (chaos.fault.ratePercentage)".into()
            }
            (Detail::None, _) => match &self.cause {
                Cause::Panic(msg) => format!("panicked: {msg}"),
                _ => "failed".into(),
            },
        }
    }

    fn hint(&self) -> Option<String> {
        use crate::isolation::thread_pool::Rejection;
        let key = &self.command_key;
        let (scope, property) = match (&self.detail, &self.fallback) {
            (_, Some(FallbackFailure::Rejected { .. })) => (
                format!("command.{key}"),
                "fallback.isolation.semaphore.maxConcurrentRequests",
            ),
            (Detail::ShortCircuit(crate::circuit::Tripped::ForcedOpen), _) => {
                return Some(format!(
                    "forced open by hystrix.command.{key}.circuitBreaker.forceOpen"
                ));
            }
            (Detail::TimeoutMs(_), _) => (
                format!("command.{key}"),
                "execution.isolation.thread.timeoutInMilliseconds",
            ),
            (Detail::SemaphoreLimit(_), _) => (
                format!("command.{key}"),
                "execution.isolation.semaphore.maxConcurrentRequests",
            ),
            (Detail::AdaptiveLimit(_), _) => (
                format!("command.{key}"),
                "execution.isolation.adaptive.maxWaitInMilliseconds",
            ),
            (Detail::PriorityReserve { priority, .. }, _) => (
                format!("command.{key}"),
                match priority {
                    crate::Priority::Sheddable => {
                        "execution.isolation.priority.{critical,normal}.reservedPercentage"
                    }
                    _ => "execution.isolation.priority.critical.reservedPercentage",
                },
            ),
            (Detail::Throttled(_), _) => {
                // K matters only once some attempts are accepted: with none, p = r / (r + 1).
                (
                    format!("command.{key}"),
                    "execution.throttle.multiplier (it matters once the backend accepts some \
                     requests again)",
                )
            }
            (Detail::ShortCircuit(_), _) => (
                format!("command.{key}"),
                "circuitBreaker.sleepWindowInMilliseconds",
            ),
            (Detail::PoolRejected { pool, rejection }, _) => match rejection {
                Rejection::QueueThreshold { .. } => {
                    (format!("threadpool.{pool}"), "queueSizeRejectionThreshold")
                }
                Rejection::Full { .. } => (format!("threadpool.{pool}"), "coreSize"),
                Rejection::Shutdown => return None,
            },
            _ => return None,
        };
        let remedy = match self.fallback {
            Some(FallbackFailure::Missing) => " or add a fallback",
            _ => "",
        };
        Some(format!("tune hystrix.{scope}.{property}{remedy}"))
    }
}

impl<E: fmt::Display> fmt::Display for HystrixError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "command {} {}", self.command_key, self.what_happened())?;
        if let Cause::Error(e) = &self.cause {
            write!(f, ": {e}")?;
        }
        if self.attempts > 1 {
            write!(f, " (after {} attempts)", self.attempts)?;
        }
        if let Some(fallback) = &self.fallback {
            write!(f, " and {fallback}")?;
        }
        if let Some(hint) = self.hint() {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl<E: fmt::Debug> fmt::Debug for HystrixError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("HystrixError");
        s.field("failure_type", &self.failure_type)
            .field("command_key", &self.command_key);
        match &self.cause {
            Cause::Error(e) => s.field("cause", e),
            Cause::Panic(msg) => s.field("panic", msg),
            Cause::None => &mut s,
        };
        if let Some(fallback) = &self.fallback {
            s.field("fallback", fallback);
        }
        if !matches!(self.detail, Detail::None) {
            s.field("detail", &self.detail);
        }
        if self.attempts > 1 {
            s.field("attempts", &self.attempts);
        }
        s.finish()
    }
}

/// The run's error is part of the message (its text follows "failed: "), so `source()` is
/// `None`: error reporters that walk sources print it once. [`HystrixError::cause`] gives it
/// typed.
impl<E: fmt::Debug + fmt::Display> StdError for HystrixError<E> {}

/// The end of [`ConfigError::UnknownProperty`]'s message: the suggestion, or the name's shape.
/// The most characters of a caller's value or name an error message shows.
const SHOWN_CHARS: usize = 256;

/// Text from a caller as an error message shows it: control characters escaped, at most `max`
/// characters, then `...` (a value of megabytes would otherwise make a log line as long).
pub(crate) fn shown(text: &str, max: usize) -> String {
    let mut shown = text
        .chars()
        .take(max)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if text.chars().nth(max).is_some() {
        shown.push_str("...");
    }
    shown
}

fn unknown_property_hint(suggestion: Option<&str>) -> String {
    match suggestion {
        Some(suggestion) => format!("; did you mean `{}`?", suggestion.escape_debug()),
        None => " (expected hystrix.command.<Key|default>.<name>, \
                 hystrix.threadpool.<Key|default>.<name> or hystrix.collapser.<Key|default>.<name> \
                 with a Hystrix property name, or a stream property such as \
                 hystrix.stream.dashboard.intervalInMilliseconds)"
            .to_owned(),
    }
}
