//! Runs one scenario a fixed number of times, for `valgrind --tool=callgrind` (see
//! `scripts/bench-instructions`, which runs N and 2N calls and divides the difference by N).
//!
//! Only `measured_calls` is meant to be collected (`--collect-atstart=no
//! --toggle-collect=*measured_calls*`): building the scenario and its warm-up are outside it.
//!
//! ```text
//! instructions list                  # INDEX<TAB>MAX_CALLS<TAB>scenario id, one per line
//! instructions run INDEX CALLS       # builds scenario INDEX, warms it up, makes CALLS calls
//! ```

use std::hint::black_box;

#[allow(dead_code)]
mod common;

const WARM_UP: u64 = 1_000;

#[inline(never)]
fn measured_calls(run: &mut common::Runner, calls: u64) {
    black_box(run(black_box(calls)));
}

fn per_call() -> Vec<common::Scenario> {
    common::all().into_iter().filter(|s| s.per_call).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] => {
            for (i, scenario) in per_call().iter().enumerate() {
                let max = scenario
                    .max_calls
                    .map_or("-".to_string(), |max| max.to_string());
                println!("{i}\t{max}\t{}", scenario.id());
            }
        }
        ["run", index, calls] => {
            let index: usize = index.parse().expect("INDEX is a number");
            let calls: u64 = calls.parse().expect("CALLS is a number");
            let scenario = per_call().into_iter().nth(index).expect("INDEX is listed");
            let warm_up = scenario.calls(WARM_UP);
            let mut run = (scenario.build)();
            run(warm_up);
            measured_calls(&mut run, calls);
        }
        _ => {
            // `cargo bench` runs every bench target with `--bench`: nothing to do here.
            eprintln!(
                "usage: instructions list | instructions run INDEX CALLS (see scripts/bench-instructions)"
            );
        }
    }
}
