//! The hystrix-rs demo: a movie-catalogue gateway keeps answering while its backends slow
//! down, fail, go away, ask for a pause and lose capacity, all on 127.0.0.1, beside an
//! unprotected twin of it that does not.
//!
//! `cargo run --release -p hystrix-demo` runs the default scenario for about a minute: the
//! backends ([`backends`]) follow the scenario's phases ([`scenario`]), a load generator
//! ([`load`]) requests movie pages from the gateway ([`gateway`]) and, with the same requests,
//! from its unprotected twin ([`twin`]) at a set rate, the live view ([`live`]) shows both and
//! each command's breaker open, short-circuit, probe and close, the dashboard serves the
//! Hystrix stream, and the report ([`report`]) compares the two and checks the resilience
//! promises at the end. The exit code is 0 only if every check held.

mod backends;
mod catalogue;
mod fleet;
mod gateway;
mod http;
mod live;
mod load;
mod report;
mod run;
mod scenario;
mod stats;
mod twin;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::live::Console;
use crate::run::{Options, Ports};
use crate::scenario::Scenario;

/// The fewest requests per second `--rps` takes: breakers need a few calls in their 1 s
/// window to open.
const MIN_RPS: f64 = 5.0;
/// The most requests per second `--rps` takes: the machine runs the gateway, its twin, their
/// backends and the load itself.
const MAX_RPS: f64 = 1000.0;

/// Exit code for a check that failed.
const CHECK_FAILED: u8 = 1;
/// Exit code for bad options or a run that could not start (as clap's own errors).
const USAGE: u8 = 2;

/// Watch hystrix-rs keep a service healthy while its dependencies misbehave.
///
/// A movie-catalogue gateway on 127.0.0.1 builds each page from five backends (catalog,
/// ratings, recommendations, availability, prices) through hystrix-rs commands: a thread
/// pool, a collapser, the request cache, tower layers, fallbacks, circuit breakers, retries,
/// hedging and an adaptive limit. A scripted scenario makes the backends slow, failing, down,
/// asking for a pause or short of capacity, phase after phase, under a steady load; an
/// unprotected twin of the gateway gets the same load from its own backends. Watch both live
/// here or on the dashboard; the report at the end compares them and checks that every
/// request was answered and every breaker opened and closed when it should.
#[derive(Debug, Parser)]
#[command(name = "hystrix-demo", version)]
struct Cli {
    /// How long the scenario runs; its phases scale with it (e.g. 10s, 90s, 2m).
    #[arg(long, short, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,

    /// Gateway requests per second, sent on schedule whatever the answers (open loop).
    #[arg(long, default_value_t = 50.0, value_parser = parse_rps)]
    rps: f64,

    /// A built-in scenario (tour, outage, latency, retry-after, chaos, calm) or the path of a TOML
    /// scenario file.
    #[arg(long, short, default_value = "tour", value_name = "NAME|PATH")]
    scenario: String,

    /// The dashboard's port; the gateway listens on the next one. 0: free ports. Without it:
    /// 7979, or free ports if 7979 or 7980 is taken.
    #[arg(long, short)]
    port: Option<u16>,

    /// Print plain lines each second (the gateway, and the commands worth noting) instead of
    /// the live table (also the case when standard error is not a terminal, or RUST_LOG is
    /// set).
    #[arg(long)]
    no_tui: bool,

    /// Do not run the unprotected twin (the same gateway without hystrix-rs, on its own
    /// backends, under the same load) beside the gateway.
    #[arg(long)]
    no_compare: bool,

    /// Seeds the backends' faults and the movies asked for (the same for the gateway and
    /// its twin).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Write the report as JSON to this file; `-` for standard output (the text then goes to
    /// standard error).
    #[arg(long, value_name = "PATH|-")]
    json: Option<String>,

    /// Gateway instances (1 to 5) behind the load, each with its own registry, port and
    /// Hystrix stream, their breakers sharing state (in memory, or through --redis); the
    /// dashboard's port then also serves /turbine.stream?cluster=demo over their streams.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=i64::from(fleet::MAX_INSTANCES)))]
    instances: u8,

    /// Share breaker state through this Redis (e.g. redis://127.0.0.1:6379/) instead of in
    /// memory; also with one instance (several demos on one Redis then share it).
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
}

/// The longest run `--duration` accepts (a longer one is surely a typo).
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|err| format!("{err} (write e.g. 10s, 90s or 2m)"))?;
    if duration.is_zero() {
        return Err("must be longer than 0s".to_owned());
    }
    if duration > MAX_DURATION {
        return Err("must be at most 24h".to_owned());
    }
    Ok(duration)
}

fn parse_rps(text: &str) -> Result<f64, String> {
    let rps: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if !(MIN_RPS..=MAX_RPS).contains(&rps) {
        return Err(format!(
            "must be from {MIN_RPS} (breakers need a few calls a second to open) to {MAX_RPS}"
        ));
    }
    Ok(rps)
}

/// Installs a `tracing` subscriber writing to standard error when `RUST_LOG` is set (e.g.
/// `RUST_LOG=hystrix_demo::gateway=debug` for each page's request log).
fn init_tracing() -> Result<bool, String> {
    let Ok(filter) = std::env::var("RUST_LOG") else {
        return Ok(false);
    };
    let targets: tracing_subscriber::filter::Targets = filter.parse().map_err(|err| {
        format!("RUST_LOG=`{filter}` is not a filter such as `hystrix_demo=debug`: {err}")
    })?;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(targets)
        .try_init()
        .map_err(|err| format!("cannot install the log subscriber: {err}"))?;
    Ok(true)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let console = if cli.json.as_deref() == Some("-") {
        Console::Stderr
    } else {
        Console::Stdout
    };
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(USAGE)
    };
    let logging = match init_tracing() {
        Ok(logging) => logging,
        Err(message) => return fail(message),
    };
    let scenario = match Scenario::load(&cli.scenario) {
        Ok(scenario) => scenario,
        Err(err) => return fail(err.to_string()),
    };
    let schedule = match scenario.schedule(cli.duration) {
        Ok(schedule) => schedule,
        Err(err) => return fail(err.to_string()),
    };
    // Open the JSON file now, so a bad path fails before the run rather than after it.
    let mut json_file = match cli.json.as_deref() {
        Some(path) if path != "-" => match std::fs::File::create(path) {
            Ok(file) => Some(file),
            Err(err) => {
                return fail(format!(
                    "--json {path}: cannot write the report there: {err}"
                ));
            }
        },
        _ => None,
    };
    let options = Options {
        scenario,
        schedule,
        rps: cli.rps,
        ports: match cli.port {
            None => Ports::Default,
            Some(0) => Ports::Free,
            Some(port) => Ports::Exact(port),
        },
        tui: !cli.no_tui && !logging && std::io::stderr().is_terminal(),
        console,
        compare: !cli.no_compare,
        seed: cli.seed,
        instances: usize::from(cli.instances),
        redis: cli.redis.clone(),
    };

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(format!("cannot start the async runtime: {err}")),
    };
    let report = runtime.block_on(async {
        tokio::select! {
            report = run::run(options) => Some(report),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    let report = match report {
        Some(Ok(report)) => report,
        Some(Err(err)) => {
            remove_unwritten(cli.json.as_deref(), json_file.take());
            return fail(err.to_string());
        }
        None => {
            remove_unwritten(cli.json.as_deref(), json_file.take());
            eprintln!("\ninterrupted: no report");
            return ExitCode::from(130);
        }
    };

    console.line(&report.to_text());
    let json = match serde_json::to_string_pretty(&report) {
        Ok(json) => json,
        Err(err) => return fail(format!("cannot write the report as JSON: {err}")),
    };
    if cli.json.as_deref() == Some("-") {
        println!("{json}");
    } else if let (Some(file), Some(path)) = (json_file.as_mut(), cli.json.as_deref()) {
        use std::io::Write;
        if let Err(err) = writeln!(file, "{json}") {
            return fail(format!("--json {path}: cannot write the report: {err}"));
        }
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHECK_FAILED)
    }
}

/// No report: do not leave the empty `--json` file opened for it.
fn remove_unwritten(path: Option<&str>, file: Option<std::fs::File>) {
    if let (Some(path), Some(file)) = (path, file) {
        drop(file);
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_one_by_default_and_at_most_five() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("hystrix-demo").chain(args.iter().copied()))
        };
        let cli = parse(&[]).unwrap();
        assert_eq!((cli.instances, cli.redis), (1, None));
        let cli = parse(&["--instances", "5", "--redis", "redis://127.0.0.1:6379/"]).unwrap();
        assert_eq!(
            (cli.instances, cli.redis.as_deref()),
            (5, Some("redis://127.0.0.1:6379/"))
        );
        for bad in ["0", "6", "three"] {
            let err = parse(&["--instances", bad]).unwrap_err().to_string();
            assert!(err.contains("--instances"), "{err}");
        }
        let err = parse(&["--instances", "6"]).unwrap_err().to_string();
        assert!(err.contains("6 is not in 1..=5"), "{err}");
    }

    #[test]
    fn durations_are_positive_and_at_most_a_day() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("24h"), Ok(MAX_DURATION));
        assert_eq!(
            parse_duration("0s"),
            Err("must be longer than 0s".to_owned())
        );
        assert_eq!(parse_duration("25h"), Err("must be at most 24h".to_owned()));
        assert_eq!(
            parse_duration("500000000000y"),
            Err("must be at most 24h".to_owned())
        );
        assert!(
            parse_duration("ten")
                .unwrap_err()
                .ends_with("(write e.g. 10s, 90s or 2m)")
        );
    }
}
