//! The setup of the Rust snippets of docs/breakers.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: breaker-and-metrics
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(&Registry::new())?;
    // [snippet]
    assert!(get_user.circuit_breaker().is_open());
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
    let g = || Ok::<_, std::io::Error>("fetched");
    let (request_json, host) = (r#"{"rating": 5}"#, "api.example.com");
    // [snippet]
    Ok(())
}

// doctest: breaker-windows
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    // [snippet]
    Ok(())
}

