//! The live view, refreshed each second: the phase (marked when it injects chaos), the
//! gateway's rate, degraded share and latency, and per command its rate, error percentage,
//! short-circuited calls per second, attempts chaos was injected into per second, circuit state (the worst of the last second: OPEN, then HALF_OPEN, then CLOSED, so an
//! episode between two samples is not missed), p50/p99 and bulkhead use; breaker transitions
//! as they happen.
//!
//! The error percentage is Hystrix's: short-circuited calls are not requests, so an open
//! breaker reads near 0 %. The short-circuited rate beside it and the state's colour (red
//! OPEN, yellow HALF_OPEN, green CLOSED) say what the percentage cannot. Colour is used only
//! on a terminal, and never with `NO_COLOR` set (or `CLICOLOR=0`; `CLICOLOR_FORCE=1` forces
//! it), as the `console` crate decides.
//!
//! In TUI mode the table sits above a progress bar (indicatif) at the bottom of the terminal,
//! with phase changes and transitions scrolling above it; with `--no-tui` (or when standard
//! error is not a terminal) each second is one plain line.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use console::Style;
use hystrix::IsolationStrategy;
use hystrix::collapser::CollapserEvent;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::gateway::Gateway;
use crate::load::LoadGenerator;
use crate::scenario::{Backend, Schedule};
use crate::stats::{BreakerLog, ChaosLog, CommandCounts, percent, percentile, shown_state};

/// Where the human-readable text goes: standard output, or standard error when standard
/// output carries the JSON report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Console {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Console {
    /// Writes `text` and a newline.
    pub fn line(self, text: &str) {
        // A closed pipe is not worth failing the run over.
        let _ = match self {
            Console::Stdout => writeln!(std::io::stdout(), "{text}"),
            Console::Stderr => writeln!(std::io::stderr(), "{text}"),
        };
    }

    /// Whether text written here may be coloured: a terminal, and neither `NO_COLOR` nor
    /// `CLICOLOR=0` set (`CLICOLOR_FORCE=1` forces colour).
    pub fn colours(self) -> bool {
        match self {
            Console::Stdout => console::colors_enabled(),
            Console::Stderr => console::colors_enabled_stderr(),
        }
    }
}

/// A circuit state in its colour when `colour`: OPEN and FORCED_OPEN bold red, HALF_OPEN and
/// FORCED_CLOSED yellow, CLOSED green; padded with spaces to `width` columns (the padding
/// uncoloured).
fn circuit_cell(state: &str, width: usize, colour: bool) -> String {
    let style = match state {
        "OPEN" | "FORCED_OPEN" => Style::new().red().bold(),
        "HALF_OPEN" | "FORCED_CLOSED" => Style::new().yellow(),
        _ => Style::new().green(),
    };
    let pad = width.saturating_sub(state.len());
    format!("{}{:pad$}", style.force_styling(colour).apply_to(state), "")
}

/// One command's row of a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    /// The command key.
    pub key: &'static str,
    /// THREAD, SEMAPHORE, or ADAPTIVE (a semaphore under an adaptive concurrency limit).
    pub isolation: &'static str,
    /// Executions in the last second.
    pub rate: u64,
    /// The error percentage the breaker sees (rolling 10 s): short-circuited calls are not
    /// requests, so an open breaker reads near 0.
    pub errors: u32,
    /// Calls short-circuited in the last second (counted in `rate`).
    pub short_circuited: u64,
    /// Attempts chaos was injected into in the last second (CHAOS_INJECTED).
    pub chaos: u64,
    /// The worst of CLOSED, HALF_OPEN and OPEN the breaker was in during the last second (so
    /// a short OPEN episode between two samples still shows), or FORCED_OPEN / FORCED_CLOSED.
    pub state: &'static str,
    /// Median and 99th percentile execution latency (rolling 5 s), in ms.
    pub p50: i64,
    /// See `p50`.
    pub p99: i64,
    /// Pool threads, semaphore permits or places of the adaptive limit in use.
    pub in_use: u32,
    /// Pool threads or semaphore permits in all, or the adaptive limit now.
    pub capacity: u32,
}

/// What one second looked like.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Since the start of the run.
    pub elapsed: Duration,
    /// The run's length.
    pub total: Duration,
    /// The phase running: its number (from 1), the count of phases, its name.
    pub phase: Option<(usize, usize, String)>,
    /// The commands the running phase injects chaos into.
    pub chaos_in: Vec<&'static str>,
    /// Gateway requests answered in the last second.
    pub answered: u64,
    /// Of those, with a part from a fallback.
    pub degraded: u64,
    /// Gateway latency of the last second's answers, median and 99th percentile, in ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// One row per command.
    pub commands: Vec<CommandRow>,
    /// Collapser batches in the last second, and the ratings they carried.
    pub batches: (u64, u64),
}

impl Tick {
    /// The TUI table; the circuit states coloured when `colour`.
    pub fn table(&self, colour: bool) -> String {
        let mut lines = Vec::new();
        let phase = match &self.phase {
            Some((number, count, name)) => format!("phase {number}/{count} {name}"),
            None => "draining".to_owned(),
        };
        let phase = if self.chaos_in.is_empty() {
            phase
        } else {
            format!("{phase} (chaos in {})", self.chaos_in.join(", "))
        };
        lines.push(format!(
            "{phase}   {:.0} s of {:.0} s",
            self.elapsed.as_secs_f64(),
            self.total.as_secs_f64()
        ));
        lines.push(format!(
            "gateway   {} answered/s, {}% degraded, p50 {:.0} ms, p99 {:.0} ms",
            self.answered,
            percent(self.degraded, self.answered),
            self.p50_ms,
            self.p99_ms
        ));
        lines.push(format!(
            "{:<20} {:<9} {:>6} {:>6} {:>7} {:>7}  {:<9} {:>5} {:>5}  {}",
            "command",
            "isolation",
            "rate/s",
            "errors",
            "short/s",
            "chaos/s",
            "circuit",
            "p50",
            "p99",
            "in use"
        ));
        for row in &self.commands {
            let unit = match row.isolation {
                "THREAD" => "threads",
                "ADAPTIVE" => "limit",
                _ => "permits",
            };
            lines.push(format!(
                "{:<20} {:<9} {:>6} {:>5}% {:>7} {:>7}  {} {:>5} {:>5}  {}/{} {unit}",
                row.key,
                row.isolation,
                row.rate,
                row.errors,
                row.short_circuited,
                row.chaos,
                circuit_cell(row.state, 9, colour),
                row.p50,
                row.p99,
                row.in_use,
                row.capacity
            ));
        }
        let (batches, ratings) = self.batches;
        lines.push(format!(
            "collapser GetRating: {batches} batches/s, {:.1} ratings per batch",
            if batches == 0 {
                0.0
            } else {
                ratings as f64 / batches as f64
            }
        ));
        lines.join("\n")
    }

    /// The plain line of `--no-tui`; the phase marked `(chaos)` when it injects any; a
    /// command's short-circuited calls and chaos injections per second follow its error
    /// percentage when there were any; the circuit states coloured when `colour`.
    pub fn line(&self, colour: bool) -> String {
        let phase = self
            .phase
            .as_ref()
            .map_or("draining", |(_, _, name)| name.as_str());
        let chaos = if self.chaos_in.is_empty() {
            ""
        } else {
            " (chaos)"
        };
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|row| {
                let mut short = if row.short_circuited > 0 {
                    format!(" {}/s short-circuited", row.short_circuited)
                } else {
                    String::new()
                };
                if row.chaos > 0 {
                    short.push_str(&format!(" {}/s chaos", row.chaos));
                }
                if row.isolation == "ADAPTIVE" {
                    short.push_str(&format!(" limit {}", row.capacity));
                }
                format!(
                    "{} {}/s {}%{short} {}",
                    row.key,
                    row.rate,
                    row.errors,
                    circuit_cell(row.state, 0, colour)
                )
            })
            .collect();
        format!(
            "[{:>5.1}s] {phase}{chaos} | gateway {}/s {}% degraded p99 {:.0}ms | {}",
            self.elapsed.as_secs_f64(),
            self.answered,
            percent(self.degraded, self.answered),
            self.p99_ms,
            commands.join(" | ")
        )
    }
}

/// Samples the run each second and shows it.
#[derive(Debug)]
pub struct LiveView {
    bar: Option<ProgressBar>,
    console: Console,
    /// Whether the table or the lines are coloured.
    colour: bool,
    gateway: Arc<Gateway>,
    load: LoadGenerator,
    breakers: BreakerLog,
    chaos: ChaosLog,
    schedule: Schedule,
    /// What the previous tick saw: counts per command, answered and degraded, batches.
    last: (BTreeMap<Backend, CommandCounts>, u64, u64, (u64, u64)),
    /// Chaos injections per command at the previous tick.
    last_chaos: BTreeMap<Backend, u64>,
    transitions_seen: usize,
}

/// A view dropped unfinished (the run was interrupted) clears its bar now, before the caller
/// prints why, not later when the last clone of the bar goes.
impl Drop for LiveView {
    fn drop(&mut self) {
        self.finish();
    }
}

impl LiveView {
    /// A view of the run; `tui` draws the table and a progress bar of the requests the load
    /// plans for the schedule on standard error, otherwise lines go to `console`.
    pub fn new(
        tui: bool,
        console: Console,
        gateway: Arc<Gateway>,
        load: LoadGenerator,
        breakers: BreakerLog,
        chaos: ChaosLog,
        schedule: Schedule,
    ) -> LiveView {
        let bar = tui.then(|| {
            let planned = load.planned(&schedule);
            let bar = ProgressBar::with_draw_target(Some(planned), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg}\n[{elapsed_precise}] {wide_bar} {pos}/{len} requests",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        // The table goes to standard error with the bar; the lines to `console`.
        let colour = if bar.is_some() {
            Console::Stderr.colours()
        } else {
            console.colours()
        };
        LiveView {
            bar,
            console,
            colour,
            gateway,
            load,
            breakers,
            chaos,
            schedule,
            last: Default::default(),
            last_chaos: BTreeMap::new(),
            transitions_seen: 0,
        }
    }

    /// The progress bar the load generator advances (hidden without the TUI).
    pub fn progress(&self) -> ProgressBar {
        self.bar.clone().unwrap_or_else(ProgressBar::hidden)
    }

    /// Shows a line above the live view (or in the plain output).
    pub fn announce(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => self.console.line(text),
        }
    }

    /// Shows the breaker transitions that happened since the last call.
    pub fn show_transitions(&mut self) {
        for record in self.breakers.since(self.transitions_seen) {
            self.transitions_seen += 1;
            let at = record.at_ms as f64 / 1000.0;
            self.announce(&format!("   {at:>5.2} s  breaker {}", record.describe()));
        }
    }

    /// Samples and shows one second, `elapsed` into the run.
    pub fn tick(&mut self, elapsed: Duration) {
        let tick = self.sample(elapsed);
        match &self.bar {
            Some(bar) => bar.set_message(tick.table(self.colour)),
            None => self.console.line(&tick.line(self.colour)),
        }
    }

    /// Clears the view (the report follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn sample(&mut self, elapsed: Duration) -> Tick {
        let (answered, degraded, mut recent) = {
            let mut stats = self.load.stats();
            let answered = stats.phases.iter().map(|p| p.answered).sum::<u64>();
            let degraded = stats.phases.iter().map(|p| p.degraded).sum::<u64>();
            (answered, degraded, std::mem::take(&mut stats.recent))
        };
        recent.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (last_counts, last_answered, last_degraded, last_batches) = &self.last;

        let mut all_counts = BTreeMap::new();
        let mut commands = Vec::new();
        for backend in Backend::ALL {
            let command = self.gateway.command(backend);
            let metrics = command.metrics();
            let counts = CommandCounts::read(&metrics);
            let last_second = counts.since(&last_counts.get(&backend).copied().unwrap_or_default());
            all_counts.insert(backend, counts);
            let injected = self.chaos.injected(backend.command_key());
            let last_injected = self.last_chaos.insert(backend, injected).unwrap_or(0);
            let latency = metrics.execution_latency();
            let thread = command.properties().execution_isolation_strategy
                != Some(IsolationStrategy::Semaphore);
            let adaptive = metrics.adaptive_limit();
            let (in_use, capacity) = match command.thread_pool_metrics() {
                Some(pool) if thread => (pool.current_active_count, pool.current_core_pool_size),
                _ if adaptive.is_some() => {
                    adaptive.map_or((0, 0), |limit| (limit.in_flight, limit.limit))
                }
                _ => (
                    metrics.current_concurrent_execution_count(),
                    command
                        .properties()
                        .execution_isolation_semaphore_max_concurrent_requests,
                ),
            };
            commands.push(CommandRow {
                key: backend.command_key(),
                isolation: match (thread, adaptive) {
                    (true, _) => "THREAD",
                    (false, Some(_)) => "ADAPTIVE",
                    (false, None) => "SEMAPHORE",
                },
                rate: last_second.executions(),
                errors: metrics.health_counts().error_percentage,
                short_circuited: last_second.short_circuits,
                chaos: injected.saturating_sub(last_injected),
                state: shown_state(command, &self.breakers),
                p50: latency.p50,
                p99: latency.p99,
                in_use,
                capacity,
            });
        }
        let collapser = self.gateway.collapser_metrics();
        let batches = (
            collapser.cumulative_count(CollapserEvent::BatchExecuted),
            collapser.cumulative_count(CollapserEvent::AddedToBatch),
        );
        let running = self.schedule.phase_at(elapsed);
        let tick = Tick {
            elapsed,
            total: self.schedule.total(),
            phase: running.map(|index| {
                let name = self.schedule.phases[index].name.clone();
                (index + 1, self.schedule.phases.len(), name)
            }),
            chaos_in: running.map_or_else(Vec::new, |index| {
                let phase = &self.schedule.phases[index];
                phase.chaotic().map(Backend::command_key).collect()
            }),
            answered: answered.saturating_sub(*last_answered),
            degraded: degraded.saturating_sub(*last_degraded),
            p50_ms: ms(percentile(&recent, 50.0)),
            p99_ms: ms(percentile(&recent, 99.0)),
            commands,
            batches: (
                batches.0.saturating_sub(last_batches.0),
                batches.1.saturating_sub(last_batches.1),
            ),
        };
        self.last = (all_counts, answered, degraded, batches);
        tick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GetTitle CLOSED; GetRatings OPEN, every call short-circuited, so its error percentage
    /// is 0; GetAvailability HALF_OPEN.
    fn tick() -> Tick {
        Tick {
            elapsed: Duration::from_millis(4200),
            total: Duration::from_secs(10),
            phase: Some((3, 7, "error-burst".into())),
            chaos_in: vec![],
            answered: 50,
            degraded: 12,
            p50_ms: 6.2,
            p99_ms: 31.4,
            commands: vec![
                CommandRow {
                    key: "GetTitle",
                    isolation: "THREAD",
                    rate: 50,
                    errors: 0,
                    short_circuited: 0,
                    chaos: 0,
                    state: "CLOSED",
                    p50: 3,
                    p99: 8,
                    in_use: 1,
                    capacity: 8,
                },
                CommandRow {
                    key: "GetRatings",
                    isolation: "SEMAPHORE",
                    rate: 12,
                    errors: 0,
                    short_circuited: 12,
                    chaos: 0,
                    state: "OPEN",
                    p50: 4,
                    p99: 9,
                    in_use: 0,
                    capacity: 20,
                },
                CommandRow {
                    key: "GetAvailability",
                    isolation: "SEMAPHORE",
                    rate: 5,
                    errors: 40,
                    short_circuited: 4,
                    chaos: 0,
                    state: "HALF_OPEN",
                    p50: 2,
                    p99: 6,
                    in_use: 1,
                    capacity: 20,
                },
            ],
            batches: (12, 48),
        }
    }

    #[test]
    fn the_table_shows_phase_gateway_commands_and_collapser() {
        assert_eq!(
            tick().table(false),
            "phase 3/7 error-burst   4 s of 10 s\n\
             gateway   50 answered/s, 24% degraded, p50 6 ms, p99 31 ms\n\
             command              isolation rate/s errors short/s chaos/s  circuit     p50   p99  in use\n\
             GetTitle             THREAD        50     0%       0       0  CLOSED        3     8  1/8 threads\n\
             GetRatings           SEMAPHORE     12     0%      12       0  OPEN          4     9  0/20 permits\n\
             GetAvailability      SEMAPHORE      5    40%       4       0  HALF_OPEN     2     6  1/20 permits\n\
             collapser GetRating: 12 batches/s, 4.0 ratings per batch"
        );
    }

    #[test]
    fn the_table_colours_the_circuit_states_when_asked() {
        let table = tick().table(true);
        let rows: Vec<&str> = table.lines().skip(3).take(3).collect();
        assert_eq!(
            rows,
            [
                "GetTitle             THREAD        50     0%       0       0  \x1b[32mCLOSED\x1b[0m        3     8  1/8 threads",
                "GetRatings           SEMAPHORE     12     0%      12       0  \x1b[31m\x1b[1mOPEN\x1b[0m          4     9  0/20 permits",
                "GetAvailability      SEMAPHORE      5    40%       4       0  \x1b[33mHALF_OPEN\x1b[0m     2     6  1/20 permits",
            ]
        );
    }

    #[test]
    fn the_plain_line_has_one_entry_per_command() {
        assert_eq!(
            tick().line(false),
            "[  4.2s] error-burst | gateway 50/s 24% degraded p99 31ms | GetTitle 50/s 0% CLOSED \
             | GetRatings 12/s 0% 12/s short-circuited OPEN \
             | GetAvailability 5/s 40% 4/s short-circuited HALF_OPEN"
        );
        let draining = Tick {
            phase: None,
            commands: vec![],
            ..tick()
        };
        assert_eq!(
            draining.line(false),
            "[  4.2s] draining | gateway 50/s 24% degraded p99 31ms | "
        );
    }

    #[test]
    fn an_adaptive_limit_shows_its_places_in_use_of_the_limit_now() {
        let mut shedding = tick();
        shedding.commands = vec![CommandRow {
            key: "GetPrices",
            isolation: "ADAPTIVE",
            rate: 50,
            errors: 6,
            short_circuited: 0,
            chaos: 0,
            state: "CLOSED",
            p50: 160,
            p99: 460,
            in_use: 3,
            capacity: 3,
        }];
        assert_eq!(
            shedding.table(false).lines().nth(3),
            Some(
                "GetPrices            ADAPTIVE      50     6%       0       0  CLOSED      160   \
                 460  3/3 limit"
            )
        );
        assert_eq!(
            shedding.line(false),
            "[  4.2s] error-burst | gateway 50/s 24% degraded p99 31ms | GetPrices 50/s 6% limit \
             3 CLOSED"
        );
    }

    #[test]
    fn a_chaos_phase_is_marked_and_each_command_shows_its_injections() {
        let mut chaotic = tick();
        chaotic.phase = Some((2, 4, "injected-faults".into()));
        chaotic.chaos_in = vec!["GetRatings"];
        chaotic.commands.truncate(2);
        chaotic.commands[1].chaos = 9;
        assert_eq!(
            chaotic.table(false).lines().take(5).collect::<Vec<_>>(),
            [
                "phase 2/4 injected-faults (chaos in GetRatings)   4 s of 10 s",
                "gateway   50 answered/s, 24% degraded, p50 6 ms, p99 31 ms",
                "command              isolation rate/s errors short/s chaos/s  circuit     p50   p99  in use",
                "GetTitle             THREAD        50     0%       0       0  CLOSED        3     8  1/8 threads",
                "GetRatings           SEMAPHORE     12     0%      12       9  OPEN          4     9  0/20 permits",
            ]
        );
        assert_eq!(
            chaotic.line(false),
            "[  4.2s] injected-faults (chaos) | gateway 50/s 24% degraded p99 31ms \
             | GetTitle 50/s 0% CLOSED | GetRatings 12/s 0% 12/s short-circuited 9/s chaos OPEN"
        );
    }

    #[test]
    fn the_plain_line_colours_the_circuit_states_when_asked() {
        assert_eq!(
            tick().line(true),
            "[  4.2s] error-burst | gateway 50/s 24% degraded p99 31ms \
             | GetTitle 50/s 0% \x1b[32mCLOSED\x1b[0m \
             | GetRatings 12/s 0% 12/s short-circuited \x1b[31m\x1b[1mOPEN\x1b[0m \
             | GetAvailability 5/s 40% 4/s short-circuited \x1b[33mHALF_OPEN\x1b[0m"
        );
    }

    #[test]
    fn forced_states_are_coloured_as_what_they_force() {
        assert_eq!(
            circuit_cell("FORCED_OPEN", 0, true),
            "\x1b[31m\x1b[1mFORCED_OPEN\x1b[0m"
        );
        assert_eq!(
            circuit_cell("FORCED_CLOSED", 0, true),
            "\x1b[33mFORCED_CLOSED\x1b[0m"
        );
        assert_eq!(circuit_cell("OPEN", 9, false), "OPEN     ");
    }

    /// A breaker that opened and closed again between two samples shows OPEN for that
    /// interval, and CLOSED for the next.
    #[test]
    fn an_episode_between_two_samples_shows_its_worst_state() {
        use hystrix::clock::ManualClock;
        use hystrix::{Command, Registry};

        let breakers = BreakerLog::default();
        let clock = ManualClock::new();
        let registry = Registry::builder()
            .clock(clock.clone())
            .circuit_breaker_listener(breakers.clone())
            .build();
        let command = Command::builder("GetTitle")
            .group("G")
            .isolation(IsolationStrategy::Semaphore)
            .circuit_breaker_sleep_window(Duration::from_millis(500))
            .classify(|_: &std::io::Error| hystrix::Class::TripNow { min_open: None })
            .build_in(&registry)
            .unwrap();
        let line = |state| {
            let row = CommandRow {
                state,
                ..tick().commands[0].clone()
            };
            let tick = Tick {
                commands: vec![row],
                ..tick()
            };
            tick.line(true)
        };
        let prefix =
            "[  4.2s] error-burst | gateway 50/s 24% degraded p99 31ms | GetTitle 50/s 0% ";

        assert_eq!(
            line(shown_state(&command, &breakers)),
            format!("{prefix}\x1b[32mCLOSED\x1b[0m")
        );
        // Within one interval: opened by a failure, half-open after the sleep window, closed
        // by a successful trial.
        let _ = command
            .run(|| Err::<u32, _>(std::io::Error::other("503")))
            .execute();
        clock.advance_ms(501);
        command
            .run(|| Ok::<_, std::io::Error>(1))
            .execute()
            .unwrap();
        assert_eq!(command.circuit_breaker().status(), hystrix::Status::Closed);
        assert_eq!(
            line(shown_state(&command, &breakers)),
            format!("{prefix}\x1b[31m\x1b[1mOPEN\x1b[0m")
        );
        assert_eq!(
            line(shown_state(&command, &breakers)),
            format!("{prefix}\x1b[32mCLOSED\x1b[0m")
        );
    }
}
