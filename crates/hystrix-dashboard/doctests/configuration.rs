//! The setup of the Rust snippets of docs/configuration.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

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
    // [snippet]
    drop(dashboard);
    Ok(())
}

