//! The breaker's state as one atomic word, so that every transition and every trial admission is
//! a single compare-and-swap (and can be model-checked with loom: `RUSTFLAGS="--cfg
//! hystrix_loom"`, a private cfg, so dependencies such as tokio keep their normal build).
//!
//! Layout: status (2 bits) | generation (30 bits) | trial slots taken (16 bits) | trial
//! successes (16 bits). The generation grows on every transition; an outcome carries the
//! generation it was admitted in and moves the breaker only if it is still current.

#[cfg(hystrix_loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(hystrix_loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// CLOSED, OPEN or HALF_OPEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Executions are allowed; health counts may trip it.
    Closed,
    /// Executions are short-circuited until the sleep window has passed.
    Open,
    /// Trial executions are allowed, up to the half-open budget.
    HalfOpen,
}

/// A decoded state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) status: Status,
    pub(crate) generation: u32,
    pub(crate) taken: u16,
    pub(crate) successes: u16,
}

pub(crate) const GENERATION_MASK: u64 = (1 << 30) - 1;

impl Word {
    fn encode(self) -> u64 {
        let status = match self.status {
            Status::Closed => 0,
            Status::Open => 1,
            Status::HalfOpen => 2,
        };
        status
            | (u64::from(self.generation) & GENERATION_MASK) << 2
            | u64::from(self.taken) << 32
            | u64::from(self.successes) << 48
    }

    fn decode(word: u64) -> Self {
        Word {
            status: match word & 3 {
                0 => Status::Closed,
                1 => Status::Open,
                _ => Status::HalfOpen,
            },
            generation: ((word >> 2) & GENERATION_MASK) as u32,
            taken: (word >> 32) as u16,
            successes: (word >> 48) as u16,
        }
    }

    /// The next generation in `status`, with no trial taken.
    fn next(self, status: Status) -> Self {
        Word {
            status,
            generation: (self.generation + 1) & GENERATION_MASK as u32,
            taken: 0,
            successes: 0,
        }
    }
}

/// What a trial's success did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrialSuccess {
    /// It was the last success needed: the breaker closed (the new generation).
    Closed(u32),
    /// More successes are needed.
    Counted,
    /// The trial was from an older generation: nothing moved.
    Stale,
}

/// The breaker's state word.
#[derive(Debug, Default)]
pub(crate) struct State(AtomicU64);

impl State {
    /// Whether it is OPEN now (one load, nothing else decoded).
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire) & 3 == 1
    }

    pub(crate) fn load(&self) -> Word {
        Word::decode(self.0.load(Ordering::Acquire))
    }

    /// Applies `change` to the current word until it succeeds or `change` declines (`None`);
    /// returns the word written.
    fn update(&self, mut change: impl FnMut(Word) -> Option<Word>) -> Option<Word> {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let next = change(Word::decode(current))?;
            match self.0.compare_exchange_weak(
                current,
                next.encode(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(next),
                Err(seen) => current = seen,
            }
        }
    }

    /// Moves from `from` (its exact generation) to `to` in the next generation; `None` if the
    /// state is no longer `from`.
    pub(crate) fn transition(&self, from: Word, to: Status) -> Option<Word> {
        self.update(|word| (word == from).then(|| word.next(to)))
    }

    /// Moves to `to` in the next generation whatever the state (manual overrides).
    pub(crate) fn force(&self, to: Status) -> Word {
        self.update(|word| Some(word.next(to)))
            .unwrap_or_else(|| unreachable!("force always writes"))
    }

    /// CLOSED → OPEN in the next generation, if still CLOSED in `generation`.
    pub(crate) fn trip(&self, generation: u32) -> Option<Word> {
        self.update(|word| {
            (word.status == Status::Closed && word.generation == generation)
                .then(|| word.next(Status::Open))
        })
    }

    /// Takes a trial slot if HALF_OPEN with fewer than `permitted` taken; returns the generation.
    pub(crate) fn take_trial(&self, permitted: u16) -> Option<u32> {
        self.update(|word| {
            (word.status == Status::HalfOpen && word.taken < permitted).then(|| Word {
                taken: word.taken + 1,
                ..word
            })
        })
        .map(|word| word.generation)
    }

    /// Gives back a trial slot of `generation` (cancelled, dropped, bad request).
    pub(crate) fn give_back(&self, generation: u32) {
        self.update(|word| {
            // `then`, not `then_some`: the new word is computed only when it is valid.
            (word.status == Status::HalfOpen && word.generation == generation && word.taken > 0)
                .then(|| Word {
                    taken: word.taken - 1,
                    ..word
                })
        });
    }

    /// A trial of `generation` succeeded; with `threshold` successes the breaker closes.
    pub(crate) fn trial_succeeded(&self, generation: u32, threshold: u16) -> TrialSuccess {
        let written = self.update(|word| {
            if word.status != Status::HalfOpen || word.generation != generation {
                return None;
            }
            let successes = word.successes + 1;
            Some(if successes >= threshold {
                word.next(Status::Closed)
            } else {
                Word { successes, ..word }
            })
        });
        match written {
            None => TrialSuccess::Stale,
            Some(word) if word.status == Status::Closed => TrialSuccess::Closed(word.generation),
            Some(_) => TrialSuccess::Counted,
        }
    }

    /// A trial of `generation` failed: HALF_OPEN → OPEN in the next generation; `None` if stale.
    pub(crate) fn trial_failed(&self, generation: u32) -> Option<Word> {
        self.update(|word| {
            (word.status == Status::HalfOpen && word.generation == generation)
                .then(|| word.next(Status::Open))
        })
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let word = Word {
            status: Status::HalfOpen,
            generation: (1 << 30) - 1,
            taken: 65_535,
            successes: 7,
        };
        assert_eq!(Word::decode(word.encode()), word);
        assert_eq!(word.next(Status::Open).generation, 0);
    }

    #[test]
    fn only_the_budget_of_trials_is_admitted_and_stale_outcomes_move_nothing() {
        let state = State::default();
        let closed = state.load();
        let open = state.trip(closed.generation).unwrap();
        assert_eq!(state.trip(closed.generation), None);
        let half = state.transition(open, Status::HalfOpen).unwrap();
        assert_eq!(state.take_trial(2), Some(half.generation));
        assert_eq!(state.take_trial(2), Some(half.generation));
        assert_eq!(state.take_trial(2), None);
        state.give_back(half.generation);
        assert_eq!(state.take_trial(2), Some(half.generation));
        assert_eq!(
            state.trial_succeeded(half.generation, 2),
            TrialSuccess::Counted
        );
        assert_eq!(
            state.trial_succeeded(open.generation, 2),
            TrialSuccess::Stale
        );
        let TrialSuccess::Closed(generation) = state.trial_succeeded(half.generation, 2) else {
            panic!("two successes close it");
        };
        assert_eq!(state.load().status, Status::Closed);
        assert_eq!(state.trial_failed(half.generation), None);
        assert_eq!(state.load().generation, generation);
    }
}

#[cfg(all(test, hystrix_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Three threads race for one trial slot in a fresh HALF_OPEN period: exactly one wins.
    #[test]
    fn only_the_budgeted_trials_pass_under_concurrency() {
        loom::model(|| {
            let state = Arc::new(State::default());
            let open = state.trip(0).unwrap();
            state.transition(open, Status::HalfOpen).unwrap();
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let state = Arc::clone(&state);
                    thread::spawn(move || state.take_trial(1).is_some())
                })
                .collect();
            let admitted = handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|admitted| *admitted)
                .count();
            assert_eq!(admitted, 1);
            assert_eq!(state.load().taken, 1);
        });
    }

    /// A trial's failure and a stale success race: the breaker ends OPEN, never CLOSED.
    #[test]
    fn a_stale_success_never_closes_a_reopened_breaker() {
        loom::model(|| {
            let state = Arc::new(State::default());
            let open = state.trip(0).unwrap();
            let half = state.transition(open, Status::HalfOpen).unwrap();
            let trial = state.take_trial(2).unwrap();
            let second = state.take_trial(2).unwrap();
            let failer = {
                let state = Arc::clone(&state);
                thread::spawn(move || {
                    state.trial_failed(trial);
                })
            };
            let succeeder = {
                let state = Arc::clone(&state);
                thread::spawn(move || state.trial_succeeded(second, 1))
            };
            failer.join().unwrap();
            let success = succeeder.join().unwrap();
            let end = state.load();
            match success {
                // The success came first and closed it; the failure was then stale.
                TrialSuccess::Closed(_) => assert_eq!(end.status, Status::Closed),
                _ => assert_eq!(end.status, Status::Open),
            }
            assert_ne!(end.generation, half.generation);
        });
    }

    /// Giving a slot back while others take: never more than the budget, never below zero.
    #[test]
    fn slots_given_back_are_reused_without_exceeding_the_budget() {
        loom::model(|| {
            let state = Arc::new(State::default());
            let open = state.trip(0).unwrap();
            state.transition(open, Status::HalfOpen).unwrap();
            let first = state.take_trial(1).unwrap();
            let giver = {
                let state = Arc::clone(&state);
                thread::spawn(move || state.give_back(first))
            };
            let taker = {
                let state = Arc::clone(&state);
                thread::spawn(move || state.take_trial(1))
            };
            giver.join().unwrap();
            let taken = taker.join().unwrap();
            let end = state.load();
            assert!(end.taken <= 1);
            assert_eq!(end.taken, u16::from(taken.is_some()));
        });
    }
}
