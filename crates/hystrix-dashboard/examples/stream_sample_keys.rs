//! The cost of one `/hystrix.stream` sample (every command's message rendered once) for a
//! registry of many command keys: its time, the bytes of its messages, and the most heap it
//! held above what it started with (the messages included), counted by a global allocator.
//!
//! Run with `cargo run --release -p hystrix-dashboard --example stream_sample_keys [-- KEYS]`
//! (default 100 000 keys, each run three times, as in `benches/stream_tick.rs`).

#![allow(missing_docs, clippy::unwrap_used, unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

#[path = "../benches/common/mod.rs"]
mod common;

use hystrix_dashboard::stream;

/// Bytes allocated and not freed yet (every thread), and the most since the last reset.
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: forwards to the system allocator; only adds counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            PEAK.fetch_max(live + layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let keys: usize = std::env::args().nth(1).map_or(100_000, |n| {
        n.parse().expect("usage: stream_sample_keys [KEYS]")
    });
    let registry = common::registry_with(keys);
    // A first sample, so that what the registry makes once is not counted.
    drop(stream::sample(&registry));
    for _ in 0..3 {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let started = Instant::now();
        let messages = stream::sample(&registry);
        let took = started.elapsed();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        let bytes: usize = messages.iter().map(String::len).sum();
        println!(
            "{keys} keys: one sample in {took:.1?}, {} messages of {:.1} MB, at most {:.1} MB \
             of heap held",
            messages.len(),
            bytes as f64 / 1e6,
            peak as f64 / 1e6
        );
    }
}
