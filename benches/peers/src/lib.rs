//! Empty on purpose: this package only holds benchmarks (`benches/`), which take hystrix-rs and
//! its peers as dev-dependencies, so that the library itself depends on none of the peers.
//! See `scripts/bench` and `scripts/bench-instructions`.
