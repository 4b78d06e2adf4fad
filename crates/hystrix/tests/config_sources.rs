//! Configuration sources (SPEC §1.1, Part A 9, 25 and 32): `.properties` and TOML files, the
//! environment and run-time values, each in the layer its name gives and ranked within it
//! (file < environment < run time); provenance from `explain`; reloads that replace only a
//! file's own values; validation that refuses a whole source and keeps the last good values.
//!
//! Time-dependent tests run on the manual clock. Run-time changes of the semaphore size and
//! the queue threshold are covered in async_execution.rs and thread_isolation.rs.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{DependencyError, builder, names, slow};
use hystrix::config::{
    FileFormat, LayerValue, LoadError, LoadReport, LoadWarning, Origin, Properties, PropertyLayer,
    env_var_name,
};
use hystrix::testing::TestRegistry;
use hystrix::{
    Command, CommandKey, CommandProperties, ConfigError, IsolationStrategy, PropertyValue,
    Registry, Status, ThreadPoolProperties,
};
use proptest::prelude::*;

const TIMEOUT: &str = "execution.isolation.thread.timeoutInMilliseconds";
const PROPS: FileFormat = FileFormat::Properties;

fn at(path: &str, line: usize) -> Origin {
    Origin::File {
        path: PathBuf::from(path),
        line,
    }
}

fn var(name: &str) -> Origin {
    Origin::Environment {
        variable: name.to_owned(),
    }
}

fn int(value: i64) -> Option<PropertyValue> {
    Some(PropertyValue::Int(value))
}

fn string(value: &str) -> Option<PropertyValue> {
    Some(PropertyValue::Str(value.to_owned()))
}

fn value(value: Option<PropertyValue>, layer: PropertyLayer, origin: Origin) -> LayerValue {
    LayerValue {
        value,
        layer,
        origin,
    }
}

fn code_default(default: i64) -> LayerValue {
    value(int(default), PropertyLayer::CodeDefault, Origin::Code)
}

fn command_of(properties: &Properties, key: &str) -> CommandProperties {
    properties.command(&CommandKey::new(key).unwrap())
}

fn pool_of(properties: &Properties, key: &str) -> ThreadPoolProperties {
    properties.thread_pool(&hystrix::ThreadPoolKey::new(key).unwrap())
}

/// Checks each (full name, value, line): the value is effective and comes from `path` at the line.
fn assert_values_from(
    properties: &Properties,
    path: &str,
    expected: &[(&str, Option<PropertyValue>, usize)],
) {
    for (name, parsed, line) in expected {
        let report = properties.explain(name).unwrap();
        assert_eq!(report.value, *parsed, "{name}");
        assert_eq!(report.origin, at(path, *line), "{name}");
    }
}

/// Loads `text` as the file `app.properties`.
fn load(properties: &Properties, text: &str) -> Result<LoadReport, LoadError> {
    properties.load_text("app.properties", PROPS, text)
}

fn timeout_of(registry: &Registry, key: &str) -> u64 {
    command_of(registry.properties(), key).execution_timeout_in_milliseconds
}

// ---------------------------------------------------------------------------------------------
// Precedence: SPEC §1.1's layers first, then the sources within a layer (Part A 25).

#[test]
fn code_default_then_file_global_then_file_per_key() {
    let registry = Registry::new();
    let properties = registry.properties();
    let name = format!("hystrix.command.GetUser.{TIMEOUT}");
    let report = properties.explain(&name).unwrap();
    assert_eq!(report.value, int(1000));
    assert_eq!(
        (report.layer, report.origin),
        (PropertyLayer::CodeDefault, Origin::Code)
    );
    assert!(report.overridden.is_empty());

    let global = format!("hystrix.command.default.{TIMEOUT}=700\n");
    load(properties, &global).unwrap();
    assert_eq!(timeout_of(&registry, "GetUser"), 700);
    let report = properties.explain(&name).unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin),
        (
            int(700),
            PropertyLayer::GlobalDefault,
            at("app.properties", 1)
        )
    );
    assert_eq!(report.overridden, [code_default(1000)]);

    let both = format!("{global}{name}=300\n");
    let report = load(properties, &both).unwrap();
    assert_eq!(report.applied, 2);
    assert_eq!(report.changed, [name.as_str()]);
    assert_eq!(timeout_of(&registry, "GetUser"), 300);
    assert_eq!(timeout_of(&registry, "Other"), 700);
    let report = properties.explain(&name).unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin),
        (int(300), PropertyLayer::PerKey, at("app.properties", 2))
    );
    assert_eq!(
        report.overridden,
        [
            value(
                int(700),
                PropertyLayer::GlobalDefault,
                at("app.properties", 1)
            ),
            code_default(1000)
        ]
    );
    assert!(report.dynamic && !report.key_in_use && report.pending.is_none());
}

#[test]
fn a_builder_value_hides_the_file_global_default_but_not_the_file_per_key_value() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let property = "execution.isolation.semaphore.maxConcurrentRequests";
    let global = format!("hystrix.command.default.{property} = 50\n");
    load(properties, &global).unwrap();
    let coded = builder("Coded")
        .semaphore_max_concurrent_requests(5)
        .build_in(test.registry())
        .unwrap();
    let defaulted = builder("Defaulted").build_in(test.registry()).unwrap();
    let max = |cmd: &Command| {
        cmd.properties()
            .execution_isolation_semaphore_max_concurrent_requests
    };
    assert_eq!((max(&coded), max(&defaulted)), (5, 50));
    let report = properties
        .explain(&format!("hystrix.command.Coded.{property}"))
        .unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin),
        (int(5), PropertyLayer::Builder, Origin::Code)
    );
    assert!(report.key_in_use);
    assert_eq!(
        report.overridden,
        [
            value(
                int(50),
                PropertyLayer::GlobalDefault,
                at("app.properties", 1)
            ),
            code_default(10)
        ]
    );

    let per_key = format!("{global}hystrix.command.Coded.{property} = 7\n");
    load(properties, &per_key).unwrap();
    assert_eq!((max(&coded), max(&defaulted)), (7, 50));
    let report = properties
        .explain(&format!("hystrix.command.Coded.{property}"))
        .unwrap();
    assert_eq!(
        (report.layer, report.origin),
        (PropertyLayer::PerKey, at("app.properties", 2))
    );
}

#[test]
fn environment_ranks_above_files_and_run_time_above_both() {
    let registry = Registry::new();
    let properties = registry.properties();
    let name = format!("hystrix.command.GetUser.{TIMEOUT}");
    let variable = env_var_name(&name).unwrap();
    assert_eq!(
        variable,
        "HYSTRIX__command__GetUser__execution__isolation__thread__timeoutInMilliseconds"
    );
    load(properties, &format!("{name}=300")).unwrap();
    properties
        .load_env_from([(variable.as_str(), "200")])
        .unwrap();
    let report = properties.explain(&name).unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin),
        (int(200), PropertyLayer::PerKey, var(&variable))
    );
    assert_eq!(
        report.overridden,
        [
            value(int(300), PropertyLayer::PerKey, at("app.properties", 1)),
            code_default(1000)
        ]
    );

    properties.set(&name, 100).unwrap();
    assert_eq!(timeout_of(&registry, "GetUser"), 100);
    let report = properties.explain(&name).unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin),
        (int(100), PropertyLayer::PerKey, Origin::Runtime)
    );
    assert_eq!(report.overridden.len(), 3);

    // Reloading the other sources keeps the run-time value (SPEC Part A 25).
    let reloaded = load(properties, &format!("{name}=350")).unwrap();
    assert_eq!(reloaded.changed, [name.as_str()]);
    let cleared = properties
        .load_env_from(std::iter::empty::<(&str, &str)>())
        .unwrap();
    assert_eq!(cleared.changed, [name.as_str()]);
    assert_eq!(timeout_of(&registry, "GetUser"), 100);

    assert!(properties.unset(&name).unwrap());
    assert!(!properties.unset(&name).unwrap());
    assert_eq!(timeout_of(&registry, "GetUser"), 350);
    assert_eq!(
        properties.explain(&name).unwrap().origin,
        at("app.properties", 1)
    );
}

#[test]
fn a_per_key_file_value_beats_a_global_run_time_value() {
    let registry = Registry::new();
    let properties = registry.properties();
    properties
        .set(&format!("hystrix.command.default.{TIMEOUT}"), 900)
        .unwrap();
    load(
        properties,
        &format!("hystrix.command.GetUser.{TIMEOUT}=300"),
    )
    .unwrap();
    assert_eq!(timeout_of(&registry, "GetUser"), 300);
    assert_eq!(timeout_of(&registry, "Other"), 900);
}

#[test]
fn a_file_loaded_later_ranks_above_one_loaded_earlier_and_keeps_its_rank_on_reload() {
    let registry = Registry::new();
    let properties = registry.properties();
    let global = format!("hystrix.command.default.{TIMEOUT}");
    properties
        .load_text("base.properties", PROPS, &format!("{global}=700"))
        .unwrap();
    properties
        .load_text("site.properties", PROPS, &format!("\n{global}=600"))
        .unwrap();
    properties
        .load_text("base.properties", PROPS, &format!("{global}=800"))
        .unwrap();
    let report = properties.explain(&global).unwrap();
    assert_eq!(
        (report.value, report.origin),
        (int(600), at("site.properties", 2))
    );
    assert_eq!(
        report.overridden[0],
        value(
            int(800),
            PropertyLayer::GlobalDefault,
            at("base.properties", 1)
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Each source parses.

#[test]
fn properties_syntax_separators_continuations_escapes_comments_bom_and_blank_lines() {
    let registry = Registry::new();
    let properties = registry.properties();
    let text = "\u{feff}# a comment = not a value\n\
                ! another comment\n\
                \n\
                \x20  \n\
                hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds : 1500\n\
                hystrix.command.A.circuitBreaker.errorThresholdPercentage   40\n\
                hystrix.command.A.circuitBreaker.requestVolumeThreshold=\\\n\
                \x20   30\n\
                hystrix.command.A.fallback\\\n\
                \x20 .enabled = false\r\n\
                hystrix.threadpool.A\\ B.coreSize = 2 \r\n\
                hystrix.threadpool.Pool.maxQueueSize=\\u0031\\u0030\n\
                hystrix.command.A.requestLog.enabled\t=\tfalse";
    let report = properties
        .load_text("edge.properties", PROPS, text)
        .unwrap();
    assert_eq!((report.applied, report.skipped), (7, 0));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // Values are reported parsed, as the executions read them.
    let off = Some(PropertyValue::Bool(false));
    let expected = [
        (
            "hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds",
            int(1500),
            5,
        ),
        (
            "hystrix.command.A.circuitBreaker.errorThresholdPercentage",
            int(40),
            6,
        ),
        (
            "hystrix.command.A.circuitBreaker.requestVolumeThreshold",
            int(30),
            7,
        ),
        ("hystrix.command.A.fallback.enabled", off.clone(), 9),
        ("hystrix.threadpool.A B.coreSize", int(2), 11),
        ("hystrix.threadpool.Pool.maxQueueSize", int(10), 12),
        ("hystrix.command.A.requestLog.enabled", off, 13),
    ];
    assert_values_from(properties, "edge.properties", &expected);
    let a = command_of(properties, "A");
    assert_eq!(a.execution_timeout_in_milliseconds, 1500);
    assert_eq!(a.circuit_breaker_error_threshold_percentage, 40);
    assert_eq!(a.circuit_breaker_request_volume_threshold, 30);
    assert!(!a.fallback_enabled && !a.request_log_enabled);
    assert_eq!(pool_of(properties, "A B").core_size, 2);
    assert_eq!(pool_of(properties, "Pool").max_queue_size, 10);
}

#[test]
fn properties_syntax_errors_name_the_line_and_the_property() {
    let registry = Registry::new();
    let text = "# fine\nhystrix.command.A.fallback.enabled=false\nhystrix.command.A.requestLog.enabled=\\u00zz\n";
    let err = registry
        .properties()
        .load_text("bad.properties", PROPS, text)
        .unwrap_err();
    assert_eq!(
        err,
        LoadError::Syntax {
            path: PathBuf::from("bad.properties"),
            line: 3,
            property: Some("hystrix.command.A.requestLog.enabled".into()),
            message: "Malformed \\uxxxx encoding: not hex.".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "bad.properties:3: `hystrix.command.A.requestLog.enabled`: Malformed \\uxxxx encoding: \
         not hex."
    );
    // Nothing was applied, not even the good line before it.
    assert!(command_of(registry.properties(), "A").fallback_enabled);
}

/// Writes `bytes` as `name` in `dir` and loads it from disk (`load_text` takes only UTF-8).
fn load_bytes(
    properties: &Properties,
    dir: &std::path::Path,
    name: &str,
    bytes: &[u8],
) -> (PathBuf, Result<LoadReport, LoadError>) {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let outcome = properties.load_file(&path);
    (path, outcome)
}

#[test]
fn a_properties_file_that_is_not_utf8_is_read_as_iso_8859_1_as_java_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let fallback = "hystrix.command.A.fallback.enabled";
    // A Latin-1 comment last (`café`, é = 0xE9), with and without a final newline: the
    // decoder's replacement of that last byte used to panic inside the parser.
    for (name, bytes) in [
        (
            "comment.properties",
            &b"hystrix.command.A.fallback.enabled=false\n# caf\xE9"[..],
        ),
        (
            "comment-nl.properties",
            b"hystrix.command.A.fallback.enabled=false\n# caf\xE9\n",
        ),
        (
            "comment-crlf.properties",
            b"hystrix.command.A.fallback.enabled=false\r\n# caf\xE9\r\n",
        ),
    ] {
        let registry = Registry::new();
        let (path, outcome) = load_bytes(registry.properties(), dir.path(), name, bytes);
        let report = outcome.unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!((report.applied, report.skipped), (1, 0), "{name}");
        let explained = registry.properties().explain(fallback).unwrap();
        assert_eq!(explained.value, Some(PropertyValue::Bool(false)), "{name}");
        assert_eq!(explained.origin, Origin::File { path, line: 1 }, "{name}");
    }
    // A file that is one byte 0xFF, with and without a newline: Java reads the key `ÿ` with an
    // empty value; it is no property of ours, so it is skipped.
    for (name, bytes) in [
        ("ff.properties", &b"\xFF"[..]),
        ("ff-nl.properties", b"\xFF\n"),
    ] {
        let registry = Registry::new();
        let (_, outcome) = load_bytes(registry.properties(), dir.path(), name, bytes);
        let report = outcome.unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!((report.applied, report.skipped), (0, 1), "{name}");
        assert!(report.warnings.is_empty(), "{name}: {:?}", report.warnings);
    }
    // Each byte is the character of that number (not a replacement character): the key
    // `café` written in Latin-1 is the key `café`, as in the same file saved as UTF-8.
    for (name, bytes) in [
        (
            "latin1.properties",
            &b"hystrix.command.caf\xE9.fallback.enabled=false\n"[..],
        ),
        (
            "utf8.properties",
            "hystrix.command.caf\u{e9}.fallback.enabled=false\n".as_bytes(),
        ),
    ] {
        let registry = Registry::new();
        let (_, outcome) = load_bytes(registry.properties(), dir.path(), name, bytes);
        assert_eq!(outcome.unwrap().applied, 1, "{name}");
        assert!(
            !command_of(registry.properties(), "caf\u{e9}").fallback_enabled,
            "{name}"
        );
    }
    // A Latin-1 value is read as Latin-1 too, and refused by name like any other bad value.
    let registry = Registry::new();
    let (path, outcome) = load_bytes(
        registry.properties(),
        dir.path(),
        "value.properties",
        b"# ok\nhystrix.command.A.fallback.enabled=f\xE9",
    );
    assert_eq!(
        outcome.unwrap_err().to_string(),
        format!(
            "{}:2: invalid value `f\u{e9}` for `{fallback}`: expected true or false (or \
             Archaius' yes/no, on/off, y/n, t/f)",
            path.display()
        )
    );
    // A UTF-8 byte-order mark says UTF-8: such a file that is not UTF-8 is refused at the line
    // of its first bad byte, not guessed at.
    let (path, outcome) = load_bytes(
        registry.properties(),
        dir.path(),
        "bom.properties",
        b"\xEF\xBB\xBF# ok\nhystrix.command.A.fallback.enabled=f\xE9\n",
    );
    assert_eq!(
        outcome.unwrap_err(),
        LoadError::Syntax {
            path,
            line: 2,
            property: Some(fallback.into()),
            message: "not valid UTF-8, though the file begins with a UTF-8 byte-order mark".into(),
        }
    );
    assert!(command_of(registry.properties(), "A").fallback_enabled);
}

#[test]
fn toml_names_are_key_paths_joined_with_dots() {
    let registry = Registry::new();
    let properties = registry.properties();
    let text = r#"# Hystrix settings
"hystrix.config.stream.maxConcurrentConnections" = 3

[hystrix.command.default]
execution.isolation.thread.timeoutInMilliseconds = 800
circuitBreaker.errorThresholdPercentage = 40

[hystrix.command.GetUser]
"circuitBreaker.requestVolumeThreshold" = 10
execution.timeout.enabled = false
execution.isolation.strategy = "SEMAPHORE"

[hystrix.command."svc.users.GetProfile"]
fallback.enabled = false

[hystrix.threadpool.UserService]
coreSize = 0x14
maxQueueSize = -1

[hystrix.collapser.Batcher]
timerDelayInMilliseconds = "25"

[hystrix.stream]
dashboard = { intervalInMilliseconds = 250 }
"#;
    let report = properties
        .load_text("app.toml", FileFormat::Toml, text)
        .unwrap();
    assert_eq!(report.applied, 11);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let expected = [
        ("hystrix.config.stream.maxConcurrentConnections", int(3), 2),
        (
            "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds",
            int(800),
            5,
        ),
        (
            "hystrix.command.default.circuitBreaker.errorThresholdPercentage",
            int(40),
            6,
        ),
        (
            "hystrix.command.GetUser.circuitBreaker.requestVolumeThreshold",
            int(10),
            9,
        ),
        (
            "hystrix.command.GetUser.execution.timeout.enabled",
            Some(PropertyValue::Bool(false)),
            10,
        ),
        (
            "hystrix.command.GetUser.execution.isolation.strategy",
            string("SEMAPHORE"),
            11,
        ),
        (
            "hystrix.command.svc.users.GetProfile.fallback.enabled",
            Some(PropertyValue::Bool(false)),
            14,
        ),
        ("hystrix.threadpool.UserService.coreSize", int(20), 17),
        ("hystrix.threadpool.UserService.maxQueueSize", int(-1), 18),
        (
            "hystrix.collapser.Batcher.timerDelayInMilliseconds",
            int(25),
            21,
        ),
        (
            "hystrix.stream.dashboard.intervalInMilliseconds",
            int(250),
            24,
        ),
    ];
    assert_values_from(properties, "app.toml", &expected);
    let get_user = command_of(properties, "GetUser");
    assert_eq!(get_user.execution_timeout_in_milliseconds, 800);
    assert_eq!(
        get_user.execution_isolation_strategy,
        Some(IsolationStrategy::Semaphore)
    );
    assert_eq!(properties.stream().max_concurrent_connections, 3);
}

#[test]
fn toml_values_of_the_wrong_type_and_syntax_errors_name_the_line() {
    let registry = Registry::new();
    let properties = registry.properties();
    let cases = [
        (
            "[hystrix.command.A]\nfallback.enabled = true\nexecution.isolation.thread.timeoutInMilliseconds = 1.5\n",
            "app.toml:3: invalid value `1.5` for \
             `hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds`: expected a \
             whole number",
        ),
        (
            "[hystrix.threadpool.P]\ncoreSize = [1, 2]\n",
            "app.toml:2: invalid value `[1, 2]` for `hystrix.threadpool.P.coreSize`: an array is \
             not a property value",
        ),
        (
            "[hystrix.command.A]\nfallback.enabled = 1\n",
            "app.toml:2: invalid value `1` for `hystrix.command.A.fallback.enabled`: expected \
             true or false",
        ),
    ];
    for (text, message) in cases {
        let err = properties
            .load_text("app.toml", FileFormat::Toml, text)
            .unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let err = properties
        .load_text(
            "app.toml",
            FileFormat::Toml,
            "[hystrix.command.A]\nfallback.enabled = \n",
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.toml:2: `hystrix.command.A.fallback.enabled`: no value after `=`"
    );
    assert!(command_of(properties, "A").fallback_enabled);
}

#[test]
fn a_toml_value_that_is_not_toml_names_the_property_file_and_line() {
    let registry = Registry::new();
    let properties = registry.properties();
    let strategy = "hystrix.command.X.execution.isolation.strategy";
    let cases = [
        // Unquoted: TOML reads `THREAD` as a boolean gone wrong, which the message does not
        // repeat ("invalid boolean, expected `true`" only misleads).
        (
            "[hystrix.command.X]\nexecution.isolation.strategy = THREAD\n",
            2,
            strategy,
            "`THREAD` is not a TOML value; a string is written in quotes: \"THREAD\"",
        ),
        (
            "hystrix.command.X.execution.isolation.strategy = SEMAPHORE\n",
            1,
            strategy,
            "`SEMAPHORE` is not a TOML value; a string is written in quotes: \"SEMAPHORE\"",
        ),
        (
            "[hystrix.command.X]\nfallback.enabled = true\ncircuitBreaker = { enabled = yes }\n",
            3,
            "hystrix.command.X.circuitBreaker.enabled",
            "`yes` is not a TOML value; a string is written in quotes: \"yes\"",
        ),
        (
            "[hystrix.threadpool.P]\ncoreSize = \"10\nmaxQueueSize = 5\n",
            2,
            "hystrix.threadpool.P.coreSize",
            "invalid basic string, expected `\"`",
        ),
    ];
    for (text, line, property, message) in cases {
        let err = properties
            .load_text("app.toml", FileFormat::Toml, text)
            .unwrap_err();
        assert_eq!(
            err,
            LoadError::Syntax {
                path: PathBuf::from("app.toml"),
                line,
                property: Some(property.into()),
                message: message.into(),
            },
            "{text}"
        );
        assert_eq!(
            err.to_string(),
            format!("app.toml:{line}: `{property}`: {message}")
        );
    }
    // An error outside any value names no property.
    let err = properties
        .load_text(
            "app.toml",
            FileFormat::Toml,
            "[hystrix.command.X]\nfallback enabled = 1\n",
        )
        .unwrap_err();
    let LoadError::Syntax { line, property, .. } = err else {
        panic!("a syntax error: {err}");
    };
    assert_eq!((line, property), (2, None));
    // Nothing was applied.
    assert!(command_of(properties, "X").fallback_enabled);
    assert_eq!(
        command_of(properties, "X").execution_isolation_strategy,
        None
    );
}

#[test]
fn environment_variables_in_both_forms_unknown_names_and_conflicts() {
    let registry = Registry::new();
    let properties = registry.properties();
    let report = properties
        .load_env_from([
            ("HYSTRIX__threadpool__UserService__coreSize", "12"),
            ("hystrix.command.default.fallback.enabled", "false"),
            (
                "HYSTRIX__command__default__execution__isolation__thread__timeoutInMiliseconds",
                "5",
            ),
            ("HOME", "/root"),
            ("HYSTRIX_DASHBOARD_PORT", "7979"),
        ])
        .unwrap();
    assert_eq!((report.applied, report.skipped), (2, 0));
    assert_eq!(
        report
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["environment variable \
             HYSTRIX__command__default__execution__isolation__thread__timeoutInMiliseconds: \
             unknown property \
             `hystrix.command.default.execution.isolation.thread.timeoutInMiliseconds` ignored; \
             did you mean \
             `hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds`?"]
    );
    assert_eq!(pool_of(properties, "UserService").core_size, 12);
    assert_eq!(
        properties
            .explain("hystrix.command.Any.fallback.enabled")
            .unwrap()
            .origin,
        var("hystrix.command.default.fallback.enabled")
    );

    let err = properties
        .load_env_from([
            ("HYSTRIX__threadpool__UserService__coreSize", "12"),
            ("hystrix.threadpool.UserService.coreSize", "13"),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`hystrix.threadpool.UserService.coreSize` is set by two environment variables, \
         HYSTRIX__threadpool__UserService__coreSize and hystrix.threadpool.UserService.coreSize: \
         keep one"
    );
    let err = properties
        .load_env_from([("HYSTRIX__threadpool__UserService__coreSize", "-2")])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "environment variable HYSTRIX__threadpool__UserService__coreSize: invalid value `-2` for \
         `hystrix.threadpool.UserService.coreSize`: must not be negative"
    );
    // Both refused loads changed nothing.
    assert_eq!(pool_of(properties, "UserService").core_size, 12);
}

#[test]
fn files_load_by_extension_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new();
    let properties = registry.properties();
    let toml = dir.path().join("hystrix.toml");
    std::fs::write(&toml, "[hystrix.threadpool.default]\ncoreSize = 7\n").unwrap();
    properties.load_file(&toml).unwrap();
    assert_eq!(
        properties
            .explain("hystrix.threadpool.P.coreSize")
            .unwrap()
            .origin,
        Origin::File {
            path: toml.clone(),
            line: 2
        }
    );
    let yaml = dir.path().join("hystrix.yaml");
    std::fs::write(&yaml, "").unwrap();
    assert_eq!(
        properties.load_file(&yaml).unwrap_err(),
        LoadError::UnknownFormat { path: yaml.clone() }
    );
    // Any name, with the format given.
    std::fs::write(&yaml, "hystrix.threadpool.default.coreSize=8\n").unwrap();
    properties.load_file_as(&yaml, PROPS).unwrap();
    assert_eq!(pool_of(properties, "P").core_size, 8);
    let missing = dir.path().join("missing.properties");
    let err = properties.load_file(&missing).unwrap_err();
    assert!(
        matches!(&err, LoadError::Read { path, .. } if *path == missing),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// A Hystrix user's file, unchanged.

const HYSTRIX_USER_FILE: &str = "\
# user-service: config.properties (Archaius)
eureka.client.serviceUrl.defaultZone=http://localhost:8761/eureka/
ribbon.ReadTimeout=3000
ribbon.ConnectTimeout=1000

# Hystrix defaults
hystrix.command.default.execution.isolation.strategy=THREAD
hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds=2000
hystrix.command.default.execution.timeout.enabled=true
hystrix.command.default.execution.isolation.thread.interruptOnTimeout=true
hystrix.command.default.fallback.enabled=true
hystrix.command.default.circuitBreaker.enabled=true
hystrix.command.default.circuitBreaker.requestVolumeThreshold=20
hystrix.command.default.circuitBreaker.sleepWindowInMilliseconds=5000
hystrix.command.default.circuitBreaker.errorThresholdPercentage=50
hystrix.command.default.metrics.rollingStats.timeInMilliseconds=10000
hystrix.command.default.metrics.rollingStats.numBuckets=10
hystrix.command.default.metrics.rollingPercentile.enabled=true
hystrix.command.default.metrics.healthSnapshot.intervalInMilliseconds=500
hystrix.command.default.requestCache.enabled=true
hystrix.command.default.requestLog.enabled=true

# Per command
hystrix.command.GetUserById.execution.isolation.thread.timeoutInMilliseconds=500
hystrix.command.GetUserById.circuitBreaker.errorThresholdPercentage=25
hystrix.command.SearchUsers.execution.isolation.strategy=SEMAPHORE
hystrix.command.SearchUsers.execution.isolation.semaphore.maxConcurrentRequests=50
hystrix.command.SearchUsers.fallback.isolation.semaphore.maxConcurrentRequests=50
hystrix.command.LegacyExport.execution.timeout.enabled=false
hystrix.command.LegacyExport.threadPoolKeyOverride=ExportPool

# Thread pools
hystrix.threadpool.default.coreSize=10
hystrix.threadpool.UserService.coreSize=30
hystrix.threadpool.UserService.maximumSize=40
hystrix.threadpool.UserService.allowMaximumSizeToDivergeFromCoreSize=true
hystrix.threadpool.UserService.keepAliveTimeMinutes=2
hystrix.threadpool.UserService.maxQueueSize=100
hystrix.threadpool.UserService.queueSizeRejectionThreshold=80
hystrix.threadpool.ExportPool.coreSize=2

# Collapser
hystrix.collapser.UserBatch.maxRequestsInBatch=100
hystrix.collapser.UserBatch.timerDelayInMilliseconds=5

# Streams and plugins
hystrix.stream.dashboard.intervalInMilliseconds=1000
hystrix.config.stream.maxConcurrentConnections=10
hystrix.timer.threadpool.default.coreSize=4
hystrix.plugin.HystrixCommandExecutionHook.implementation=com.example.TracingHook
";

#[test]
fn a_hystrix_users_properties_file_works_unchanged() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let report = properties
        .load_text("config.properties", PROPS, HYSTRIX_USER_FILE)
        .unwrap();
    assert_eq!((report.applied, report.skipped), (34, 3));
    assert_eq!(
        report
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "config.properties:49: `hystrix.timer.threadpool.default.coreSize` ignored: \
             hystrix-rs has no timer thread pool: timeouts and timers run on the registry's Clock",
            "config.properties:50: \
             `hystrix.plugin.HystrixCommandExecutionHook.implementation` ignored: plugins are \
             registered in code, per registry, with Registry::builder()",
        ]
    );

    let get_user = Command::builder("GetUserById")
        .group("UserService")
        .build_in(test.registry())
        .unwrap();
    let props = get_user.properties();
    assert_eq!(props.execution_timeout_in_milliseconds, 500);
    assert_eq!(props.circuit_breaker_error_threshold_percentage, 25);
    assert_eq!(
        props.execution_isolation_strategy,
        Some(IsolationStrategy::Thread)
    );
    assert_eq!(get_user.thread_pool_key().as_str(), "UserService");
    assert_eq!(
        get_user
            .run(|| Ok::<_, DependencyError>(7))
            .execute()
            .unwrap(),
        7
    );
    let pool_props = pool_of(properties, "UserService");
    assert_eq!(
        (
            pool_props.core_size,
            pool_props.actual_maximum_size(),
            pool_props.keep_alive_time_minutes,
            pool_props.max_queue_size,
            pool_props.queue_size_rejection_threshold
        ),
        (30, 40, 2, 100, 80)
    );

    let search = Command::builder("SearchUsers")
        .group("UserService")
        .build_in(test.registry())
        .unwrap();
    let props = search.properties();
    assert_eq!(
        props.execution_isolation_strategy,
        Some(IsolationStrategy::Semaphore)
    );
    assert_eq!(
        props.execution_isolation_semaphore_max_concurrent_requests,
        50
    );
    assert_eq!(props.execution_timeout_in_milliseconds, 2000);
    assert_eq!(
        search
            .run(|| Ok::<_, DependencyError>(3))
            .execute()
            .unwrap(),
        3
    );

    let export = Command::builder("LegacyExport")
        .group("Reports")
        .build_in(test.registry())
        .unwrap();
    assert_eq!(export.thread_pool_key().as_str(), "ExportPool");
    assert!(!export.properties().execution_timeout_enabled);
    assert_eq!(
        properties
            .get("hystrix.collapser.UserBatch.maxRequestsInBatch")
            .unwrap(),
        int(100)
    );
    assert_eq!(properties.stream().dashboard_interval_in_milliseconds, 1000);
    assert_eq!(properties.stream().max_concurrent_connections, 10);
}

// ---------------------------------------------------------------------------------------------
// Reloads and run-time changes reach the next execution.

#[test]
fn a_reloaded_timeout_applies_to_the_next_execution() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let name = format!("hystrix.command.Slow.{TIMEOUT}");
    load(properties, &format!("{name}=1000")).unwrap();
    let cmd = builder("Slow").build_in(test.registry()).unwrap();
    assert_eq!(cmd.run(slow(&test, 600, 1)).execute().unwrap(), 1);

    load(properties, &format!("{name}=500")).unwrap();
    let outcome = cmd.run(slow(&test, 600, 2)).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert_eq!(outcome.into_response().unwrap_err().timeout_ms(), Some(500));
}

#[test]
fn a_run_time_timeout_applies_to_the_next_execution() {
    let test = TestRegistry::new();
    let cmd = builder("RunTimeTimeout")
        .timeout(Duration::from_millis(300))
        .build_in(test.registry())
        .unwrap();
    let err = cmd.run(slow(&test, 400, 1)).execute().unwrap_err();
    assert_eq!(err.timeout_ms(), Some(300));
    test.registry()
        .properties()
        .set(&format!("hystrix.command.RunTimeTimeout.{TIMEOUT}"), 450)
        .unwrap();
    assert_eq!(cmd.run(slow(&test, 400, 2)).execute().unwrap(), 2);
}

#[test]
fn a_reloaded_semaphore_of_zero_rejects_the_next_execution_and_back() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let name = "hystrix.command.Gate.execution.isolation.semaphore.maxConcurrentRequests";
    let cmd = builder("Gate").build_in(test.registry()).unwrap();
    // Zero is Hystrix's kill switch, not an error (SPEC Part A 32).
    load(properties, &format!("{name}=0")).unwrap();
    let outcome = cmd.run(|| Ok::<_, DependencyError>(1)).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SEMAPHORE_REJECTED", "FALLBACK_MISSING"]
    );
    load(properties, &format!("{name}=1")).unwrap();
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(2)).execute().unwrap(),
        2
    );
}

fn advance_to(test: &TestRegistry, ms: u64) {
    let now = hystrix::clock::Clock::now_ms(&**test.registry().clock());
    test.advance(Duration::from_millis(ms - now));
}

#[test]
fn run_time_breaker_thresholds_apply_at_the_next_health_check() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let volume = builder("Volume").build_in(test.registry()).unwrap();
    let percent = builder("Percent").build_in(test.registry()).unwrap();
    properties
        .set_all([
            (
                "hystrix.command.Percent.circuitBreaker.requestVolumeThreshold",
                10,
            ),
            (
                "hystrix.command.Percent.circuitBreaker.errorThresholdPercentage",
                60,
            ),
        ])
        .unwrap();
    let fail = || Err::<u32, _>(DependencyError("boom"));
    for _ in 0..10 {
        let _ = volume.run(fail).execute();
    }
    for i in 0..10 {
        let _ = if i < 5 {
            percent.run(|| Ok(1)).execute()
        } else {
            percent.run(fail).execute()
        };
    }
    advance_to(&test, 500);
    // 10 requests at 100 %: below the default volume of 20. 50 %: below 60 %.
    assert_eq!(volume.circuit_breaker().status(), Status::Closed);
    assert_eq!(percent.circuit_breaker().status(), Status::Closed);

    properties
        .set(
            "hystrix.command.Volume.circuitBreaker.requestVolumeThreshold",
            10,
        )
        .unwrap();
    properties
        .set(
            "hystrix.command.Percent.circuitBreaker.errorThresholdPercentage",
            50,
        )
        .unwrap();
    advance_to(&test, 1000);
    assert_eq!(volume.circuit_breaker().status(), Status::Open);
    assert_eq!(percent.circuit_breaker().status(), Status::Open);
}

#[test]
fn a_reload_keeps_run_time_and_environment_values() {
    let registry = Registry::new();
    let properties = registry.properties();
    let timeout = format!("hystrix.command.A.{TIMEOUT}");
    let volume = "hystrix.command.A.circuitBreaker.requestVolumeThreshold";
    let sleep = "hystrix.command.A.circuitBreaker.sleepWindowInMilliseconds";
    let file = |t: u32, v: u32, s: u32| format!("{timeout}={t}\n{volume}={v}\n{sleep}={s}\n");
    load(properties, &file(500, 5, 1000)).unwrap();
    properties.set(&timeout, 200).unwrap();
    properties
        .load_env_from([(env_var_name(volume).unwrap(), "7")])
        .unwrap();
    let report = load(properties, &file(800, 9, 3000)).unwrap();
    assert_eq!(report.changed, [volume, sleep, timeout.as_str()]);
    let a = command_of(properties, "A");
    assert_eq!(
        (
            a.execution_timeout_in_milliseconds,
            a.circuit_breaker_request_volume_threshold,
            a.circuit_breaker_sleep_window_in_milliseconds
        ),
        (200, 7, 3000)
    );
}

#[test]
fn a_value_removed_from_the_file_falls_back_to_the_layers_below() {
    let registry = Registry::new();
    let properties = registry.properties();
    let name = format!("hystrix.command.A.{TIMEOUT}");
    load(properties, &format!("{name}=500")).unwrap();
    let report = load(properties, "# emptied\n").unwrap();
    assert_eq!((report.applied, report.changed), (0, vec![name.clone()]));
    assert_eq!(timeout_of(&registry, "A"), 1000);
}

// ---------------------------------------------------------------------------------------------
// An invalid source changes nothing (SPEC Part A 9).

#[test]
fn an_invalid_reload_keeps_the_last_good_values_and_names_file_line_and_property() {
    let registry = Registry::new();
    let properties = registry.properties();
    let good =
        format!("hystrix.command.GetUser.{TIMEOUT}=500\nhystrix.threadpool.Users.coreSize=4\n");
    load(properties, &good).unwrap();
    let bad = format!(
        "hystrix.command.GetUser.{TIMEOUT}=700\n\
         hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage=150\n\
         hystrix.threadpool.Users.coreSize=8\n"
    );
    let err = load(properties, &bad).unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:2: invalid value `150` for \
         `hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage`: must be a percentage \
         from 0 to 100"
    );
    assert_eq!(timeout_of(&registry, "GetUser"), 500);
    assert_eq!(pool_of(properties, "Users").core_size, 4);
    assert_eq!(
        properties
            .explain(&format!("hystrix.command.GetUser.{TIMEOUT}"))
            .unwrap()
            .origin,
        at("app.properties", 1)
    );
}

#[test]
fn rules_between_properties_are_checked_on_the_whole_file() {
    let registry = Registry::new();
    let properties = registry.properties();
    let success = "hystrix.command.A.circuitBreaker.halfOpen.successThreshold";
    let permitted = "hystrix.command.A.circuitBreaker.halfOpen.permittedRequests";
    let err = load(properties, &format!("# trials\n{success}=3\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:2: invalid value `3` for \
         `hystrix.command.A.circuitBreaker.halfOpen.successThreshold`: must not exceed \
         circuitBreaker.halfOpen.permittedRequests (1)"
    );
    // Valid together, in any order.
    load(properties, &format!("{success}=3\n{permitted}=5\n")).unwrap();
    // A rule broken by a later line points at that line, and names both properties.
    let err = load(
        properties,
        "hystrix.command.default.metrics.rollingStats.numBuckets=20\n\
             hystrix.command.default.metrics.rollingStats.timeInMilliseconds=1010\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:2: invalid value `1010` for \
         `hystrix.command.default.metrics.rollingStats.timeInMilliseconds`: conflicts with \
         `hystrix.command.default.metrics.rollingStats.numBuckets` = 20, which must divide \
         metrics.rollingStats.timeInMilliseconds (1010 ms) evenly"
    );
    // Dropping a value that a run-time value relies on is refused too.
    properties.set(success, 3).unwrap();
    let err = load(properties, "").unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties: invalid value `3` for \
         `hystrix.command.A.circuitBreaker.halfOpen.successThreshold`: must not exceed \
         circuitBreaker.halfOpen.permittedRequests (1)"
    );
    assert!(matches!(err, LoadError::Removal { .. }));
}

#[test]
fn values_are_checked_by_type_and_range_and_zero_keeps_its_meaning() {
    let registry = Registry::new();
    let properties = registry.properties();
    let refused = [
        (
            "hystrix.command.A.execution.isolation.semaphore.maxConcurrentRequests=-1",
            "invalid value `-1` for \
             `hystrix.command.A.execution.isolation.semaphore.maxConcurrentRequests`: must not be \
             negative",
        ),
        (
            "hystrix.command.A.requestLog.enabled=true # a comment only at the start of a line",
            "invalid value `true # a comment only at the start of a line` for \
             `hystrix.command.A.requestLog.enabled`: expected true or false (or Archaius' \
             yes/no, on/off, y/n, t/f)",
        ),
        (
            "hystrix.command.default.threadPoolKeyOverride=Other",
            "invalid value `Other` for `hystrix.command.default.threadPoolKeyOverride`: this \
             property exists only per key, not under `default`",
        ),
        (
            "hystrix.threadpool.P.coreSize=0",
            "invalid value `0` for `hystrix.threadpool.P.coreSize`: the pool needs at least 1 \
             thread (coreSize, or maximumSize with allowMaximumSizeToDivergeFromCoreSize)",
        ),
        (
            "hystrix.command.A.execution.isolation.strategy=FIBER",
            "invalid value `FIBER` for `hystrix.command.A.execution.isolation.strategy`: \
             expected THREAD or SEMAPHORE",
        ),
    ];
    for (line, message) in refused {
        let err = load(properties, line).unwrap_err();
        assert_eq!(err.to_string(), format!("app.properties:1: {message}"));
    }
    // Hystrix's meanings of zero and below (SPEC Part A 32): accepted.
    load(
        properties,
        "hystrix.command.A.execution.isolation.semaphore.maxConcurrentRequests=0\n\
             hystrix.command.A.fallback.isolation.semaphore.maxConcurrentRequests=0\n\
             hystrix.threadpool.P.maxQueueSize=-1\n\
             hystrix.threadpool.Q.maxQueueSize=0\n\
             hystrix.threadpool.P.queueSizeRejectionThreshold=0\n",
    )
    .unwrap();
}

#[test]
fn unknown_names_are_warnings_with_a_suggestion_and_never_fail_a_load() {
    let registry = Registry::new();
    let properties = registry.properties();
    let report = load(
        properties,
        "hystrix.command.default.execution.isolation.thread.timeoutInMiliseconds=500\n\
             hystrix.threadpool.Users.coresize=4\n\
             hystrix.command.GetUser.somethingElse=1\n\
             hystrix.command.\\ Padded.fallback.enabled=false\n\
             spring.application.name=users\n\
             hystrix.command.GetUser.fallback.enabled=false\n",
    )
    .unwrap();
    assert_eq!((report.applied, report.skipped), (1, 1));
    let shown: Vec<String> = report.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "app.properties:1: unknown property \
             `hystrix.command.default.execution.isolation.thread.timeoutInMiliseconds` ignored; \
             did you mean \
             `hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds`?",
            "app.properties:2: unknown property `hystrix.threadpool.Users.coresize` ignored; did \
             you mean `hystrix.threadpool.Users.coreSize`?",
            "app.properties:3: unknown property `hystrix.command.GetUser.somethingElse` ignored",
            "app.properties:4: `hystrix.command. Padded.fallback.enabled` ignored: invalid \
             command key ` Padded`: must not start or end with whitespace",
        ]
    );
    assert!(matches!(
        &report.warnings[0],
        LoadWarning::UnknownProperty {
            suggestion: Some(_),
            ..
        }
    ));
}

#[test]
fn a_registry_that_denies_unknown_properties_refuses_such_loads_from_every_source() {
    let registry = Registry::builder().deny_unknown_properties(true).build();
    let properties = registry.properties();
    // Another library's keys are still skipped.
    let report = load(
        properties,
        "ribbon.ReadTimeout=3000\nhystrix.command.GetUser.fallback.enabled=false\n",
    )
    .unwrap();
    assert_eq!((report.applied, report.skipped), (1, 1));
    let err = load(
        properties,
        "hystrix.command.GetUser.fallback.enabled=true\nhystrix.threadpool.Users.coresize=4\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:2: unknown property `hystrix.threadpool.Users.coresize` refused; did you \
         mean `hystrix.threadpool.Users.coreSize`? (this registry denies unknown properties: \
         nothing was loaded)"
    );
    assert_eq!(
        err,
        LoadError::Denied {
            warning: Box::new(LoadWarning::UnknownProperty {
                name: "hystrix.threadpool.Users.coresize".into(),
                origin: at("app.properties", 2),
                suggestion: Some("hystrix.threadpool.Users.coreSize".into()),
            })
        }
    );
    // The refused reload kept the file's last good values.
    assert!(!command_of(properties, "GetUser").fallback_enabled);
    let err = load(properties, "hystrix.timer.threadpool.default.coreSize=4\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:1: `hystrix.timer.threadpool.default.coreSize` refused: hystrix-rs has no \
         timer thread pool: timeouts and timers run on the registry's Clock (this registry \
         denies unknown properties: nothing was loaded)"
    );
    let err = properties
        .load_env_from([("HYSTRIX__threadpool__default__coresize", "4")])
        .unwrap_err();
    assert!(
        matches!(&err, LoadError::Denied { warning } if matches!(**warning, LoadWarning::UnknownProperty { origin: Origin::Environment { .. }, .. })),
        "{err}"
    );
    // A name set twice stays a warning.
    let name = format!("hystrix.command.A.{TIMEOUT}");
    let report = load(properties, &format!("{name}=300\n{name}=400\n")).unwrap();
    assert!(matches!(
        report.warnings[..],
        [LoadWarning::Duplicate { .. }]
    ));
}

#[test]
fn a_name_set_twice_takes_the_later_value_with_a_warning() {
    let registry = Registry::new();
    let properties = registry.properties();
    let name = format!("hystrix.command.A.{TIMEOUT}");
    let report = load(properties, &format!("{name}=300\n{name}=400\n")).unwrap();
    assert_eq!(
        report.warnings,
        [LoadWarning::Duplicate {
            name: name.clone(),
            origin: at("app.properties", 2),
            ignored: at("app.properties", 1),
        }]
    );
    assert_eq!(timeout_of(&registry, "A"), 400);
}

// ---------------------------------------------------------------------------------------------
// Fixed properties (SPEC §1.1): reported, never silently ignored.

#[test]
fn a_fixed_property_of_a_key_in_use_refuses_the_reload_by_line() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let cmd = builder("InUse").build_in(test.registry()).unwrap();
    let err = load(
        properties,
        &format!(
            "hystrix.command.InUse.{TIMEOUT}=300\n\
                 hystrix.command.InUse.metrics.rollingStats.numBuckets=20\n"
        ),
    )
    .unwrap_err();
    assert_eq!(
        err,
        LoadError::Invalid {
            origin: at("app.properties", 2),
            error: Box::new(ConfigError::FixedAfterFirstUse {
                name: "hystrix.command.InUse.metrics.rollingStats.numBuckets".into()
            }),
        }
    );
    assert_eq!(cmd.properties().execution_timeout_in_milliseconds, 1000);
}

#[test]
fn a_reload_that_changes_a_fixed_value_the_file_gave_names_that_line() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let v1 = "hystrix.command.A.metrics.rollingStats.timeInMilliseconds=20000\n\
              hystrix.command.A.fallback.enabled=true\n\
              hystrix.command.A.threadPoolKeyOverride=P\n";
    load(properties, v1).unwrap();
    builder("A").build_in(test.registry()).unwrap();
    // The override changes on line 3; lines 1 and 2 keep their values.
    let err = load(properties, &v1.replace("=P", "=Q")).unwrap_err();
    assert_eq!(
        err,
        LoadError::Invalid {
            origin: at("app.properties", 3),
            error: Box::new(ConfigError::FixedAfterFirstUse {
                name: "hystrix.command.A.threadPoolKeyOverride".into()
            }),
        }
    );
    // The window changes on line 1.
    let err = load(properties, &v1.replace("20000", "30000")).unwrap_err();
    assert!(
        matches!(&err, LoadError::Invalid { origin, .. } if *origin == at("app.properties", 1)),
        "{err}"
    );
    // A file that no longer gives the override removes it: that is the refused change.
    let err = load(
        properties,
        "hystrix.command.A.metrics.rollingStats.timeInMilliseconds=20000\n",
    )
    .unwrap_err();
    assert!(matches!(err, LoadError::Removal { .. }), "{err}");
}

#[test]
fn a_global_fixed_change_is_reported_for_keys_in_use_and_applies_to_new_keys() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let early = builder("Early").build_in(test.registry()).unwrap();
    let also = builder("Also").build_in(test.registry()).unwrap();
    let name = "hystrix.command.default.metrics.rollingStats.numBuckets";
    let report = load(properties, &format!("{name}=20")).unwrap();
    assert_eq!(
        report.warnings,
        [LoadWarning::FixedKept {
            name: name.into(),
            keys: vec!["Also".into(), "Early".into()],
        }]
    );
    let late = builder("Late").build_in(test.registry()).unwrap();
    let buckets = |cmd: &Command| cmd.properties().metrics_rolling_stats_num_buckets;
    assert_eq!(
        (buckets(&early), buckets(&also), buckets(&late)),
        (10, 10, 20)
    );
    let report = properties
        .explain("hystrix.command.Early.metrics.rollingStats.numBuckets")
        .unwrap();
    assert_eq!(
        (report.value, report.layer, report.origin, report.dynamic),
        (int(10), PropertyLayer::CodeDefault, Origin::Code, false)
    );
    assert_eq!(
        report.pending,
        Some(value(
            int(20),
            PropertyLayer::GlobalDefault,
            at("app.properties", 1)
        ))
    );
    let report = properties
        .explain("hystrix.command.Late.metrics.rollingStats.numBuckets")
        .unwrap();
    assert_eq!((report.value, report.pending), (int(20), None));
}

// ---------------------------------------------------------------------------------------------
// Random files and keys: no panic, and every error names its place and the property.

const SOME_NAMES: &[&str] = &[
    "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds",
    "hystrix.command.A.circuitBreaker.errorThresholdPercentage",
    "hystrix.command.A.circuitBreaker.halfOpen.successThreshold",
    "hystrix.command.default.metrics.rollingStats.numBuckets",
    "hystrix.command.A.threadPoolKeyOverride",
    "hystrix.command.default.threadPoolKeyOverride",
    "hystrix.threadpool.P.coreSize",
    "hystrix.threadpool.default.maxQueueSize",
    "hystrix.collapser.C.maxRequestsInBatch",
    "hystrix.stream.dashboard.intervalInMilliseconds",
    "hystrix.command.A.execution.isolation.strategy",
];

fn key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(SOME_NAMES).prop_map(String::from),
        // A property under a random key.
        (
            "[A-Za-z_ .-]{0,6}",
            prop::sample::select(hystrix::config::COMMAND_PROPERTIES)
        )
            .prop_map(|(key, info)| format!("hystrix.command.{key}.{}", info.name)),
        // A real name with one character changed.
        (
            prop::sample::select(SOME_NAMES),
            any::<prop::sample::Index>(),
            "[ -~]"
        )
            .prop_map(|(name, at, c)| {
                let mut chars: Vec<char> = name.chars().collect();
                let i = at.index(chars.len());
                chars[i] = c.chars().next().unwrap_or('x');
                chars.into_iter().collect()
            }),
        "[ -~]{0,30}",
        "\\PC{0,12}",
    ]
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i64..2000).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        prop::sample::select(
            &[
                "true",
                "false",
                "THREAD",
                "SEMAPHORE",
                "",
                "\\u00zz",
                "\\",
                "\\u0031\\u0032"
            ][..]
        )
        .prop_map(String::from),
        "[ -~]{0,12}",
        "\\PC{0,8}",
    ]
}

fn properties_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (key_strategy(), prop::sample::select(&["=", ":", " ", " = ", "\t", "\\\n  ="][..]), value_strategy())
            .prop_map(|(key, separator, value)| format!("{key}{separator}{value}")),
        1 => "[#!][ -~]{0,20}",
        1 => Just(String::new()),
        1 => "[ -~\\\\]{0,40}",
    ]
}

/// The checks every load of `text` under `path` must pass.
fn check_outcome(
    registry: &Registry,
    path: &str,
    text: &str,
    outcome: Result<LoadReport, LoadError>,
) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    let err = match outcome {
        Ok(_) => return Ok(()),
        Err(err) => err,
    };
    let shown = err.to_string();
    match &err {
        LoadError::Syntax {
            path: at,
            line,
            property,
            ..
        } => {
            prop_assert_eq!(at, &PathBuf::from(path));
            prop_assert!((1..=lines).contains(line), "{}", shown);
            if let Some(property) = property {
                prop_assert!(
                    !property.is_empty() && shown.contains(&as_written(property)),
                    "{}",
                    shown
                );
            }
        }
        LoadError::Invalid { origin, error } => {
            let Origin::File { path: at, line } = origin else {
                return Err(TestCaseError::fail(format!("not a file origin: {shown}")));
            };
            prop_assert_eq!(at, &PathBuf::from(path));
            prop_assert!((1..=lines).contains(line), "{}", shown);
            let name = match error.as_ref() {
                ConfigError::InvalidValue { name, .. }
                | ConfigError::FixedAfterFirstUse { name } => name,
                other => return Err(TestCaseError::fail(format!("names no property: {other}"))),
            };
            prop_assert!(
                registry.properties().get(name).is_ok(),
                "{} is a property",
                name
            );
            prop_assert!(
                shown.contains(&name.escape_debug().to_string()),
                "{}",
                shown
            );
        }
        other => return Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
    // A refused load stored nothing: loading nothing under its name changes nothing.
    let emptied = registry.properties().load_text(path, PROPS, "").unwrap();
    prop_assert!(emptied.changed.is_empty(), "{:?}", emptied.changed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_properties_files_never_panic_and_errors_name_the_property(
        lines in prop::collection::vec(properties_line(), 0..12),
        crlf in any::<bool>(),
    ) {
        let text = lines.join(if crlf { "\r\n" } else { "\n" });
        let registry = Registry::new();
        let outcome = registry.properties().load_text("fuzz.properties", PROPS, &text);
        check_outcome(&registry, "fuzz.properties", &text, outcome)?;
    }

    #[test]
    fn random_bytes_as_a_properties_file_never_panic_and_errors_name_the_line(
        lines in prop::collection::vec(
            prop::collection::vec(
                prop_oneof![
                    // Bytes that are not UTF-8 on their own, and the syntax's own.
                    3 => 0x80u8..=0xFF,
                    1 => prop::sample::select(&b"=:# !\\u\r\t"[..]),
                    2 => prop::sample::select(&b"hystrix.command.A.fallback.enabled"[..]),
                ],
                0..24,
            ),
            0..6,
        ),
        newline_last in any::<bool>(),
    ) {
        let mut bytes = lines.join(&b'\n');
        if newline_last {
            bytes.push(b'\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new();
        let (path, outcome) = load_bytes(registry.properties(), dir.path(), "fuzz.properties", &bytes);
        match outcome {
            Ok(_) => {}
            Err(LoadError::Syntax { path: at, line, .. }) => {
                prop_assert_eq!(at, path);
                // A CR alone ends a line too (as Java reads them): at most one line per
                // terminator, plus the last.
                let terminators = bytes.iter().filter(|&&b| b == b'\n' || b == b'\r').count();
                prop_assert!((1..=terminators + 1).contains(&line), "line {}", line);
            }
            Err(LoadError::Invalid { origin: Origin::File { path: at, .. }, .. }) => {
                prop_assert_eq!(at, path);
            }
            Err(other) => return Err(TestCaseError::fail(format!("unexpected: {other}"))),
        }
    }

    #[test]
    fn random_toml_files_never_panic_and_errors_name_the_property(
        sections in prop::collection::vec(
            (
                prop::sample::select(&["command", "threadpool", "collapser"][..]),
                "[A-Za-z][A-Za-z0-9]{0,5}|default",
                prop::collection::vec(
                    (
                        prop::sample::select(
                            [hystrix::config::COMMAND_PROPERTIES, hystrix::config::THREAD_POOL_PROPERTIES]
                                .concat()
                        ),
                        prop_oneof![
                            any::<i64>().prop_map(|v| v.to_string()),
                            (-3i64..200).prop_map(|v| v.to_string()),
                            Just("true".to_owned()),
                            Just("1.5".to_owned()),
                            Just("[1]".to_owned()),
                            Just("1979-05-27".to_owned()),
                            // Not TOML: a syntax error that names the property.
                            Just("THREAD".to_owned()),
                            "\"[ -~&&[^\"\\\\]]{0,8}\"",
                        ],
                    ),
                    0..5,
                ),
            ),
            0..4,
        ),
    ) {
        let mut text = String::new();
        for (kind, key, values) in &sections {
            text.push_str(&format!("[hystrix.{kind}.{key}]\n"));
            for (info, value) in values {
                text.push_str(&format!("\"{}\" = {value}\n", info.name));
            }
        }
        let registry = Registry::new();
        let outcome = registry.properties().load_text("fuzz.toml", FileFormat::Toml, &text);
        // TOML refuses a key written twice in a table: a syntax error without a property.
        check_outcome(&registry, "fuzz.toml", &text, outcome)?;
    }

    #[test]
    fn random_environments_never_panic(
        vars in prop::collection::vec(
            (
                prop_oneof![
                    key_strategy().prop_map(|name| name.replacen("hystrix.", "HYSTRIX__", 1).replace('.', "__")),
                    key_strategy(),
                ],
                value_strategy(),
            ),
            0..8,
        ),
    ) {
        let registry = Registry::new();
        match registry.properties().load_env_from(vars) {
            Ok(_) | Err(LoadError::Conflict { .. }) => {}
            Err(LoadError::Invalid { origin: Origin::Environment { .. }, error }) => {
                let name = match error.as_ref() {
                    ConfigError::InvalidValue { name, .. } => name.clone(),
                    other => return Err(TestCaseError::fail(format!("names no property: {other}"))),
                };
                prop_assert!(registry.properties().get(&name).is_ok());
            }
            Err(other) => return Err(TestCaseError::fail(format!("unexpected: {other}"))),
        }
    }
}

/// A value or a name from outside (a file, a variable, an admin's PUT) may hold a line break or
/// a NUL: error messages show them escaped, as `str::escape_debug` does, so that one error stays
/// one log line. The errors' fields keep them as given.
#[test]
fn values_and_names_in_error_messages_are_escaped() {
    let registry = Registry::new();
    let properties = registry.properties();
    let threshold = "hystrix.command.A.circuitBreaker.errorThresholdPercentage";
    let err = properties.set(threshold, "25\n\0").unwrap_err();
    assert_eq!(
        err,
        ConfigError::InvalidValue {
            name: threshold.into(),
            value: "25\n\0".into(),
            reason: "expected a whole number".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid value `25\\n\\0` for \
         `hystrix.command.A.circuitBreaker.errorThresholdPercentage`: expected a whole number"
    );
    let err = properties
        .set("hystrix.command.A.fallback.enabled\n\0x", true)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown property `hystrix.command.A.fallback.enabled\\n\\0x`; did you mean \
         `hystrix.command.A.fallback.enabled`?"
    );

    // From a file: `\n` and `\u0000` are the .properties escapes of a line break and a NUL.
    let err = properties
        .load_text(
            "app.properties",
            PROPS,
            "hystrix.command.A.circuitBreaker.errorThresholdPercentage = 25\\n\\u0000\n",
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.properties:1: invalid value `25\\n\\0` for \
         `hystrix.command.A.circuitBreaker.errorThresholdPercentage`: expected a whole number"
    );
    let err = properties
        .load_text(
            "app.toml",
            FileFormat::Toml,
            "[hystrix.command.A]\nfallback.\"en\\n\\u0000abled\" = yes\n",
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "app.toml:2: `hystrix.command.A.fallback.en\\n\\0abled`: `yes` is not a TOML value; a \
         string is written in quotes: \"yes\""
    );
    let report = properties
        .load_text(
            "app.toml",
            FileFormat::Toml,
            "[hystrix.command.A]\n\"fallback\\nenabled\" = 1\n",
        )
        .unwrap();
    assert_eq!(
        report.warnings[0].to_string(),
        "app.toml:2: unknown property `hystrix.command.A.fallback\\nenabled` ignored; did you \
         mean `hystrix.command.A.fallback.enabled`?"
    );

    // From the environment: the variable's name is escaped where it says where.
    let report = properties
        .load_env_from([("hystrix.command.A.fallback.enabled\n", "true")])
        .unwrap();
    assert_eq!(
        report.warnings[0].to_string(),
        "environment variable hystrix.command.A.fallback.enabled\\n: unknown property \
         `hystrix.command.A.fallback.enabled\\n` ignored; did you mean \
         `hystrix.command.A.fallback.enabled`?"
    );
    assert!(command_of(properties, "A").fallback_enabled);
}

// ---------------------------------------------------------------------------------------------
// Byte-level fuzzing (issue 32): realistic files, mutated byte by byte, through every entry
// point that reads a file's bytes (`load_file`, `load_file_as`, and `load_text` when the bytes
// are UTF-8). Never a panic (a caught one, `LoadError::Internal`, fails too); the bytes read
// as the format documents (`.properties`: UTF-8, else ISO-8859-1, but refused after a UTF-8
// byte-order mark; TOML: UTF-8 only); every error names the file, a line of it and, where a
// property is involved, the property.

/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Lines of a realistic Hystrix `.properties` file, each valid on its own and in any
/// subsequence (the property `sleepWindowInMilliseconds` is continued on a second line).
const PROPERTIES_SEED_LINES: &[&str] = &[
    "# Hystrix settings for the user service: café, naïve, 10 €",
    "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds=500",
    "hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage = 40",
    "hystrix.command.GetUser.circuitBreaker.requestVolumeThreshold: 30",
    "hystrix.command.GetUser.execution.isolation.strategy SEMAPHORE",
    "! Archaius' booleans",
    "hystrix.command.GetUser.fallback.enabled=no",
    "hystrix.command.GetUser.threadPoolKeyOverride=Bücher",
    "",
    "hystrix.command.GetUser.circuitBreaker.sleepWindowInMilliseconds=\\\n    7000",
    "hystrix.threadpool.UserService.coreSize\t20",
    "hystrix.threadpool.UserService.maxQueueSize=\\u0031\\u0030",
    "hystrix.collapser.Batch.maxRequestsInBatch=100",
    "ribbon.ReadTimeout=3000",
];

/// Pieces of a realistic Hystrix TOML file, valid in any subsequence (the top-level key
/// first, each table once).
const TOML_SEED_PIECES: &[&str] = &[
    "\"hystrix.collapser.Batch.maxRequestsInBatch\" = 100\n",
    "# Hystrix settings for the user service: café, naïve, 10 €\n",
    "[hystrix.command.default]\nexecution.isolation.thread.timeoutInMilliseconds = 500\n",
    "[hystrix.command.GetUser]\ncircuitBreaker.errorThresholdPercentage = 40\n\
     execution.isolation.strategy = \"SEMAPHORE\"\nfallback.enabled = false # no fallback\n\
     threadPoolKeyOverride = \"Bücher€\"\n",
    "[hystrix.command.Search.circuitBreaker]\nsleepWindowInMilliseconds = 7_000\n\
     requestVolumeThreshold = 0x1E\n",
    "[hystrix.threadpool.UserService]\ncoreSize = 20\nmaxQueueSize = 10\n",
    "[hystrix.threadpool]\nBatchPool = { coreSize = 4, maximumSize = 8, \
     allowMaximumSizeToDivergeFromCoreSize = true }\n",
    "[hystrix.stream.dashboard]\nintervalInMilliseconds = 500\n",
];

/// A realistic `.properties` file: some seed lines in order, perhaps one random line (the
/// generator above), LF or CRLF, perhaps a byte-order mark.
fn properties_seed() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::subsequence(PROPERTIES_SEED_LINES, 2..=PROPERTIES_SEED_LINES.len()),
        prop::option::weighted(0.25, (properties_line(), any::<prop::sample::Index>())),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(lines, extra, crlf, bom)| {
            let mut lines: Vec<String> = lines.into_iter().map(String::from).collect();
            if let Some((line, at)) = extra {
                lines.insert(at.index(lines.len() + 1), line);
            }
            let mut bytes = if bom { BOM.to_vec() } else { Vec::new() };
            bytes.extend_from_slice(lines.join(if crlf { "\r\n" } else { "\n" }).as_bytes());
            bytes
        })
}

/// A realistic TOML file: some seed pieces in order, perhaps a byte-order mark.
fn toml_seed() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::subsequence(TOML_SEED_PIECES, 2..=TOML_SEED_PIECES.len()),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(pieces, bom)| {
            let mut bytes = if bom { BOM.to_vec() } else { Vec::new() };
            bytes.extend_from_slice(pieces.concat().as_bytes());
            bytes
        })
}

/// Byte strings that parsers and decoders trip on.
const NASTY: &[&[u8]] = &[
    b"\x00",
    b"\xFF",
    b"\xFE",
    // A truncated three-byte start, an overlong `/`, a UTF-16 surrogate, a code point
    // above U+10FFFF, a byte-order mark in the middle.
    b"\xE2\x82",
    b"\xC0\xAF",
    b"\xED\xA0\x80",
    b"\xF4\x90\x80\x80",
    BOM,
    b"\r",
    b"\n",
    b"\r\n",
    b"\\",
    b"\\u",
    b"\\u00",
    b"\\\n",
    b"=",
    b":",
    b"#",
    b"[",
    b"]",
    b"[[",
    b"{",
    b"\"",
    b"'''",
    b"\"\"\"",
    b".",
    b" = ",
    b"\t",
    b"\x0c",
    b"\x85",
    "\u{2028}".as_bytes(),
];

/// Bytes to insert: [`NASTY`], lone continuation bytes, random bytes, very long runs.
fn nasty_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::sample::select(NASTY).prop_map(<[u8]>::to_vec),
        // Lone continuation bytes.
        2 => (0x80u8..=0xBF).prop_map(|b| vec![b]),
        2 => prop::collection::vec(any::<u8>(), 1..8),
        // A very long line, key or value (deeply nested for TOML's brackets).
        1 => (
            1usize..20_000,
            prop::sample::select(&[b'a', b'1', b'=', b'\\', b'[', b'{', b'"', b' ', b'.'][..]),
        )
            .prop_map(|(n, b)| vec![b; n]),
    ]
}

/// One edit of a file's bytes; indices are taken modulo the length at the time.
#[derive(Debug, Clone)]
enum Mutation {
    /// Flips one bit of a byte.
    Flip(prop::sample::Index, u8),
    /// Replaces a byte.
    Replace(prop::sample::Index, u8),
    /// Inserts bytes before a position.
    Insert(prop::sample::Index, Vec<u8>),
    /// Deletes up to `n` bytes from a position.
    Delete(prop::sample::Index, usize),
    /// Cuts the file at a position.
    Truncate(prop::sample::Index),
    /// Copies up to `n` bytes from a position to another.
    Duplicate(prop::sample::Index, usize, prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::Index;
    prop_oneof![
        2 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Mutation::Replace(at, b)),
        4 => (any::<Index>(), nasty_bytes()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        2 => (any::<Index>(), 1usize..64).prop_map(|(at, n)| Mutation::Delete(at, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), 1usize..128, any::<Index>())
            .prop_map(|(from, n, to)| Mutation::Duplicate(from, n, to)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        let len = bytes.len();
        match mutation {
            Mutation::Flip(at, bit) if len > 0 => bytes[at.index(len)] ^= 1 << (bit % 8),
            Mutation::Replace(at, byte) if len > 0 => bytes[at.index(len)] = *byte,
            Mutation::Insert(at, new) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Mutation::Delete(at, n) if len > 0 => {
                let at = at.index(len);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Truncate(at) => bytes.truncate(at.index(len + 1)),
            Mutation::Duplicate(from, n, to) if len > 0 => {
                let from = from.index(len);
                let copy = bytes[from..(from + n).min(len)].to_vec();
                let to = to.index(len + 1);
                bytes.splice(to..to, copy);
            }
            _ => {}
        }
    }
    bytes
}

/// The 1-based line of byte `offset`: one more than the line feeds before it.
fn line_of(bytes: &[u8], offset: usize) -> usize {
    1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count()
}

/// How the library must read `bytes` as a file of `format`, as its docs say: the text it
/// stands for, or the error it is.
enum Reading {
    /// The bytes are the text (UTF-8, or for `.properties` ISO-8859-1): the file loads as
    /// `load_text` loads that text.
    Text(String),
    /// Refused before parsing: not UTF-8 where UTF-8 is required; the error is a syntax error
    /// with this message at the line of the first invalid byte.
    NotUtf8 { line: usize, message: &'static str },
}

fn reading(format: FileFormat, bytes: &[u8]) -> Reading {
    match (std::str::from_utf8(bytes), format) {
        (Ok(text), _) => Reading::Text(text.to_owned()),
        (Err(err), FileFormat::Properties) if bytes.starts_with(BOM) => Reading::NotUtf8 {
            line: line_of(bytes, err.valid_up_to()),
            message: "not valid UTF-8, though the file begins with a UTF-8 byte-order mark",
        },
        // ISO-8859-1: each byte is the character of that number.
        (Err(_), FileFormat::Properties) => {
            Reading::Text(bytes.iter().map(|&b| char::from(b)).collect())
        }
        (Err(err), _) => Reading::NotUtf8 {
            line: line_of(bytes, err.valid_up_to()),
            message: "not valid UTF-8 (TOML files are UTF-8)",
        },
    }
}

/// The checks every load of the file `path` holding `bytes` must pass: the outcome is the one
/// its [`reading`] gives (the same as `load_text` of its text, or the not-UTF-8 error), and
///
/// - `Ok`: every changed value comes from `path`, at a line of it; every warning's origin is
///   `path` at a line of it;
/// - `Err(Syntax)`: `path`, a line of the file, shown as `<path>:<line>: ` and, when the error
///   names a property, shown with it (escaped);
/// - `Err(Invalid)`: a file origin at `path` and a line of it, and a property of ours named
///   in the message (escaped);
/// - any other error (`Internal`, a caught panic, above all) fails; and a refused load
///   stored nothing.
fn check_bytes_outcome(
    registry: &Registry,
    path: &std::path::Path,
    format: FileFormat,
    bytes: &[u8],
    outcome: &Result<LoadReport, LoadError>,
) -> Result<(), TestCaseError> {
    // Lines as the parsers count them: `.properties` also ends a line at a CR alone.
    let lines = 1 + bytes
        .iter()
        .filter(|&&b| b == b'\n' || (format == PROPS && b == b'\r'))
        .count();
    let expected_path = PathBuf::from(path);
    let place = |at: &PathBuf, line: usize| -> Result<(), TestCaseError> {
        prop_assert_eq!(at, &expected_path);
        prop_assert!((1..=lines).contains(&line), "line {} of {}", line, lines);
        Ok(())
    };
    match reading(format, bytes) {
        Reading::Text(text) => {
            let twin = Registry::new();
            let expected = twin.properties().load_text(path, format, &text);
            prop_assert_eq!(outcome, &expected, "as load_text of {:?}", text);
        }
        Reading::NotUtf8 { line, message } => {
            let Err(LoadError::Syntax {
                path: at,
                line: got,
                message: said,
                ..
            }) = outcome
            else {
                return Err(TestCaseError::fail(format!("not refused: {outcome:?}")));
            };
            prop_assert_eq!((at, *got, said.as_str()), (&expected_path, line, message));
        }
    }
    let err = match outcome {
        Ok(report) => {
            for name in &report.changed {
                let explained = registry.properties().explain(name).unwrap();
                let Origin::File { path: at, line } = &explained.origin else {
                    return Err(TestCaseError::fail(format!("{name}: {explained:?}")));
                };
                place(at, *line)?;
            }
            for warning in &report.warnings {
                let origin = match warning {
                    LoadWarning::UnknownProperty { origin, .. }
                    | LoadWarning::Unsupported { origin, .. }
                    | LoadWarning::UnusableKey { origin, .. }
                    | LoadWarning::Duplicate { origin, .. } => origin,
                    other => return Err(TestCaseError::fail(format!("unexpected: {other}"))),
                };
                let Origin::File { path: at, line } = origin else {
                    return Err(TestCaseError::fail(format!("not a file: {warning}")));
                };
                place(at, *line)?;
            }
            return Ok(());
        }
        Err(err) => err,
    };
    let shown = err.to_string();
    match err {
        LoadError::Syntax {
            path: at,
            line,
            property,
            message,
        } => {
            place(at, *line)?;
            prop_assert!(!message.is_empty());
            prop_assert!(
                shown.starts_with(&format!("{}:{line}: ", path.display())),
                "{}",
                shown
            );
            if let Some(property) = property {
                prop_assert!(
                    !property.is_empty() && shown.contains(&format!("`{}`", as_written(property))),
                    "{}",
                    shown
                );
            }
        }
        LoadError::Invalid {
            origin: Origin::File { path: at, line },
            error,
        } => {
            place(at, *line)?;
            let name = match error.as_ref() {
                ConfigError::InvalidValue { name, .. }
                | ConfigError::FixedAfterFirstUse { name } => name,
                other => return Err(TestCaseError::fail(format!("names no property: {other}"))),
            };
            prop_assert!(registry.properties().get(name).is_ok(), "{} is ours", name);
            prop_assert!(
                shown.starts_with(&format!("{}:{line}: ", path.display()))
                    && shown.contains(&format!("`{}`", name.escape_debug())),
                "{}",
                shown
            );
        }
        other => return Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
    let emptied = registry.properties().load_text(path, format, "").unwrap();
    prop_assert!(emptied.changed.is_empty(), "{:?}", emptied.changed);
    Ok(())
}

/// Writes `bytes` to `path` and loads it as `format` with `load_file` when the extension names
/// that format, else with `load_file_as`; then checks the outcome.
fn load_and_check(
    path: &std::path::Path,
    format: FileFormat,
    bytes: &[u8],
) -> Result<Result<LoadReport, LoadError>, TestCaseError> {
    // A new file each time: truncating one with data costs milliseconds on ext4 (it flushes).
    std::fs::remove_file(path).ok();
    std::fs::write(path, bytes).unwrap();
    let registry = Registry::new();
    let outcome = if FileFormat::from_path(path) == Some(format) {
        registry.properties().load_file(path)
    } else {
        registry.properties().load_file_as(path, format)
    };
    check_bytes_outcome(&registry, path, format, bytes, &outcome)?;
    Ok(outcome)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(MUTATED_FILE_CASES))]

    /// Realistic files, each mutated one to six times, read in both formats (a `.properties`
    /// file read as TOML too, and the other way round).
    #[test]
    fn mutated_files_never_panic_and_read_as_documented(
        (seed_is_toml, seed) in prop_oneof![
            properties_seed().prop_map(|seed| (false, seed)),
            toml_seed().prop_map(|seed| (true, seed)),
        ],
        mutations in prop::collection::vec(mutation(), 1..=6),
    ) {
        let bytes = mutate(seed, &mutations);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(if seed_is_toml { "fuzz.toml" } else { "fuzz.properties" });
        for format in [PROPS, FileFormat::Toml] {
            load_and_check(&path, format, &bytes)?.ok();
        }
    }
}

/// Cases of [`mutated_files_never_panic_and_read_as_documented`]: each loads one file twice
/// (and its `load_text` twin), about 15 ms in a debug build.
const MUTATED_FILE_CASES: u32 = 96;

/// Found by `mutated_files_never_panic_and_read_as_documented` (a run of `a` inserted into a
/// key): the did-you-mean search compared each candidate name, key included, with the name
/// written, in time quadratic in its length: a line of 1,000 bytes took 1.6 s to load in a
/// debug build, 4,000 bytes 33 s, 20,000 bytes about fourteen minutes. No key is longer than
/// 200 bytes, so a name with a longer key is suggested nothing, and costs nothing to check.
#[test]
fn a_name_with_a_key_too_long_for_a_key_gets_no_suggestion_and_loads_at_once() {
    let typo = |key: &str| format!("hystrix.command.{key}.fallback.enabeld");
    let registry = Registry::new();
    let properties = registry.properties();
    let suggestion = |text: &str| match &load(properties, text).unwrap().warnings[..] {
        [LoadWarning::UnknownProperty { suggestion, .. }] => suggestion.clone(),
        other => panic!("{other:?}"),
    };
    // A key of 200 bytes is a key: the typo is suggested away.
    let longest = "k".repeat(200);
    assert_eq!(
        suggestion(&format!("{}=true\n", typo(&longest))),
        Some(format!("hystrix.command.{longest}.fallback.enabled"))
    );
    // One more byte, and no command can have the key: nothing to suggest.
    assert_eq!(
        suggestion(&format!("{}=true\n", typo(&"k".repeat(201)))),
        None
    );
    // The same at run time.
    assert_eq!(
        properties.set(&typo(&"k".repeat(201)), true).unwrap_err(),
        ConfigError::UnknownProperty {
            name: typo(&"k".repeat(201)),
            suggestion: None,
        }
    );
    // 64 kB in a key, and in dotted segments: at once (seconds before, in release).
    for key in ["a".repeat(1 << 16), "a.".repeat(1 << 15)] {
        let start = std::time::Instant::now();
        assert_eq!(suggestion(&format!("{}=true", typo(&key))), None);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }
}

/// The `.properties` file of the exhaustive tests: non-ASCII text in a comment and a value
/// (`ü` is two bytes, `€` three); short keys, since each edit in a key costs a did-you-mean
/// search (about 3 ms in a debug build; 60 ms for the longest names).
const PROPERTIES_SEED: &str = "# Hystrix: café, 10 €\n\
    hystrix.command.A.fallback.enabled=false\n\
    hystrix.command.A.threadPoolKeyOverride: Bücher\n\
    hystrix.threadpool.P.coreSize 20\n";

/// The TOML file of the exhaustive tests.
const TOML_SEED: &str = "# Hystrix: café, 10 €\n\
    [hystrix.command.default]\n\
    execution.isolation.thread.timeoutInMilliseconds = 500\n\
    \n\
    [hystrix.command.GetUser]\n\
    circuitBreaker.errorThresholdPercentage = 40\n\
    threadPoolKeyOverride = \"Bücher€\"\n\
    \n\
    [hystrix.threadpool.UserService]\n\
    coreSize = 20\n";

/// Byte sequences that are not UTF-8 wherever they are inserted (an overlong `/`, a UTF-16
/// surrogate, a truncated `€`, a byte no UTF-8 has); a lone continuation byte is not UTF-8
/// either, except after the first byte of a character, where it makes another character and
/// leaves the next byte invalid (on the same line: no line break is inside a character).
const NOT_UTF8: &[&[u8]] = &[b"\xFF", b"\xC0\xAF", b"\xED\xA0\x80", b"\xE2\x82", b"\x80"];

/// `seed` with `bytes` inserted at `at`.
fn inserted(seed: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    [&seed[..at], bytes, &seed[at..]].concat()
}

/// `seed` with the byte at `at` replaced by `bytes`.
fn replaced(seed: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    [&seed[..at], bytes, &seed[at + 1..]].concat()
}

/// The property a `.properties` error at byte `at` of the (BOM-less) seed must name, when an
/// edit there leaves the key before it whole: `None` on a comment line edited after its `#`,
/// the key on a property line edited after the key's end; `Err` where an edit at `at` changes
/// the key (the error names what it reads, not checked here).
fn seed_property_at(seed: &[u8], at: usize) -> Result<Option<&str>, ()> {
    let start = seed[..at]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = seed[start..]
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    let column = at - start;
    if line.starts_with(b"#") {
        return if column > 0 { Ok(None) } else { Err(()) };
    }
    let key_end = line
        .iter()
        .position(|b| b"=: \t".contains(b))
        .unwrap_or(line.len());
    if column > key_end && key_end > 0 {
        Ok(Some(std::str::from_utf8(&line[..key_end]).unwrap()))
    } else {
        Err(())
    }
}

/// The values a load of the line-prefix `seed[..at]` (cut at a line's end) applies: each
/// line that sets a value is one applied value.
fn values_before(seed: &str, at: usize, format: FileFormat) -> usize {
    seed[..at]
        .lines()
        .filter(|line| {
            let table = format == FileFormat::Toml && line.starts_with('[');
            !(line.is_empty() || line.starts_with('#') || table)
        })
        .count()
}

/// Every position of a `.properties` file, exhaustively: an invalid UTF-8 sequence inserted
/// there, the byte there replaced by one, the file cut there.
///
/// - Without a byte-order mark, such a file is read as ISO-8859-1: it loads as `load_text`
///   loads its Latin-1 text (checked by [`check_bytes_outcome`], as everything else it checks).
///   Each such load costs a did-you-mean search when the edit is in a key, so each position
///   gets one of the [`NOT_UTF8`] sequences in turn, not all five.
/// - With a mark, an invalid sequence after the mark (all five at each position) is refused
///   as a syntax error at the line of the edit, naming the property when the edit leaves its
///   key whole (after the key), and no property on a comment line.
/// - Cut at a line's end, a file loads the values of the lines kept.
#[test]
fn invalid_utf8_at_every_position_of_a_properties_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every.properties");
    let seed = PROPERTIES_SEED.as_bytes();
    let (mut loads, mut expected_loads) = (0, 0);
    for bom in [false, true] {
        let prefix: &[u8] = if bom { BOM } else { b"" };
        let file = [prefix, seed].concat();
        // Per position: the inserts, a replacement (but at the end) and a cut.
        let inserts = if bom { NOT_UTF8.len() } else { 1 };
        expected_loads += (file.len() + 1) * (inserts + 2) - 1;
        for at in 0..=file.len() {
            // The offset in the seed, for edits after the mark.
            let in_seed = at.checked_sub(prefix.len()).filter(|_| bom);
            let mut edits: Vec<Vec<u8>> = if bom {
                NOT_UTF8
                    .iter()
                    .map(|bytes| inserted(&file, at, bytes))
                    .collect()
            } else {
                vec![inserted(&file, at, NOT_UTF8[at % NOT_UTF8.len()])]
            };
            if at < file.len() {
                edits.push(replaced(&file, at, b"\xFF"));
            }
            for bytes in edits {
                let outcome = load_and_check(&path, PROPS, &bytes)
                    .unwrap_or_else(|err| panic!("at {at} (mark: {bom}): {err}"));
                loads += 1;
                let Some(in_seed) = in_seed else {
                    continue;
                };
                // After the mark: refused at the edit's line (check_bytes_outcome checked the
                // message), naming the property whose key the edit left whole.
                let Err(LoadError::Syntax { line, property, .. }) = &outcome else {
                    panic!("at {at}: {outcome:?}");
                };
                assert_eq!(*line, line_of(seed, in_seed), "at {at}");
                // A byte replaced keeps the key whole where an insertion does: after the key.
                if let Ok(expected) = seed_property_at(seed, in_seed) {
                    assert_eq!(property.as_deref(), expected, "at {at}: {outcome:?}");
                }
            }
            // Cut here: not UTF-8 where a character is cut (read as Latin-1, or refused after
            // the mark, as any other invalid byte).
            let outcome = load_and_check(&path, PROPS, &file[..at])
                .unwrap_or_else(|err| panic!("cut at {at} (mark: {bom}): {err}"));
            loads += 1;
            let kept = at.checked_sub(prefix.len());
            if let Some(kept) = kept.filter(|&i| i == 0 || seed[i - 1] == b'\n') {
                let report = outcome.unwrap_or_else(|err| panic!("cut at {at}: {err}"));
                assert_eq!(
                    report.applied,
                    values_before(PROPERTIES_SEED, kept, PROPS),
                    "cut at {at}"
                );
            }
        }
    }
    assert_eq!(loads, expected_loads);
}

/// Every position of a TOML file, exhaustively: an invalid UTF-8 sequence inserted there, the
/// byte there replaced by one (each refused, before parsing, as a syntax error at the line of
/// the edit: `<path>:<line>: not valid UTF-8 (TOML files are UTF-8)`, naming no property), and
/// the file cut there (where a character is cut, refused the same way at the cut's line; else
/// loaded as `load_text` loads it, and at a line's end with the values of the lines kept).
#[test]
fn invalid_utf8_at_every_position_of_a_toml_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every.toml");
    let seed = TOML_SEED.as_bytes();
    let refused = |bytes: &[u8], line: usize, at: usize| {
        let outcome = load_and_check(&path, FileFormat::Toml, bytes)
            .unwrap_or_else(|err| panic!("at {at}: {err}"));
        let err = outcome.unwrap_err();
        assert_eq!(
            err,
            LoadError::Syntax {
                path: path.clone(),
                line,
                property: None,
                message: "not valid UTF-8 (TOML files are UTF-8)".into(),
            },
            "at {at}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "{}:{line}: not valid UTF-8 (TOML files are UTF-8)",
                path.display()
            )
        );
    };
    let mut loads = 0;
    for at in 0..=seed.len() {
        let line = line_of(seed, at);
        for bytes in NOT_UTF8 {
            refused(&inserted(seed, at, bytes), line, at);
            loads += 1;
        }
        if at < seed.len() {
            refused(&replaced(seed, at, b"\xFF"), line, at);
            loads += 1;
        }
        let cut = &seed[..at];
        loads += 1;
        if std::str::from_utf8(cut).is_err() {
            refused(cut, line, at);
            continue;
        }
        let outcome = load_and_check(&path, FileFormat::Toml, cut)
            .unwrap_or_else(|err| panic!("cut at {at}: {err}"));
        if at == 0 || seed[at - 1] == b'\n' {
            let report = outcome.unwrap_or_else(|err| panic!("cut at {at}: {err}"));
            assert_eq!(
                report.applied,
                values_before(TOML_SEED, at, FileFormat::Toml),
                "cut at {at}"
            );
        }
    }
    assert_eq!(loads, (seed.len() + 1) * (NOT_UTF8.len() + 2) - 1);
}

/// Found by `mutated_files_never_panic_and_read_as_documented` (a `.properties` line
/// `=[…a=…` read as TOML): a syntax error in the value of an empty top-level key named the
/// property ``, an empty name. No property has it: the error names none.
#[test]
fn a_toml_syntax_error_at_an_empty_key_names_no_property() {
    let registry = Registry::new();
    for text in ["=[a=1\n", "\"\" = [=]\n", "x = 1\n= THREAD\n"] {
        let err = registry
            .properties()
            .load_text("empty.toml", FileFormat::Toml, text)
            .unwrap_err();
        let LoadError::Syntax { property, line, .. } = &err else {
            panic!("{text:?}: {err:?}");
        };
        assert_eq!(*property, None, "{text:?}: {err}");
        assert!(
            err.to_string().starts_with(&format!("empty.toml:{line}: ")),
            "{err}"
        );
        assert!(!err.to_string().contains("``"), "{err}");
    }
}

/// A refused value of a megabyte keeps it whole in the error's field, but the message (a log
/// line) shows its first 256 characters then `...` (a fresh user's 20 MB value made a 20 MB
/// message).
#[test]
fn an_error_message_shows_a_huge_value_cut() {
    let value = "9".repeat(1 << 20);
    let text =
        format!("hystrix.command.Big.execution.isolation.thread.timeoutInMilliseconds={value}\n");
    let registry = Registry::new();
    let err = registry
        .properties()
        .load_text("big", FileFormat::Properties, &text)
        .unwrap_err();
    let LoadError::Invalid { error, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(matches!(&**error, ConfigError::InvalidValue { value: whole, .. } if *whole == value));
    assert_eq!(
        err.to_string(),
        format!(
            "big:1: invalid value `{}...` for \
             `hystrix.command.Big.execution.isolation.thread.timeoutInMilliseconds`: out of \
             range (at most 18446744073709551615)",
            "9".repeat(256)
        )
    );
}

/// The extremes the mutations reach only by chance, each exactly: nesting 20,000 deep in TOML
/// (the parser's recursion limit refuses it: no stack overflow, which no `catch_unwind` could
/// catch), and 20,000 backslashes, continuations or CRs in a `.properties` file.
/// Found by a fresh user's trial: each key's line was found by a scan from the start of the
/// file, time quadratic in the keys (10 000 keys: 24 s in a debug build, 100 000: 92 s in
/// release). 20 000 keys load at once, each value and the last key's line exact.
#[test]
fn a_toml_file_of_20_000_keys_loads_each_exactly() {
    let n = 20_000;
    let text: String = (0..n)
        .map(|i| {
            format!(
                "hystrix.command.K{i}.execution.isolation.thread.timeoutInMilliseconds = {}\n",
                i + 1
            )
        })
        .collect::<String>()
        + "hystrix.command.Last.fallback.enabled = 3\n";
    let registry = Registry::new();
    let err = registry
        .properties()
        .load_text("many", FileFormat::Toml, &text)
        .unwrap_err();
    assert_eq!(
        err,
        LoadError::Invalid {
            origin: Origin::File {
                path: PathBuf::from("many"),
                line: n + 1,
            },
            error: Box::new(ConfigError::InvalidValue {
                name: "hystrix.command.Last.fallback.enabled".into(),
                value: "3".into(),
                reason: "expected true or false".into(),
            }),
        }
    );
    let report = registry
        .properties()
        .load_text(
            "many",
            FileFormat::Toml,
            text.trim_end().rsplit_once('\n').unwrap().0,
        )
        .unwrap();
    assert_eq!((report.applied, report.skipped), (n, 0));
    for i in [0, 1, n / 2, n - 1] {
        let name = format!("hystrix.command.K{i}.execution.isolation.thread.timeoutInMilliseconds");
        assert_eq!(
            registry.properties().get(&name),
            Ok(Some(hystrix::config::PropertyValue::Int(i as i64 + 1))),
            "{name}"
        );
    }
}

#[test]
fn deep_nesting_and_long_runs_are_refused_or_loaded_exactly() {
    let n = 20_000;
    let toml = FileFormat::Toml;
    let syntax = |property: Option<&str>, message: &str| {
        Err(LoadError::Syntax {
            path: PathBuf::from("deep"),
            line: 1,
            property: property.map(String::from),
            message: message.into(),
        })
    };
    let too_deep = "cannot recurse further; max recursion depth met";
    let cases = [
        (
            toml,
            format!("a = {}", "[".repeat(n)),
            syntax(None, too_deep),
        ),
        (
            toml,
            format!("a = {}{}", "[".repeat(n), "]".repeat(n)),
            syntax(Some("a"), too_deep),
        ),
        (
            toml,
            format!("a = {}", "{a=".repeat(n)),
            syntax(None, too_deep),
        ),
        (
            toml,
            "a.".repeat(n) + "b = 1",
            syntax(None, "recursion limit"),
        ),
        (
            toml,
            format!("[{}b]\nx = 1", "a.".repeat(n)),
            syntax(None, "recursion limit"),
        ),
        // An even run of backslashes is a key of backslashes: not ours, skipped.
        (PROPS, "\\".repeat(n), Ok((0, 1))),
        (PROPS, "\r".repeat(n), Ok((0, 0))),
        // A value continued over 20,000 lines is empty, and refused by name at its first line.
        (
            PROPS,
            format!("hystrix.command.A.fallback.enabled={}", "\\\n".repeat(n)),
            Err(LoadError::Invalid {
                origin: Origin::File {
                    path: PathBuf::from("deep"),
                    line: 1,
                },
                error: Box::new(ConfigError::InvalidValue {
                    name: "hystrix.command.A.fallback.enabled".into(),
                    value: String::new(),
                    reason: "expected true or false (or Archaius' yes/no, on/off, y/n, t/f)".into(),
                }),
            }),
        ),
    ];
    for (format, text, expected) in cases {
        let registry = Registry::new();
        // (applied, skipped), nothing changed or warned of.
        let outcome = registry
            .properties()
            .load_text("deep", format, &text)
            .map(|report| {
                assert!(
                    report.changed.is_empty() && report.warnings.is_empty(),
                    "{report:?}"
                );
                (report.applied, report.skipped)
            });
        assert_eq!(outcome, expected, "{}", &text[..40.min(text.len())]);
    }
}

// ---------------------------------------------------------------------------------------------
// The environment, fuzzed: names and values with any characters through `load_env_from`, and
// bytes that are not UTF-8 through `load_env` in a child process (the test never changes its
// own environment, which other threads read).

/// A realistic variable name, verbatim or shell-friendly, or random characters.
fn env_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => key_strategy()
            .prop_map(|name| name.replacen("hystrix.", "HYSTRIX__", 1).replace('.', "__")),
        2 => key_strategy(),
        1 => any::<String>().prop_map(|rest| format!("HYSTRIX__{rest}")),
        1 => any::<String>(),
    ]
}

/// A realistic name or value, with characters inserted (NUL, `=`, line breaks, a byte-order
/// mark, any character) or cut.
fn mutated_string(base: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (
        base,
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop_oneof![
                    prop::sample::select(
                        &['\0', '=', '\n', '\r', '\u{feff}', '\u{fffd}', '.', '_'][..]
                    ),
                    any::<char>(),
                ],
            ),
            0..3,
        ),
        prop::option::weighted(0.2, any::<prop::sample::Index>()),
    )
        .prop_map(|(base, inserts, cut)| {
            let mut chars: Vec<char> = base.chars().collect();
            for (at, c) in inserts {
                chars.insert(at.index(chars.len() + 1), c);
            }
            if let Some(at) = cut {
                chars.truncate(at.index(chars.len() + 1));
            }
            chars.into_iter().collect()
        })
}

/// The checks every load of the environment `vars` must pass: every value applied, every
/// warning and every error names a variable given (escaped in the message), whose name maps to
/// the property named; an error stored nothing.
fn check_env_outcome<S: AsRef<str>>(
    registry: &Registry,
    vars: &[(S, S)],
    outcome: &Result<LoadReport, LoadError>,
) -> Result<(), TestCaseError> {
    let given = |variable: &str| vars.iter().any(|(name, _)| name.as_ref() == variable);
    let ours = |variable: &str, name: &str| {
        hystrix::config::property_name_of_env_var(variable).as_deref() == Some(name)
    };
    let err = match outcome {
        Ok(report) => {
            for name in &report.changed {
                let explained = registry.properties().explain(name).unwrap();
                let Origin::Environment { variable } = &explained.origin else {
                    return Err(TestCaseError::fail(format!("{name}: {explained:?}")));
                };
                prop_assert!(given(variable) && ours(variable, name), "{}", variable);
            }
            for warning in &report.warnings {
                let (name, origin) = match warning {
                    LoadWarning::UnknownProperty { name, origin, .. }
                    | LoadWarning::Unsupported { name, origin, .. }
                    | LoadWarning::UnusableKey { name, origin, .. } => (name, origin),
                    other => return Err(TestCaseError::fail(format!("unexpected: {other}"))),
                };
                let Origin::Environment { variable } = origin else {
                    return Err(TestCaseError::fail(format!("not a variable: {warning}")));
                };
                prop_assert!(given(variable) && ours(variable, name), "{}", warning);
                prop_assert!(
                    warning.to_string().starts_with(&format!(
                        "environment variable {}: ",
                        variable.escape_debug()
                    )),
                    "{}",
                    warning
                );
            }
            return Ok(());
        }
        Err(err) => err,
    };
    let shown = err.to_string();
    match err {
        LoadError::Conflict { name, variables } => {
            prop_assert!(variables[0] != variables[1], "{}", shown);
            for variable in variables {
                prop_assert!(given(variable) && ours(variable, name), "{}", shown);
                prop_assert!(
                    shown.contains(&variable.escape_debug().to_string()),
                    "{}",
                    shown
                );
            }
        }
        LoadError::Invalid {
            origin: Origin::Environment { variable },
            error,
        } => {
            let name = match error.as_ref() {
                ConfigError::InvalidValue { name, .. } => name,
                other => return Err(TestCaseError::fail(format!("names no property: {other}"))),
            };
            prop_assert!(given(variable), "{}", shown);
            prop_assert!(registry.properties().get(name).is_ok(), "{} is ours", name);
            prop_assert!(
                shown.starts_with(&format!(
                    "environment variable {}: ",
                    variable.escape_debug()
                )) && shown.contains(&format!("`{}`", name.escape_debug())),
                "{}",
                shown
            );
        }
        other => return Err(TestCaseError::fail(format!("unexpected error: {other}"))),
    }
    let emptied = registry
        .properties()
        .load_env_from(std::iter::empty::<(&str, &str)>())
        .unwrap();
    prop_assert!(emptied.changed.is_empty(), "{:?}", emptied.changed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(ENV_CASES))]

    /// Names and values with any characters (`load_env_from` takes strings: everything but
    /// bytes that are not UTF-8, which the next test gives through the process environment).
    #[test]
    fn environments_of_any_characters_never_panic_and_errors_name_the_variable(
        vars in prop::collection::vec(
            (mutated_string(env_name()), mutated_string(value_strategy())),
            0..5,
        ),
    ) {
        let registry = Registry::new();
        let outcome = registry.properties().load_env_from(vars.iter().map(|(n, v)| (n, v)));
        check_env_outcome(&registry, &vars, &outcome)?;
    }
}

/// Cases of [`environments_of_any_characters_never_panic_and_errors_name_the_variable`]: each
/// misspelt name costs a did-you-mean search (up to 60 ms in a debug build).
const ENV_CASES: u32 = 32;

/// Set in the child process of [`process_environments_that_are_not_utf8_load_as_documented`].
#[cfg(unix)]
const ENV_CHILD: &str = "CONFIG_SOURCES_ENV_CHILD";

/// What the child prints before its outcome.
#[cfg(unix)]
const ENV_OUTCOME: &str = "load_env: ";

/// The child process of [`process_environments_that_are_not_utf8_load_as_documented`]: loads
/// its environment and prints the outcome. Does nothing in the test run itself.
#[cfg(unix)]
#[test]
fn process_environment_child() {
    if std::env::var_os(ENV_CHILD).is_some() {
        let registry = Registry::new();
        println!("{ENV_OUTCOME}{:?}", registry.properties().load_env());
    }
}

/// A realistic variable (name, value) as bytes, mutated byte by byte; without the bytes an
/// environment cannot hold (NUL, and `=` in a name).
#[cfg(unix)]
fn env_var_bytes() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let bytes = |base: BoxedStrategy<String>| {
        (base, prop::collection::vec(mutation(), 0..3))
            .prop_map(|(base, mutations)| mutate(base.into_bytes(), &mutations))
    };
    (bytes(env_name().boxed()), bytes(value_strategy().boxed())).prop_map(
        |(mut name, mut value)| {
            name.retain(|&b| b != 0 && b != b'=');
            value.retain(|&b| b != 0);
            (name, value)
        },
    )
}

#[cfg(unix)]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(ENV_PROCESS_CASES))]

    /// `load_env` in a child process whose environment is only these variables, with bytes
    /// that are not UTF-8 in names and values. As documented: a name that is not UTF-8 is no
    /// variable of ours (property names are UTF-8), ignored without a warning; a value of ours
    /// that is not UTF-8 refuses the load (`Invalid`, naming the variable and the property,
    /// the value shown lossily), after two variables for one property (`Conflict`), the
    /// variables taken in order of property name, then variable name; with all values UTF-8,
    /// the outcome is `load_env_from`'s.
    #[test]
    fn process_environments_that_are_not_utf8_load_as_documented(
        vars in prop::collection::vec(env_var_bytes(), 0..6),
    ) {
        use std::os::unix::ffi::OsStringExt;
        // The environment keeps one value per name (the last set), and no empty name.
        let vars: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
            vars.into_iter().filter(|(name, _)| !name.is_empty()).collect();
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["process_environment_child", "--exact", "--nocapture", "--test-threads=1"])
            .env_clear()
            .env(ENV_CHILD, "1")
            .envs(vars.iter().map(|(name, value)| {
                (
                    std::ffi::OsString::from_vec(name.clone()),
                    std::ffi::OsString::from_vec(value.clone()),
                )
            }))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        prop_assert!(output.status.success(), "{}", stdout);
        let got = stdout
            .lines()
            .find_map(|line| line.split_once(ENV_OUTCOME).map(|(_, outcome)| outcome))
            .unwrap_or_else(|| panic!("no outcome: {stdout}"));

        // (property, variable, value) of ours, sorted; names that are not UTF-8 dropped.
        let mut ours: Vec<(String, String, Result<String, Vec<u8>>)> = vars
            .iter()
            .filter_map(|(name, value)| {
                let variable = String::from_utf8(name.clone()).ok()?;
                let property = hystrix::config::property_name_of_env_var(&variable)?;
                let value = String::from_utf8(value.clone()).map_err(|err| err.into_bytes());
                Some((property, variable, value))
            })
            .collect();
        ours.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let conflict = ours.windows(2).find(|pair| pair[0].0 == pair[1].0);
        let not_utf8 = ours.iter().find(|(_, _, value)| value.is_err());
        let expected = match (conflict, not_utf8) {
            (_, None) => {
                let utf8: Vec<(&str, &str)> = ours
                    .iter()
                    .map(|(_, variable, value)| (variable.as_str(), value.as_deref().unwrap()))
                    .collect();
                format!("{:?}", Registry::new().properties().load_env_from(utf8))
            }
            (Some(pair), Some(_)) => format!(
                "{:?}",
                Err::<LoadReport, _>(LoadError::Conflict {
                    name: pair[0].0.clone(),
                    variables: [pair[0].1.clone(), pair[1].1.clone()],
                })
            ),
            (None, Some((property, variable, value))) => format!(
                "{:?}",
                Err::<LoadReport, _>(LoadError::Invalid {
                    origin: Origin::Environment { variable: variable.clone() },
                    error: Box::new(ConfigError::InvalidValue {
                        name: property.clone(),
                        value: String::from_utf8_lossy(value.as_ref().unwrap_err()).into_owned(),
                        reason: "not valid UTF-8".into(),
                    }),
                })
            ),
        };
        prop_assert_eq!(got, expected.as_str());
    }
}

/// Cases of [`process_environments_that_are_not_utf8_load_as_documented`]: a child process
/// each, about 50 ms (a debug build of this test binary started anew).
#[cfg(unix)]
const ENV_PROCESS_CASES: u32 = 24;
/// A raw key as a syntax error shows it: escaped as `escape_debug` does, a backslash once.
fn as_written(raw_key: &str) -> String {
    raw_key.escape_debug().to_string().replace(r"\\", r"\")
}
