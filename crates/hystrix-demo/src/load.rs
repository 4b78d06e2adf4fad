//! The load generator: movie pages requested from the gateway at a set rate, open-loop (a
//! request is sent on schedule whether or not earlier ones were answered, as real users do),
//! each counted in the phase it was sent in.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::catalogue::CATALOGUE_SIZE;
use crate::gateway::DEGRADED;
use crate::http::{self, HttpClient};
use crate::scenario::Schedule;

/// How long a client waits for a page before counting it unanswered.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many unanswered requests' errors a phase keeps, as examples.
const ERRORS_KEPT: usize = 5;

/// The gateway's answers to the requests sent in one phase.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseLoad {
    /// Requests sent.
    pub sent: u64,
    /// Answered `200` (a page, maybe with parts from fallbacks).
    pub answered: u64,
    /// Answered with at least one part from a fallback.
    pub degraded: u64,
    /// Not answered `200` within [`CLIENT_TIMEOUT`].
    pub unanswered: u64,
    /// Latencies of the answered ones, in the order they came.
    pub latencies: Vec<Duration>,
    /// What went wrong with the first unanswered ones.
    pub errors: Vec<String>,
}

/// The answers one gateway instance gave to the requests sent to it in one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceLoad {
    /// Requests sent to it.
    pub sent: u64,
    /// Answered `200`.
    pub answered: u64,
    /// Not answered `200` within [`CLIENT_TIMEOUT`].
    pub unanswered: u64,
}

/// The load's counts so far, shared with the live view.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// Per phase of the schedule.
    pub phases: Vec<PhaseLoad>,
    /// Per phase of the schedule, per gateway instance (one entry with a single gateway).
    pub instances: Vec<Vec<InstanceLoad>>,
    /// Latencies of answers since the live view last took them.
    pub recent: Vec<Duration>,
}

impl LoadStats {
    /// Each instance's counts over every phase so far.
    pub fn instance_totals(&self) -> Vec<InstanceLoad> {
        let mut totals = vec![InstanceLoad::default(); self.instances.first().map_or(0, Vec::len)];
        for phase in &self.instances {
            for (total, load) in totals.iter_mut().zip(phase) {
                total.sent += load.sent;
                total.answered += load.answered;
                total.unanswered += load.unanswered;
            }
        }
        totals
    }
}

/// Picks the gateway instance (0-based) of request number `index`, sent at a time since the
/// start of the run.
pub type Router = Arc<dyn Fn(u64, Duration) -> usize + Send + Sync>;

/// One request's outcome.
enum Answer {
    Page { degraded: bool },
    None(String),
}

/// Sends the load and collects the answers.
#[derive(Clone)]
pub struct LoadGenerator {
    client: HttpClient,
    /// The gateway instances (`http://host:port`), the first one alone unless a router is set.
    gateways: Vec<String>,
    router: Option<Router>,
    rps: f64,
    /// Seeds the movie ids asked for: two generators with the same seed ask for the same ids
    /// in the same order.
    seed: u64,
    stats: Arc<Mutex<LoadStats>>,
}

impl std::fmt::Debug for LoadGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGenerator")
            .field("gateways", &self.gateways)
            .field("rps", &self.rps)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl LoadGenerator {
    /// A generator of `rps` requests per second to the gateway at `gateway` (`http://host:port`),
    /// asking for movie ids drawn from `seed`.
    pub fn new(gateway: String, rps: f64, phases: usize, seed: u64) -> LoadGenerator {
        LoadGenerator::fleet(vec![gateway], None, rps, phases, seed)
    }

    /// A generator of `rps` requests per second in all to the gateway instances `gateways`,
    /// each request sent to the one `router` picks (the first one without a router), asking
    /// for movie ids drawn from `seed`.
    pub fn fleet(
        gateways: Vec<String>,
        router: Option<Router>,
        rps: f64,
        phases: usize,
        seed: u64,
    ) -> LoadGenerator {
        let stats = LoadStats {
            phases: vec![PhaseLoad::default(); phases],
            instances: vec![vec![InstanceLoad::default(); gateways.len()]; phases],
            recent: Vec::new(),
        };
        LoadGenerator {
            client: http::async_client(),
            gateways,
            router,
            rps,
            seed,
            stats: Arc::new(Mutex::new(stats)),
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> std::sync::MutexGuard<'_, LoadStats> {
        self.stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Requests sent and neither answered nor given up on yet.
    pub fn in_flight(&self) -> u64 {
        let stats = self.stats();
        let sum = |count: fn(&PhaseLoad) -> u64| stats.phases.iter().map(count).sum::<u64>();
        sum(|p| p.sent).saturating_sub(sum(|p| p.answered) + sum(|p| p.unanswered))
    }

    /// How many requests a run of `schedule` sends.
    pub fn planned(&self, schedule: &Schedule) -> u64 {
        (schedule.total().as_secs_f64() * self.rps).ceil() as u64
    }

    /// Sends request `i` at `start + i / rps` until the schedule ends, then waits for the
    /// answers (each at most [`CLIENT_TIMEOUT`]). `progress` counts the requests sent.
    pub async fn run(&self, start: Instant, schedule: &Schedule, progress: ProgressBar) {
        let mut in_flight = JoinSet::new();
        let mut ids = StdRng::seed_from_u64(self.seed);
        for i in 0..self.planned(schedule) {
            let due = Duration::from_secs_f64(i as f64 / self.rps);
            let Some(phase) = schedule.phase_at(due) else {
                break;
            };
            // Open loop: a late tick sends at once, catching up with the schedule.
            tokio::time::sleep_until((start + due).into()).await;
            let id = ids.random_range(1..=CATALOGUE_SIZE);
            let instance = self.router.as_ref().map_or(0, |router| {
                router(i, start.elapsed()).min(self.gateways.len() - 1)
            });
            let (this, url) = (
                self.clone(),
                format!("{}/movies/{id}", self.gateways[instance]),
            );
            in_flight.spawn(async move {
                let sent = Instant::now();
                let answer = this.request(&url).await;
                this.record(phase, instance, sent.elapsed(), answer);
            });
            {
                let mut stats = self.stats();
                stats.phases[phase].sent += 1;
                stats.instances[phase][instance].sent += 1;
            }
            progress.inc(1);
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    }

    async fn request(&self, url: &str) -> Answer {
        match tokio::time::timeout(CLIENT_TIMEOUT, http::get(&self.client, url)).await {
            Err(_) => Answer::None(format!("no answer within {} s", CLIENT_TIMEOUT.as_secs())),
            Ok(Err(err)) => Answer::None(err.to_string()),
            Ok(Ok((status, headers, _))) if status.is_success() => Answer::Page {
                degraded: headers
                    .get(&DEGRADED)
                    .is_some_and(|value| !value.is_empty()),
            },
            Ok(Ok((status, _, body))) => Answer::None(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&body)
            )),
        }
    }

    fn record(&self, phase: usize, instance: usize, latency: Duration, answer: Answer) {
        let mut stats = self.stats();
        let by_instance = &mut stats.instances[phase][instance];
        match answer {
            Answer::Page { .. } => by_instance.answered += 1,
            Answer::None(_) => by_instance.unanswered += 1,
        }
        let load = &mut stats.phases[phase];
        match answer {
            Answer::Page { degraded } => {
                load.answered += 1;
                load.degraded += u64::from(degraded);
                load.latencies.push(latency);
                stats.recent.push(latency);
            }
            Answer::None(error) => {
                load.unanswered += 1;
                if load.errors.len() < ERRORS_KEPT {
                    load.errors.push(error);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::get;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sends_the_planned_requests_in_their_phases_and_counts_the_answers() {
        // A stand-in gateway: every third page is degraded, every fifth is a 500.
        let calls = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&calls);
        let router = Router::new().route(
            "/movies/{id}",
            get(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if n % 5 == 0 {
                        return (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [(DEGRADED.clone(), "")],
                            "",
                        );
                    }
                    let degraded = if n % 3 == 0 { "title" } else { "" };
                    (StatusCode::OK, [(DEGRADED.clone(), degraded)], "{}")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });

        // 2 s at 15 rps over the `outage` scenario's three phases (500, 700, 800 ms).
        let schedule = Scenario::load("outage")
            .unwrap()
            .schedule(Duration::from_secs(2))
            .unwrap();
        let load = LoadGenerator::new(format!("http://{addr}"), 15.0, schedule.phases.len(), 0);
        assert_eq!(load.planned(&schedule), 30);
        let progress = ProgressBar::hidden();
        load.run(Instant::now(), &schedule, progress.clone()).await;

        assert_eq!(progress.position(), 30);
        assert_eq!(calls.load(Ordering::SeqCst), 30);
        let stats = load.stats();
        // Request i is due at i/15 s: 0..=7 before 500 ms, 8..=17 before 1200 ms, the rest after.
        let sent: Vec<u64> = stats.phases.iter().map(|p| p.sent).collect();
        assert_eq!(sent, [8, 10, 12]);
        let total = |f: fn(&PhaseLoad) -> u64| stats.phases.iter().map(f).sum::<u64>();
        assert_eq!(total(|p| p.answered), 24);
        assert_eq!(total(|p| p.unanswered), 6);
        // Of 30 calls: 6 are 500s; 10 are multiples of 3, of which 2 (15, 30) are 500s.
        assert_eq!(total(|p| p.degraded), 8);
        assert_eq!(total(|p| p.latencies.len() as u64), 24);
        assert_eq!(stats.recent.len(), 24);
        let errors: Vec<&String> = stats.phases.iter().flat_map(|p| &p.errors).collect();
        assert_eq!(errors.len(), 6);
        assert!(
            errors.iter().all(|e| e.starts_with("answered 500")),
            "{errors:?}"
        );
    }

    /// A stand-in gateway answering every page, counting its calls; its URL.
    async fn counting_gateway(calls: Arc<AtomicU64>) -> String {
        let router = Router::new().route(
            "/movies/{id}",
            get(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { (StatusCode::OK, [(DEGRADED.clone(), "")], "{}") }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fleet_sends_each_request_to_the_instance_the_router_picks() {
        let calls: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let mut urls = Vec::new();
        for counter in &calls {
            urls.push(counting_gateway(Arc::clone(counter)).await);
        }
        // Every third request to instance 3, the others to instance 1; a pick past the last
        // instance goes to the last.
        let router: super::Router = Arc::new(|index, _| if index % 3 == 2 { 7 } else { 0 });
        let schedule = Scenario::load("outage")
            .unwrap()
            .schedule(Duration::from_secs(2))
            .unwrap();
        let load = LoadGenerator::fleet(urls, Some(router), 15.0, schedule.phases.len(), 0);
        load.run(Instant::now(), &schedule, ProgressBar::hidden())
            .await;

        let served: Vec<u64> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(served, [20, 0, 10]);
        let stats = load.stats();
        // Requests 0..=7, 8..=17 and 18..=29 by phase; of each, the ones numbered 2 mod 3.
        let third: Vec<u64> = stats.instances.iter().map(|p| p[2].sent).collect();
        assert_eq!(third, [2, 4, 4]);
        assert_eq!(
            stats.instance_totals(),
            [
                InstanceLoad {
                    sent: 20,
                    answered: 20,
                    unanswered: 0
                },
                InstanceLoad::default(),
                InstanceLoad {
                    sent: 10,
                    answered: 10,
                    unanswered: 0
                },
            ]
        );
        let sent: Vec<u64> = stats.phases.iter().map(|p| p.sent).collect();
        assert_eq!(sent, [8, 10, 12]);
    }
}
