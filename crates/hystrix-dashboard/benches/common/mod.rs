//! The registry the stream benchmarks read, shared by `benches/stream_tick.rs` and
//! `examples/stream_sample_keys.rs`.

use hystrix::{Command, IsolationStrategy, Registry};

/// A registry of `commands` SEMAPHORE command keys in 10 groups, each run three times (now,
/// on the system clock).
pub fn registry_with(commands: usize) -> Registry {
    let registry = Registry::new();
    for n in 0..commands {
        let command = Command::builder(format!("Command{n}"))
            .group(format!("Group{}", n % 10))
            .isolation(IsolationStrategy::Semaphore)
            .build_in(&registry)
            .unwrap();
        for _ in 0..3 {
            command
                .run(|| Ok::<u64, std::convert::Infallible>(1))
                .execute()
                .unwrap();
        }
    }
    registry
}
