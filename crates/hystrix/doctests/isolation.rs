//! The setup of the Rust snippets of docs/isolation.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`, then `Backend` below.

/// A backend whose calls wait until it is released: a run that holds its pool thread.
#[derive(Clone, Default)]
struct Backend(std::sync::Arc<(std::sync::Mutex<(u32, bool)>, std::sync::Condvar)>);

impl Backend {
    fn search(&self, query: &str) -> Result<String, MyError> {
        self.call();
        Ok(format!("results for {query}"))
    }

    fn render(&self, quarter: &str) -> Result<String, MyError> {
        self.call();
        Ok(format!("report {quarter}"))
    }

    /// Counts the call, then waits for the release.
    fn call(&self) {
        let (lock, changed) = &*self.0;
        let mut state = lock.lock().unwrap();
        state.0 += 1;
        changed.notify_all();
        while !state.1 {
            state = changed.wait(state).unwrap();
        }
    }

    fn wait_for_calls(&self, calls: u32) {
        let (lock, changed) = &*self.0;
        let mut state = lock.lock().unwrap();
        while state.0 < calls {
            state = changed.wait(state).unwrap();
        }
    }

    fn release(&self) {
        let (lock, changed) = &*self.0;
        lock.lock().unwrap().1 = true;
        changed.notify_all();
    }
}

// doctest: isolation-by-run-kind
use futures::executor::block_on;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    // [snippet]
    let stream = lookup.run_stream(futures::stream::iter([Ok::<_, MyError>(3)]));
    let mut values = stream.to_observable();
    assert_eq!(block_on(futures::StreamExt::next(&mut values)).transpose()?, Some(3));
    assert_eq!(block_on(futures::StreamExt::next(&mut values)).transpose()?, None);
    let result = values.execution_result().expect("the stream ended");
    assert_eq!(result.isolation(), IsolationStrategy::Semaphore);
    assert_eq!(lookup.properties().execution_isolation_strategy, None);
    Ok(())
}

// doctest: thread-pool-rejection
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let backend = Backend::default();
    // [snippet]
    let pool = search.thread_pool_metrics().expect("the pool was made");
    assert_eq!((pool.current_active_count, pool.current_queue_size), (1, 0));
    backend.release();
    assert_eq!(slow.get()?, "results for shoes");
    Ok(())
}

// doctest: semaphore-rejection
/// A directory whose lookups take 100 ms of the registry's clock.
struct Directory {
    clock: std::sync::Arc<dyn hystrix::clock::Clock>,
}

impl Directory {
    fn lookup(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<String, MyError>> + Send + 'static {
        let (clock, name) = (std::sync::Arc::clone(&self.clock), name.to_owned());
        async move {
            hystrix::clock::sleep(&clock, Duration::from_millis(100)).await;
            Ok(format!("{name}@example.com"))
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let directory = Directory {
        clock: std::sync::Arc::clone(test.registry().clock()),
    };
    // [snippet]
    assert_eq!(lookup.metrics().cumulative_count(EventType::SemaphoreRejected), 1);
    in_flight.cancel();
    Ok(())
}

// doctest: timeouts
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A run that never answers, and says when it is dropped.
async fn never_answers(dropped: Arc<AtomicBool>) -> Result<String, MyError> {
    let _flag = DropFlag(dropped);
    futures::future::pending::<()>().await;
    Ok("never".into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let test = testing::TestRegistry::new();
    let backend = Backend::default();
    let dropped_flag = Arc::new(AtomicBool::new(false));
    // [snippet]
    backend.release();
    Ok(())
}

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

