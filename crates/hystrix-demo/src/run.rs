//! One run of the demo: start the backends, the gateway and the dashboard, drive the
//! scenario's phases while the load runs, and put the report together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hystrix::Registry;
use hystrix_dashboard::Dashboard;
use tokio::net::TcpListener;

use crate::backends::Backends;
use crate::gateway::{self, Gateway};
use crate::live::{Console, LiveView};
use crate::load::LoadGenerator;
use crate::report::{self, PhaseReport, Policies, PolicyInput, Report, TwinPhase};
use crate::scenario::{Backend, Chaos, Phase, Scenario, Schedule};
use crate::stats::{self, BackendCounts, BreakerLog, ChaosLog, CommandCounts, Held, circuit_state};
use crate::twin::Twin;

/// The dashboard's port when `--port` is not given (Hystrix's dashboard examples use it); the
/// gateway takes the next one.
pub const DEFAULT_PORT: u16 = 7979;

/// Which ports the dashboard and the gateway listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// [`DEFAULT_PORT`] and the next, or free ports if either is taken.
    Default,
    /// Exactly this one for the dashboard and the next for the gateway.
    Exact(u16),
    /// Free ports.
    Free,
}

/// What a run needs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The scenario.
    pub scenario: Scenario,
    /// Its phases placed in time.
    pub schedule: Schedule,
    /// Gateway requests per second.
    pub rps: f64,
    /// The dashboard's and the gateway's ports.
    pub ports: Ports,
    /// The live view (else plain lines).
    pub tui: bool,
    /// Where text goes.
    pub console: Console,
    /// Whether the unprotected twin runs beside the gateway (`--no-compare` turns it off).
    pub compare: bool,
    /// Seeds the backends' fault scripts and the movie ids the load asks for (both sides
    /// alike).
    pub seed: u64,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A port could not be bound.
    #[error("{0}")]
    Bind(String),
    /// Starting a backend failed.
    #[error("cannot start the backends: {0}")]
    Backends(std::io::Error),
    /// Starting the unprotected twin failed.
    #[error("cannot start the unprotected twin: {0}")]
    Twin(std::io::Error),
    /// A command definition was refused.
    #[error("cannot define the gateway's commands: {0}")]
    Config(#[from] hystrix::ConfigError),
}

/// Listens on 127.0.0.1:`port` and on the next port.
async fn listen_pair(port: u16) -> std::io::Result<(TcpListener, TcpListener)> {
    let next = port
        .checked_add(1)
        .ok_or_else(|| std::io::Error::other("the gateway needs the next port, past 65535"))?;
    let dashboard = TcpListener::bind(("127.0.0.1", port)).await?;
    let gateway = TcpListener::bind(("127.0.0.1", next)).await?;
    Ok((dashboard, gateway))
}

/// Binds the dashboard's and the gateway's listeners on 127.0.0.1; the note says why the
/// default ports were not used.
async fn bind(ports: Ports) -> Result<(TcpListener, TcpListener, Option<String>), RunError> {
    let free = || async {
        let dashboard = TcpListener::bind("127.0.0.1:0").await?;
        let gateway = TcpListener::bind("127.0.0.1:0").await?;
        Ok::<_, std::io::Error>((dashboard, gateway))
    };
    let free_error = |err| RunError::Bind(format!("cannot listen on 127.0.0.1: {err}"));
    match ports {
        Ports::Exact(port) => {
            let (dashboard, gateway) = listen_pair(port).await.map_err(|err| {
                RunError::Bind(format!(
                    "--port {port}: cannot listen on 127.0.0.1:{port} and the next port: {err}"
                ))
            })?;
            Ok((dashboard, gateway, None))
        }
        Ports::Free => {
            let (dashboard, gateway) = free().await.map_err(free_error)?;
            Ok((dashboard, gateway, None))
        }
        Ports::Default => match listen_pair(DEFAULT_PORT).await {
            Ok((dashboard, gateway)) => Ok((dashboard, gateway, None)),
            Err(err) => {
                let (dashboard, gateway) = free().await.map_err(free_error)?;
                let note = format!(
                    "ports {DEFAULT_PORT} and {} are not both free ({err}): using free ports \
                     (choose with --port)",
                    DEFAULT_PORT + 1
                );
                Ok((dashboard, gateway, Some(note)))
            }
        },
    }
}

/// Runs the scenario and returns its report.
///
/// # Errors
/// A port cannot be bound, or the backends or commands cannot be set up.
pub async fn run(options: Options) -> Result<Report, RunError> {
    let Options {
        scenario,
        schedule,
        rps,
        ports,
        tui,
        console,
        compare,
        seed,
    } = options;
    let backends = Backends::start_seeded(seed)
        .await
        .map_err(RunError::Backends)?;
    let twin = if compare {
        let twin = Twin::start(seed, rps, schedule.phases.len())
            .await
            .map_err(RunError::Twin)?;
        Some(twin)
    } else {
        None
    };
    let breakers = BreakerLog::default();
    let chaos_log = ChaosLog::default();
    // The demo injects chaos by phase, so its registry allows it; a registry does not by
    // default, and then refuses `chaos.enabled=true`.
    let registry = Registry::builder()
        .executor(tokio::runtime::Handle::current())
        .circuit_breaker_listener(breakers.clone())
        .event_notifier(chaos_log.clone())
        .allow_chaos(true)
        .build();
    let volume = crate::gateway::volume_threshold(rps);
    let gateway = Arc::new(Gateway::new(
        &registry,
        |backend| backends.addr(backend),
        volume,
    )?);

    let (dashboard_listener, gateway_listener, note) = bind(ports).await?;
    let dashboard_addr = local_addr(&dashboard_listener)?;
    let gateway_addr = local_addr(&gateway_listener)?;
    let router = Arc::clone(&gateway).router();
    tokio::spawn(async move { axum::serve(gateway_listener, router).await });
    // The web page, the streams, /metrics, and the admin routes for loopback clients only
    // (the page's breaker buttons, run-time properties); `/` redirects to the page.
    // An operator's hold on a breaker (the sticky forceOpen / forceClosed properties) goes
    // into the breaker log, for the live view and the report.
    let operator = breakers.clone();
    let dashboard = Dashboard::builder(registry.clone())
        .admin()
        .on_admin_change(move |change| operator.on_admin_change(change))
        .build();
    tokio::spawn(dashboard.serve_on(dashboard_listener));
    let dashboard_url = format!(
        "http://{dashboard_addr}{}",
        hystrix_dashboard::page::PAGE_PATH
    );
    let gateway_url = format!("http://{gateway_addr}");

    let load = LoadGenerator::new(gateway_url.clone(), rps, schedule.phases.len(), seed);
    let view = LiveView::new(
        tui,
        console,
        Arc::clone(&gateway),
        load.clone(),
        breakers.clone(),
        chaos_log.clone(),
        schedule.clone(),
    );
    let mut view = match &twin {
        Some(twin) => view.compare_with(twin.gauges()),
        None => view,
    };
    for line in banner(
        &scenario,
        &schedule,
        rps,
        &dashboard_url,
        &gateway_url,
        &backends,
        note,
    )
    .into_iter()
    .chain(twin.as_ref().map(twin_line))
    {
        console.line(&crate::live::wrap(&line, crate::live::WIDTH, 13));
    }

    let start = Instant::now();
    breakers.start(start);
    let sending = {
        let (load, schedule, progress) = (load.clone(), schedule.clone(), view.progress());
        tokio::spawn(async move { load.run(start, &schedule, progress).await })
    };
    let twin_sending = twin.as_ref().map(|twin| twin.send(start, &schedule));
    // The most each gateway held during each phase: the protected one, the twin.
    let mut held = vec![(Held::default(), Held::default()); schedule.phases.len()];
    // Counts, backend calls and errors, chaos injected and hedges won at each phase boundary
    // (a phase's are the differences), and the times the gateway recorded since the last one.
    let sample = || {
        let policies = PolicyInput {
            hedges_won: gateway.hedges_won(),
            availability_times: gateway.take_availability_times(),
            prices_times: gateway.take_price_times(Backend::Prices),
            prices_fixed_times: gateway.take_price_times(Backend::PricesFixed),
            limits: Vec::new(),
        };
        let reached: BTreeMap<Backend, BackendCounts> = Backend::ALL
            .into_iter()
            .map(|b| {
                let counts = BackendCounts {
                    calls: backends.calls(b),
                    errors: backends.errors(b),
                    chaos_injected: chaos_log.injected(b.command_key()),
                };
                (b, counts)
            })
            .collect();
        (stats::read_counts(&registry, &gateway), reached, policies)
    };
    // `GetPrices`'s adaptive limit every 100 ms: when, and the limit.
    let mut limits: Vec<(Duration, u32)> = Vec::new();
    let prices = gateway.command(Backend::Prices).clone();
    let limit_now = || prices.metrics().adaptive_limit().map(|l| l.limit);
    let mut boundaries = vec![sample()];
    // One loop: each phase starts on time (the counts sampled, its faults and chaos applied),
    // chaos is turned off when the last phase ends, breaker transitions are shown within
    // 100 ms, the live view is redrawn each second, and the loop ends when the load has sent
    // its last request and had its answers.
    let mut sending = sending;
    let mut phases = schedule.phases.iter().enumerate().peekable();
    let mut chaos = BTreeMap::new();
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next_second = Duration::from_secs(1);
    loop {
        let next_phase = match phases.peek() {
            Some((_, phase)) => Some(start + phase.start),
            None => (!chaos.is_empty()).then(|| start + schedule.total()),
        };
        tokio::select! {
            biased;
            _ = &mut sending => break,
            () = sleep_until(next_phase) => {
                let Some((index, phase)) = phases.next() else {
                    // The last phase is over: no chaos while the last answers come back.
                    apply_chaos(&registry, &mut chaos, None)?;
                    continue;
                };
                if index > 0 {
                    boundaries.push(sample());
                }
                backends.apply(phase);
                if let Some(twin) = &twin {
                    twin.apply(phase);
                }
                apply_chaos(&registry, &mut chaos, Some(phase))?;
                view.announce_phase(&phase_line(index, &schedule, phase));
            }
            _ = poll.tick() => {
                view.show_transitions();
                let elapsed = start.elapsed();
                if let Some(index) = schedule.phase_at(elapsed) {
                    let (protected, unprotected) = &mut held[index];
                    *protected = protected.max(Held::protected(&gateway, &load));
                    if let Some(twin) = &twin {
                        *unprotected = unprotected.max(twin.held());
                    }
                }
                if let Some(limit) = limit_now() {
                    limits.push((elapsed, limit));
                }
                if elapsed >= next_second {
                    view.tick(elapsed);
                    next_second += Duration::from_secs(1);
                }
            }
        }
    }
    boundaries.push(sample());
    // The twin's last answers (or the load giving up on them) end its run too.
    if let Some(sending) = twin_sending {
        let _ = sending.await;
    }
    view.finish();

    let loads = load.stats().phases.clone();
    let twin_loads = twin.as_ref().map(|twin| twin.load().stats().phases.clone());
    let phases: Vec<PhaseReport> = schedule
        .phases
        .iter()
        .enumerate()
        .map(|(index, phase)| {
            let ((before, reached_before, policies_before), (after, reached_after, policies)) =
                (&boundaries[index], &boundaries[index + 1]);
            let counts: BTreeMap<Backend, CommandCounts> = after
                .iter()
                .map(|(backend, counts)| (*backend, counts.since(&before[backend])))
                .collect();
            let reached: BTreeMap<Backend, BackendCounts> = reached_after
                .iter()
                .map(|(backend, reached)| (*backend, reached.since(&reached_before[backend])))
                .collect();
            let unprotected = twin_loads
                .as_ref()
                .map(|loads| TwinPhase::new(&loads[index], held[index].1));
            let mut report = PhaseReport::new(phase, &loads[index], &counts, &reached)
                .held(held[index].0, unprotected);
            let input = PolicyInput {
                hedges_won: policies
                    .hedges_won
                    .saturating_sub(policies_before.hedges_won),
                limits: limits
                    .iter()
                    .filter(|(at, _)| phase.start <= *at && *at < phase.end())
                    .map(|(_, limit)| *limit)
                    .collect(),
                ..policies.clone()
            };
            report.policies = Policies::of(phase, &input);
            report
        })
        .collect();
    let breaker_events = breakers.since(0);
    let final_breakers = Backend::ALL
        .into_iter()
        .map(|backend| {
            let state = circuit_state(gateway.command(backend));
            (backend.command_key().to_owned(), state)
        })
        .collect();
    let mut checks = report::checks(&schedule, &phases, &breaker_events, &final_breakers);
    checks.extend(report::policy_checks(&schedule, &phases, &breaker_events));
    let contrast = phases.iter().filter_map(PhaseReport::contrast).collect();
    Ok(Report {
        scenario: scenario.name,
        description: scenario.description,
        duration_ms: u64::try_from(schedule.total().as_millis()).unwrap_or(u64::MAX),
        rps,
        dashboard_url,
        gateway_url,
        twin_url: twin.as_ref().map(|twin| twin.url().to_owned()),
        seed,
        passed: checks.iter().all(|check| check.passed),
        phases,
        breaker_events,
        final_breakers,
        checks,
        contrast,
    })
}

/// Sets the chaos of `phase` (none without one) on the gateway's commands in `registry`,
/// changing only those whose chaos differs from `on` (the chaos set so far, updated).
fn apply_chaos(
    registry: &Registry,
    on: &mut BTreeMap<Backend, Chaos>,
    phase: Option<&Phase>,
) -> Result<(), RunError> {
    for backend in Backend::ALL {
        let wanted = phase.map_or_else(Chaos::default, |phase| phase.chaos(backend));
        if on.get(&backend).copied().unwrap_or_default() != wanted {
            gateway::set_chaos(registry, backend, &wanted)?;
        }
        if wanted.is_off() {
            on.remove(&backend);
        } else {
            on.insert(backend, wanted);
        }
    }
    Ok(())
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The line announcing phase `index`, with its faults and its chaos.
fn phase_line(index: usize, schedule: &Schedule, phase: &Phase) -> String {
    let faults: Vec<String> = phase
        .faults
        .iter()
        .filter(|(_, fault)| !fault.is_healthy())
        .map(|(backend, fault)| format!("{backend}: {}", fault.describe()))
        .chain(phase.chaotic().map(|backend| {
            let chaos = phase.chaos(backend).describe();
            format!("chaos in {}: {chaos}", backend.command_key())
        }))
        .collect();
    format!(
        "== {:>5.1} s  phase {}/{} {}: {}{}",
        phase.start.as_secs_f64(),
        index + 1,
        schedule.phases.len(),
        phase.name,
        phase.description,
        if faults.is_empty() {
            String::new()
        } else {
            format!(" [{}]", faults.join("; "))
        }
    )
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, RunError> {
    listener
        .local_addr()
        .map_err(|err| RunError::Bind(format!("cannot read a listener's address: {err}")))
}

/// The start line naming the unprotected twin.
fn twin_line(twin: &Twin) -> String {
    format!(
        "  twin       {}/movies/7  (unprotected: the same calls, a {} s socket timeout only; \
         its own backends, the same load; --no-compare turns it off)",
        twin.url(),
        crate::twin::SOCKET_TIMEOUT.as_secs()
    )
}

/// What the demo prints before it starts.
fn banner(
    scenario: &Scenario,
    schedule: &Schedule,
    rps: f64,
    dashboard_url: &str,
    gateway_url: &str,
    backends: &Backends,
    note: Option<String>,
) -> Vec<String> {
    let mut lines = vec![format!(
        "hystrix-rs demo: scenario `{}` ({}), {} s at {rps} requests/s",
        scenario.name,
        scenario.description,
        schedule.total().as_secs_f64()
    )];
    if let Some(note) = note {
        lines.push(format!("  note: {note}"));
    }
    lines.push(format!(
        "  dashboard  {dashboard_url}  (the web page; /hystrix.stream, /metrics and /hystrix/admin/ beside it)"
    ));
    lines.push(format!("  gateway    {gateway_url}/movies/7"));
    let backends: Vec<String> = Backend::ALL
        .into_iter()
        .map(|backend| format!("{backend} {}", backends.addr(backend)))
        .collect();
    lines.push(format!("  backends   {}", backends.join(", ")));

    if schedule
        .phases
        .iter()
        .any(|phase| phase.chaotic().next().is_some())
    {
        lines.push(
            "  chaos      injected in-process by hystrix-rs into the commands the phases name, \
             their backends healthy (the demo's registry allows chaos; a registry does not by \
             default)"
                .to_owned(),
        );
    }
    let phases: Vec<String> = schedule
        .phases
        .iter()
        .map(|phase| format!("{} {:.1} s", phase.name, phase.duration.as_secs_f64()))
        .collect();
    lines.push(format!("  phases     {}", phases.join(", ")));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `chaos.enabled` and `chaos.fault.ratePercentage` of `backend`'s command in `registry`,
    /// as resolved there.
    fn chaos_of(registry: &Registry, backend: Backend) -> (Option<String>, Option<String>) {
        let get = |property: &str| {
            let name = format!("hystrix.command.{}.chaos.{property}", backend.command_key());
            registry
                .properties()
                .get(&name)
                .unwrap()
                .map(|value| value.to_string())
        };
        (get("enabled"), get("fault.ratePercentage"))
    }

    #[test]
    fn chaos_is_set_at_a_phase_start_and_off_when_the_next_sets_none() {
        let registry = Registry::builder().allow_chaos(true).build();
        let schedule = crate::scenario::chaos_6s();
        let mut on = BTreeMap::new();
        let set = |value: &str| Some(value.to_owned());

        apply_chaos(&registry, &mut on, Some(&schedule.phases[0])).unwrap();
        assert!(on.is_empty());
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("false"), set("0"))
        );

        apply_chaos(&registry, &mut on, Some(&schedule.phases[1])).unwrap();
        assert_eq!(on.keys().collect::<Vec<_>>(), [&Backend::Recommendations]);
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("true"), set("80"))
        );

        apply_chaos(&registry, &mut on, Some(&schedule.phases[2])).unwrap();
        assert_eq!(on.keys().collect::<Vec<_>>(), [&Backend::Catalog]);
        assert_eq!(
            chaos_of(&registry, Backend::Recommendations),
            (set("false"), set("0"))
        );
        assert_eq!(chaos_of(&registry, Backend::Catalog).0, set("true"));

        // The end of the run turns off what is left on.
        apply_chaos(&registry, &mut on, None).unwrap();
        assert!(on.is_empty());
        assert_eq!(chaos_of(&registry, Backend::Catalog).0, set("false"));
    }

    #[test]
    fn phase_lines_name_the_chaos_and_the_command() {
        let schedule = crate::scenario::chaos_6s();
        let line = phase_line(1, &schedule, &schedule.phases[1]);
        assert!(
            line.starts_with("==   1.2 s  phase 2/4 injected-faults: "),
            "{line}"
        );
        assert!(
            line.ends_with(" [chaos in GetRecommendations: 80% injected faults]"),
            "{line}"
        );
    }
}
