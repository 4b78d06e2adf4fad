//! The retry budget (Finagle's RetryBudget, Envoy's retry budget): retries are at most a share
//! of the requests of a rolling window, plus a floor per second.

use crate::metrics::rolling::{RollingCounts, View};

const REQUESTS: usize = 0;
const RETRIES: usize = 1;
/// Buckets of the budget's window.
const BUCKETS: u32 = 10;

/// What a retry budget counted over its window: what
/// [`Command::retry_budget`](crate::Command::retry_budget) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryBudgetCounts {
    /// Executions of retry-enabled commands (first attempts) in the window.
    pub requests: u64,
    /// Retries granted in the window.
    pub retries: u64,
    /// Retries the budget allows in the window now: `requests × percent / 100 +
    /// minPerSecond × window in s` (rounded down).
    pub allowed: u64,
}

/// Requests and granted retries over the last `window_ms` (the bucket filling included, so a
/// burst counts at once), lock-free.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    counts: RollingCounts<2>,
    view: View,
    window_ms: u64,
}

impl RetryBudget {
    /// A budget over `window_ms` (at least 10 ms, a multiple of 10: validated), in 10 buckets.
    pub(crate) fn new(window_ms: u64) -> Self {
        let bucket_ms = (window_ms / u64::from(BUCKETS)).max(1);
        let view = View::new(bucket_ms, bucket_ms, BUCKETS);
        RetryBudget {
            counts: RollingCounts::new(bucket_ms, view.fine_buckets_kept()),
            view,
            window_ms,
        }
    }

    /// One execution of a retry-enabled command started at `now_ms`.
    #[inline]
    pub(crate) fn deposit(&self, now_ms: u64) {
        self.counts.add(now_ms, REQUESTS, 1);
    }

    /// Grants a retry at `now_ms` if the window's retries are below what `percent` (of the
    /// window's requests) and `min_per_second` allow. Concurrent withdrawals may each see the
    /// same count, so the budget can be exceeded by the number of threads racing for its last
    /// retry.
    pub(crate) fn try_withdraw(&self, now_ms: u64, percent: u32, min_per_second: u32) -> bool {
        let counts = self.counts(now_ms, percent, min_per_second);
        if counts.retries < counts.allowed {
            self.counts.add(now_ms, RETRIES, 1);
            true
        } else {
            false
        }
    }

    /// The window's counts at `now_ms` with these settings.
    pub(crate) fn counts(
        &self,
        now_ms: u64,
        percent: u32,
        min_per_second: u32,
    ) -> RetryBudgetCounts {
        let window = self.view.recent(now_ms);
        let sum = |index: usize| {
            self.counts.sum_by(window.clone(), |counters, tag| {
                u64::from(counters[index].get(tag))
            })
        };
        let requests = sum(REQUESTS);
        let allowed =
            requests * u64::from(percent) / 100 + u64::from(min_per_second) * self.window_ms / 1000;
        RetryBudgetCounts {
            requests,
            retries: sum(RETRIES),
            allowed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_a_share_of_the_requests_plus_a_floor() {
        let budget = RetryBudget::new(10_000);
        for _ in 0..100 {
            budget.deposit(0);
        }
        // 20 % of 100 requests, plus 1 per second over 10 s.
        let granted = (0..100).filter(|_| budget.try_withdraw(0, 20, 1)).count();
        assert_eq!(granted, 30);
        assert_eq!(
            budget.counts(0, 20, 1),
            RetryBudgetCounts {
                requests: 100,
                retries: 30,
                allowed: 30
            }
        );
    }

    #[test]
    fn the_window_forgets_old_requests_and_retries() {
        let budget = RetryBudget::new(1_000);
        for _ in 0..10 {
            budget.deposit(0);
        }
        assert!(budget.try_withdraw(0, 10, 0));
        assert!(!budget.try_withdraw(0, 10, 0));
        // Still in the window at 999 ms; gone at 1 000 ms (10 buckets of 100 ms).
        assert!(!budget.try_withdraw(999, 10, 0));
        assert_eq!(budget.counts(1_000, 10, 0), RetryBudgetCounts::default());
        assert!(!budget.try_withdraw(1_000, 10, 0));
    }
}
