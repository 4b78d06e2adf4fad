//! Priorities under pressure: the share of a command key's admission bound reserved for its
//! higher classes (`execution.isolation.priority.*.reservedPercentage`).
//!
//! An execution carries a [`Priority`] (NORMAL unless the caller says otherwise). Where a
//! semaphore admits executions (SEMAPHORE isolation, or any isolation with adaptive limits), a
//! class is admitted only while the executions in flight leave the higher classes' unused
//! reserve free: each higher class counts as holding at least its reserve. CRITICAL is admitted
//! up to the whole bound; NORMAL leaves CRITICAL's reserve free; SHEDDABLE leaves both. So under
//! pressure SHEDDABLE is refused first, then NORMAL, and a CRITICAL call still finds its
//! reserve at a load that sheds the others. The bound is never exceeded (unlike Netflix's
//! partitioned limiter, which lets a class under its share overshoot the limit): a reserve its
//! class does not use stays free, which is its price.
//!
//! While no reserve is set, executions are not counted by class at all, so a priority costs
//! nothing then; while one is, every admission reads and updates the three classes' counts in
//! one compare-and-swap.

#[cfg(hystrix_loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(hystrix_loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// How much an execution matters when its dependency is under pressure (our extension, after
/// Netflix concurrency-limits' partitions and the "criticality" of Google's SRE book).
///
/// Set it per call with [`Execution::priority`](crate::command::Execution::priority) (or per
/// request with `HystrixLayer::priority_with` (feature `tower`) when
/// the `tower` feature is on). It matters only once a reserve is set
/// (`execution.isolation.priority.critical.reservedPercentage`,
/// `execution.isolation.priority.normal.reservedPercentage`, both 0 by default), and only where
/// a semaphore admits executions: SEMAPHORE isolation, or THREAD isolation with adaptive limits
/// (`execution.isolation.adaptive.enabled`), whose limit is applied before the pool. A THREAD
/// pool alone admits by its queue and ignores it.
///
/// ```
/// use hystrix::Priority;
///
/// assert_eq!(Priority::default(), Priority::Normal);
/// assert_eq!("sheddable".parse::<Priority>(), Ok(Priority::Sheddable));
/// assert_eq!(Priority::Critical.name(), "CRITICAL");
/// assert!("urgent".parse::<Priority>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// Refused last: may use the whole admission bound, including the reserves of the classes
    /// below it.
    Critical,
    /// The default. Leaves CRITICAL's unused reserve free.
    #[default]
    Normal,
    /// Refused first: leaves the unused reserves of CRITICAL and NORMAL free.
    Sheddable,
}

impl Priority {
    /// Every class, highest first.
    pub const ALL: [Priority; 3] = [Priority::Critical, Priority::Normal, Priority::Sheddable];

    /// The class's name in capitals, as in error messages and logs: `CRITICAL`, `NORMAL`,
    /// `SHEDDABLE` (`/metrics` labels use it in lowercase: `class="critical"`).
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "CRITICAL",
            Priority::Normal => "NORMAL",
            Priority::Sheddable => "SHEDDABLE",
        }
    }

    /// The index of the class in [`Priority::ALL`] (0 is CRITICAL).
    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`Priority`] (see its `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown priority {0:?}: expected CRITICAL, NORMAL or SHEDDABLE (any case)")]
pub struct UnknownPriority(pub String);

impl std::str::FromStr for Priority {
    type Err = UnknownPriority;

    /// Reads `CRITICAL`, `NORMAL` or `SHEDDABLE`, in any case (e.g. from a request header).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPriority(s.to_owned()))
    }
}

/// The places of `bound` reserved for CRITICAL and for NORMAL, from their percentages
/// (`reserves`, 0-100 each, at most 100 together): each rounded up (a reserve above 0 keeps at
/// least one place), but never the last place of the classes below while they have a share
/// (the percentages add to less than 100), so a lower class is never shut out at a small
/// bound (e.g. an adaptive limit down to 1) by rounding alone.
pub(crate) fn reserve_places(bound: u32, reserves: (u32, u32)) -> (u32, u32) {
    let places = |percent: u32| {
        let percent = percent.min(100);
        let up = (u64::from(bound) * u64::from(percent)).div_ceil(100);
        let up = u32::try_from(up).unwrap_or(bound);
        if percent < 100 {
            up.min(bound.saturating_sub(1))
        } else {
            up
        }
    };
    let critical = places(reserves.0);
    let with_normal = places(reserves.0.saturating_add(reserves.1)).max(critical);
    (critical, with_normal - critical)
}

/// The executions admitted while priority reserves are set, by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) critical: u32,
    pub(crate) normal: u32,
    pub(crate) sheddable: u32,
}

/// Bits per class in the packed word (about two million executions each).
const CLASS_BITS: u32 = 21;
const CLASS_MASK: u64 = (1 << CLASS_BITS) - 1;

impl Counts {
    fn unpack(word: u64) -> Counts {
        let class = |i: u32| (word >> (i * CLASS_BITS) & CLASS_MASK) as u32;
        Counts {
            critical: class(0),
            normal: class(1),
            sheddable: class(2),
        }
    }

    /// One execution of `priority`, as a difference of the packed word.
    fn unit(priority: Priority) -> u64 {
        1 << (priority.index() as u32 * CLASS_BITS)
    }

    /// All classes.
    pub(crate) fn sum(&self) -> u32 {
        self.critical + self.normal + self.sheddable
    }

    fn of(&self, priority: Priority) -> u32 {
        match priority {
            Priority::Critical => self.critical,
            Priority::Normal => self.normal,
            Priority::Sheddable => self.sheddable,
        }
    }
}

/// The admission bound of class `priority`: `bound` less the unused reserves of the classes
/// above it (`reserves`: CRITICAL's and NORMAL's percentages; see [`reserve_places`]), given
/// the executions of each class in flight (`counts`). An execution of the class is admitted
/// while fewer than this many are in flight in all.
pub(crate) fn class_bound(
    priority: Priority,
    bound: u32,
    reserves: (u32, u32),
    counts: Counts,
) -> u32 {
    let (critical, normal) = reserve_places(bound, reserves);
    let unused_critical = critical.saturating_sub(counts.critical);
    match priority {
        Priority::Critical => bound,
        Priority::Normal => bound.saturating_sub(unused_critical),
        Priority::Sheddable => bound
            .saturating_sub(unused_critical)
            .saturating_sub(normal.saturating_sub(counts.normal)),
    }
}

/// How an execution holds its permit: taken without classes (no reserve was set), or counted
/// in its class. Given back with
/// [`CommandState::release_permit`](crate::registry::CommandState::release_permit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    Plain,
    Counted(Priority),
}

/// A command key's executions by class while priority reserves are set (boxed in its state:
/// off the hot path). The three in-flight counts are one atomic word, so an admission reads
/// them and takes its place in its class in one compare-and-swap: no other admission can slip
/// between its look and its take (an attempt that is refused never shows in the counts).
#[derive(Debug, Default)]
pub(crate) struct Priorities {
    /// CRITICAL | NORMAL << 21 | SHEDDABLE << 42.
    word: AtomicU64,
    /// Admitted and refused by class, counted while a reserve is set (cumulative).
    admitted: [std::sync::atomic::AtomicU64; 3],
    refused: [std::sync::atomic::AtomicU64; 3],
}

impl Priorities {
    /// The executions in flight by class.
    pub(crate) fn counts(&self) -> Counts {
        Counts::unpack(self.word.load(Ordering::Acquire))
    }

    /// Admits an execution of `priority` under `bound` and `reserves` if its class's bound
    /// ([`class_bound`]) allows, counting it in its class. `in_use` reads all the permits
    /// held (executions admitted without classes too); the caller takes the permit itself
    /// after this (counted here first, so the total is the larger of the two). Returns how
    /// many are in flight with this one, or `None` when refused.
    pub(crate) fn admit(
        &self,
        priority: Priority,
        bound: u32,
        reserves: (u32, u32),
        in_use: impl Fn() -> u32,
    ) -> Option<u32> {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let counts = Counts::unpack(word);
            let total = in_use().max(counts.sum());
            if total >= class_bound(priority, bound, reserves, counts)
                || u64::from(counts.of(priority)) >= CLASS_MASK
            {
                return None;
            }
            match self.word.compare_exchange_weak(
                word,
                word + Counts::unit(priority),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(total + 1),
                Err(now) => word = now,
            }
        }
    }

    /// An execution of `priority` admitted by [`admit`](Self::admit) ended (before its permit
    /// is given back, so the total never reads low).
    pub(crate) fn leave(&self, priority: Priority) {
        self.word
            .fetch_sub(Counts::unit(priority), Ordering::AcqRel);
    }

    /// Counts an admission (`true`) or a refusal of `priority`.
    pub(crate) fn count(&self, priority: Priority, admitted: bool) {
        let counts = if admitted {
            &self.admitted
        } else {
            &self.refused
        };
        counts[priority.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts by class, with the reserves in places of `bound`.
    pub(crate) fn snapshot(&self, bound: u32, reserves: (u32, u32)) -> PrioritySnapshot {
        let counts = self.counts();
        let class = |priority: Priority| ClassCounts {
            in_flight: counts.of(priority),
            admitted: self.admitted[priority.index()].load(std::sync::atomic::Ordering::Relaxed),
            refused: self.refused[priority.index()].load(std::sync::atomic::Ordering::Relaxed),
        };
        let (critical_reserved, normal_reserved) = reserve_places(bound, reserves);
        PrioritySnapshot {
            critical: class(Priority::Critical),
            normal: class(Priority::Normal),
            sheddable: class(Priority::Sheddable),
            critical_reserved,
            normal_reserved,
        }
    }
}

/// One class's executions (see [`PrioritySnapshot`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Attempts of the class holding a permit now (admitted while a reserve was set).
    pub in_flight: u32,
    /// Attempts of the class given a permit since the key was created, counted while a
    /// reserve is set (cumulative). Each attempt of a retried execution and each hedge asks
    /// for its own permit, so a retried execution counts once per attempt.
    pub admitted: u64,
    /// Executions of the class refused a permit (SEMAPHORE_REJECTED or LIMIT_REJECTED, after
    /// any wait for a place) since the key was created, counted while a reserve is set
    /// (cumulative). A hedge that finds no place is skipped, not counted here.
    pub refused: u64,
}

/// A command's executions by [`Priority`] at one instant (see
/// [`CommandMetrics::priorities`](crate::CommandMetrics::priorities)): present while
/// `execution.isolation.priority.critical.reservedPercentage` or
/// `execution.isolation.priority.normal.reservedPercentage` is above 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrioritySnapshot {
    /// CRITICAL executions.
    pub critical: ClassCounts,
    /// NORMAL executions (those without a priority too).
    pub normal: ClassCounts,
    /// SHEDDABLE executions.
    pub sheddable: ClassCounts,
    /// Places of the admission bound reserved for CRITICAL (its percentage of the bound,
    /// rounded up, but never the last place of the classes below while they have a share).
    pub critical_reserved: u32,
    /// Places of the admission bound reserved for NORMAL and above, against SHEDDABLE.
    pub normal_reserved: u32,
}

impl PrioritySnapshot {
    /// The counts of one class.
    pub fn class(&self, priority: Priority) -> ClassCounts {
        match priority {
            Priority::Critical => self.critical,
            Priority::Normal => self.normal,
            Priority::Sheddable => self.sheddable,
        }
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    fn at(critical: u32, normal: u32, sheddable: u32) -> Counts {
        Counts {
            critical,
            normal,
            sheddable,
        }
    }

    #[test]
    fn a_snapshot_gives_each_class_its_own_counts() {
        let counts = |n: u32| ClassCounts {
            in_flight: n,
            admitted: u64::from(n) * 10,
            refused: u64::from(n) * 100,
        };
        let snapshot = PrioritySnapshot {
            critical: counts(1),
            normal: counts(2),
            sheddable: counts(3),
            ..PrioritySnapshot::default()
        };
        assert_eq!(snapshot.class(Priority::Critical), counts(1));
        assert_eq!(snapshot.class(Priority::Normal), counts(2));
        assert_eq!(snapshot.class(Priority::Sheddable), counts(3));
    }

    #[test]
    fn reserves_round_up_but_leave_the_lower_classes_a_place() {
        assert_eq!(reserve_places(10, (0, 0)), (0, 0));
        assert_eq!(reserve_places(10, (25, 0)), (3, 0));
        assert_eq!(reserve_places(10, (30, 20)), (3, 2));
        assert_eq!(reserve_places(20, (60, 30)), (12, 6));
        // A small bound: rounding up never takes the last place of a class with a share.
        assert_eq!(reserve_places(1, (10, 0)), (0, 0));
        assert_eq!(reserve_places(2, (60, 30)), (1, 0));
        assert_eq!(reserve_places(3, (60, 30)), (2, 0));
        // Shares of 100 % mean it: nothing is left below.
        assert_eq!(reserve_places(1, (100, 0)), (1, 0));
        assert_eq!(reserve_places(10, (60, 40)), (6, 4));
        assert_eq!(reserve_places(0, (50, 50)), (0, 0));
        assert_eq!(reserve_places(u32::MAX, (100, 0)), (u32::MAX, 0));
    }

    #[test]
    fn without_reserves_every_class_has_the_whole_bound() {
        for priority in Priority::ALL {
            assert_eq!(class_bound(priority, 10, (0, 0), at(1, 2, 1)), 10);
        }
    }

    #[test]
    fn lower_classes_leave_the_higher_classes_unused_reserve_free() {
        // Bound 10, CRITICAL reserves 30 % (3 places), NORMAL 20 % (2 places).
        let reserves = (30, 20);
        // Nothing in flight: CRITICAL 10, NORMAL 10 - 3, SHEDDABLE 10 - 3 - 2.
        assert_eq!(
            class_bound(Priority::Critical, 10, reserves, at(0, 0, 0)),
            10
        );
        assert_eq!(class_bound(Priority::Normal, 10, reserves, at(0, 0, 0)), 7);
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(0, 0, 0)),
            5
        );
        // Two CRITICAL in flight use 2 of its 3: one place stays held.
        assert_eq!(class_bound(Priority::Normal, 10, reserves, at(2, 0, 0)), 9);
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(2, 0, 0)),
            7
        );
        // Four CRITICAL (past the reserve) and two NORMAL: nothing is held any more.
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(4, 2, 0)),
            10
        );
        // One NORMAL and three SHEDDABLE in flight: NORMAL's reserve has 1 place unused.
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(0, 1, 3)),
            10 - 3 - 1
        );
    }

    #[test]
    fn reserves_of_the_whole_bound_refuse_sheddable_at_any_load() {
        assert_eq!(
            class_bound(Priority::Sheddable, 10, (60, 40), at(0, 0, 0)),
            0
        );
        assert_eq!(class_bound(Priority::Normal, 10, (60, 40), at(0, 0, 0)), 4);
    }

    #[test]
    fn names_parse_back_in_any_case() {
        for priority in Priority::ALL {
            assert_eq!(priority.name().parse::<Priority>(), Ok(priority));
            assert_eq!(
                priority.name().to_lowercase().parse::<Priority>(),
                Ok(priority)
            );
        }
        assert_eq!(
            "low".parse::<Priority>().unwrap_err().to_string(),
            "unknown priority \"low\": expected CRITICAL, NORMAL or SHEDDABLE (any case)"
        );
    }

    #[test]
    fn admissions_are_counted_in_their_class_and_refusals_never_are() {
        let priorities = Priorities::default();
        let none = || 0;
        // Bound 4, CRITICAL keeps 2: NORMAL gets 2, SHEDDABLE then nothing.
        assert_eq!(
            priorities.admit(Priority::Normal, 4, (50, 0), none),
            Some(1)
        );
        assert_eq!(
            priorities.admit(Priority::Normal, 4, (50, 0), none),
            Some(2)
        );
        assert_eq!(
            priorities.admit(Priority::Sheddable, 4, (50, 0), none),
            None
        );
        assert_eq!(
            priorities.admit(Priority::Critical, 4, (50, 0), none),
            Some(3)
        );
        assert_eq!(priorities.counts(), at(1, 2, 0));
        // Permits held without classes count in the total.
        assert_eq!(priorities.admit(Priority::Critical, 4, (50, 0), || 4), None);
        priorities.leave(Priority::Normal);
        assert_eq!(priorities.counts(), at(1, 1, 0));
        priorities.count(Priority::Sheddable, false);
        let snap = priorities.snapshot(4, (50, 0));
        assert_eq!(snap.critical.in_flight, 1);
        assert_eq!(snap.normal.in_flight, 1);
        assert_eq!(snap.sheddable.refused, 1);
        assert_eq!((snap.critical_reserved, snap.normal_reserved), (2, 0));
    }
}

#[cfg(all(test, hystrix_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU32;
    use loom::thread;

    /// Bound 10, 3 places kept for CRITICAL, 7 NORMAL and 2 CRITICAL in flight: the one free
    /// place is CRITICAL's. One CRITICAL call takes it and gives it back, another tries for it
    /// (and may be refused), while a NORMAL call tries: in no interleaving is the NORMAL one
    /// admitted (an attempt that is refused never shows as holding the reserve).
    #[test]
    fn a_lower_class_never_takes_a_reserved_place_under_concurrency() {
        loom::model(|| {
            let priorities = Arc::new(Priorities::default());
            let in_use = Arc::new(AtomicU32::new(0));
            let admit = |p: &Priorities, in_use: &AtomicU32, priority| {
                let admitted = p
                    .admit(priority, 10, (30, 0), || in_use.load(Ordering::Acquire))
                    .is_some();
                if admitted {
                    in_use.fetch_add(1, Ordering::AcqRel);
                }
                admitted
            };
            for priority in [[Priority::Normal; 7].as_slice(), &[Priority::Critical; 2]].concat() {
                assert!(admit(&priorities, &in_use, priority));
            }
            let critical = |release: bool| {
                let (p, in_use) = (Arc::clone(&priorities), Arc::clone(&in_use));
                thread::spawn(move || {
                    if admit(&p, &in_use, Priority::Critical) && release {
                        p.leave(Priority::Critical);
                        in_use.fetch_sub(1, Ordering::AcqRel);
                    }
                })
            };
            let first = critical(true);
            let second = critical(false);
            let normal = admit(&priorities, &in_use, Priority::Normal);
            first.join().unwrap();
            second.join().unwrap();
            assert!(!normal, "a NORMAL call took CRITICAL's place");
            assert!(priorities.counts().sum() <= 10);
        });
    }
}
