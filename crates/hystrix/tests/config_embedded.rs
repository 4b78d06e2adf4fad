//! Properties in a section of an application's own settings (issue 30), read with serde through
//! figment and config-rs: the same names, values, validation and messages as files and the
//! environment; loaded as a ranked source whose reload replaces only its own values.

#![allow(clippy::unwrap_used)]
// figment's error is as figment makes it (208 bytes); figment's Jail returns it too.
#![allow(clippy::result_large_err)]

mod common;

use common::builder;
use figment::providers::Format;
use hystrix::config::{
    FileFormat, LoadError, LoadWarning, Origin, PropertiesSection, PropertyLayer,
};
use hystrix::testing::TestRegistry;
use hystrix::{CommandKey, ConfigError, PropertyValue, Registry, ThreadPoolKey};
use serde::Deserialize;

const TIMEOUT: &str = "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds";

/// An application's settings: its own fields and the hystrix section.
#[derive(Debug, Deserialize)]
struct Settings {
    listen: String,
    #[serde(default)]
    hystrix: PropertiesSection,
}

/// Every shape the TOML loader accepts: a table per key with dotted and quoted names, fully
/// nested tables, a quoted full name, a key with dots, strings for numbers and flags.
const APP_TOML: &str = r#"
listen = "127.0.0.1:8080"

[hystrix.command.default]
execution.isolation.thread.timeoutInMilliseconds = 1000
"circuitBreaker.errorThresholdPercentage" = 40

[hystrix.command.GetUser]
execution.isolation.thread.timeoutInMilliseconds = 250
fallback.enabled = "no"

[hystrix.command."svc.users.GetProfile".circuitBreaker]
requestVolumeThreshold = "10"

[hystrix.threadpool.UserService]
coreSize = 20
"maxQueueSize" = 100
"#;

fn section(name: &str) -> Origin {
    Origin::Section {
        name: name.to_owned(),
    }
}

fn figment_settings(toml: &str) -> Result<Settings, figment::Error> {
    figment::Figment::new()
        .merge(figment::providers::Toml::string(toml))
        .extract()
}

/// The hystrix section of settings whose other fields are empty, `toml` being their rest.
fn hystrix_of(toml: &str) -> PropertiesSection {
    figment_settings(&format!("listen = \"\"\n{toml}"))
        .unwrap()
        .hystrix
}

fn config_rs_settings(toml: &str) -> Result<Settings, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
}

fn key(name: &str) -> CommandKey {
    CommandKey::new(name).unwrap()
}

/// The values the registry resolves from APP_TOML.
fn assert_app_values(registry: &Registry) {
    let properties = registry.properties();
    let user = properties.command(&key("GetUser"));
    assert_eq!(user.execution_timeout_in_milliseconds, 250);
    assert!(!user.fallback_enabled);
    assert_eq!(user.circuit_breaker_error_threshold_percentage, 40);
    let other = properties.command(&key("Other"));
    assert_eq!(other.execution_timeout_in_milliseconds, 1000);
    let profile = properties.command(&key("svc.users.GetProfile"));
    assert_eq!(profile.circuit_breaker_request_volume_threshold, 10);
    let pool = properties.thread_pool(&ThreadPoolKey::new("UserService").unwrap());
    assert_eq!((pool.core_size, pool.max_queue_size), (20, 100));
}

const APP_NAMES: [&str; 7] = [
    "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds",
    "hystrix.command.GetUser.fallback.enabled",
    "hystrix.command.default.circuitBreaker.errorThresholdPercentage",
    "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds",
    "hystrix.command.svc.users.GetProfile.circuitBreaker.requestVolumeThreshold",
    "hystrix.threadpool.UserService.coreSize",
    "hystrix.threadpool.UserService.maxQueueSize",
];

#[test]
fn nested_toml_through_figment_loads_every_shape_with_exact_values() {
    let settings = figment_settings(APP_TOML).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:8080");
    assert_eq!(settings.hystrix.len(), 7);
    assert_eq!(
        settings.hystrix.get(TIMEOUT),
        Some(&PropertyValue::Int(250))
    );
    let registry = Registry::new();
    let report = registry
        .properties()
        .load_section("hystrix", &settings.hystrix)
        .unwrap();
    assert_eq!((report.applied, report.skipped), (7, 0));
    assert_eq!(report.changed, APP_NAMES);
    assert_eq!(report.warnings, []);
    assert_app_values(&registry);
}

#[test]
fn nested_toml_through_config_rs_loads_the_same_values() {
    let settings = config_rs_settings(APP_TOML).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:8080");
    let registry = Registry::new();
    let report = registry
        .properties()
        .load_section("hystrix", &settings.hystrix)
        .unwrap();
    assert_eq!(report.changed, APP_NAMES);
    assert_eq!(report.warnings, []);
    assert_app_values(&registry);
}

#[test]
fn a_section_is_read_as_the_toml_loader_reads_the_same_text() {
    // The section's text as a Hystrix TOML file: the same names and values.
    let from_file = Registry::new();
    from_file
        .properties()
        .load_text("hystrix.toml", FileFormat::Toml, APP_TOML)
        .unwrap();
    assert_app_values(&from_file);
    // A leading `hystrix` inside the section, and full names as quoted keys, are accepted.
    let settings = figment_settings(
        r#"
        listen = ""
        [hystrix]
        "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds" = 250
        hystrix.threadpool.UserService.coreSize = "20"
        command.GetUser."fallback.enabled" = false
        "#,
    )
    .unwrap();
    // In figment's order (its maps sort their keys).
    let names: Vec<&str> = settings.hystrix.iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "hystrix.command.GetUser.fallback.enabled",
            "hystrix.threadpool.UserService.coreSize",
            "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds",
        ]
    );
}

#[test]
fn string_values_from_environment_providers_parse_as_in_files() {
    // figment's Env keeps case with lowercase(false); its values arrive parsed or as strings.
    figment::Jail::expect_with(|jail| {
        jail.set_env(
            "APP_hystrix__command__GetUser__execution__isolation__thread__timeoutInMilliseconds",
            "250",
        );
        jail.set_env("APP_hystrix__command__GetUser__fallback__enabled", "off");
        jail.set_env("APP_hystrix__threadpool__UserService__coreSize", "\"20\"");
        jail.set_env("APP_listen", "0.0.0.0:80");
        let settings: Settings = figment::Figment::new()
            .merge(
                figment::providers::Env::prefixed("APP_")
                    .split("__")
                    .lowercase(false),
            )
            .extract()?;
        let registry = Registry::new();
        let report = registry
            .properties()
            .load_section("env", &settings.hystrix)
            .unwrap();
        assert_eq!((report.applied, report.warnings.len()), (3, 0));
        let user = registry.properties().command(&key("GetUser"));
        assert_eq!(user.execution_timeout_in_milliseconds, 250);
        assert!(!user.fallback_enabled);
        let pool = registry
            .properties()
            .thread_pool(&ThreadPoolKey::new("UserService").unwrap());
        assert_eq!(pool.core_size, 20);
        Ok(())
    });

    // config-rs: every value from its Environment is a string; its keys are lowercased.
    let vars = [
        ("APP_LISTEN", "0.0.0.0:80"),
        ("APP_HYSTRIX__COMMAND__DEFAULT__FALLBACK__ENABLED", "false"),
        ("APP_HYSTRIX__THREADPOOL__DEFAULT__CORESIZE", "4"),
    ];
    let settings: Settings = config::Config::builder()
        .add_source(
            config::Environment::with_prefix("APP")
                .prefix_separator("_")
                .separator("__")
                .source(Some(
                    vars.iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                )),
        )
        .build()
        .unwrap()
        .try_deserialize()
        .unwrap();
    assert_eq!(
        settings
            .hystrix
            .get("hystrix.command.default.fallback.enabled"),
        Some(&PropertyValue::Str("false".into()))
    );
    let registry = Registry::new();
    let report = registry
        .properties()
        .load_section("env", &settings.hystrix)
        .unwrap();
    assert!(!registry.properties().command(&key("Any")).fallback_enabled);
    assert_eq!(
        report.warnings,
        [LoadWarning::UnknownProperty {
            name: "hystrix.threadpool.default.coresize".into(),
            origin: section("env"),
            suggestion: Some("hystrix.threadpool.default.coreSize".into()),
        }]
    );
}

#[test]
fn an_invalid_value_fails_deserialization_naming_the_property() {
    let toml =
        "listen = \"\"\n[hystrix.command.GetUser]\ncircuitBreaker.errorThresholdPercentage = 120\n";
    let expected = "invalid value `120` for \
                    `hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage`: must be a \
                    percentage from 0 to 100";
    // Each library adds where it was reading.
    let err = figment_settings(toml).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{expected} for key \"default.hystrix\" in TOML source string")
    );
    let err = config_rs_settings(toml).unwrap_err();
    assert_eq!(err.to_string(), format!("{expected} for key `hystrix`"));
    // Not a number, an array, a value under `default` for a per-key property.
    for (toml, message) in [
        (
            "[hystrix.threadpool.P]\ncoreSize = \"many\"",
            "invalid value `many` for `hystrix.threadpool.P.coreSize`: expected a whole number",
        ),
        (
            "[hystrix.command.A]\nfallback.enabled = [true]",
            "invalid value `[true]` for `hystrix.command.A.fallback.enabled`: an array is not a \
             property value",
        ),
        (
            "[hystrix.command.default]\nthreadPoolKeyOverride = \"P\"",
            "invalid value `P` for `hystrix.command.default.threadPoolKeyOverride`: this \
             property exists only per key, not under `default`",
        ),
    ] {
        let err = figment_settings(&format!("listen = \"\"\n{toml}")).unwrap_err();
        assert_eq!(err.kind.to_string(), message, "{toml}");
    }
}

#[test]
fn a_rule_between_properties_fails_the_load_naming_the_section() {
    let hystrix = hystrix_of("[hystrix.command.A.metrics.rollingStats]\nnumBuckets = 7\n");
    let registry = Registry::new();
    let err = registry
        .properties()
        .load_section("hystrix", &hystrix)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "section `hystrix`: invalid value `7` for \
         `hystrix.command.A.metrics.rollingStats.numBuckets`: must divide \
         metrics.rollingStats.timeInMilliseconds (10000 ms) evenly"
    );
    assert!(matches!(&err, LoadError::Invalid { origin, .. } if *origin == section("hystrix")));
}

#[test]
fn an_unknown_name_is_a_warning_with_its_suggestion() {
    let hystrix = hystrix_of(
        "[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMiliseconds = 250\n",
    );
    let registry = Registry::new();
    let report = registry
        .properties()
        .load_section("hystrix", &hystrix)
        .unwrap();
    assert_eq!(report.applied, 0);
    assert_eq!(
        report.warnings,
        [LoadWarning::UnknownProperty {
            name: "hystrix.command.GetUser.execution.isolation.thread.timeoutInMiliseconds".into(),
            origin: section("hystrix"),
            suggestion: Some(TIMEOUT.into()),
        }]
    );
    assert_eq!(
        report.warnings[0].to_string(),
        "section `hystrix`: unknown property \
         `hystrix.command.GetUser.execution.isolation.thread.timeoutInMiliseconds` ignored; did \
         you mean `hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds`?"
    );
}

#[test]
fn fixed_properties_of_keys_in_use_follow_the_file_rules() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let cmd = builder("InUse").build_in(test.registry()).unwrap();
    // Per key: refused, naming the property; nothing changes.
    let err = properties
        .load_section(
            "hystrix",
            &hystrix_of("[hystrix.command.InUse]\nexecution.isolation.thread.timeoutInMilliseconds = 300\nmetrics.rollingStats.numBuckets = 20"),
        )
        .unwrap_err();
    assert_eq!(
        err,
        LoadError::Invalid {
            origin: section("hystrix"),
            error: Box::new(ConfigError::FixedAfterFirstUse {
                name: "hystrix.command.InUse.metrics.rollingStats.numBuckets".into()
            }),
        }
    );
    assert_eq!(cmd.properties().execution_timeout_in_milliseconds, 1000);
    // A global default: kept by the key in use, reported, taken by keys created later.
    let report = properties
        .load_section(
            "hystrix",
            &hystrix_of("[hystrix.command.default]\nmetrics.rollingStats.numBuckets = 20"),
        )
        .unwrap();
    assert_eq!(
        report.warnings,
        [LoadWarning::FixedKept {
            name: "hystrix.command.default.metrics.rollingStats.numBuckets".into(),
            keys: vec!["InUse".into()],
        }]
    );
    let late = builder("Late").build_in(test.registry()).unwrap();
    assert_eq!(
        (
            cmd.properties().metrics_rolling_stats_num_buckets,
            late.properties().metrics_rolling_stats_num_buckets
        ),
        (10, 20)
    );
}

#[test]
fn explain_names_the_section_and_its_rank_among_sources() {
    let registry = Registry::new();
    let properties = registry.properties();
    properties
        .load_text(
            "hystrix.toml",
            FileFormat::Toml,
            "[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMilliseconds = 400\n",
        )
        .unwrap();
    let hystrix = hystrix_of(
        "[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMilliseconds = 250\n",
    );
    properties.load_section("app", &hystrix).unwrap();
    let report = properties.explain(TIMEOUT).unwrap();
    assert_eq!(report.value, Some(PropertyValue::Int(250)));
    assert_eq!(
        (report.layer, report.origin.clone()),
        (PropertyLayer::PerKey, section("app"))
    );
    assert_eq!(report.origin.to_string(), "section `app`");
    assert_eq!(
        report.overridden[0].origin,
        Origin::File {
            path: "hystrix.toml".into(),
            line: 2
        }
    );
    // The environment ranks above a section, run time above both.
    properties
        .load_env_from([(
            "HYSTRIX__command__GetUser__execution__isolation__thread__timeoutInMilliseconds",
            "300",
        )])
        .unwrap();
    assert_eq!(
        properties
            .command(&key("GetUser"))
            .execution_timeout_in_milliseconds,
        300
    );
    properties.set(TIMEOUT, 350).unwrap();
    assert_eq!(
        properties
            .command(&key("GetUser"))
            .execution_timeout_in_milliseconds,
        350
    );
}

#[test]
fn a_reload_of_the_section_replaces_only_its_own_values() {
    let registry = Registry::new();
    let properties = registry.properties();
    let load = |toml: &str| properties.load_section("hystrix", &hystrix_of(toml));
    load("[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMilliseconds = 250\nfallback.enabled = false").unwrap();
    properties
        .set(
            "hystrix.command.GetUser.circuitBreaker.requestVolumeThreshold",
            5,
        )
        .unwrap();
    properties
        .load_env_from([("HYSTRIX__threadpool__default__coreSize", "4")])
        .unwrap();
    let report =
        load("[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMilliseconds = 300")
            .unwrap();
    assert_eq!(
        report.changed,
        [
            "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds",
            "hystrix.command.GetUser.fallback.enabled",
        ]
    );
    let user = properties.command(&key("GetUser"));
    assert_eq!(user.execution_timeout_in_milliseconds, 300);
    assert!(user.fallback_enabled); // no longer given: the default again
    assert_eq!(user.circuit_breaker_request_volume_threshold, 5); // run time stays
    let pool = properties.thread_pool(&ThreadPoolKey::new("Any").unwrap());
    assert_eq!(pool.core_size, 4); // the environment stays
    // An invalid reload changes nothing.
    load("[hystrix.command.GetUser]\nexecution.isolation.thread.timeoutInMilliseconds = 100\nmetrics.rollingStats.numBuckets = 7").unwrap_err();
    assert_eq!(
        properties
            .command(&key("GetUser"))
            .execution_timeout_in_milliseconds,
        300
    );
    // Another section is another source.
    let tenant = hystrix_of("[hystrix.command.GetUser]\nfallback.enabled = false");
    properties.load_section("tenant", &tenant).unwrap();
    assert!(!properties.command(&key("GetUser")).fallback_enabled);
}

#[test]
fn a_registry_that_denies_unknown_properties_refuses_the_whole_section() {
    let registry = Registry::builder().deny_unknown_properties(true).build();
    let properties = registry.properties();
    let hystrix = hystrix_of(
        "[hystrix.command.GetUser]\nfallback.enabled = false\n\
         execution.isolation.thread.timeoutInMiliseconds = 250\n",
    );
    let err = properties.load_section("hystrix", &hystrix).unwrap_err();
    assert_eq!(
        err.to_string(),
        "section `hystrix`: unknown property \
         `hystrix.command.GetUser.execution.isolation.thread.timeoutInMiliseconds` refused; did \
         you mean `hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds`? \
         (this registry denies unknown properties: nothing was loaded)"
    );
    assert!(matches!(
        &err,
        LoadError::Denied { warning } if matches!(**warning, LoadWarning::UnknownProperty { .. })
    ));
    assert!(properties.command(&key("GetUser")).fallback_enabled);
    // Files and the environment: tests/config_sources.rs.
}

#[test]
fn a_name_given_twice_with_different_values_fails_and_with_equal_values_counts_once() {
    let toml = "listen = \"\"\n[hystrix.command.GetUser]\n\"fallback.enabled\" = true\n\
                fallback.enabled = false\n";
    let err = figment_settings(toml).unwrap_err();
    // In figment's order: it sorts the keys ("fallback" before "fallback.enabled").
    assert_eq!(
        err.kind.to_string(),
        "`hystrix.command.GetUser.fallback.enabled` is given twice, as `false` and `true`: keep \
         one spelling (a quoted dotted name and nested keys are two keys to your settings \
         library, which merges an override, say from the environment, into the nested one only)"
    );
    let err = config_rs_settings(toml).unwrap_err();
    assert!(err.to_string().contains("is given twice"), "{err}");
    let hystrix = hystrix_of(
        "[hystrix.command.GetUser]\n\"fallback.enabled\" = false\nfallback.enabled = \"false\"\n\
         [hystrix.command.Other]\nfallback.enabled = false\n",
    );
    assert_eq!(hystrix.len(), 2);
    // The first in figment's order.
    assert_eq!(
        hystrix.get("hystrix.command.GetUser.fallback.enabled"),
        Some(&PropertyValue::Str("false".into()))
    );
}

#[test]
fn floats_are_read_where_a_property_takes_one_and_refused_by_whole_numbers() {
    let hystrix = hystrix_of("[hystrix.command.GetUser]\nretry.backoff.multiplier = 1.5\n");
    let registry = Registry::new();
    registry
        .properties()
        .load_section("hystrix", &hystrix)
        .unwrap();
    let user = registry.properties().command(&key("GetUser"));
    assert_eq!(user.retry_backoff_multiplier, 1.5);
    let err =
        figment_settings("listen = \"\"\n[hystrix.threadpool.P]\ncoreSize = 2.5\n").unwrap_err();
    assert_eq!(
        err.kind.to_string(),
        "invalid value `2.5` for `hystrix.threadpool.P.coreSize`: expected a whole number"
    );
    // A section that is not a table.
    let err = figment_settings("listen = \"\"\nhystrix = 5\n").unwrap_err();
    assert_eq!(
        err.kind.to_string(),
        "expected a map of Hystrix properties, found `5`"
    );
}

#[test]
fn a_table_or_a_date_where_a_value_goes_fails_naming_the_property() {
    // A fresh user's trial: figment hands a TOML date over as a map, which used to become an
    // unknown name under the property (a warning) while the property kept its old value.
    let expected = "invalid value `{…}` for \
                    `hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds`: expected \
                    a value, found a table (or a date, which no property takes)";
    for toml in [
        "[hystrix.command.A]\nexecution.isolation.thread.timeoutInMilliseconds = 1979-05-27T07:32:00Z",
        "[hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds]\nfoo = 1",
    ] {
        let err = figment_settings(&format!("listen = \"\"\n{toml}")).unwrap_err();
        assert_eq!(err.kind.to_string(), expected, "{toml}");
    }
    // config-rs reads the date as text, which the property refuses on its own.
    let err = config_rs_settings(
        "listen = \"\"\n[hystrix.command.A]\n\
         execution.isolation.thread.timeoutInMilliseconds = 1979-05-27T07:32:00Z",
    )
    .unwrap_err();
    assert!(err.to_string().starts_with(
        "invalid value `1979-05-27T07:32:00Z` for \
         `hystrix.command.A.execution.isolation.thread.timeoutInMilliseconds`: expected a whole \
         number"
    ));
    // A table under a command key that only looks like a property's start stays a path.
    let section = hystrix_of("[hystrix.command.A.fallback]\nenabled = false");
    assert_eq!(
        section.get("hystrix.command.A.fallback.enabled"),
        Some(&hystrix::config::PropertyValue::Bool(false))
    );
}

#[test]
fn an_environment_override_of_a_quoted_name_is_refused_with_the_reason() {
    // A fresh user's trial: a file spelling a name quoted, and an override from the
    // environment (nested keys): figment keeps both, so the section sees two values.
    figment::Jail::expect_with(|jail| {
        jail.set_env("APP_hystrix__command__GetUser__fallback__enabled", "false");
        let quoted = "listen = \"\"\n[hystrix.command.GetUser]\n\"fallback.enabled\" = true\n";
        let nested = "listen = \"\"\n[hystrix.command.GetUser]\nfallback.enabled = true\n";
        let with_env = |toml: &str| {
            figment::Figment::new()
                .merge(figment::providers::Toml::string(toml))
                .merge(
                    figment::providers::Env::prefixed("APP_")
                        .split("__")
                        .lowercase(false),
                )
                .extract::<Settings>()
        };
        let err = with_env(quoted).unwrap_err();
        assert!(err.kind.to_string().contains("keep one spelling"), "{err}");
        // Nested keys in the file: the override replaces the file's value.
        let settings = with_env(nested).unwrap();
        assert_eq!(
            settings
                .hystrix
                .get("hystrix.command.GetUser.fallback.enabled"),
            Some(&hystrix::config::PropertyValue::Bool(false))
        );
        Ok(())
    });
}
