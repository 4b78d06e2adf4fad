//! Build script: the README's Rust snippets that use this crate, as doc tests (see
//! crates/hystrix/doctests/generate.rs).
include!("../hystrix/doctests/generate.rs");
