//! 10 000 command keys that ran once and went idle stay under 12 KiB each (issue 27), as do
//! the same keys defined and never run: heap bytes per key, allocated minus freed, counted by
//! a global allocator (`memory/mod.rs`). One test in its own binary, since the allocator counts
//! every thread.

mod memory;

use memory::{Run, measure};

/// The bound per key, in bytes: 12 KiB less the 0.5 KiB kept for a cumulative latency
/// histogram per key.
const BOUND: f64 = 11.5 * 1024.0;

#[test]
fn ten_thousand_idle_keys_stay_under_12_kib_each() {
    let measured = measure(10_000, 1, Run::Success);
    for (what, per_key) in [
        ("defined", measured.defined),
        ("ran once", measured.ran),
        ("idle past every window", measured.idle),
        ("idle, handles dropped", measured.registry_only),
    ] {
        assert!(
            per_key.bytes <= BOUND,
            "{what}: {} B per key, more than {BOUND} B",
            per_key.bytes
        );
    }
}
