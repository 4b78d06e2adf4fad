//! `Registry::set_global`: plugins for commands built with `.build()`, installed once, before
//! first use (its own test binary: the global registry is process-wide).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::DependencyError;
use hystrix::{Command, CommandKey, ConfigError, ExecutionHook, IsolationStrategy, Registry};

#[derive(Clone, Default)]
struct Starts(Arc<AtomicUsize>);

impl ExecutionHook for Starts {
    fn on_start(&self, _: &CommandKey) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn the_global_registry_is_set_once_before_use_and_commands_built_with_build_use_it() {
    let starts = Starts::default();
    Registry::set_global(Registry::builder().execution_hook(starts.clone()).build()).unwrap();
    let cmd = Command::builder("GlobalHooked")
        .group("G")
        .isolation(IsolationStrategy::Semaphore)
        .build()
        .unwrap();
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(7)).execute().unwrap(),
        7
    );
    assert_eq!(starts.0.load(Ordering::Relaxed), 1);
    assert_eq!(Registry::global().command_keys().len(), 1);

    let err = Registry::set_global(Registry::new()).unwrap_err();
    assert_eq!(err, ConfigError::GlobalRegistryInUse);
    assert_eq!(
        err.to_string(),
        "the global registry is already in use: call Registry::set_global at the start of main, \
         before any command is built with .build() or Registry::global() is called"
    );
    // The first one stays.
    assert_eq!(Registry::global().command_keys().len(), 1);
}
