//! Requests per second through a request collapser at batch sizes 1, 10 and 100, beside the
//! same number of single executions of the batch command.
//!
//! Run with `cargo bench -p hystrix-rs --bench collapser`. One iteration submits a whole batch
//! (`maxRequestsInBatch` = its size, so it runs as soon as it is full, without waiting for the
//! window) and waits for every response; criterion's throughput is requests, so `scripts/bench`
//! reports requests per second. The batch call itself is a ready future: this measures the
//! collapser's own cost (submission, one batch execution on the executor, mapping, delivery).

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hystrix::collapser::{Collapser, CollapserScope};
use hystrix::{Command, IsolationStrategy, Registry};

type Never = std::convert::Infallible;

fn collapser(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let registry = Registry::builder()
        .executor(runtime.handle().clone())
        .build();
    let command = Command::builder("Batch")
        .group("Bench")
        .isolation(IsolationStrategy::Semaphore)
        .timeout_enabled(false)
        .build_in(&registry)
        .unwrap();
    let mut group = c.benchmark_group("collapser_throughput");
    for size in [1u32, 10, 100] {
        let collapser = Collapser::builder(format!("Collapse{size}"))
            .scope(CollapserScope::Global)
            .max_requests_in_batch(size)
            .build(
                command.clone(),
                |ids: Vec<u64>| async move { Ok::<_, Never>(ids) },
                |ids: &mut Vec<u64>, id: &u64| ids.contains(id).then_some(*id),
            )
            .unwrap();
        group.throughput(Throughput::Elements(u64::from(size)));
        group.bench_function(format!("collapser, batches of {size}"), |b| {
            b.iter(|| {
                let pending: Vec<_> = (0..u64::from(size)).map(|id| collapser.queue(id)).collect();
                runtime.block_on(async {
                    for response in pending {
                        black_box(response.await.unwrap());
                    }
                });
            });
        });
        group.bench_function(format!("{size} single executions"), |b| {
            b.iter(|| {
                runtime.block_on(async {
                    for id in 0..u64::from(size) {
                        let value = command
                            .run_async(async move { Ok::<_, Never>(id) })
                            .execute_async()
                            .await
                            .unwrap();
                        black_box(value);
                    }
                });
            });
        });
    }
    group.finish();
    registry.shutdown();
}

criterion_group!(benches, collapser);
criterion_main!(benches);
