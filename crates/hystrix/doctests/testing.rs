//! The setup of the Rust snippets of docs/testing.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: chaos
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    Ok(())
}

