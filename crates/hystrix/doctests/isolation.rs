//! The setup of the Rust snippets of docs/isolation.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: adaptive-limits
/// A payment gateway whose charges take 100 ms of the registry's clock.
struct Gateway {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
}

impl Gateway {
    fn charge(&self, id: u32) -> impl std::future::Future<Output = Result<String, std::io::Error>> + Send + 'static {
        let clock = std::sync::Arc::clone(&self.clock);
        async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(100)).await;
            Ok(format!("charge {id} done"))
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let gateway = Gateway {
        clock: std::sync::Arc::clone(test.registry().clock()),
    };
    // [snippet]
    // The clock has not moved: both charges are still in flight.
    drop(in_flight);
    Ok(())
}

// doctest: priorities
/// A backend whose calls take 100 ms of the registry's clock.
struct SlowBackend {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
}

impl SlowBackend {
    fn call(&self) -> impl std::future::Future<Output = Result<&'static str, MyError>> + Send + 'static {
        let clock = std::sync::Arc::clone(&self.clock);
        async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(100)).await;
            Ok("results")
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let backend = SlowBackend {
        clock: std::sync::Arc::clone(test.registry().clock()),
    };
    // [snippet]
    assert_eq!(found, "results");
    let _ = layer;
    drop(held);
    Ok(())
}

// doctest: throttling
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    Ok(())
}

