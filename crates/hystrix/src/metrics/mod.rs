//! Command metrics: counters per event type and the number of executions running now.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::{EventCounts, EventType, MULTIPLE_MASK, THROWS_MASK};
use crate::key::CommandKey;

/// The live counters of one command key.
///
/// There is no separate gauge of running executions: an execution holds its permit exactly
/// while its user code runs (SPEC Part A 4), so the permits in use are that gauge, and the hot
/// path pays for one counter instead of two.
#[derive(Debug, Default)]
pub(crate) struct CommandCounters {
    cumulative: [AtomicU64; EventType::COUNT],
}

impl CommandCounters {
    /// Counts every event of a finished execution, and EXCEPTION_THROWN if its caller got an
    /// error from a bad request or a failed, rejected, missing or disabled fallback.
    #[inline]
    pub(crate) fn record(&self, events: &EventCounts, fallback_disabled: bool) {
        let bits = events.bits();
        let mut once = bits & !MULTIPLE_MASK;
        while once != 0 {
            let index = once.trailing_zeros() as usize;
            once &= once - 1;
            self.cumulative[index].fetch_add(1, Ordering::Relaxed);
        }
        let mut multiple = bits & MULTIPLE_MASK;
        while multiple != 0 {
            let index = multiple.trailing_zeros() as usize;
            multiple &= multiple - 1;
            let count = events.count(EventType::ALL[index]);
            self.cumulative[index].fetch_add(u64::from(count), Ordering::Relaxed);
        }
        if fallback_disabled || bits & THROWS_MASK != 0 {
            self.cumulative[EventType::ExceptionThrown.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A snapshot; `executing` is the number of executions whose user code runs now.
    pub(crate) fn snapshot(&self, command_key: CommandKey, executing: u32) -> CommandMetrics {
        let mut cumulative = [0u64; EventType::COUNT];
        for (slot, counter) in cumulative.iter_mut().zip(&self.cumulative) {
            *slot = counter.load(Ordering::Relaxed);
        }
        CommandMetrics {
            command_key,
            cumulative,
            current_concurrent_execution_count: executing,
        }
    }
}

/// A snapshot of one command key's metrics, read without stopping writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandMetrics {
    command_key: CommandKey,
    cumulative: [u64; EventType::COUNT],
    current_concurrent_execution_count: u32,
}

impl CommandMetrics {
    /// The command key.
    pub fn command_key(&self) -> &CommandKey {
        &self.command_key
    }

    /// How many times `event` happened since the key's state was created. `EXCEPTION_THROWN`
    /// counts executions whose caller got an error from a bad request or from a failed,
    /// rejected, missing or disabled fallback; `FALLBACK_DISABLED` itself is never counted (as
    /// Hystrix, it is not an event of the execution).
    pub fn cumulative_count(&self, event: EventType) -> u64 {
        self.cumulative[event.index()]
    }

    /// Executions whose user code is running now (Hystrix's `currentConcurrentExecutionCount`):
    /// under SEMAPHORE isolation, the execution permits in use. An attempt refused at that very
    /// moment may show as one more for an instant.
    pub fn current_concurrent_execution_count(&self) -> u32 {
        self.current_concurrent_execution_count
    }
}
