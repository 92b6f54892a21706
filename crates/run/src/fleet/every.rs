//! `sonde fleet --every`: the whole matrix again and again until Ctrl-C or SIGTERM. Each
//! pass starts a period after the last one began, late by a random jitter so that many
//! controllers started together do not measure in step; a pass that kept a host in tests
//! longer than `--max-load` of its time pushes the next one back until the share holds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::file::Fleet;
use super::rounds::{run_pass, Hooks, Tally};
use crate::signals::Interrupt;

/// The schedule of a continuous fleet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Every {
    /// From one pass's start to the next's.
    pub period: Duration,
    /// The most of each host's time its tests may take, 0 to 1 (`--max-load`).
    pub max_load: f64,
    /// Each pass starts up to this much later than its period says.
    pub jitter: Duration,
}

/// The jitter of a period: a tenth of it, at most a minute. Enough to spread controllers
/// started by the same deployment; small enough to keep the period.
pub fn default_jitter(period: Duration) -> Duration {
    (period / 10).min(Duration::from_secs(60))
}

/// What the caller learns after each pass.
pub struct PassEnd<'a> {
    pub pass: u32,
    pub tally: &'a Tally,
    /// When the next pass starts, from the end of this one.
    pub next_in: Duration,
    /// The busiest host and its share of the pass's span in tests.
    pub busiest: Option<(&'a str, f64)>,
}

/// `pass 3: 12 stored, 0 failed; busiest host a in tests 18 % of the time; next pass in 42 s`.
pub fn pass_line(p: &PassEnd<'_>) -> String {
    let busiest = p.busiest.map_or_else(String::new, |(name, share)| {
        format!(
            "; busiest host {name} in tests {:.0} % of the time",
            share * 100.0
        )
    });
    format!(
        "pass {}: {} stored, {} failed{busiest}; next pass in {:.0} s",
        p.pass,
        p.tally.stored,
        p.tally.failed,
        p.next_in.as_secs_f64()
    )
}

/// Passes until `interrupt`; `after` hears of each. Returns every pass's tally, summed.
pub fn run_every(
    fleet: &Fleet,
    overlap: usize,
    hooks: &Hooks<'_>,
    interrupt: &Interrupt,
    every: &Every,
    after: &dyn Fn(&PassEnd<'_>),
) -> Tally {
    let mut total = Tally::default();
    let mut start = Instant::now() + jitter(every.jitter);
    for pass in 1.. {
        if !interrupt.sleep_until(start) {
            break;
        }
        let t = run_pass(fleet, overlap, hooks, interrupt, Some(pass));
        let next = next_start(start, &t.busy, every) + jitter(every.jitter);
        let busiest = t
            .busy
            .iter()
            .max_by_key(|(_, d)| **d)
            .map(|(name, d)| (name.as_str(), share(*d, next - start)));
        after(&PassEnd {
            pass,
            tally: &t,
            next_in: next.saturating_duration_since(Instant::now()),
            busiest,
        });
        add(&mut total, t);
        if interrupt.is_set() {
            break;
        }
        start = next;
    }
    total
}

/// A period after `start`, or later if a host's time in tests would then exceed the
/// budget: busy / span ≤ max_load.
fn next_start(start: Instant, busy: &BTreeMap<String, Duration>, every: &Every) -> Instant {
    let most = busy.values().max().copied().unwrap_or_default();
    let span = every
        .period
        .max(most.div_f64(every.max_load.clamp(1e-3, 1.0)));
    start + span
}

fn share(busy: Duration, span: Duration) -> f64 {
    busy.as_secs_f64() / span.as_secs_f64().max(1e-9)
}

/// A random delay up to `max`, from the kernel's random bytes.
fn jitter(max: Duration) -> Duration {
    max.mul_f64(crate::random::u64() as f64 / u64::MAX as f64)
}

fn add(total: &mut Tally, t: Tally) {
    total.stored += t.stored;
    total.skipped += t.skipped;
    total.failed += t.failed;
    total.not_run += t.not_run;
    for (name, d) in t.busy {
        *total.busy.entry(name).or_default() += d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(period_s: u64, max_load: f64) -> Every {
        Every {
            period: Duration::from_secs(period_s),
            max_load,
            jitter: Duration::ZERO,
        }
    }

    #[test]
    fn the_next_pass_waits_a_period_or_until_the_budget_holds() {
        let t0 = Instant::now();
        let busy: BTreeMap<String, Duration> = [
            ("a".to_string(), Duration::from_secs(20)),
            ("b".to_string(), Duration::from_secs(5)),
        ]
        .into();
        // 20 s of tests in a 60 s period is a third: within a 50 % budget.
        assert_eq!(
            next_start(t0, &busy, &every(60, 0.5)) - t0,
            Duration::from_secs(60)
        );
        // Within a 10 % budget, a's 20 s need 200 s.
        assert_eq!(
            next_start(t0, &busy, &every(60, 0.1)) - t0,
            Duration::from_secs(200)
        );
        assert_eq!(
            next_start(t0, &BTreeMap::new(), &every(60, 0.1)) - t0,
            Duration::from_secs(60)
        );
    }

    #[test]
    fn jitter_stays_within_its_bound_and_varies() {
        let max = Duration::from_millis(500);
        let draws: Vec<Duration> = (0..32).map(|_| jitter(max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        assert!(draws.iter().any(|d| *d != draws[0]));
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            default_jitter(Duration::from_secs(30)),
            Duration::from_secs(3)
        );
        assert_eq!(
            default_jitter(Duration::from_secs(3600)),
            Duration::from_secs(60)
        );
    }
}
