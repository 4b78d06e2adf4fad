//! Helpers for commands that call HTTP services: what an HTTP response tells the breaker and
//! the retry loop.
//!
//! **Accelerated tripping**: a `503 Service Unavailable` with a `Retry-After` header says the
//! server wants no requests for a while. A classifier can turn such a response into a trip of
//! the breaker now, open for at least the delay [`retry_after`] reads from the header, instead
//! of waiting for the error percentage to cross its threshold.
//!
//! **Both questions at once**: [`classify_status`] answers the breaker's (a [`Class`]) and the
//! retry loop's (a [`RetryAnswer`]) for a status code; with the `http` feature,
//! `classify_response` and `classify_parts` read the status, `Retry-After` and method of the
//! `http` crate's types, which hyper, axum, reqwest (`status()`, `headers()`) and ureq use.
//!
//! **Servers**: [`error_status`] (and with the `http` feature `error_response`) says which
//! status answers a call that ended in a [`HystrixError`]. The tower layer applies both sides
//! in one line each: `HystrixLayer::classify_http` and `HystrixLayer::errors_as_responses`
//! (features `tower` and `http`).
use std::time::{Duration, SystemTime};

use crate::command::Class;
use crate::error::{FailureType, HystrixError};
use crate::retry::RetryAnswer;

/// The [`Class`] and [`RetryAnswer`] of an HTTP error response with status `status`, its
/// `Retry-After` delay if it had one (see [`retry_after`]), and whether its request may be
/// repeated (`idempotent`; see [`is_idempotent`]):
///
/// | status | class | retry |
/// |---|---|---|
/// | 503 with Retry-After | [`Class::TripNow`] for at least the delay | after the delay, overload |
/// | 503 | FAILURE | yes, overload |
/// | 429 with Retry-After | FAILURE | after the delay, overload |
/// | 429 | FAILURE | yes, overload |
/// | other 5xx | FAILURE | yes |
/// | 408 Request Timeout | FAILURE | yes |
/// | other 4xx | BAD_REQUEST | no |
/// | below 400 | IGNORED (not an error of the dependency) | no |
///
/// A request that is not idempotent is never retried (a POST may have been applied before the
/// error), whatever the status; say `idempotent = true` for one you know is safe to repeat.
/// A delay that does not fit in the execution's remaining deadline makes the execution go to
/// its fallback at once.
///
/// ```
/// use hystrix::http::classify_status;
/// use hystrix::Class;
/// use std::time::Duration;
///
/// let (class, retry) = classify_status(503, Some(Duration::from_secs(30)), true);
/// assert_eq!(class, Class::TripNow { min_open: Some(Duration::from_secs(30)) });
/// assert_eq!(retry.min_delay(), Some(Duration::from_secs(30)));
/// let (class, retry) = classify_status(500, None, false);
/// assert_eq!(class, Class::Failure);
/// assert!(!retry.is_retryable()); // a POST: never repeated
/// let (class, retry) = classify_status(404, None, true);
/// assert_eq!(class, Class::BadRequest);
/// assert!(!retry.is_retryable());
/// ```
pub fn classify_status(
    status: u16,
    retry_after: Option<Duration>,
    idempotent: bool,
) -> (Class, RetryAnswer) {
    let retry = |answer: RetryAnswer| {
        if idempotent {
            answer
        } else {
            RetryAnswer::never()
        }
    };
    let after = |answer: RetryAnswer| match retry_after {
        Some(delay) => answer.after(delay),
        None => answer,
    };
    match status {
        503 => {
            let class = match retry_after {
                Some(delay) => Class::TripNow {
                    min_open: Some(delay),
                },
                None => Class::Failure,
            };
            (class, retry(after(RetryAnswer::retry().overloaded())))
        }
        429 => (
            Class::Failure,
            retry(after(RetryAnswer::retry().overloaded())),
        ),
        408 | 500..=599 => (Class::Failure, retry(RetryAnswer::retry())),
        400..=499 => (Class::BadRequest, RetryAnswer::never()),
        _ => (Class::Ignored, RetryAnswer::never()),
    }
}

/// Whether requests of this method may be repeated (RFC 9110 §9.2.2): GET, HEAD, OPTIONS,
/// TRACE, PUT and DELETE are; POST, PATCH, CONNECT and unknown methods are not. Any case.
pub fn is_idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]
        .iter()
        .any(|idempotent| idempotent.eq_ignore_ascii_case(method))
}

/// [`classify_status`] for a response of the `http` crate (hyper, axum, ureq; reqwest's
/// `status()` and `headers()` are these types too): its status, its `Retry-After` header
/// read against the wall clock, and its request's `method` ([`is_idempotent`]).
///
/// ```
/// use hystrix::http::classify_response;
/// use hystrix::Class;
///
/// let response = http::Response::builder()
///     .status(429)
///     .header("retry-after", "2")
///     .body(())
///     .unwrap();
/// let (class, retry) = classify_response(&response, &http::Method::GET);
/// assert_eq!(class, Class::Failure);
/// assert_eq!(retry.min_delay(), Some(std::time::Duration::from_secs(2)));
/// assert!(retry.is_overload());
/// ```
#[cfg(feature = "http")]
pub fn classify_response<B>(
    response: &::http::Response<B>,
    method: &::http::Method,
) -> (Class, RetryAnswer) {
    classify_parts(response.status(), response.headers(), method)
}

/// [`classify_response`] from a response's parts (e.g. reqwest's `status()` and `headers()`).
#[cfg(feature = "http")]
pub fn classify_parts(
    status: ::http::StatusCode,
    headers: &::http::HeaderMap,
    method: &::http::Method,
) -> (Class, RetryAnswer) {
    classify_head(status, headers, is_idempotent(method.as_str()))
}

/// [`classify_status`] of a status and its headers' `Retry-After` (read against the wall
/// clock), for a request that may be repeated or not.
#[cfg(feature = "http")]
pub(crate) fn classify_head(
    status: ::http::StatusCode,
    headers: &::http::HeaderMap,
    idempotent: bool,
) -> (Class, RetryAnswer) {
    let delay = headers
        .get(::http::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| retry_after(value, SystemTime::now()));
    classify_status(status.as_u16(), delay, idempotent)
}

/// The status code an HTTP server answers with when a call of a command ended in `error`
/// (the mapping of `HystrixLayer::errors_as_responses`, features `tower` and `http`):
///
/// | the call ended in | status |
/// |---|---|
/// | a short-circuit (open breaker) or a rejection (semaphore, thread pool, adaptive limit, priority reserve, throttling, fallback semaphore) | 503 Service Unavailable |
/// | a timeout | 504 Gateway Timeout |
/// | a misuse of the API, or no request context for a request-scoped feature (this server's own fault) | 500 Internal Server Error |
/// | any other failure (the dependency's error, a panic, an injected fault) | 502 Bad Gateway |
///
/// ```
/// use hystrix::http::error_status;
/// use hystrix::{Command, FailureType, IsolationStrategy, Registry};
///
/// let registry = Registry::new();
/// let command = Command::builder("Users")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(&registry)?;
/// let err = command.run(|| Err::<(), _>("refused")).execute().unwrap_err();
/// assert_eq!(err.failure_type(), FailureType::CommandException);
/// assert_eq!(error_status(&err), 502);
/// command.circuit_breaker().force_open();
/// let err = command.run(|| Ok::<_, &str>(())).execute().unwrap_err();
/// assert_eq!(error_status(&err), 503);
/// # Ok::<(), hystrix::ConfigError>(())
/// ```
pub fn error_status<E>(error: &HystrixError<E>) -> u16 {
    match error.failure_type() {
        FailureType::Misuse | FailureType::NoRequestContext => 500,
        FailureType::RejectedSemaphoreFallback => 503,
        _ if error.is_rejection() => 503,
        _ if error.is_timeout() => 504,
        _ => 502,
    }
}

/// An empty response with [`error_status`]'s status for `error`, as an HTTP server answers a
/// call that ended in it (its body is `B::default()`, e.g. an empty axum `Body`).
///
/// ```
/// use hystrix::http::error_response;
/// use hystrix::{Command, IsolationStrategy, Registry};
///
/// let registry = Registry::new();
/// let command = Command::builder("Users")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(&registry)?;
/// command.circuit_breaker().force_open();
/// let err = command.run(|| Ok::<_, &str>(())).execute().unwrap_err();
/// let response: http::Response<String> = error_response(&err);
/// assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(response.body(), "");
/// # Ok::<(), hystrix::ConfigError>(())
/// ```
#[cfg(feature = "http")]
pub fn error_response<E, B: Default>(error: &HystrixError<E>) -> ::http::Response<B> {
    let mut response = ::http::Response::new(B::default());
    *response.status_mut() = ::http::StatusCode::from_u16(error_status(error))
        .unwrap_or(::http::StatusCode::BAD_GATEWAY);
    response
}

/// The delay a `Retry-After` header value asks for (RFC 9110 §10.2.3), or `None` when `value`
/// is neither form.
///
/// - **delay-seconds**: one or more ASCII digits, e.g. `"120"` → 120 s. A sign, a fraction, an
///   exponent or a number over `u64::MAX` seconds is not one (`None`).
/// - **HTTP-date**, e.g. `"Wed, 21 Oct 2015 07:28:00 GMT"` (also the obsolete RFC 850 and
///   asctime forms): the time from `now` to that date, in whole seconds as the date has them
///   less `now`'s fraction of a second; a date at or before `now` gives [`Duration::ZERO`].
///
/// Spaces and tabs around the value are ignored. Never panics, whatever `value` is.
///
/// ```
/// use hystrix::http::retry_after;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
///
/// // 2015-10-21T07:26:00Z, two minutes before the date below.
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_360);
/// assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
///     Some(Duration::from_secs(120))
/// );
/// assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
/// assert_eq!(retry_after("soon", now), None);
/// // For a live response, measure from the wall clock.
/// let _delay = retry_after("5", SystemTime::now());
/// ```
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim_matches([' ', '\t']);
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Only digits: `parse` fails only on overflow.
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    /// 2015-10-21T07:28:00Z.
    const DATE_SECS: u64 = 1_445_412_480;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn delay_seconds() {
        let now = at(DATE_SECS);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(retry_after("007", now), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after("18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn surrounding_spaces_and_tabs_are_ignored() {
        let now = at(DATE_SECS - 60);
        assert_eq!(
            retry_after(" \t120 \t", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            retry_after("  Wed, 21 Oct 2015 07:28:00 GMT\t", now),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn statuses_answer_both_questions() {
        let secs = Duration::from_secs;
        let cases = [
            (
                503,
                Some(secs(5)),
                Class::TripNow {
                    min_open: Some(secs(5)),
                },
                true,
                Some(secs(5)),
                true,
            ),
            (503, None, Class::Failure, true, None, true),
            (
                429,
                Some(secs(2)),
                Class::Failure,
                true,
                Some(secs(2)),
                true,
            ),
            (500, None, Class::Failure, true, None, false),
            (502, Some(secs(1)), Class::Failure, true, None, false),
            (408, None, Class::Failure, true, None, false),
            (404, None, Class::BadRequest, false, None, false),
            (400, None, Class::BadRequest, false, None, false),
            (200, None, Class::Ignored, false, None, false),
        ];
        for (status, delay, class, retryable, min_delay, overload) in cases {
            let (got, answer) = classify_status(status, delay, true);
            assert_eq!(got, class, "{status}");
            assert_eq!(answer.is_retryable(), retryable, "{status}");
            assert_eq!(answer.min_delay(), min_delay, "{status}");
            assert_eq!(answer.is_overload(), overload, "{status}");
            // Not idempotent: the class stays, the request is never repeated.
            let (got, answer) = classify_status(status, delay, false);
            assert_eq!(got, class, "{status}");
            assert!(!answer.is_retryable(), "{status}");
        }
    }

    #[test]
    fn idempotent_methods() {
        for method in ["GET", "head", "Options", "TRACE", "PUT", "DELETE"] {
            assert!(is_idempotent(method), "{method}");
        }
        for method in ["POST", "PATCH", "CONNECT", "PURGE", ""] {
            assert!(!is_idempotent(method), "{method}");
        }
    }

    #[test]
    fn malformed_numbers_are_none() {
        let now = at(DATE_SECS);
        for value in [
            "",
            "   ",
            "-1",
            "+5",
            "1.5",
            "1e3",
            "1 2",
            "0x10",
            "١٢",
            "18446744073709551616",
            "99999999999999999999999",
        ] {
            assert_eq!(retry_after(value, now), None, "{value:?}");
        }
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let now = at(DATE_SECS - 90);
        for value in [
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "Wednesday, 21-Oct-15 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2015",
        ] {
            assert_eq!(
                retry_after(value, now),
                Some(Duration::from_secs(90)),
                "{value:?}"
            );
        }
    }

    #[test]
    fn http_date_counts_from_now_including_its_fraction() {
        let now = at(DATE_SECS - 2) + Duration::from_millis(250);
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_millis(1750))
        );
    }

    #[test]
    fn a_date_now_or_past_is_zero() {
        let value = "Wed, 21 Oct 2015 07:28:00 GMT";
        assert_eq!(retry_after(value, at(DATE_SECS)), Some(Duration::ZERO));
        assert_eq!(
            retry_after(value, at(DATE_SECS + 3600)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn malformed_dates_are_none() {
        let now = at(DATE_SECS);
        for value in [
            "Wed, 21 Oct 2015 07:28:00",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "Wed, 21 Oct 2015 25:28:00 GMT",
            "2015-10-21T07:28:00Z",
            "tomorrow",
        ] {
            assert_eq!(retry_after(value, now), None, "{value:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(value in any::<String>(), secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
            // Any instant SystemTime can hold here; the sum cannot overflow it on 64-bit hosts.
            let now = UNIX_EPOCH
                .checked_add(Duration::new(secs / 4, nanos))
                .unwrap_or(UNIX_EPOCH);
            let _ = retry_after(&value, now);
        }

        #[test]
        fn any_u64_of_digits_is_that_many_seconds(secs in any::<u64>(), pad in " {0,3}") {
            let value = format!("{pad}{secs}{pad}");
            prop_assert_eq!(retry_after(&value, at(0)), Some(Duration::from_secs(secs)));
        }

        #[test]
        fn date_like_strings_never_panic(value in "[A-Za-z]{3}, [0-9]{1,2} [A-Za-z]{3} [0-9]{1,5} [0-9]{2}:[0-9]{2}:[0-9]{2} [A-Z]{3}") {
            let _ = retry_after(&value, at(DATE_SECS));
        }
    }
}
