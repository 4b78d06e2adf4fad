//! Allocations per call of every single-threaded scenario (ours and the peers), counted by a
//! global allocator only on the measuring thread and only while it measures.
//!
//! Run with `cargo bench -p hystrix-peers-bench --bench allocations [-- FILTER]` (FILTER: a
//! substring of the row id `group/implementation`, or `^prefix`). Ours must not
//! allocate on the paths marked as zero-allocation targets (sync `execute`, `execute_async` of
//! a ready future, a `HystrixLayer` call, an open-circuit rejection): the run exits with status 1
//! if one does.

// The counting allocator is the one unsafe piece: it forwards to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

#[allow(dead_code)]
mod common;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(size: usize) {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = COUNTING.try_with(|counting| {
        if counting.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const WARM_UP: u64 = 1_000;
const CALLS: u64 = 10_000;

/// A filter is a substring of the row's id, or with a leading `^` its prefix.
fn matches(id: &str, filter: &str) -> bool {
    match filter.strip_prefix('^') {
        Some(prefix) => id.starts_with(prefix),
        None => id.contains(filter),
    }
}

/// Exact zero as `0`; rare allocations (amortized growth) with enough digits to show.
fn per_call_text(per_call: f64) -> String {
    if per_call == 0.0 {
        "0".to_string()
    } else if per_call < 0.01 {
        format!("{per_call:.4}")
    } else {
        format!("{per_call:.2}")
    }
}

fn main() {
    // Criterion-style arguments (`--bench`) are ignored; any other argument filters rows.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    println!("| scenario | implementation | allocations/call | bytes/call |");
    println!("|---|---|---:|---:|");
    let mut missed = Vec::new();
    for scenario in common::all() {
        let id = scenario.id();
        if !scenario.per_call || !(filters.is_empty() || filters.iter().any(|f| matches(&id, f))) {
            continue;
        }
        let (group, name, zero_target) = (
            scenario.group,
            scenario.name.clone(),
            scenario.zero_alloc_target,
        );
        let (warm_up, calls) = (scenario.calls(WARM_UP), scenario.calls(CALLS));
        let mut run = (scenario.build)();
        run(warm_up);
        ALLOCATIONS.with(|n| n.set(0));
        BYTES.with(|b| b.set(0));
        COUNTING.with(|c| c.set(true));
        run(calls);
        COUNTING.with(|c| c.set(false));
        let per_call = ALLOCATIONS.with(Cell::get) as f64 / calls as f64;
        let bytes = BYTES.with(Cell::get) as f64 / calls as f64;
        let mark = if zero_target { " (target 0)" } else { "" };
        println!(
            "| {group} | {name}{mark} | {} | {bytes:.1} |",
            per_call_text(per_call)
        );
        if zero_target && per_call > 0.0 {
            missed.push(id);
        }
        drop(run);
    }
    if !missed.is_empty() {
        eprintln!("zero-allocation target missed by: {}", missed.join(", "));
        std::process::exit(1);
    }
}
