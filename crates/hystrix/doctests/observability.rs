//! The setup of the Rust snippets of docs/observability.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: metrics-facade feature=metrics
fn main() {
    // [snippet]
    drop(registry);
}

// doctest: event-notifier
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    assert_eq!(name, "anonymous");
    assert_eq!(
        *log.0.lock().unwrap(),
        ["GetUser: FAILURE", "GetUser: FALLBACK_SUCCESS"]
    );
    Ok(())
}
