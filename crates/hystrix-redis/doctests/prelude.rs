//! What every snippet set up in this crate starts with (see crates/hystrix/doctests/generate.rs):
//! the crate root and std, nothing else of hystrix, so a snippet that names a hystrix item
//! outside the root imports it itself, as its readers must.

use hystrix::*;
