//! The open-loop load source: when requests arrive.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::SimError;

/// An open-loop load: requests arrive at a rate for a duration whatever happens to the earlier
/// ones (as users of a service do), unlike a closed loop of N clients that each wait for their
/// answer. Arrival times are in virtual time, from the start of
/// [`Sim::run_load`](super::Sim::run_load); a request arriving within a millisecond starts at
/// that millisecond (the clock's resolution).
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    rate_per_s: f64,
    duration: Duration,
    arrivals: ArrivalKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrivalKind {
    Even,
    Poisson { seed: u64 },
}

impl Load {
    /// `rate_per_s` requests per second for `duration`, evenly spaced: request `i` arrives at
    /// `floor(i · 1000 / rate_per_s)` ms, for every `i` whose arrival is before `duration`
    /// (1 000 per second for 10 s: 10 000 requests, one each millisecond).
    pub fn constant(rate_per_s: f64, duration: Duration) -> Self {
        Load {
            rate_per_s,
            duration,
            arrivals: ArrivalKind::Even,
        }
    }

    /// `rate_per_s` requests per second on average for `duration`, as a Poisson process: the
    /// gaps between arrivals are independent and exponential with mean `1 / rate_per_s`, drawn
    /// from a generator seeded with `seed`. Bursts and lulls come as they do from many
    /// independent users; the count varies around `rate_per_s · duration`.
    pub fn poisson(rate_per_s: f64, duration: Duration, seed: u64) -> Self {
        Load {
            rate_per_s,
            duration,
            arrivals: ArrivalKind::Poisson { seed },
        }
    }

    /// The mean arrival rate, in requests per second.
    pub fn rate_per_s(&self) -> f64 {
        self.rate_per_s
    }

    /// How long requests keep arriving.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The arrival times, in ms from the start of the load, in order.
    ///
    /// # Errors
    /// [`SimError::Invalid`] for a rate that is not a positive finite number.
    pub fn arrival_times_ms(&self) -> Result<Arrivals, SimError> {
        if !(self.rate_per_s.is_finite() && self.rate_per_s > 0.0) {
            return Err(SimError::invalid(format!(
                "a load's rate must be a positive number of requests per second, got {}",
                self.rate_per_s
            )));
        }
        Ok(Arrivals {
            gap_us: 1e6 / self.rate_per_s,
            end_us: self.duration.as_secs_f64() * 1e6,
            index: 0,
            at_us: 0.0,
            rng: match self.arrivals {
                ArrivalKind::Even => None,
                ArrivalKind::Poisson { seed } => Some(StdRng::seed_from_u64(seed)),
            },
        })
    }
}

/// The arrival times of a [`Load`], in ms from its start: an iterator, see
/// [`Load::arrival_times_ms`].
#[derive(Debug, Clone)]
pub struct Arrivals {
    gap_us: f64,
    end_us: f64,
    index: u64,
    /// The next Poisson arrival, in µs.
    at_us: f64,
    rng: Option<StdRng>,
}

impl Iterator for Arrivals {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let at_us = match &mut self.rng {
            // From the index, not a running sum, so rounding never accumulates.
            None => self.index as f64 * self.gap_us,
            Some(rng) => {
                // Inverse transform: -ln(U) for U in (0, 1] is exponential with mean 1.
                let unit = 1.0 - rng.random::<f64>();
                self.at_us += -unit.ln() * self.gap_us;
                self.at_us
            }
        };
        if at_us >= self.end_us {
            return None;
        }
        self.index += 1;
        Some((at_us / 1000.0) as u64)
    }
}
