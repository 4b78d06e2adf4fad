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
//! Only CRITICAL and SHEDDABLE executions are counted apart (NORMAL's count is the rest), so an
//! execution without a priority costs nothing more while no reserve is set.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How much an execution matters when its dependency is under pressure (our extension, after
/// Netflix concurrency-limits' partitions and the "criticality" of Google's SRE book).
///
/// Set it per call with [`Execution::priority`](crate::command::Execution::priority) (or per
/// request with [`HystrixLayer::priority_with`](crate::tower::HystrixLayer::priority_with) when
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

    /// The class's name in capitals, as in metrics and logs: `CRITICAL`, `NORMAL`, `SHEDDABLE`.
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

/// How many of `bound` places `percent` (0-100) reserves: rounded up, so a reserve above 0 keeps
/// at least one place.
pub(crate) fn reserved_places(bound: u32, percent: u32) -> u32 {
    let places = (u64::from(bound) * u64::from(percent.min(100))).div_ceil(100);
    u32::try_from(places).unwrap_or(bound)
}

/// The executions in flight by class, as admission reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// All executions holding a permit.
    pub(crate) total: u32,
    pub(crate) critical: u32,
    pub(crate) sheddable: u32,
}

impl InFlight {
    /// NORMAL executions: the rest (never below 0 while counts move).
    pub(crate) fn normal(&self) -> u32 {
        self.total
            .saturating_sub(self.critical)
            .saturating_sub(self.sheddable)
    }
}

/// The admission bound of class `priority`: `bound` less the unused reserves of the classes
/// above it (`reserves`: CRITICAL's and NORMAL's percentages). An execution of the class is
/// admitted while fewer than this many are in flight in all.
pub(crate) fn class_bound(
    priority: Priority,
    bound: u32,
    reserves: (u32, u32),
    in_flight: InFlight,
) -> u32 {
    let unused = |percent: u32, used: u32| reserved_places(bound, percent).saturating_sub(used);
    match priority {
        Priority::Critical => bound,
        Priority::Normal => bound.saturating_sub(unused(reserves.0, in_flight.critical)),
        Priority::Sheddable => bound
            .saturating_sub(unused(reserves.0, in_flight.critical))
            .saturating_sub(unused(reserves.1, in_flight.normal())),
    }
}

/// A command key's counts by class (boxed in its state: off the hot path).
#[derive(Debug, Default)]
pub(crate) struct Priorities {
    critical_in_flight: AtomicU32,
    sheddable_in_flight: AtomicU32,
    /// Admitted and refused by class, counted while a reserve is set (cumulative).
    admitted: [AtomicU64; 3],
    refused: [AtomicU64; 3],
}

impl Priorities {
    /// The in-flight counter of a class counted apart (`None` for NORMAL).
    fn in_flight_of(&self, priority: Priority) -> Option<&AtomicU32> {
        match priority {
            Priority::Critical => Some(&self.critical_in_flight),
            Priority::Normal => None,
            Priority::Sheddable => Some(&self.sheddable_in_flight),
        }
    }

    /// The executions in flight by class, `total` being all permits held.
    pub(crate) fn in_flight(&self, total: u32) -> InFlight {
        InFlight {
            total,
            critical: self.critical_in_flight.load(Ordering::Acquire),
            sheddable: self.sheddable_in_flight.load(Ordering::Acquire),
        }
    }

    /// An execution of `priority` is about to try for a permit: counted in its class first, so
    /// a lower class never sees the place as free reserve.
    pub(crate) fn enter(&self, priority: Priority) {
        if let Some(count) = self.in_flight_of(priority) {
            count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// An execution of `priority` gave its permit back, or was refused one after
    /// [`enter`](Self::enter).
    pub(crate) fn leave(&self, priority: Priority) {
        if let Some(count) = self.in_flight_of(priority) {
            count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Counts an admission (`true`) or a refusal of `priority`.
    pub(crate) fn count(&self, priority: Priority, admitted: bool) {
        let counts = if admitted {
            &self.admitted
        } else {
            &self.refused
        };
        counts[priority.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts by class, with `total` permits held and the reserves in places of `bound`.
    pub(crate) fn snapshot(
        &self,
        total: u32,
        bound: u32,
        reserves: (u32, u32),
    ) -> PrioritySnapshot {
        let in_flight = self.in_flight(total);
        let class = |priority: Priority, now: u32| ClassCounts {
            in_flight: now,
            admitted: self.admitted[priority.index()].load(Ordering::Relaxed),
            refused: self.refused[priority.index()].load(Ordering::Relaxed),
        };
        PrioritySnapshot {
            critical: class(Priority::Critical, in_flight.critical),
            normal: class(Priority::Normal, in_flight.normal()),
            sheddable: class(Priority::Sheddable, in_flight.sheddable),
            critical_reserved: reserved_places(bound, reserves.0),
            normal_reserved: reserved_places(bound, reserves.1),
        }
    }
}

/// One class's executions (see [`PrioritySnapshot`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Executions of the class holding a permit now.
    pub in_flight: u32,
    /// Executions of the class admitted since the key was created, counted while a reserve is
    /// set (cumulative).
    pub admitted: u64,
    /// Executions of the class refused a permit (SEMAPHORE_REJECTED or LIMIT_REJECTED) since
    /// the key was created, counted while a reserve is set (cumulative).
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
    /// rounded up).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(total: u32, critical: u32, sheddable: u32) -> InFlight {
        InFlight {
            total,
            critical,
            sheddable,
        }
    }

    #[test]
    fn reserves_round_up_and_never_pass_the_bound() {
        assert_eq!(reserved_places(10, 0), 0);
        assert_eq!(reserved_places(10, 25), 3);
        assert_eq!(reserved_places(10, 30), 3);
        assert_eq!(reserved_places(1, 1), 1);
        assert_eq!(reserved_places(0, 50), 0);
        assert_eq!(reserved_places(7, 100), 7);
        assert_eq!(reserved_places(u32::MAX, 100), u32::MAX);
    }

    #[test]
    fn without_reserves_every_class_has_the_whole_bound() {
        for priority in Priority::ALL {
            assert_eq!(class_bound(priority, 10, (0, 0), at(4, 1, 1)), 10);
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
        assert_eq!(class_bound(Priority::Normal, 10, reserves, at(2, 2, 0)), 9);
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(2, 2, 0)),
            7
        );
        // Four CRITICAL (past the reserve) and two NORMAL: nothing is held any more.
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(6, 4, 0)),
            10
        );
        // One NORMAL and three SHEDDABLE in flight: NORMAL's reserve has 1 place unused.
        assert_eq!(
            class_bound(Priority::Sheddable, 10, reserves, at(4, 0, 3)),
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
    fn counts_by_class_derive_normal_from_the_total() {
        let priorities = Priorities::default();
        priorities.enter(Priority::Critical);
        priorities.enter(Priority::Sheddable);
        priorities.enter(Priority::Sheddable);
        priorities.enter(Priority::Normal);
        priorities.count(Priority::Critical, true);
        priorities.count(Priority::Sheddable, false);
        let snap = priorities.snapshot(5, 10, (30, 0));
        assert_eq!(snap.critical.in_flight, 1);
        assert_eq!(snap.sheddable.in_flight, 2);
        assert_eq!(snap.normal.in_flight, 2);
        assert_eq!(snap.critical.admitted, 1);
        assert_eq!(snap.sheddable.refused, 1);
        assert_eq!(snap.critical_reserved, 3);
        priorities.leave(Priority::Sheddable);
        assert_eq!(priorities.in_flight(4), at(4, 1, 1));
    }
}
