//! Round trip of one task handed to a pool thread and its result handed back, beside a bare
//! baseline: a std channel to one worker thread and a channel back.
//!
//! Run with `cargo bench -p hystrix-rs --bench thread_pool`. Besides criterion's estimates it
//! prints the median and p99 of single round trips, measured one by one.
//!
//! Two groups measure the same pair:
//! - `pool_hand_off_round_trip`: threads wherever the scheduler puts them. On a small VM the
//!   bare worker, which blocks in a channel receive, is often woken on the other vCPU, and
//!   each round trip then pays a cross-CPU wake-up: this row says more about scheduling than
//!   about the channel.
//! - `pool_hand_off_round_trip, one CPU`: the whole process is pinned to one CPU
//!   (`taskset -a -p -c CPU PID`, Linux only; `HANDOFF_CPU` chooses it, the last CPU by
//!   default) before the group builds its registry, commands and bare worker: the threads
//!   already running (the process-wide timer and clock threads) are pinned, and every thread
//!   started afterwards (the bare worker, the pool threads) inherits the main thread's
//!   affinity, so both sides get the same placement. The bench prints every thread's allowed
//!   CPUs while the group's objects are alive, as a check. This is the comparison for the
//!   ≤ 1.2× target.

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

/// The bare worker and two THREAD commands (timeout off, timeout 1 s), in a registry of
/// their own, measured as one criterion group; with `show_cpus`, then prints every thread's
/// allowed CPUs while they are alive.
fn pair(c: &mut Criterion, group_name: &str, show_cpus: bool) {
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
    // Start the pool threads and the registry's timer before measuring (and, when pinned,
    // from the pinned thread).
    command.run(|| Ok::<u64, Never>(7)).execute().unwrap();
    timed.run(|| Ok::<u64, Never>(7)).execute().unwrap();

    let mut group = c.benchmark_group(group_name);
    group.bench_function("bare channel + worker", |b| b.iter(|| bare.round_trip(7)));
    group.bench_function("THREAD execute(), timeout off", |b| {
        b.iter(|| command.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.bench_function("THREAD execute(), timeout 1 s", |b| {
        b.iter(|| timed.run(|| Ok::<u64, Never>(black_box(7))).execute())
    });
    group.finish();

    percentiles(&format!("{group_name}: bare channel + worker"), || {
        bare.round_trip(7);
    });
    percentiles(
        &format!("{group_name}: THREAD execute(), timeout off"),
        || {
            command.run(|| Ok::<u64, Never>(7)).execute().unwrap();
        },
    );
    percentiles(
        &format!("{group_name}: THREAD execute(), timeout 1 s"),
        || {
            timed.run(|| Ok::<u64, Never>(7)).execute().unwrap();
        },
    );
    if show_cpus {
        println!("{group_name}: threads and their CPUs: {}", affinities());
    }
}

/// Pins every thread of this process to `cpu` with `taskset`; threads started afterwards
/// inherit it from the thread that starts them.
fn pin_process(cpu: usize) -> Result<(), String> {
    if !std::path::Path::new("/proc/self/task").exists() {
        return Err("no /proc/self/task (not Linux)".into());
    }
    let status = std::process::Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("taskset: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset exited with {status}"))
    }
}

/// Every thread of this process with its allowed CPUs (from /proc), one line.
fn affinities() -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return String::new();
    };
    let mut all: Vec<String> = tasks
        .flatten()
        .filter_map(|task| {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).ok()?;
            let status = std::fs::read_to_string(path.join("status")).ok()?;
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_string();
            Some(format!("{} [{cpus}]", name.trim()))
        })
        .collect();
    all.sort();
    all.join(", ")
}

fn hand_off(c: &mut Criterion) {
    pair(c, "pool_hand_off_round_trip", false);

    let cpu = std::env::var("HANDOFF_CPU")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()) - 1);
    match pin_process(cpu) {
        Ok(()) => pair(c, "pool_hand_off_round_trip, one CPU", true),
        Err(why) => println!("pool_hand_off_round_trip, one CPU: skipped ({why})"),
    }
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
