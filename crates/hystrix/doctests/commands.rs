//! The setup of the Rust snippets of docs/commands.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

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
    let get_price = Command::builder("GetPrice").group("Pricing").build()?;
    let (client, item) = (PriceClient, 7);
    // [snippet]
    assert_eq!(price, 700);
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

