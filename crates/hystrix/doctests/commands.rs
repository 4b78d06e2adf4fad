//! The setup of the Rust snippets of docs/commands.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: define-command
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // [snippet]
    assert_eq!(get_user.key().as_str(), "GetUser");
    assert_eq!(get_user.group().as_str(), "UserService");
    assert_eq!(get_user.thread_pool_key().as_str(), "UserReads");
    let properties = get_user.properties();
    assert_eq!(properties.execution_timeout_in_milliseconds, 500);
    assert_eq!(properties.circuit_breaker_error_threshold_percentage, 40);
    assert_eq!(
        registry
            .properties()
            .thread_pool(get_user.thread_pool_key())
            .core_size,
        4
    );
    let missing = Command::builder("GetCart").build_in(&registry).unwrap_err();
    assert!(matches!(missing, ConfigError::MissingGroupKey { .. }));
    assert_eq!(
        missing.to_string(),
        "command `GetCart` has no group key; Hystrix requires one: call .group(\"...\")"
    );
    Ok(())
}

// doctest: quick-start-blocking
#[derive(Clone)]
struct UserClient;

impl UserClient {
    fn get_user_name(&self, id: u64) -> Result<String, MyError> {
        Ok(format!("user {id}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = UserClient;
    // [snippet]
    assert_eq!(name, "user 42");
    assert_eq!(get_user.properties().execution_timeout_in_milliseconds, 500);
    Ok(())
}

// doctest: run-cancellable
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let export = Command::builder("Export").group("Reports").build_in(&registry)?;
    // [snippet]
    assert_eq!(rows, 1_000);

    // At the timeout the token is cancelled, and a run that waits on it returns.
    let test = testing::TestRegistry::new();
    let slow = Command::builder("SlowExport").group("Reports").build_in(test.registry())?;
    let (started, run_started) = std::sync::mpsc::channel();
    let (returned, run_returned) = std::sync::mpsc::channel();
    let handle = slow
        .run_cancellable(move |token| {
            started.send(()).unwrap();
            futures::executor::block_on(token.cancelled());
            returned.send(()).unwrap();
            Ok::<_, MyError>(0)
        })
        .queue();
    run_started.recv()?;
    test.advance_when_pending(1, Duration::from_millis(1000))?;
    assert!(handle.get().unwrap_err().is_timeout());
    run_returned.recv_timeout(Duration::from_secs(10))?;
    Ok(())
}

// doctest: quick-start-async
struct PriceClient;

impl PriceClient {
    async fn price(&self, item: u64) -> Result<u64, MyError> {
        Ok(item * 100)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_price = Command::builder("GetPrice").group("Pricing").build_in(&Registry::new())?;
    let (client, item) = (PriceClient, 7);
    // [snippet]
    assert_eq!(price, 700);
    Ok(())
}

// doctest: modes-blocking
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let get_user = Command::builder("GetUser").group("UserService").build_in(&registry)?;
    // [snippet]
    assert_eq!((user, other), ("ada", "grace"));
    assert_eq!(get_user.metrics().cumulative_count(EventType::Success), 2);
    Ok(())
}

// doctest: modes-async
async fn price_of(item: u64) -> Result<u64, MyError> {
    Ok(item * 100)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let get_price = Command::builder("GetPrice").group("Pricing").build_in(&registry)?;
    let get_user = Command::builder("GetUser").group("Users").build_in(&registry)?;
    // [snippet]
    assert_eq!([a, b, c, d], [100, 200, 300, 400]);
    assert_eq!(name, "ada");
    // execute() of an async run on this runtime's thread is refused, with the message above.
    let err = get_price.run_async(price_of(5)).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert!(err.to_string().contains(
        "executed with execute() on a thread a tokio runtime drives, which it would block; \
         use execute_async().await or queue()"
    ));
    Ok(())
}

// doctest: errors-and-fallbacks
#[derive(Debug, PartialEq)]
struct HttpError(u16);

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}", self.0)
    }
}

impl std::error::Error for HttpError {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    let err = get_item.run(|| Err::<String, _>(HttpError(400))).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
    assert!(err.fallback_failure().is_none());
    Ok(())
}

// doctest: execute-outcome
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let get_item = Command::builder("GetItem").group("Catalog").build_in(test.registry())?;
    // [snippet]
    Ok(())
}

// doctest: stream-command
struct Feed;

impl Feed {
    fn subscribe(
        &self,
        symbol: &str,
    ) -> impl futures::Stream<Item = Result<u64, MyError>> + Send + 'static {
        let prices = if symbol == "ACME" {
            vec![Ok(1), Ok(2), Ok(3), Err(MyError)]
        } else {
            vec![]
        };
        futures::stream::iter(prices)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (feed, symbol, last_known) = (Feed, "ACME", 0);
    // [snippet]
    let events = result.map(|result| format!("[{}]", result.execution_events()));
    assert_eq!(
        events.as_deref(),
        Some("[EMITx3, FAILURE, FALLBACK_EMIT, FALLBACK_SUCCESS]")
    );
    Ok(())
}

// doctest: hystrix-command-trait
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // [snippet]
    assert_eq!(greeting, "Hello, Ada!");
    Ok(())
}
