//! The setup of the Rust snippets of docs/http.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: tower-layer feature=tower
// The tower crate, not the glob-imported hystrix::tower module.
use ::tower;
use axum::body::Body;
use axum::http::{Request, Response};
use tower::{Service, ServiceExt};

#[derive(Clone, Debug, PartialEq)]
struct Price(Option<u64>);

impl Price {
    fn unknown() -> Self {
        Price(None)
    }
}

fn degraded_response(err: &HystrixError<BoxError>) -> Response<Body> {
    Response::new(Body::from(format!("degraded: {err}")))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let get_price = Command::builder("GetPrice").group("Pricing").build()?;
    let price_client = tower::service_fn(|item: u64| async move {
        if item == 0 {
            Err(MyError)
        } else {
            Ok(Price(Some(item * 100)))
        }
    });
    // [snippet]
    let mut svc = svc;
    assert_eq!(svc.ready().await?.call(7).await?, Price(Some(700)));
    assert_eq!(svc.ready().await?.call(0).await?, Price::unknown());

    let http = tower::service_fn(|_: Request<Body>| async {
        Err::<Response<Body>, BoxError>("connection refused".into())
    });
    let mut per_host = tower::ServiceBuilder::new().layer(layer).service(http);
    let request = Request::get("http://example.com/").body(Body::empty())?;
    let response = per_host.ready().await?.call(request).await?;
    assert!(response.status().is_success());
    Ok(())
}

