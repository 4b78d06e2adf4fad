//! The hystrix-rs demo.
#![allow(dead_code)]
mod backends;
mod catalogue;
mod gateway;
mod http;
mod scenario;
fn main() {}
