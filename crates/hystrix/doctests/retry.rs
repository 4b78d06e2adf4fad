//! The setup of the Rust snippets of docs/retry.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: retry
#[derive(Debug)]
enum ApiError {
    Busy { retry_after: Duration },
    NotFound,
    Down,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for ApiError {}

/// Fails twice (down, then busy for 200 ms), then answers.
#[derive(Clone, Default)]
struct UserClient(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl UserClient {
    async fn get_user(&self, id: u64) -> Result<String, ApiError> {
        match self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Err(ApiError::Down),
            1 => Err(ApiError::Busy {
                retry_after: Duration::from_millis(200),
            }),
            2 if id == 0 => Err(ApiError::NotFound),
            _ => Ok(format!("user {id}")),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let client = UserClient::default();
    // [snippet]
    // Attempts at 0 ms, after 50 ms (backoff), and after 200 ms (the Retry-After wins over 100).
    let driver = std::thread::spawn({
        let test = test.clone();
        move || {
            for _ in 0..2 {
                test.advance_to_next_timer_when_pending(1).unwrap();
            }
        }
    });
    let outcome = futures::executor::block_on(outcome);
    driver.join().unwrap();
    assert_eq!(outcome.response().as_ref().unwrap(), "user 7");
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "SUCCESS, FAILUREx2, RETRYx2"
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 250);
    assert_eq!(
        get_user.retry_budget(),
        Some(hystrix::retry::RetryBudgetCounts { requests: 1, retries: 2, allowed: 100 })
    );
    Ok(())
}

// doctest: retry-budget
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    assert_eq!(outcome.response().as_ref().unwrap(), &0);
    assert_eq!(
        outcome.execution_result().execution_events().to_string(),
        "FAILURE, FALLBACK_SUCCESS, RETRY_BUDGET_EXHAUSTED"
    );
    assert_eq!(
        get_quote.retry_budget(),
        Some(hystrix::retry::RetryBudgetCounts { requests: 1, retries: 0, allowed: 0 })
    );
    Ok(())
}

// doctest: hedging
/// Replica 1 answers in 500 ms, replica 2 in 5 ms (on the registry's clock).
#[derive(Clone)]
struct Replicas {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
    calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Replicas {
    async fn search(&self, query: &str) -> Result<String, std::io::Error> {
        let replica = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let ms = if replica == 1 { 500 } else { 5 };
        hystrix::clock::sleep(&self.clock, Duration::from_millis(ms)).await;
        Ok(format!("{query}: results from replica {replica}"))
    }
}

/// Polls `future` to its end, moving the manual clock to the next timer whenever it waits.
fn drive<F: std::future::Future>(test: &testing::TestRegistry, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = futures::task::noop_waker();
    loop {
        let mut cx = std::task::Context::from_waker(&waker);
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        test.clock().advance_to_next_timer().unwrap();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let replicas = Replicas {
        clock: std::sync::Arc::clone(test.registry().clock()),
        calls: Default::default(),
    };
    let context = hystrix::context::RequestContext::new();
    let _entered = context.enter();
    // [snippet]
    let outcome = drive(&test, outcome);
    assert_eq!(outcome.response().as_ref().unwrap(), "rust: results from replica 2");
    assert_eq!(outcome.execution_result().total_time_ms(), 25);
    assert_eq!(context.request_log().to_string(), "Search[SUCCESS, HEDGE, HEDGE_CANCELLED][5ms]");
    Ok(())
}

