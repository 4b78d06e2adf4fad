//! Build script: the README's Rust snippets that use this crate, as doc tests (see
//! doctests/generate.rs).
include!("doctests/generate.rs");
