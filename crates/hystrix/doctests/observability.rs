//! The setup of the Rust snippets of docs/observability.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: metrics-facade feature=metrics
fn main() {
    // [snippet]
    drop(registry);
}
