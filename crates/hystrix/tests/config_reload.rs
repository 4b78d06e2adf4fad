//! Hot reload of a configuration file (feature `reload`): `reload_now` for deterministic steps,
//! and the watcher itself with bounded waits (never a fixed sleep): an editor-style replace
//! (write a temporary file, rename it over the watched one) reaches the next execution, an
//! invalid edit keeps the last good values and reports file, line and property, run-time values
//! survive, and the watcher stops when its handle drops.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{DependencyError, builder, names};
use hystrix::config::{LoadError, ReloadEvent, ReloadTrigger, WatchOptions};
use hystrix::testing::TestRegistry;
use hystrix::{CommandKey, Registry};

const TIMEOUT: &str = "hystrix.command.Watched.execution.isolation.thread.timeoutInMilliseconds";
const VOLUME: &str = "hystrix.command.Watched.circuitBreaker.requestVolumeThreshold";

/// A folder with `hystrix.properties` holding `text`; the folder goes when the guard drops.
fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hystrix.properties");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Replaces `path` the way editors do: a temporary file in the same folder, renamed over it.
fn replace(path: &Path, text: &str) {
    replace_bytes(path, text.as_bytes());
}

/// [`replace`] with bytes that need not be UTF-8.
fn replace_bytes(path: &Path, bytes: &[u8]) {
    let temporary = path.with_extension("properties.tmp");
    std::fs::write(&temporary, bytes).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// A debounce so long that only `reload_now` reloads while a test runs.
const NEVER: Duration = Duration::from_secs(3600);
const QUICK: Duration = Duration::from_millis(50);

/// Watches `path` with `debounce`; every reload event is sent to the receiver.
fn watch(
    registry: &Registry,
    path: &Path,
    debounce: Duration,
) -> (hystrix::config::FileWatcher, Receiver<ReloadEvent>) {
    let (events, received) = mpsc::channel();
    let events = Mutex::new(events);
    let options = WatchOptions::new()
        .debounce(debounce)
        .on_reload(move |event| {
            let _ = events.lock().unwrap().send(event.clone());
        });
    let watcher = registry
        .properties()
        .watch_file_with(path, options)
        .unwrap();
    (watcher, received)
}

/// Waits (at most 10 s) for a reload event that `accept`s, skipping others.
fn wait_for(
    received: &Receiver<ReloadEvent>,
    accept: impl Fn(&ReloadEvent) -> bool,
) -> ReloadEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = received
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no matching reload event within 10 s"));
        if accept(&event) {
            return event;
        }
    }
}

fn timeout_of(registry: &Registry) -> u64 {
    registry
        .properties()
        .command(&CommandKey::new("Watched").unwrap())
        .execution_timeout_in_milliseconds
}

#[test]
fn reload_now_applies_a_changed_value_to_the_next_execution() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=1000\n"));
    let test = TestRegistry::new();
    let (watcher, received) = watch(test.registry(), &path, NEVER);
    assert_eq!(watcher.path(), path);
    let cmd = builder("Watched").build_in(test.registry()).unwrap();
    let slow = |test: &TestRegistry| {
        let test = test.clone();
        move || {
            test.advance(Duration::from_millis(600));
            Ok::<_, DependencyError>(1)
        }
    };
    assert_eq!(cmd.run(slow(&test)).execute().unwrap(), 1);

    std::fs::write(&path, format!("{TIMEOUT}=500\n")).unwrap();
    let report = watcher.reload_now().unwrap();
    assert_eq!(report.changed, [TIMEOUT]);
    let outcome = cmd.run(slow(&test)).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    // The callback heard it too.
    let event = received.try_recv().unwrap();
    assert_eq!(event.trigger, ReloadTrigger::Manual);
    assert_eq!(event.path, path);
    assert_eq!(event.outcome.unwrap().changed, [TIMEOUT]);
}

#[test]
fn an_edit_reaches_the_registry_through_the_watcher() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=1000\n"));
    let registry = Registry::new();
    let (_watcher, received) = watch(&registry, &path, QUICK);
    assert_eq!(timeout_of(&registry), 1000);

    replace(&path, &format!("# tuned\n{TIMEOUT}=250\n"));
    let event = wait_for(&received, |event| {
        event.trigger == ReloadTrigger::FileChanged
            && event
                .outcome
                .as_ref()
                .is_ok_and(|report| !report.changed.is_empty())
    });
    assert_eq!(event.outcome.unwrap().changed, [TIMEOUT]);
    assert_eq!(timeout_of(&registry), 250);
    let report = registry.properties().explain(TIMEOUT).unwrap();
    assert_eq!(
        report.origin,
        hystrix::config::Origin::File {
            path: path.clone(),
            line: 2
        }
    );
}

#[test]
fn an_invalid_edit_keeps_the_last_good_values_and_reports_file_line_and_property() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=400\n{VOLUME}=5\n"));
    let registry = Registry::new();
    let (_watcher, received) = watch(&registry, &path, QUICK);

    replace(&path, &format!("{TIMEOUT}=900\n{VOLUME}=lots\n"));
    let event = wait_for(&received, |event| event.outcome.is_err());
    let err = event.outcome.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: invalid value `lots` for `{VOLUME}`: expected a whole number",
            path.display()
        )
    );
    assert!(matches!(err, LoadError::Invalid { .. }));
    assert_eq!(timeout_of(&registry), 400);
    let props = registry
        .properties()
        .command(&CommandKey::new("Watched").unwrap());
    assert_eq!(props.circuit_breaker_request_volume_threshold, 5);

    // Fixing the file applies it.
    replace(&path, &format!("{TIMEOUT}=900\n{VOLUME}=6\n"));
    wait_for(&received, |event| event.outcome.is_ok());
    assert_eq!(timeout_of(&registry), 900);
}

#[test]
fn no_file_stops_the_watcher_and_the_next_good_edit_applies() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=400\n"));
    let registry = Registry::new();
    let (_watcher, received) = watch(&registry, &path, QUICK);
    let changed = |event: &ReloadEvent| {
        event
            .outcome
            .as_ref()
            .is_ok_and(|report| !report.changed.is_empty())
    };

    // A Latin-1 comment last, without a final newline: it used to panic inside the parser and
    // end the watcher's thread. It loads, as Java reads it.
    let mut latin1 = format!("{TIMEOUT}=500\n# caf").into_bytes();
    latin1.push(0xE9);
    replace_bytes(&path, &latin1);
    wait_for(&received, changed);
    assert_eq!(timeout_of(&registry), 500);

    // A file that cannot load is reported; the last good values stay.
    let mut marked = format!("\u{feff}{TIMEOUT}=700\n# caf").into_bytes();
    marked.push(0xE9);
    replace_bytes(&path, &marked);
    let event = wait_for(&received, |event| event.outcome.is_err());
    assert_eq!(
        event.outcome.unwrap_err().to_string(),
        format!(
            "{}:2: not valid UTF-8, though the file begins with a UTF-8 byte-order mark",
            path.display()
        )
    );
    assert_eq!(timeout_of(&registry), 500);

    // The watcher lives on: the next good edit applies.
    replace(&path, &format!("{TIMEOUT}=600\n"));
    wait_for(&received, changed);
    assert_eq!(timeout_of(&registry), 600);
}

#[test]
fn a_reload_keeps_values_set_at_run_time() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=400\n{VOLUME}=5\n"));
    let registry = Registry::new();
    let (watcher, _received) = watch(&registry, &path, NEVER);
    registry.properties().set(TIMEOUT, 150).unwrap();

    std::fs::write(&path, format!("{TIMEOUT}=800\n{VOLUME}=9\n")).unwrap();
    watcher.reload_now().unwrap();
    let props = registry
        .properties()
        .command(&CommandKey::new("Watched").unwrap());
    assert_eq!(
        (
            props.execution_timeout_in_milliseconds,
            props.circuit_breaker_request_volume_threshold
        ),
        (150, 9)
    );
    assert!(registry.properties().unset(TIMEOUT).unwrap());
    assert_eq!(timeout_of(&registry), 800);
}

#[test]
fn the_first_load_must_succeed_and_the_watcher_stops_when_dropped() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=-1\n"));
    let registry = Registry::new();
    let err = registry.properties().watch_file(&path).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:1: invalid value `-1` for `{TIMEOUT}`: must not be negative",
            path.display()
        )
    );

    std::fs::write(&path, format!("{TIMEOUT}=300\n")).unwrap();
    let heard = Arc::new(());
    let held = Arc::clone(&heard);
    let watcher = registry
        .properties()
        .watch_file_with(
            &path,
            WatchOptions::new().on_reload(move |_| {
                let _ = &held;
            }),
        )
        .unwrap();
    assert_eq!(Arc::strong_count(&heard), 2);
    drop(watcher);
    // The watcher's thread has ended and dropped the callback: nothing can reload any more.
    assert_eq!(Arc::strong_count(&heard), 1);
    assert_eq!(timeout_of(&registry), 300);
}

#[test]
fn a_watcher_does_not_keep_its_registry_alive() {
    let (_dir, path) = file_with(&format!("{TIMEOUT}=300\n"));
    let registry = Registry::new();
    let watcher = registry.properties().watch_file(&path).unwrap();
    drop(registry);
    let err = watcher.reload_now().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read {}: the registry these properties belonged to is gone",
            path.display()
        )
    );
}
