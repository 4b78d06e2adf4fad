//! Helpers for commands that call HTTP services: reading what an HTTP error tells the breaker.
//!
//! **Accelerated tripping** (SPEC Part C): a `503 Service Unavailable` (or `429 Too Many
//! Requests`) with a `Retry-After` header says the server wants no requests for a while. A
//! classifier can turn such a response into a trip of the breaker now, open for at least the
//! delay [`retry_after`] reads from the header, instead of waiting for the error percentage to
//! cross its threshold.

use std::time::{Duration, SystemTime};

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
