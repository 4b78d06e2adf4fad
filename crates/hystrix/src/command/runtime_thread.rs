//! Whether this thread is one a tokio runtime is driving right now: a worker thread polling a
//! task, or a thread inside `Runtime::block_on`. Blocking such a thread stalls every task the
//! runtime would run on it (all of them, on a current-thread runtime).
//!
//! `tokio::runtime::Handle::try_current()` cannot tell: it also succeeds on the threads of
//! tokio's blocking pool (`spawn_blocking`), where blocking is what they are for, and on any
//! thread inside a `Handle::enter()` guard. What tells them apart is the task budget of tokio's
//! cooperative scheduling (`tokio::task::coop`): a runtime gives every task poll and every
//! `block_on` future a budget (128 units in tokio 1.x), and runs blocking-pool closures and
//! `block_in_place` sections unconstrained. So the check spends the budget with
//! `coop::poll_proceed` (one unit per call, each given back when the probe returns) and looks
//! for the point where tokio would yield: a constrained budget reaches it, an unconstrained one
//! never does.
//!
//! Limits: code inside `tokio::task::unconstrained(..)` on a worker thread looks like a blocking
//! thread (no budget); the check then says "not driven". A probe that exhausts the budget counts
//! once in the runtime's `budget_forced_yield_count` metric. The probe runs only where
//! `Handle::try_current()` succeeds, and costs about a microsecond there.

use std::task::{Context, Poll, Waker};

/// Budget units the probe may spend before it concludes the budget is unconstrained: tokio
/// 1.x gives 128; the margin covers a larger budget in a later version.
const PROBE_UNITS: u32 = 512;

/// Whether a tokio runtime drives this thread now (see the module docs).
pub(crate) fn driven_by_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok() && budget_is_constrained()
}

/// Spends the coop budget until tokio would yield (constrained) or `PROBE_UNITS` were spent
/// (unconstrained). Each unit is given back as the recursion unwinds: a guard dropped without
/// `made_progress()` restores the budget it found.
fn budget_is_constrained() -> bool {
    fn spend(cx: &mut Context<'_>, left: u32) -> bool {
        match tokio::task::coop::poll_proceed(cx) {
            Poll::Pending => true,
            Poll::Ready(_restore) => left > 0 && spend(cx, left - 1),
        }
    }
    spend(&mut Context::from_waker(Waker::noop()), PROBE_UNITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(multi: bool) -> tokio::runtime::Runtime {
        let mut builder = if multi {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        builder.worker_threads(1).build().unwrap()
    }

    #[test]
    fn workers_and_block_on_are_driven_blocking_threads_are_not() {
        assert!(!driven_by_runtime());
        for multi in [false, true] {
            let rt = runtime(multi);
            assert!(rt.block_on(async { driven_by_runtime() }));
            assert!(
                rt.block_on(rt.spawn(async { driven_by_runtime() }))
                    .unwrap()
            );
            let blocking = rt.spawn_blocking(driven_by_runtime);
            assert!(!rt.block_on(blocking).unwrap());
            let _entered = rt.enter();
            assert!(!driven_by_runtime());
        }
        let rt = runtime(true);
        let in_place = rt.spawn(async { tokio::task::block_in_place(driven_by_runtime) });
        assert!(!rt.block_on(in_place).unwrap());
    }

    #[test]
    fn the_probe_gives_the_budget_back() {
        let rt = runtime(false);
        rt.block_on(async {
            // Spend all but one unit; the probe must leave exactly that one.
            let waker = Waker::noop();
            let mut cx = Context::from_waker(waker);
            for _ in 0..127 {
                match tokio::task::coop::poll_proceed(&mut cx) {
                    Poll::Ready(restore) => restore.made_progress(),
                    Poll::Pending => panic!("budget spent early"),
                }
            }
            assert!(driven_by_runtime());
            assert!(tokio::task::coop::has_budget_remaining());
            match tokio::task::coop::poll_proceed(&mut cx) {
                Poll::Ready(restore) => restore.made_progress(),
                Poll::Pending => panic!("the probe kept a unit"),
            }
            assert!(!tokio::task::coop::has_budget_remaining());
        });
    }
}
