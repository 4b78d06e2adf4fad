//! Empty on purpose: this package holds benchmarks (`benches/`), which take hystrix-rs and its
//! peers as dev-dependencies, so that the library itself depends on none of the peers, and,
//! behind the `sim` feature, peer programs in tokio's paused time (`src/bin/`: `retry_tower`,
//! tower's retry and budget in our retry scenarios).
//! See `scripts/bench` and `scripts/bench-instructions`.
