//! The guide's memory per command key (docs/differences.md), held to a
//! measurement: heap bytes per key, allocated minus freed, counted by a global allocator
//! (`memory/mod.rs`, shared with `cargo run --example memory_per_key`, which prints them).
//! One test in its own binary, since the allocator counts every thread.

mod memory;

use memory::{Run, measure};

/// The guide's figure (docs/differences.md) for a key that ran once and then stayed idle, in KiB.
const IDLE_KIB: f64 = 11.5;
/// The latency table of one 10 s bucket of latencies under 64 ms: 64 counters of 8 bytes and
/// a pointer to the other segments' pointers (16 bytes, a `OnceLock`).
const TABLE: f64 = 528.0;
/// A latency window made at first use (execution or total latency, when they differ): the
/// window (48 bytes), its cumulative histogram (12 bucket counters and a sum, 104 bytes) and
/// its ring of 8 slot pointers (16 bytes each).
const WINDOW: f64 = 48.0 + 104.0 + 8.0 * 16.0;

#[test]
fn memory_per_command_key_is_what_the_readme_says() {
    // 5000 keys, as the guide: a key's share of the registry's maps depends on their number.
    let measured = measure(5000, 1, Run::Success);
    let (defined, idle) = (measured.defined.bytes, measured.registry_only.bytes);
    let readme_idle = IDLE_KIB * 1024.0;
    assert!(
        (idle - readme_idle).abs() <= readme_idle * 0.1,
        "a key that ran once keeps {idle} B, more than 10 % away from the guide's \
         {IDLE_KIB} KiB: update docs/differences.md and IDLE_KIB"
    );

    // What more latency buckets add is exact; fewer keys measure it faster.
    let keys = 500;
    let base = measure(keys, 1, Run::Success).registry_only.bytes;
    // Per-key bytes are averages: rounded to a millionth of a byte, to drop float noise.
    let extra = |buckets, how| {
        ((measure(keys, buckets, how).registry_only.bytes - base) * 1e6).round() / 1e6
    };
    assert_eq!(extra(2, Run::Success), TABLE, "a table per latency bucket");
    assert_eq!(extra(8, Run::Success), 7.0 * TABLE, "up to 8 buckets");
    assert_eq!(
        extra(9, Run::Success),
        7.0 * TABLE,
        "no more than 8 buckets"
    );
    // Execution and total latency in two windows of their own, a table each per bucket (the
    // window of equal latencies keeps its table).
    assert_eq!(
        extra(1, Run::Fallback),
        2.0 * WINDOW + TABLE,
        "two windows with a fallback"
    );
    assert_eq!(
        extra(8, Run::Fallback),
        2.0 * WINDOW + 15.0 * TABLE,
        "up to 8 buckets with a fallback"
    );

    // The guide's figures, to 0.1 KiB, from this measurement.
    let kib = |bytes: f64| format!("{:.1}", bytes / 1024.0);
    let page = include_str!("../../../docs/differences.md");
    for claim in [
        format!("{} KiB for a key defined and never run", kib(defined)),
        format!("{} KiB for a key that ran once", kib(idle)),
        format!("{} KiB for a key used for", kib(idle + 7.0 * TABLE)),
        format!("up to {} KiB", kib(idle + 2.0 * WINDOW + 15.0 * TABLE)),
    ] {
        assert!(
            page.replace("\n  ", " ").contains(&claim),
            "docs/differences.md no longer says `{claim}`"
        );
    }
}
