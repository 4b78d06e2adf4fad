//! The setup of the Rust snippets of docs/migrating.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: migrating-resilience4j
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let registry = test.registry().clone();
    let _ = &registry;
    // [snippet]
    assert_eq!(
        get_user.properties().circuit_breaker_window_type,
        hystrix::circuit::WindowType::Count
    );
    for fails in [true, true, true, false] {
        let _ = get_user
            .run(move || if fails { Err(MyError) } else { Ok(1) })
            .no_retry()
            .execute();
        assert_eq!(get_user.circuit_breaker().status(), Status::Closed);
    }
    let _ = get_user.run(|| Ok::<_, MyError>(1)).no_retry().execute(); // the fifth call
    assert_eq!(get_user.circuit_breaker().status(), Status::Open);
    assert_eq!(get_user.circuit_breaker().open_duration_ms(), Some(60_000));
    Ok(())
}
