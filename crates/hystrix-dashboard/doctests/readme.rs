//! What the README's Rust snippets of hystrix-dashboard leave out, to run each as a doc test
//! (see crates/hystrix/build.rs, this crate's build script too): a prelude, then one section
//! per snippet, named by the snippet's `<!-- doctest: NAME -->` line; `// [README snippet]`
//! is where the snippet goes.

use hystrix::*;
use std::time::Duration;

// doctest: admin-endpoint
fn audit_log(change: &hystrix_dashboard::admin::AdminChange) {
    eprintln!("{change:?}");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the test's only thread.
    unsafe {
        std::env::set_var(
            "HYSTRIX_ADMIN_TOKEN",
            "a-long-enough-admin-token-for-the-test",
        )
    };
    let registry = Registry::new();
    // [README snippet]
    drop(dashboard);
    Ok(())
}

// doctest: dashboard-router
fn main() {
    // [README snippet]
    let _: axum::Router = app;
}

// doctest: dashboard-serve no_run
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // [README snippet]
    Ok(())
}
