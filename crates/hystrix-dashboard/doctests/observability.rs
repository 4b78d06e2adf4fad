//! The setup of the Rust snippets of docs/observability.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: dashboard-router
fn main() {
    // [snippet]
    let _: axum::Router = app;
}

// doctest: dashboard-serve no_run
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // [snippet]
    Ok(())
}

// doctest: turbine-serve no_run
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::time::Duration;
    // [snippet]
    Ok(())
}
