//! Command metrics: counters per event type and the number of executions running now.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::event::{EventCounts, EventType};
use crate::key::CommandKey;

/// The live counters of one command key.
#[derive(Debug, Default)]
pub(crate) struct CommandCounters {
    cumulative: [AtomicU64; EventType::COUNT],
    concurrent: CachePadded<AtomicU32>,
}

impl CommandCounters {
    /// Counts every event of a finished execution.
    #[inline]
    pub(crate) fn record(&self, events: &EventCounts) {
        let mut bits = events.bits();
        while bits != 0 {
            let index = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let event = EventType::ALL[index];
            self.cumulative[index].fetch_add(u64::from(events.count(event)), Ordering::Relaxed);
        }
    }

    /// User code of an execution started.
    #[inline]
    pub(crate) fn execution_started(&self) {
        self.concurrent.fetch_add(1, Ordering::Relaxed);
    }

    /// User code of an execution ended (returned, panicked, timed out or was dropped).
    #[inline]
    pub(crate) fn execution_ended(&self) {
        self.concurrent.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, command_key: CommandKey, permits_in_use: u32) -> CommandMetrics {
        let mut cumulative = [0u64; EventType::COUNT];
        for (slot, counter) in cumulative.iter_mut().zip(&self.cumulative) {
            *slot = counter.load(Ordering::Relaxed);
        }
        cumulative[EventType::ExceptionThrown.index()] = EventType::ALL
            .iter()
            .filter(|e| e.throws_exception())
            .map(|e| cumulative[e.index()])
            .sum();
        CommandMetrics {
            command_key,
            cumulative,
            current_concurrent_execution_count: self.concurrent.load(Ordering::Relaxed),
            execution_semaphore_permits_in_use: permits_in_use,
        }
    }
}

/// A snapshot of one command key's metrics, read without stopping writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandMetrics {
    command_key: CommandKey,
    cumulative: [u64; EventType::COUNT],
    current_concurrent_execution_count: u32,
    execution_semaphore_permits_in_use: u32,
}

impl CommandMetrics {
    /// The command key.
    pub fn command_key(&self) -> &CommandKey {
        &self.command_key
    }

    /// How many times `event` happened since the key's state was created. `EXCEPTION_THROWN` is
    /// derived (bad requests plus fallback failures, rejections and missing fallbacks), as
    /// Hystrix counts it; `FALLBACK_DISABLED` is never counted.
    pub fn cumulative_count(&self, event: EventType) -> u64 {
        self.cumulative[event.index()]
    }

    /// Executions whose user code is running now (Hystrix's `currentConcurrentExecutionCount`).
    pub fn current_concurrent_execution_count(&self) -> u32 {
        self.current_concurrent_execution_count
    }

    /// Execution semaphore permits held now (SEMAPHORE isolation).
    pub fn execution_semaphore_permits_in_use(&self) -> u32 {
        self.execution_semaphore_permits_in_use
    }
}
