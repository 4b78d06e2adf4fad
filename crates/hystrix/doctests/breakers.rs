//! The setup of the Rust snippets of docs/breakers.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: breaker-and-metrics
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(test.registry())?;
    for i in 0..40 {
        let _ = get_user
            .run(move || if i < 22 { Err(MyError) } else { Ok(i) })
            .execute();
    }
    test.advance(Duration::from_millis(1000));
    // [snippet]
    assert_eq!(status, Status::Open);
    assert_eq!(
        (health.total_requests, health.error_count, health.error_percentage),
        (40, 22, 55)
    );
    assert_eq!(
        cause.unwrap().to_string(),
        "55% of 40 requests failed in the last 10000 ms (circuitBreaker.errorThresholdPercentage 50%); last failure: FAILURE"
    );
    assert_eq!(failures, 22);
    assert_eq!(p99_ms, 0);
    assert!(breaker.is_open());
    assert_eq!(breaker.open_duration_ms(), Some(5000));
    assert_eq!(metrics.circuit_open_duration_ms(), Some(5000));
    Ok(())
}

// doctest: breaker-listener
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    let get_user = Command::builder("GetUser")
        .group("Users")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&registry)?;
    for _ in 0..20 {
        let _ = get_user.run(|| Err::<u32, _>(MyError)).execute();
    }
    test.advance(Duration::from_millis(500));
    assert!(get_user.circuit_breaker().is_open());
    test.advance(Duration::from_millis(5001));
    let _ = get_user.run(|| Err::<u32, _>(MyError)).execute(); // a failed trial
    test.advance(Duration::from_millis(5001));
    assert_eq!(get_user.run(|| Ok::<_, MyError>(1)).execute()?, 1); // a successful one
    assert_eq!(
        *transitions.0.lock().unwrap(),
        [
            "GetUser: opened for 5000 ms",
            "GetUser: half-open",
            "GetUser: opened for 5000 ms",
            "GetUser: half-open",
            "GetUser: closed",
        ]
    );
    Ok(())
}

// doctest: breaker-windows
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    Ok(())
}

// doctest: cloud-pattern
#[derive(Debug)]
struct HttpError {
    status: u16,
    retry_after: Option<String>,
}

fn ping_health() -> bool {
    true
}

fn requeue(_description: String) {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let f = || Ok::<_, HttpError>("rated");
    let (request_json,) = (r#"{"rating": 5}"#,);
    // [snippet]
    Ok(())
}

// doctest: breaker-per-key
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    assert_eq!(healthy?, "fetched");
    assert_eq!(refused.unwrap_err().failure_type(), FailureType::ShortCircuit);
    assert_eq!(fetch.keyed_circuit_breaker(sick).unwrap().status(), Status::Open);
    assert_eq!(fetch.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        test.registry().open_breaker_keys("Fetch"),
        Some(vec![sick.to_string()])
    );
    Ok(())
}

// doctest: breaker-shared-state
use futures::executor::block_on;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    assert_eq!(on_b.circuit_breaker().status(), Status::Open);
    let err = on_b.run(|| Ok::<_, MyError>(1)).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(on_b.circuit_breaker().open_duration_ms(), Some(5000));
    assert!(!b.state_store_status().unwrap().degraded);
    Ok(())
}
