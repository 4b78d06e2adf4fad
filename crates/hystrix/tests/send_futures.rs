//! Execution futures can be awaited inside `tokio::spawn` (and so in axum handlers) when the
//! error type is tower's `BoxError` (`Box<dyn Error + Send + Sync>`), whose lifetime the
//! compiler erases when it proves an `async` block `Send`. A regression test: this file failed
//! to compile ("higher-ranked lifetime error") while the futures carried `where R: RunFn`.

#![allow(clippy::unwrap_used)]

use std::future::poll_fn;
use std::pin::pin;

use futures_core::Stream;
use hystrix::{BoxError, Command, Registry};

fn boxed(message: &str) -> BoxError {
    message.to_owned().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_with_box_errors_run_in_spawned_tasks() {
    let registry = Registry::new();
    let cmd = Command::builder("Spawned")
        .group("Send")
        .build_in(&registry)
        .unwrap();

    let c = cmd.clone();
    let async_run = tokio::spawn(async move {
        c.run_async(async { Ok::<u32, BoxError>(1) })
            .execute_async()
            .await
    });
    assert_eq!(async_run.await.unwrap().unwrap(), 1);

    // A blocking run (THREAD isolation, on the pool) with its fallback.
    let c = cmd.clone();
    let blocking = tokio::spawn(async move {
        c.run(|| Err::<u32, BoxError>(boxed("down")))
            .fallback(|_| Ok::<u32, BoxError>(2))
            .execute_async()
            .await
    });
    assert_eq!(blocking.await.unwrap().unwrap(), 2);

    let c = cmd.clone();
    let async_fallback = tokio::spawn(async move {
        c.run_async(async { Err::<u32, BoxError>(boxed("down")) })
            .fallback_async(|_| async { Ok::<u32, BoxError>(3) })
            .execute_async()
            .await
    });
    assert_eq!(async_fallback.await.unwrap().unwrap(), 3);

    let c = cmd.clone();
    let observable = tokio::spawn(async move {
        let mut stream = pin!(
            c.run_async(async { Ok::<u32, BoxError>(4) })
                .to_observable()
        );
        poll_fn(|cx| stream.as_mut().poll_next(cx)).await
    });
    assert_eq!(observable.await.unwrap().unwrap().unwrap(), 4);

    // Through the request cache, in a context scope inside the spawned task.
    let c = cmd.clone();
    let cached = tokio::spawn(async move {
        let ctx = hystrix::context::RequestContext::new();
        ctx.scope(async move {
            c.run_async(async { Ok::<u32, BoxError>(5) })
                .cache_key("five")
                .execute_async()
                .await
        })
        .await
    });
    assert_eq!(*cached.await.unwrap().unwrap(), 5);
}

#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_calls_with_box_errors_run_in_spawned_tasks() {
    use hystrix::IsolationStrategy;
    use hystrix::tower::HystrixLayer;
    use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

    let registry = Registry::new();
    let cmd = Command::builder("SpawnedLayer")
        .group("Send")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&registry)
        .unwrap();

    let mut svc = ServiceBuilder::new()
        .layer(HystrixLayer::new(cmd.clone()))
        .service(service_fn(|x: u32| async move { Ok::<u32, BoxError>(x) }));
    let call = tokio::spawn(async move { svc.ready().await?.call(5).await });
    assert_eq!(call.await.unwrap().unwrap(), 5);

    // Over `and_then` producing BoxError, with a fallback function.
    let mut svc = ServiceBuilder::new()
        .layer(
            HystrixLayer::new(cmd)
                .fallback_fn(|_: &hystrix::HystrixError<BoxError>| Ok::<u32, BoxError>(0)),
        )
        .and_then(|x: u32| async move { if x > 10 { Err(boxed("too big")) } else { Ok(x) } })
        .service(service_fn(|x: u32| async move { Ok::<u32, BoxError>(x) }));
    let call = tokio::spawn(async move {
        let small = svc.ready().await?.call(6).await?;
        let big = svc.ready().await?.call(60).await?;
        Ok::<_, BoxError>((small, big))
    });
    assert_eq!(call.await.unwrap().unwrap(), (6, 0));

    // Through the request cache.
    let mut svc = ServiceBuilder::new()
        .layer(HystrixLayer::new(cmd_cached(&registry)).cache_key(|x: &u32| Some(x.to_string())))
        .service(service_fn(|x: u32| async move { Ok::<u32, BoxError>(x) }));
    let call = tokio::spawn(async move {
        let ctx = hystrix::context::RequestContext::new();
        ctx.scope(async move { svc.ready().await?.call(7).await })
            .await
    });
    assert_eq!(*call.await.unwrap().unwrap(), 7);
}

#[cfg(feature = "tower")]
fn cmd_cached(registry: &Registry) -> Command {
    Command::builder("SpawnedCached")
        .group("Send")
        .build_in(registry)
        .unwrap()
}
