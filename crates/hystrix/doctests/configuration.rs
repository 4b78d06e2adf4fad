//! The setup of the Rust snippets of docs/configuration.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: configuration no_run feature=reload
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    drop(watcher);
    Ok(())
}

