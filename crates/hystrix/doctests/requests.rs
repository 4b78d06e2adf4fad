//! The setup of the Rust snippets of docs/requests.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: request-context-async feature=tower
// The tower crate, not the glob-imported hystrix::tower module.
use ::tower;

async fn fetch_title(id: u32) -> Result<String, MyError> {
    Ok(format!("movie {id}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let get_title = Command::builder("GetTitle")
        .group("Movies")
        .build_in(test.registry())?;
    let handler = tower::service_fn(|_request: ()| async {
        let logged = RequestContext::current().map(|ctx| ctx.request_log().entries().len());
        Ok::<_, std::convert::Infallible>(logged)
    });
    // [snippet]
    assert_eq!(title, "movie 7");
    assert_eq!(ctx.request_log().to_string(), "GetTitle[SUCCESS][0ms]");
    assert_eq!(RequestContext::current(), None);
    // Each call of the app runs in a new, empty context.
    let logged = tower::ServiceExt::oneshot(app, ()).await?;
    assert_eq!(logged, Some(0));
    Ok(())
}

// doctest: request-context
use std::net::SocketAddr;

fn get(backend: SocketAddr, id: u32) -> Result<String, MyError> {
    if backend.port() == 2 {
        Err(MyError)
    } else {
        Ok(format!("movie {id}"))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let command = |key: &str| Command::builder(key).group("Movies").build_in(test.registry());
    let (get_title, get_rating) = (command("GetTitle")?, command("GetRating")?);
    let (catalog, ratings, id): (SocketAddr, SocketAddr, u32) =
        (([127, 0, 0, 1], 1).into(), ([127, 0, 0, 1], 2).into(), 7);
    // [snippet]
    assert_eq!(
        ctx.request_log().to_string(),
        "GetTitle[SUCCESS][0ms], GetRating[FAILURE, FALLBACK_SUCCESS][0ms]x2"
    );
    assert_eq!(ctx.request_log().entries().len(), 3);
    Ok(())
}

// doctest: request-cache
#[derive(Debug, PartialEq)]
struct User(u32);

fn fetch_user(id: u32) -> Result<User, MyError> {
    Ok(User(id))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(test.registry())?;
    // [snippet]
    assert!(std::sync::Arc::ptr_eq(&user, &again));
    assert_eq!(*user, User(7));
    assert_eq!(
        ctx.request_log().to_string(),
        "GetUser[SUCCESS][0ms], GetUser[SUCCESS, RESPONSE_FROM_CACHE][0ms]"
    );
    assert!(!get_user.clear_cache("7")?);
    Ok(())
}

// doctest: collapser
use std::net::SocketAddr;

async fn fetch_ratings(_backend: SocketAddr, ids: Vec<u32>) -> Result<HashMap<u32, f64>, MyError> {
    Ok(ids
        .into_iter()
        .map(|id| (id, f64::from(id) / 2.0))
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let get_ratings = Command::builder("GetRatings")
        .group("Ratings")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&Registry::new())?;
    let addr: SocketAddr = ([127, 0, 0, 1], 7).into();
    // [snippet]
    assert_eq!(*rating, 3.5);
    Ok(())
}

