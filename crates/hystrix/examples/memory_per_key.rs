//! Memory per command key, measured with a counting global allocator: the guide's numbers
//! (docs/differences.md).
//!
//! Run with `cargo run --example memory_per_key [-- KEYS] [--once]` (default 5000 keys;
//! `--once`: only the first table, each key run once).
//!
//! Each measurement defines KEYS command keys in a fresh registry on a manual clock (SEMAPHORE
//! isolation: a thread pool belongs to a pool key, not to a command key), runs each key once in
//! each of N consecutive 10 s latency buckets, lets 70 s pass (every window rolls past the
//! runs) and reads each key's metrics once. It prints the heap bytes still allocated per key:
//! bytes asked for, allocated minus freed, so the allocator's own overhead per allocation
//! comes on top (the number of live allocations is shown too). Then it lists each allocation
//! one idle key keeps, with the code that made it. `tests/memory_per_key.rs` holds the
//! guide's numbers to the same measurement (`tests/memory/mod.rs`).

#![allow(clippy::unwrap_used)]

#[path = "../tests/memory/mod.rs"]
mod memory;

use std::time::Instant;

use memory::{PerKey, Run};

fn main() {
    let mut keys = 5000;
    let mut once = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--once" => once = true,
            number => {
                keys = number
                    .parse()
                    .expect("usage: memory_per_key [KEYS] [--once]")
            }
        }
    }
    let started = Instant::now();
    println!(
        "Heap bytes per command key, {keys} keys (bytes asked for; allocator overhead not included)"
    );
    println!("Each key run once (a success taking 3 ms):");
    let steps = memory::measure(keys, 1, Run::Success);
    let line = |what: &str, per_key: PerKey| {
        println!(
            "  {what:<44} {:>8.0} B/key in {:>4.1} allocations",
            per_key.bytes, per_key.allocations
        );
    };
    line("defined (Command handles kept)", steps.defined);
    line("+ run once", steps.ran);
    line("+ 70 s idle, metrics read once", steps.idle);
    line(
        "Command handles dropped (the registry alone)",
        steps.registry_only,
    );
    if !once {
        for (how, what) in [
            (Run::Success, "successes taking 3 ms"),
            (
                Run::Fallback,
                "failures of 3 ms answered by a fallback of 1 ms",
            ),
        ] {
            println!(
                "Each key run once in each of N consecutive 10 s latency buckets ({what}), then 70 s idle:"
            );
            for buckets in [1, 2, 4, 8, 9] {
                let measured = memory::measure(keys, buckets, how);
                println!(
                    "  N = {buckets}: {:>8.0} B/key in the registry alone ({:.1} allocations)",
                    measured.registry_only.bytes, measured.registry_only.allocations
                );
            }
        }
        let census = memory::census();
        let total: usize = census.iter().map(|(bytes, _)| bytes).sum();
        println!(
            "Allocations one idle key keeps (run once, its handle dropped): {total} B in {}",
            census.len()
        );
        for (bytes, made_by) in census {
            println!("  {bytes:>6} B  {made_by}");
        }
    }
    eprintln!("({:.1?})", started.elapsed());
}
