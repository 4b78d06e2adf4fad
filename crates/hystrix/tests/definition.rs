//! Defining commands: keys, validation of builder properties, conflicting redefinitions, the
//! registry's per-key state, and the trait style.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{DependencyError, builder, names};
use hystrix::testing::TestRegistry;
use hystrix::{
    BoxError, Command, ConfigError, EventType, FailureType, HystrixCommand, HystrixError,
    IsolationStrategy, PropertyValue, Registry,
};

#[test]
fn a_group_key_is_required() {
    let test = TestRegistry::new();
    let err = Command::builder("NoGroup")
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::MissingGroupKey {
            key: "NoGroup".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "command `NoGroup` has no group key; Hystrix requires one: call .group(\"...\")"
    );
}

#[test]
fn invalid_builder_values_are_refused_with_the_full_property_name() {
    let test = TestRegistry::new();
    let cases = [
        (
            builder("A").circuit_breaker_error_threshold_percentage(101),
            "invalid value `101` for `hystrix.command.A.circuitBreaker.errorThresholdPercentage`: \
             must be a percentage from 0 to 100",
        ),
        (
            builder("A").timeout(Duration::ZERO),
            "invalid value `0` for `hystrix.command.A.execution.isolation.thread.\
             timeoutInMilliseconds`: must be at least 1 ms (to turn the timeout off, set \
             execution.timeout.enabled=false)",
        ),
        (
            builder("A").property("metrics.rollingStats.numBuckets", 0),
            "invalid value `0` for `hystrix.command.A.metrics.rollingStats.numBuckets`: must be \
             at least 1",
        ),
        (
            builder("A").property("metrics.rollingPercentile.numBuckets", 7),
            "invalid value `7` for `hystrix.command.A.metrics.rollingPercentile.numBuckets`: must \
             divide metrics.rollingPercentile.timeInMilliseconds (60000 ms) evenly",
        ),
        (
            builder("A").property("execution.isolation.semaphore.maxConcurrentRequests", -1),
            "invalid value `-1` for `hystrix.command.A.execution.isolation.semaphore.\
             maxConcurrentRequests`: must not be negative",
        ),
        (
            builder("A").property("circuitBreaker.sleepWindowInMillis", 10),
            "unknown property `hystrix.command.A.circuitBreaker.sleepWindowInMillis`; did you \
             mean `hystrix.command.A.circuitBreaker.sleepWindowInMilliseconds`?",
        ),
        (
            builder("A").property("somethingElse", 10),
            "unknown property `hystrix.command.A.somethingElse` (expected \
             hystrix.command.<Key|default>.<name>, hystrix.threadpool.<Key|default>.<name> or \
             hystrix.collapser.<Key|default>.<name> with a Hystrix property name, or a stream \
             property such as hystrix.stream.dashboard.intervalInMilliseconds)",
        ),
        (
            builder("A").property("metrics.healthSnapshot.intervalInMilliseconds", 20_000),
            "invalid value `20000` for `hystrix.command.A.metrics.healthSnapshot.\
             intervalInMilliseconds`: must divide metrics.rollingStats.timeInMilliseconds \
             (10000 ms) evenly into at most 1000 health buckets",
        ),
        (
            // 3 s buckets would cover 9 s of a 10 s window.
            builder("A").property("metrics.healthSnapshot.intervalInMilliseconds", 3000),
            "invalid value `3000` for `hystrix.command.A.metrics.healthSnapshot.\
             intervalInMilliseconds`: must divide metrics.rollingStats.timeInMilliseconds \
             (10000 ms) evenly into at most 1000 health buckets",
        ),
        (
            // A million health buckets would take gigabytes per key: refused, not allocated.
            builder("A")
                .property("metrics.rollingStats.timeInMilliseconds", 1_000_000_000)
                .property("metrics.healthSnapshot.intervalInMilliseconds", 1000),
            "invalid value `1000` for `hystrix.command.A.metrics.healthSnapshot.\
             intervalInMilliseconds`: must divide metrics.rollingStats.timeInMilliseconds \
             (1000000000 ms) evenly into at most 1000 health buckets",
        ),
        (
            // Buckets of 1000 ms and health buckets of 999 ms share only 1 ms buckets.
            builder("A")
                .property("metrics.rollingStats.timeInMilliseconds", 999_000)
                .property("metrics.rollingStats.numBuckets", 999)
                .property("metrics.healthSnapshot.intervalInMilliseconds", 999),
            "invalid value `999` for `hystrix.command.A.metrics.healthSnapshot.\
             intervalInMilliseconds`: with rolling-stats buckets of 1000 ms, events would be \
             counted in buckets of 1 ms (their greatest common divisor): 999000 in the window, \
             more than 1000; use an interval that divides the bucket size or is a multiple of it",
        ),
        (
            builder("A").property("metrics.rollingPercentile.numBuckets", 1_000_000),
            "invalid value `1000000` for `hystrix.command.A.metrics.rollingPercentile.\
             numBuckets`: must be at most 1000 (each bucket takes memory per command key)",
        ),
        (
            builder("A").property("execution.isolation.strategy", "FIBER"),
            "invalid value `FIBER` for `hystrix.command.A.execution.isolation.strategy`: \
             expected THREAD or SEMAPHORE",
        ),
    ];
    for (builder, message) in cases {
        let err = builder.build_in(test.registry()).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    assert!(test.registry().command_keys().is_empty());
}

#[test]
fn invalid_keys_are_refused() {
    let test = TestRegistry::new();
    let err = Command::builder("")
        .group("G")
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(err.to_string(), "invalid command key ``: must not be empty");
    let err = Command::builder("default")
        .group("G")
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid command key `default`: `default` is reserved for the global default properties"
    );
}

#[test]
fn definitions_of_one_key_share_the_union_of_their_settings() {
    let test = TestRegistry::new();
    let first = builder("Shared")
        .timeout(Duration::from_millis(300))
        .build_in(test.registry())
        .unwrap();
    // Leaving a setting out inherits it; adding one applies to every definition of the key.
    let second = builder("Shared")
        .fallback_enabled(false)
        .build_in(test.registry())
        .unwrap();
    assert_eq!(second.properties().execution_timeout_in_milliseconds, 300);
    assert!(!first.properties().fallback_enabled);
    first.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
    assert_eq!(second.metrics().cumulative_count(EventType::Success), 1);

    let err = builder("Shared")
        .timeout(Duration::from_millis(400))
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command `Shared` is already defined with a different value for \
         `hystrix.command.Shared.execution.isolation.thread.timeoutInMilliseconds`: first \
         `300`, now `400`"
    );
    let err = builder("Shared")
        .property("metrics.rollingStats.timeInMilliseconds", 20_000)
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "property `hystrix.command.Shared.metrics.rollingStats.timeInMilliseconds` is fixed \
         once its key is in use (a command was defined with it), so it was not changed; set it \
         before the key's first definition, or after `Registry::remove` of the key"
    );
    let err = Command::builder("Shared")
        .group("OtherGroup")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command `Shared` is already defined with a different group key: first `Test`, now \
         `OtherGroup`"
    );
    let err = builder("Shared")
        .thread_pool_key("Pool")
        .build_in(test.registry())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command `Shared` is already defined with a different thread-pool key: first `Test`, \
         now `Pool`"
    );
    // Naming the pool it already has is no conflict.
    assert!(
        builder("Shared")
            .thread_pool_key("Test")
            .build_in(test.registry())
            .is_ok()
    );
}

#[test]
fn property_names_must_name_a_usable_key() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let err = properties
        .set("hystrix.command. Padded.circuitBreaker.enabled", true)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid command key ` Padded`: must not start or end with whitespace"
    );
    let err = properties
        .set("hystrix.command.TPO.threadPoolKeyOverride", "default")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value `default` for `hystrix.command.TPO.threadPoolKeyOverride`: invalid \
         thread-pool key `default`: `default` is reserved for the global default properties"
    );
}

#[test]
fn numbers_beyond_a_property_type_are_out_of_range() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let err = properties
        .set(
            "hystrix.command.A.execution.isolation.semaphore.maxConcurrentRequests",
            u64::MAX,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value `18446744073709551615` for \
         `hystrix.command.A.execution.isolation.semaphore.maxConcurrentRequests`: out of range \
         (at most 4294967295)"
    );
    // A duration too long for any timer is still a valid (effectively endless) timeout.
    let cmd = builder("Endless")
        .timeout(Duration::MAX)
        .build_in(test.registry())
        .unwrap();
    assert_eq!(cmd.properties().execution_timeout_in_milliseconds, u64::MAX);
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(1)).execute().unwrap(),
        1
    );
}

#[test]
fn durations_round_up_to_whole_milliseconds() {
    let test = TestRegistry::new();
    let cmd = builder("Rounded")
        .timeout(Duration::from_micros(1_200))
        .build_in(test.registry())
        .unwrap();
    assert_eq!(cmd.properties().execution_timeout_in_milliseconds, 2);
    let cmd = builder("SubMillisecond")
        .timeout(Duration::from_micros(1))
        .build_in(test.registry())
        .unwrap();
    assert_eq!(cmd.properties().execution_timeout_in_milliseconds, 1);
}

#[test]
fn thread_pool_key_defaults_to_the_group_and_can_be_overridden() {
    let test = TestRegistry::new();
    let by_group = builder("ByGroup").build_in(test.registry()).unwrap();
    assert_eq!(by_group.thread_pool_key().as_str(), "Test");
    let explicit = builder("Explicit")
        .thread_pool_key("Users")
        .build_in(test.registry())
        .unwrap();
    assert_eq!(explicit.thread_pool_key().as_str(), "Users");
    test.registry()
        .properties()
        .set(
            "hystrix.command.Overridden.threadPoolKeyOverride",
            "Isolated",
        )
        .unwrap();
    let overridden = builder("Overridden")
        .thread_pool_key("Users")
        .build_in(test.registry())
        .unwrap();
    assert_eq!(overridden.thread_pool_key().as_str(), "Isolated");
    assert_eq!(overridden.group().as_str(), "Test");
}

#[test]
fn builder_values_hide_the_global_default_but_not_the_per_key_value() {
    let test = TestRegistry::new();
    let properties = test.registry().properties();
    let name = "execution.isolation.semaphore.maxConcurrentRequests";
    properties
        .set(&format!("hystrix.command.default.{name}"), 50)
        .unwrap();
    let defaulted = builder("Defaulted").build_in(test.registry()).unwrap();
    let coded = builder("Coded")
        .semaphore_max_concurrent_requests(5)
        .build_in(test.registry())
        .unwrap();
    assert_eq!(
        defaulted
            .properties()
            .execution_isolation_semaphore_max_concurrent_requests,
        50
    );
    assert_eq!(
        coded
            .properties()
            .execution_isolation_semaphore_max_concurrent_requests,
        5
    );
    properties
        .set(&format!("hystrix.command.Coded.{name}"), 7)
        .unwrap();
    assert_eq!(
        coded
            .properties()
            .execution_isolation_semaphore_max_concurrent_requests,
        7
    );
    assert_eq!(
        properties
            .get(&format!("hystrix.command.Coded.{name}"))
            .unwrap(),
        Some(PropertyValue::Int(7))
    );
    assert_eq!(
        properties
            .get("hystrix.command.Coded.threadPoolKeyOverride")
            .unwrap(),
        None
    );
}

#[test]
fn removing_a_key_drops_its_state() {
    let test = TestRegistry::new();
    let old = builder("Removable").build_in(test.registry()).unwrap();
    old.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
    assert_eq!(
        test.registry()
            .command_keys()
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        ["Removable"]
    );
    assert!(test.registry().remove("Removable"));
    assert!(!test.registry().remove("Removable"));
    assert!(test.registry().command_metrics("Removable").is_none());
    assert!(test.registry().command_keys().is_empty());

    // A new definition starts fresh and may differ; the old one still works, detached.
    let new = builder("Removable")
        .timeout(Duration::from_millis(10))
        .build_in(test.registry())
        .unwrap();
    assert_eq!(new.metrics().cumulative_count(EventType::Success), 0);
    old.run(|| Ok::<_, DependencyError>(1)).execute().unwrap();
    assert_eq!(old.metrics().cumulative_count(EventType::Success), 2);
    assert_eq!(new.metrics().cumulative_count(EventType::Success), 0);
}

#[test]
fn registries_are_isolated() {
    let a = TestRegistry::new();
    let b = TestRegistry::new();
    let in_a = builder("Same").build_in(a.registry()).unwrap();
    let in_b = builder("Same")
        .timeout(Duration::from_millis(5))
        .build_in(b.registry())
        .unwrap();
    a.force_open("Same").unwrap();
    assert!(in_a.is_circuit_breaker_open());
    assert!(!in_b.is_circuit_breaker_open());
}

#[test]
fn the_global_registry_serves_build() {
    let cmd = Command::builder("GlobalRegistryCommand")
        .group("Global")
        .isolation(IsolationStrategy::Semaphore)
        .build()
        .unwrap();
    assert_eq!(
        cmd.run(|| Ok::<_, DependencyError>(2)).execute().unwrap(),
        2
    );
    assert!(
        Registry::global()
            .command_keys()
            .iter()
            .any(|k| k.as_str() == "GlobalRegistryCommand")
    );
}

#[tokio::test]
async fn the_system_clock_times_out_a_hanging_async_run() {
    // Real time: the outcome is certain (the run never completes), only its moment is not.
    let registry = Registry::new();
    let cmd = builder("RealTimeout")
        .timeout(Duration::from_millis(20))
        .build_in(&registry)
        .unwrap();
    let outcome = cmd
        .run_async(std::future::pending::<Result<u32, DependencyError>>())
        .execute_async_outcome()
        .await;
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["TIMEOUT", "FALLBACK_MISSING"]
    );
    assert!(outcome.execution_result().execution_time_ms().unwrap() >= 19);
}

struct GetUser {
    command: Command,
    id: u32,
    cached_name: Option<&'static str>,
}

impl HystrixCommand for GetUser {
    type Response = String;
    type Error = DependencyError;

    fn command(&self) -> &Command {
        &self.command
    }

    fn run(&self) -> Result<String, DependencyError> {
        match self.id {
            0 => Err(DependencyError("invalid id")),
            1 => Ok("ada".into()),
            _ => Err(DependencyError("user service down")),
        }
    }

    fn fallback(&self, _: &HystrixError<DependencyError>) -> Option<Result<String, BoxError>> {
        self.cached_name.map(|name| Ok(name.to_owned()))
    }

    fn classify(&self, error: &DependencyError) -> hystrix::Class {
        if error.0 == "invalid id" {
            hystrix::Class::BadRequest
        } else {
            hystrix::Class::Failure
        }
    }
}

#[test]
fn trait_style_commands_run_through_the_same_pipeline() {
    let test = TestRegistry::new();
    let command = builder("GetUser").build_in(test.registry()).unwrap();
    let user = |id, cached_name| GetUser {
        command: command.clone(),
        id,
        cached_name,
    };
    assert_eq!(user(1, None).execute().unwrap(), "ada");
    let outcome = user(2, Some("cached ada")).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_SUCCESS"]
    );
    assert_eq!(outcome.into_response().unwrap(), "cached ada");
    // A fallback that returns None is missing, as Hystrix's default getFallback().
    let outcome = user(2, None).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    let err = user(0, Some("x")).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
}

#[test]
fn errors_convert_for_anyhow_and_boxed_error_users() {
    fn with_question_mark(cmd: &Command) -> Result<u32, BoxError> {
        let value = cmd
            .run(|| Err::<u32, _>(DependencyError("down")))
            .execute()?;
        Ok(value)
    }
    fn with_string_cause(cmd: &Command) -> Result<u32, BoxError> {
        // A cause that is only Debug + Display still makes HystrixError a std error.
        let value = cmd
            .run(|| Err::<u32, _>(String::from("plain text")))
            .execute()?;
        Ok(value)
    }
    fn boxed(cmd: &Command) -> Result<u32, HystrixError<BoxError>> {
        cmd.run(|| Err::<u32, _>(DependencyError("typed")))
            .execute()
            .map_err(HystrixError::into_boxed)
    }
    let test = TestRegistry::new();
    let cmd = builder("Converted").build_in(test.registry()).unwrap();
    let err = with_question_mark(&cmd).unwrap_err();
    assert_eq!(
        err.to_string(),
        "command Converted failed: down and no fallback available"
    );
    // The cause's text is in the message, so error reporters do not also print it as a source.
    assert!(err.source().is_none());
    let typed = err.downcast_ref::<HystrixError<DependencyError>>().unwrap();
    assert_eq!(typed.cause(), Some(&DependencyError("down")));
    let err = with_string_cause(&cmd).unwrap_err();
    assert_eq!(
        err.to_string(),
        "command Converted failed: plain text and no fallback available"
    );
    let err = boxed(&cmd).unwrap_err();
    assert_eq!(err.cause().unwrap().to_string(), "typed");
}

#[test]
fn properties_that_depend_on_each_other_change_together_and_errors_name_both() {
    let test = TestRegistry::new();
    let cmd = builder("Trials").build_in(test.registry()).unwrap();
    let props = test.registry().properties();
    let permitted = "hystrix.command.Trials.circuitBreaker.halfOpen.permittedRequests";
    let threshold = "hystrix.command.Trials.circuitBreaker.halfOpen.successThreshold";
    let err = props.set(threshold, 3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value `3` for `hystrix.command.Trials.circuitBreaker.halfOpen.\
         successThreshold`: must not exceed circuitBreaker.halfOpen.permittedRequests (1)"
    );
    // Together, in either order.
    props.set_all([(threshold, 3), (permitted, 3)]).unwrap();
    let live = cmd.properties();
    assert_eq!(
        (
            live.circuit_breaker_half_open_permitted_requests,
            live.circuit_breaker_half_open_success_threshold
        ),
        (3, 3)
    );
    // Alone, a change that breaks the rule names itself and the property it conflicts with.
    let conflict = "conflicts with `hystrix.command.Trials.circuitBreaker.halfOpen.\
                    successThreshold` = 3, which must not exceed circuitBreaker.halfOpen.\
                    permittedRequests (1) (change both at once with Properties::set_all)";
    assert_eq!(
        props.set(permitted, 1).unwrap_err().to_string(),
        format!(
            "invalid value `1` for `hystrix.command.Trials.circuitBreaker.halfOpen.\
             permittedRequests`: {conflict}"
        )
    );
    assert_eq!(
        props.unset(permitted).unwrap_err().to_string(),
        format!(
            "invalid value `(unset)` for `hystrix.command.Trials.circuitBreaker.halfOpen.\
             permittedRequests`: {conflict}"
        )
    );
    // All or nothing: one bad value in a batch changes none.
    let err = props
        .set_all([
            (permitted, 5),
            (
                "hystrix.command.Trials.circuitBreaker.errorThresholdPercentage",
                101,
            ),
        ])
        .unwrap_err();
    assert!(
        err.to_string().contains("errorThresholdPercentage"),
        "{err}"
    );
    assert_eq!(
        cmd.properties()
            .circuit_breaker_half_open_permitted_requests,
        3
    );
    props.unset(threshold).unwrap();
    props.unset(permitted).unwrap();
    assert_eq!(
        cmd.properties()
            .circuit_breaker_half_open_permitted_requests,
        1
    );
}

#[test]
fn a_fixed_property_refused_for_a_key_in_use_can_be_set_after_removing_the_key() {
    let test = TestRegistry::new();
    let registry = test.registry();
    let name = "hystrix.command.Fixed.metrics.rollingStats.numBuckets";
    builder("Fixed").build_in(registry).unwrap();
    let err = registry.properties().set(name, 5).unwrap_err();
    assert!(err.to_string().contains("so it was not changed"), "{err}");
    assert!(registry.remove("Fixed"));
    registry.properties().set(name, 5).unwrap();
    let cmd = builder("Fixed").build_in(registry).unwrap();
    assert_eq!(cmd.properties().metrics_rolling_stats_num_buckets, 5);
}
