//! The README's memory per command key ("Where hystrix-rs deliberately differs"), held to a
//! measurement: heap bytes per key, allocated minus freed, counted by a global allocator
//! (`memory/mod.rs`, shared with `cargo run --example memory_per_key`, which prints them).
//! One test in its own binary, since the allocator counts every thread.

mod memory;

use memory::{Run, measure};

/// The README's figure for a key that ran once and then stayed idle, in KiB.
const IDLE_KIB: f64 = 28.0;
/// The latency counters of one 10 s bucket of latencies under 256 ms: 256 counters of 8 bytes.
const BUCKET: f64 = 2048.0;

#[test]
fn memory_per_command_key_is_what_the_readme_says() {
    // 5000 keys, as the README: a key's share of the registry's maps depends on their number.
    let idle = measure(5000, 1, Run::Success).registry_only.bytes;
    let readme_idle = IDLE_KIB * 1024.0;
    assert!(
        (idle - readme_idle).abs() <= readme_idle * 0.1,
        "a key that ran once keeps {idle} B, more than 10 % away from the README's \
         {IDLE_KIB} KiB: update README.md and IDLE_KIB"
    );

    // What more latency buckets add is exact; fewer keys measure it faster.
    let keys = 500;
    let base = measure(keys, 1, Run::Success).registry_only.bytes;
    // Per-key bytes are averages: rounded to a millionth of a bucket, to drop float noise.
    let extra = |buckets, how| {
        ((measure(keys, buckets, how).registry_only.bytes - base) / BUCKET * 1e6).round() / 1e6
    };
    assert_eq!(extra(2, Run::Success), 1.0, "2 KiB per latency bucket");
    assert_eq!(extra(8, Run::Success), 7.0, "up to 8 buckets");
    assert_eq!(extra(9, Run::Success), 7.0, "no more than 8 buckets");
    // Execution and total latency in two windows: 4 KiB per bucket.
    assert_eq!(
        extra(1, Run::Fallback),
        1.0,
        "4 KiB per bucket with a fallback"
    );
    assert_eq!(
        extra(8, Run::Fallback),
        15.0,
        "up to 8 buckets with a fallback"
    );

    let readme = include_str!("../../../README.md");
    for claim in [
        format!("{IDLE_KIB} KiB for a key that ran once"),
        format!("{} KiB for a key used for", IDLE_KIB + 7.0 * 2.0),
        format!("up to {} KiB", IDLE_KIB + 1.0 * 2.0 + 7.0 * 4.0),
    ] {
        assert!(
            readme.replace("\n  ", " ").contains(&claim),
            "README.md no longer says `{claim}`"
        );
    }
}
