//! What every snippet set up in this crate starts with (see crates/hystrix/doctests/generate.rs):
//! the crate root and std, nothing else of hystrix, so a snippet that names a hystrix item
//! outside the root imports it itself, as its readers must.

use hystrix::*;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::{Duration, SystemTime};

/// The error of the made-up dependencies below.
#[derive(Debug)]
struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dependency failed")
    }
}

impl std::error::Error for MyError {}
