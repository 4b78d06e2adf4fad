//! Round trip of one task handed to a pool thread and its result handed back, beside a bare
//! baseline: a std channel to one worker thread and a channel back.
//!
//! Run with `cargo bench -p hystrix-rs --bench thread_pool`. Besides criterion's estimates it
//! prints the median and p99 of single round trips, measured one by one.

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use hystrix::{Command, Registry};

type Never = std::convert::Infallible;
type Task = Box<dyn FnOnce() -> u64 + Send>;

/// The baseline: one worker thread fed through a std channel, answering through another.
struct BareWorker {
    tasks: mpsc::Sender<(Task, mpsc::Sender<u64>)>,
}

impl BareWorker {
    fn start() -> Self {
        let (tasks, rx) = mpsc::channel::<(Task, mpsc::Sender<u64>)>();
        thread::spawn(move || {
            for (task, reply) in rx {
                let _ = reply.send(task());
            }
        });
        BareWorker { tasks }
    }

    fn round_trip(&self, value: u64) -> u64 {
        let (reply, answer) = mpsc::channel();
        self.tasks
            .send((Box::new(move || black_box(value)), reply))
            .unwrap();
        answer.recv().unwrap()
    }
}

fn percentiles(label: &str, mut f: impl FnMut()) {
    let mut samples: Vec<Duration> = (0..20_000)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    println!(
        "{label}: median {:.1} µs, p99 {:.1} µs",
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

fn hand_off(c: &mut Criterion) {
    let registry = Registry::new();
    let command = Command::builder("HandOff")
        .group("Bench")
        .timeout_enabled(false)
        .build_in(&registry)
        .unwrap();
    let timed = Command::builder("HandOffTimed")
        .group("BenchTimed")
        .build_in(&registry)
        .unwrap();
    let bare = BareWorker::start();

    let mut group = c.benchmark_group("pool_hand_off_round_trip");
    group.bench_function("bare channel + worker", |b| b.iter(|| bare.round_trip(7)));
    group.bench_function("THREAD execute(), timeout off", |b| {
        b.iter(|| command.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("THREAD execute(), timeout 1 s", |b| {
        b.iter(|| timed.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.finish();

    percentiles("bare channel + worker", || {
        bare.round_trip(7);
    });
    percentiles("THREAD execute(), timeout off", || {
        command.run(|| Ok::<u64, Never>(7)).execute().unwrap();
    });
    percentiles("THREAD execute(), timeout 1 s", || {
        timed.run(|| Ok::<u64, Never>(7)).execute().unwrap();
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hand_off
}
criterion_main!(benches);
