//! Runs named simulation scenarios in virtual time and prints their table.
//!
//! ```text
//! cargo run -p hystrix-rs --release --features sim --example sim                 # lists them
//! cargo run -p hystrix-rs --release --features sim --example sim -- <name>...    # runs those
//! cargo run -p hystrix-rs --release --features sim --example sim -- all --seed 7
//! cargo run -p hystrix-rs --release --features sim --example sim -- limit-study [limit-overload|limit-capacity-drop|limit-slowdown]...
//! cargo run -p hystrix-rs --release --features sim --example sim -- priority-study [--seed N]
//! cargo run -p hystrix-rs --release --features sim --example sim -- throttle-study
//! cargo run -p hystrix-rs --release --features sim --example sim -- slow-call-study
//! ```
//!
//! `limit-study` runs the adaptive limit scenarios' whole sweeps (no limit, static limits,
//! each algorithm: `hystrix::testing::sim::scenarios::limits`) and prints their Markdown
//! tables and goals, as in BENCHMARKS.md. `throttle-study` runs the adaptive throttling
//! scenario (`hystrix::testing::sim::scenarios::throttle`: off, K = 2, 1.5, 1.2, 1.1) and
//! prints its Markdown table. `slow-call-study` runs the hang-to-OPEN study
//! (`hystrix::testing::sim::scenarios::slow_calls`: a dependency that starts hanging, slow
//! calls counted in flight or not) and prints its Markdown table and conclusion.
//!
//! The scenarios are `hystrix::testing::sim::scenarios`; one seed gives one table, on any
//! machine. The measures some scenarios add are printed below it.

use std::process::ExitCode;
use std::time::Instant;

use hystrix::testing::sim;
use hystrix::testing::sim::scenarios::{self, limits, priorities, slow_calls, throttle};

fn usage() -> String {
    let mut out = String::from(
        "usage: sim <scenario>... | all [--seed N]\n\nscenarios (latencies in virtual ms):\n",
    );
    let width = scenarios::SCENARIOS
        .iter()
        .map(|s| s.name().len())
        .max()
        .unwrap_or(0);
    for scenario in scenarios::SCENARIOS {
        out.push_str(&format!(
            "  {:<width$}  {}\n",
            scenario.name(),
            scenario.summary()
        ));
    }
    out.push_str(
        "\nlimit-study [scenario]...: the adaptive limit sweeps (limit-overload, \
         limit-capacity-drop, limit-slowdown; all three by default) as Markdown\n\
         priority-study: the 2x overload with CRITICAL/NORMAL/SHEDDABLE traffic, with and \
         without priority reserves, as Markdown\n\
         throttle-study: the adaptive throttling scenario (off, K = 2, 1.5, 1.2, 1.1) as \
         Markdown\n\
         slow-call-study: a dependency that starts hanging, time to OPEN with slow calls \
         counted in flight and without, as Markdown\n",
    );
    out
}

/// `limit-study`: the whole sweep of each named limit scenario (all three if none), as
/// Markdown.
fn limit_study(names: &[String], seed: u64) -> ExitCode {
    let mut chosen = Vec::new();
    for name in names {
        match limits::LimitScenario::find(name) {
            Some(scenario) => chosen.push(scenario),
            None => {
                eprintln!("unknown limit scenario '{name}'\n\n{}", usage());
                return ExitCode::from(2);
            }
        }
    }
    if chosen.is_empty() {
        chosen = limits::LimitScenario::ALL.to_vec();
    }
    for scenario in chosen {
        let started = Instant::now();
        match limits::study(scenario, &limits::Limiting::sweep(scenario), seed) {
            Ok(study) => {
                eprintln!(
                    "{}: {} runs in {:.2} s real",
                    scenario.name(),
                    study.reports.len(),
                    started.elapsed().as_secs_f64()
                );
                println!("{}", study.markdown());
            }
            Err(err) => {
                eprintln!("{}: {err}", scenario.name());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Runs a study (its reports, then its Markdown table on stdout; the time on stderr).
fn print_study<R>(
    name: &str,
    study: impl FnOnce() -> Result<Vec<R>, sim::SimError>,
    markdown: impl FnOnce(&[R]) -> String,
) -> ExitCode {
    let started = Instant::now();
    match study() {
        Ok(reports) => {
            eprintln!(
                "{name}: {} runs in {:.2} s real",
                reports.len(),
                started.elapsed().as_secs_f64()
            );
            println!("{}", markdown(&reports));
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{name}: {err}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut names = Vec::new();
    let mut seed = scenarios::DEFAULT_SEED;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => match args.next().map(|value| value.parse::<u64>()) {
                Some(Ok(value)) => seed = value,
                _ => {
                    eprintln!("--seed needs a whole number\n\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                print!("{}", usage());
                return ExitCode::SUCCESS;
            }
            _ => names.push(arg),
        }
    }
    if names.is_empty() {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    if names[0] == "limit-study" {
        return limit_study(&names[1..], seed);
    }
    match names[0].as_str() {
        "priority-study" => {
            return print_study(
                "priority-study",
                || priorities::study(seed),
                priorities::markdown,
            );
        }
        "throttle-study" => {
            return print_study(
                "throttle-study",
                || throttle::study(seed),
                throttle::markdown,
            );
        }
        "slow-call-study" => {
            return print_study(
                "slow-call-study",
                || slow_calls::study(seed),
                slow_calls::markdown,
            );
        }
        _ => {}
    }
    let chosen: Vec<&scenarios::Scenario> = if names.iter().any(|name| name == "all") {
        scenarios::SCENARIOS.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for name in &names {
            match scenarios::find(name) {
                Some(scenario) => chosen.push(scenario),
                None => {
                    eprintln!("unknown scenario '{name}'\n\n{}", usage());
                    return ExitCode::from(2);
                }
            }
        }
        chosen
    };

    let mut reports = Vec::new();
    for scenario in chosen {
        let started = Instant::now();
        match scenario.run(seed) {
            Ok(report) => {
                eprintln!(
                    "{}: {} ({} ms virtual in {:.2} s real)",
                    scenario.name(),
                    scenario.summary(),
                    report.elapsed_ms(),
                    started.elapsed().as_secs_f64()
                );
                reports.push(report);
            }
            Err(err) => {
                eprintln!("{}: {err}", scenario.name());
                return ExitCode::FAILURE;
            }
        }
    }
    println!("seed {seed}\n{}", sim::table(&reports));
    let measures = sim::measures(&reports);
    if !measures.is_empty() {
        println!("{measures}");
    }
    ExitCode::SUCCESS
}
