//! What the README's Rust snippets of hystrix-redis leave out, to compile each as a doc test
//! (see crates/hystrix/build.rs, this crate's build script too): a prelude, then one section
//! per snippet, named by the snippet's `<!-- doctest: NAME -->` line; `// [README snippet]`
//! is where the snippet goes.

use hystrix::*;

// doctest: redis-state-store no_run
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [README snippet]
    Ok(())
}
