//! The setup of the Rust snippets of docs/testing.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: testing-trip-and-recover
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    assert_eq!(hystrix::clock::Clock::now_ms(test.clock()), 5501);
    let metrics = get_user.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Failure), 20);
    assert_eq!(metrics.cumulative_count(EventType::FallbackSuccess), 20);
    assert_eq!(metrics.cumulative_count(EventType::ShortCircuited), 2);
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(breaker.health_counts().total_requests, 0);
    Ok(())
}

// doctest: testing-force
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let get_price = Command::builder("GetPrice")
        .group("Pricing")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())?;
    // [snippet]
    test.advance(Duration::from_millis(5001));
    assert_eq!(get_price.run(|| Ok::<_, MyError>(42)).execute()?, 42);
    Ok(())
}

// doctest: testing-blocked-caller
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    assert_eq!(hystrix::clock::Clock::now_ms(test.clock()), 300);
    assert_eq!(outcome.execution_result().execution_time_ms(), Some(300));
    Ok(())
}

// doctest: testing-sim feature=sim
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    let stats = backend.stats();
    assert_eq!(
        (report.offered(), report.answered(), report.fallback(), report.failed()),
        (1000, 249, 751, 0)
    );
    assert_eq!((stats.calls, stats.succeeded, stats.failed), (499, 249, 250));
    assert_eq!(cmd.metrics().cumulative_count(EventType::ShortCircuited), 501);
    assert_eq!(report.backend_calls_per_request(), None); // the stats are added by with_backend
    assert_eq!(
        report.with_backend(stats).backend_calls_per_request(),
        Some(0.499)
    );
    Ok(())
}

// doctest: chaos
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    Ok(())
}
