//! Test helpers.

pub mod server;
