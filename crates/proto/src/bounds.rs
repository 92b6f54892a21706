//! What a controller keeps of an agent's `Interval` frames is bounded by the spec it sent:
//! a rogue agent holding the key could otherwise send 4 MiB frames without end and fill
//! the controller's memory. Beyond these bounds a sample is a protocol error that ends the
//! test (partial, with what was measured until then).
//!
//! Issue 52: the count alone let a rogue send every interval's sample at once, each with
//! eight histograms just under the size check (1,195 MB held for a 300 s ping). Now a
//! sample may carry only the histograms its side measures (a serving agent's none; a
//! client agent's its round trips', and the stages and one-way delays only with
//! `--stages`), the `n`-th may not come before interval `n` began, and what is kept has a
//! budget that grows by [`per_interval_bytes`] an interval.

use std::time::Duration;

use sonde_results::{IntervalSample, Role, TestSpec};

/// The longest encoded histogram a sample may carry. A histogram of `new_histogram`'s
/// bounds with every bucket counted differently encodes to less than this (see the test),
/// so only a rogue agent's exceeds it.
pub const MAX_HISTOGRAM_CHARS: usize = 512 << 10;

/// What a sample costs beyond its histograms and connections, in the budget.
const SAMPLE_BYTES: u64 = 1 << 10;
/// What each histogram a sample may carry adds to an interval's budget: a real interval's
/// round trips encode to a few kB (107 kB if every bucket of the 1 ns-60 s range were
/// counted differently), and the budget is cumulative, so an interval's spare is the next
/// one's.
const HISTOGRAM_BUDGET: u64 = 64 << 10;

/// Samples an agent may send in a test: one per interval of the window, and one partial.
pub fn most_intervals(spec: &TestSpec) -> u64 {
    spec.timing().intervals().saturating_add(1)
}

/// Connections a sample may describe: the test's own (its kind's row:
/// `sonde_results::document`; the most any test may open for a kind not run over a session).
pub fn most_connections(spec: &TestSpec) -> usize {
    sonde_results::document::connections(spec) as usize
}

/// Which histograms a sample of the agent in `role` may carry for `spec`: its round
/// trips' (a client part's), and each stage's and both one-way directions' (with
/// `--stages`). A serving agent measures no latency: it only answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histograms {
    pub latency: bool,
    pub stages: bool,
}

impl Histograms {
    pub fn of(spec: &TestSpec, role: Role) -> Histograms {
        let client = role == Role::Client;
        let staged = matches!(spec, TestSpec::Ping(r) | TestSpec::Rpc(r) if r.stages);
        Histograms {
            latency: client && matches!(spec, TestSpec::Ping(_) | TestSpec::Rpc(_)),
            stages: client && staged,
        }
    }

    /// How many histograms one sample may carry: the round trips', seven stages', two
    /// one-way directions'.
    fn most(self) -> u64 {
        u64::from(self.latency) + if self.stages { 9 } else { 0 }
    }
}

/// What an interval adds to the budget of the samples kept (see the module's note): 1 kB,
/// 64 kB per histogram a sample may carry, and the connections a sample may describe. A
/// serving agent's ping: 1 kB; a client agent's with `--stages`: 641 kB.
pub fn per_interval_bytes(spec: &TestSpec, role: Role) -> u64 {
    let conns = most_connections(spec) as u64;
    SAMPLE_BYTES
        + Histograms::of(spec, role).most() * HISTOGRAM_BUDGET
        + conns * std::mem::size_of::<sonde_results::tcp::TcpSample>() as u64
}

/// What a sample costs the controller to keep: its histograms' and one-way strings'
/// bytes, its connections, and [`SAMPLE_BYTES`].
pub fn retained_bytes(sample: &IntervalSample) -> u64 {
    let conns = sample.stream().map_or(0, |s| s.tcp.len()) as u64;
    let texts: u64 = texts(sample).map(|(_, t)| t.len() as u64).sum();
    SAMPLE_BYTES + texts + conns * std::mem::size_of::<sonde_results::tcp::TcpSample>() as u64
}

/// Every histogram and one-way string of `sample`, with what it is.
fn texts(sample: &IntervalSample) -> impl Iterator<Item = (&'static str, &str)> {
    let rr = sample.rr();
    let latency = rr
        .and_then(|r| r.latency_ns.as_ref())
        .and_then(|l| l.histogram.as_deref())
        .map(|h| ("round-trip histogram", h));
    let stages = rr
        .and_then(|r| r.stages.as_ref())
        .into_iter()
        .flat_map(|s| s.ns.values())
        .filter_map(|l| l.histogram.as_deref())
        .map(|h| ("stage histogram", h));
    let oneway = rr
        .and_then(|r| r.oneway.as_deref())
        .into_iter()
        .flat_map(|o| [o.forward.as_str(), o.reverse.as_str()])
        .map(|h| ("one-way histogram", h));
    latency.into_iter().chain(stages).chain(oneway)
}

/// When a sample comes: how many were taken before it, their bytes, and how long after
/// the controller said Start.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub seen: u64,
    pub retained: u64,
    pub since_start: Duration,
    /// A partial sample was taken already (the one a cut test sends early).
    pub partial_seen: bool,
}

/// What an agent sent beyond the bounds of its test (`ProtoError::Excess`): the test ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Excess {
    #[error("it sent more interval samples than the test's {most} ({} intervals and a partial one)", .most - 1)]
    Samples { most: u64 },
    #[error("its sample {nth} came {:.3} s after Start, before that interval began ({:.3} s)", .after.as_secs_f64(), .begins.as_secs_f64())]
    Early {
        nth: u64,
        after: Duration,
        begins: Duration,
    },
    #[error("its interval {index} is not a {test} test's sample")]
    Section { index: u32, test: &'static str },
    #[error("its interval {index} describes {described} connections, more than the test's {most}")]
    Connections {
        index: u32,
        described: usize,
        most: usize,
    },
    #[error(
        "its interval {index} carries {what}, which {side} of this test{asked} does not measure"
    )]
    Unmeasured {
        index: u32,
        what: &'static str,
        side: &'static str,
        asked: &'static str,
    },
    #[error(
        "its interval {index} carries a {what} of {bytes} bytes, more than {MAX_HISTOGRAM_CHARS}"
    )]
    Histogram {
        index: u32,
        what: &'static str,
        bytes: usize,
    },
    #[error("its samples up to interval {index} hold {held} bytes, more than the {budget} its first {intervals} intervals allow")]
    Retained {
        index: u32,
        held: u64,
        budget: u64,
        intervals: u64,
    },
    #[error("its document is not a STAMP run's")]
    NotStamp,
    #[error("its STAMP run went to {0}, not the reflector asked for")]
    OtherReflector(String),
    #[error("its STAMP run has {intervals} intervals, more than the spec's {most}")]
    StampIntervals { intervals: usize, most: usize },
}

/// Why a sample of the agent in `role` in a test of `spec`, arriving as `at` says, is
/// beyond the bounds; else what it costs to keep ([`retained_bytes`]).
pub fn check_sample(
    spec: &TestSpec,
    role: Role,
    at: Arrival,
    sample: &IntervalSample,
) -> Result<u64, Excess> {
    let most = most_intervals(spec);
    let index = sample.index;
    if at.seen >= most {
        return Err(Excess::Samples { most });
    }
    check_time(spec, at, sample)?;
    if !sonde_results::document::sample_of(spec, &sample.section) {
        return Err(Excess::Section {
            index,
            test: spec.name(),
        });
    }
    let conns = most_connections(spec);
    let described = sample.stream().map_or(0, |s| s.tcp.len());
    if described > conns {
        return Err(Excess::Connections {
            index,
            described,
            most: conns,
        });
    }
    check_histograms(spec, role, sample)?;
    let bytes = retained_bytes(sample);
    let budget = at.seen.saturating_add(2) * per_interval_bytes(spec, role);
    if at.retained.saturating_add(bytes) > budget {
        return Err(Excess::Retained {
            index,
            held: at.retained.saturating_add(bytes),
            budget,
            intervals: at.seen + 1,
        });
    }
    Ok(bytes)
}

/// The `seen`-th sample (from 0) describes interval `seen` at the earliest, which begins
/// `warmup + seen` intervals after Start on the agent's clock, whose Start came after ours.
/// One partial sample (a test cut short) may come at any time.
fn check_time(spec: &TestSpec, at: Arrival, sample: &IntervalSample) -> Result<(), Excess> {
    if sample.partial && !at.partial_seen {
        return Ok(());
    }
    let t = spec.timing();
    let begins = Duration::from_millis(
        t.warmup_ms
            .saturating_add(at.seen.saturating_mul(t.interval_ms)),
    );
    if at.since_start < begins {
        return Err(Excess::Early {
            nth: at.seen + 1,
            after: at.since_start,
            begins,
        });
    }
    Ok(())
}

/// Only the histograms this side measures, each of at most [`MAX_HISTOGRAM_CHARS`].
fn check_histograms(spec: &TestSpec, role: Role, sample: &IntervalSample) -> Result<(), Excess> {
    let index = sample.index;
    let may = Histograms::of(spec, role);
    if let Some(rr) = sample.rr() {
        let side = match role {
            Role::Client => "a client part",
            Role::Server => "a serving agent",
        };
        let extra = [
            (
                rr.latency_ns.is_some() && !may.latency,
                "round-trip latency",
            ),
            (rr.stages.is_some() && !may.stages, "stages"),
            (rr.oneway.is_some() && !may.stages, "one-way delays"),
        ];
        if let Some((_, what)) = extra.iter().find(|(bad, _)| *bad) {
            let asked = if may.latency { " without --stages" } else { "" };
            return Err(Excess::Unmeasured {
                index,
                what,
                side,
                asked,
            });
        }
    }
    if let Some((what, h)) = texts(sample).find(|(_, h)| h.len() > MAX_HISTOGRAM_CHARS) {
        return Err(Excess::Histogram {
            index,
            what,
            bytes: h.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::latency::{encode, new_histogram, LatencySummary, MAX_LATENCY_NS};
    use sonde_results::oneway::OneWayRaw;
    use sonde_results::stages::{Stage, Stages};
    use sonde_results::tcp::TcpSample;
    use sonde_results::{Direction, RrSample, RrSpec, SampleSection, StreamSample, StreamSpec};

    fn spec() -> TestSpec {
        // 10 s in 1 s intervals, 4 connections each way.
        TestSpec::Stream(StreamSpec {
            connections: 4,
            direction: Direction::Bidir,
            ..Default::default()
        })
    }

    fn sample(tcp: usize) -> IntervalSample {
        IntervalSample {
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            cpu_busy_percent: None,
            partial: false,
            section: SampleSection::Stream(StreamSample {
                tcp: vec![TcpSample::default(); tcp],
                ..Default::default()
            }),
        }
    }

    /// The `seen`-th sample, on time (each interval over), nothing kept before.
    fn on_time(spec: &TestSpec, seen: u64) -> Arrival {
        let t = spec.timing();
        Arrival {
            seen,
            retained: 0,
            since_start: Duration::from_millis(t.warmup_ms + (seen + 1) * t.interval_ms),
            partial_seen: false,
        }
    }

    #[test]
    fn the_spec_bounds_samples_and_their_connections() {
        let s = spec();
        assert_eq!(most_intervals(&s), 11);
        assert_eq!(most_connections(&s), 8);
        for seen in 0..11 {
            check_sample(&s, Role::Server, on_time(&s, seen), &sample(8)).unwrap();
        }
        let e = check_sample(&s, Role::Server, on_time(&s, 11), &sample(1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("more interval samples than the test's 11"),
            "{e}"
        );
        let e = check_sample(&s, Role::Server, on_time(&s, 0), &sample(9))
            .unwrap_err()
            .to_string();
        assert!(e.contains("9 connections, more than the test's 8"), "{e}");
        // Another kind's sample: a rogue agent's, refused.
        let mut rr = sample(0);
        rr.section = SampleSection::Rr(Default::default());
        let e = check_sample(&s, Role::Server, on_time(&s, 0), &rr)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a stream test's sample"), "{e}");
    }

    #[test]
    fn no_sample_before_its_interval_began_but_one_partial() {
        // A second of warm-up, then 1 s intervals.
        let s = spec();
        let t = s.timing();
        assert_eq!((t.warmup_ms, t.interval_ms), (1000, 1000));
        let mut at = on_time(&s, 3);
        at.since_start = Duration::from_millis(3999);
        let e = check_sample(&s, Role::Server, at, &sample(1))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "its sample 4 came 3.999 s after Start, before that interval began (4.000 s)"
        );
        at.since_start = Duration::from_millis(4000);
        check_sample(&s, Role::Server, at, &sample(1)).unwrap();
        // A test cut in its warm-up: its one partial sample comes at once; a second not.
        let mut cut = sample(1);
        cut.partial = true;
        let mut early = on_time(&s, 0);
        early.since_start = Duration::from_millis(10);
        check_sample(&s, Role::Server, early, &cut).unwrap();
        early.partial_seen = true;
        assert!(check_sample(&s, Role::Server, early, &cut).is_err());
    }

    /// The largest histogram a real interval encodes: every bucket counted, each
    /// differently.
    fn largest_real() -> LatencySummary {
        let mut h = new_histogram();
        let mut v = 1u64;
        let mut n = 1u64;
        while v <= MAX_LATENCY_NS {
            h.record_n(v, n).unwrap();
            v = h.next_non_equivalent(v);
            n = n * 7 % 1_000_003 + 1;
        }
        let text = encode(&h);
        assert!(text.len() < MAX_HISTOGRAM_CHARS, "{}", text.len());
        LatencySummary::of(&h).unwrap()
    }

    fn rr(latency: Option<LatencySummary>, stages: Option<Stages>) -> IntervalSample {
        let mut s = sample(0);
        s.section = SampleSection::Rr(RrSample {
            messages: 1,
            latency_ns: latency,
            stages,
            oneway: None,
        });
        s
    }

    fn ping(stages: bool) -> TestSpec {
        TestSpec::Ping(RrSpec {
            stages,
            ..Default::default()
        })
    }

    #[test]
    fn the_largest_real_histogram_fits_and_a_larger_one_is_refused() {
        let (client, p) = (Role::Client, ping(false));
        let mut summary = largest_real();
        check_sample(&p, client, on_time(&p, 0), &rr(Some(summary.clone()), None)).unwrap();
        summary.histogram = Some("A".repeat(MAX_HISTOGRAM_CHARS + 1));
        let e = check_sample(&p, client, on_time(&p, 0), &rr(Some(summary.clone()), None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("round-trip histogram of 524289 bytes"), "{e}");
        // A stage's histogram is held to the same bound, where stages were asked.
        let staged = ping(true);
        let mut stages = Stages::default();
        stages.ns.insert(Stage::ServerWake, summary.clone());
        let s = rr(None, Some(stages));
        let e = check_sample(&staged, client, on_time(&staged, 0), &s)
            .unwrap_err()
            .to_string();
        assert!(e.contains("stage histogram of 524289 bytes"), "{e}");
    }

    #[test]
    fn histograms_only_where_the_spec_and_the_side_measure_them() {
        let summary = largest_real();
        let mut stages = Stages::default();
        stages.ns.insert(Stage::ServerWake, summary.clone());
        let oneway = OneWayRaw {
            exchanges: 1,
            forward_base_ns: 0,
            forward: summary.histogram.clone().unwrap(),
            reverse_base_ns: 0,
            reverse: "B".repeat(MAX_HISTOGRAM_CHARS + 1),
            limits: Default::default(),
            unkept: 0,
        };
        let (plain, staged) = (ping(false), ping(true));
        // A serving agent measures no latency at all (the rogue sent eight).
        let e = check_sample(
            &staged,
            Role::Server,
            on_time(&staged, 0),
            &rr(Some(summary.clone()), None),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "its interval 0 carries round-trip latency, which a serving agent of this test does not measure"
        );
        let e = check_sample(
            &plain,
            Role::Client,
            on_time(&plain, 0),
            &rr(None, Some(stages.clone())),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "its interval 0 carries stages, which a client part of this test without --stages does not measure"
        );
        let mut with_oneway = rr(Some(summary.clone()), None);
        if let SampleSection::Rr(r) = &mut with_oneway.section {
            r.oneway = Some(Box::new(oneway.clone()));
        }
        let e = check_sample(&plain, Role::Client, on_time(&plain, 0), &with_oneway)
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries one-way delays"), "{e}");
        // With --stages, one-way's strings are histograms like the others: bounded.
        let e = check_sample(&staged, Role::Client, on_time(&staged, 0), &with_oneway)
            .unwrap_err()
            .to_string();
        assert!(e.contains("one-way histogram of 524289 bytes"), "{e}");
        if let SampleSection::Rr(r) = &mut with_oneway.section {
            r.oneway.as_mut().unwrap().reverse = summary.histogram.clone().unwrap();
        }
        check_sample(&staged, Role::Client, on_time(&staged, 0), &with_oneway).unwrap();
    }

    #[test]
    fn the_kept_bytes_have_a_budget_of_each_interval_past_and_one_more() {
        let staged = ping(true);
        let per = per_interval_bytes(&staged, Role::Client);
        assert_eq!(
            per,
            (1 << 10) + 10 * (64 << 10) + std::mem::size_of::<TcpSample>() as u64
        );
        assert_eq!(
            per_interval_bytes(&ping(true), Role::Server),
            1024 + std::mem::size_of::<TcpSample>() as u64
        );
        // Ten histograms of 100 kB in every sample (a rogue's: real ones are a few kB):
        // the first fits the budget of two intervals, the second exceeds three's.
        let h = "C".repeat(100_000);
        let mut full = Stages::default();
        for stage in Stage::ALL {
            let mut l = largest_real();
            l.histogram = Some(h.clone());
            full.ns.insert(stage, l);
        }
        let mut lat = largest_real();
        lat.histogram = Some(h.clone());
        let mut s = rr(Some(lat), Some(full));
        if let SampleSection::Rr(r) = &mut s.section {
            r.oneway = Some(Box::new(OneWayRaw {
                exchanges: 1,
                forward_base_ns: 0,
                forward: h.clone(),
                reverse_base_ns: 0,
                reverse: h.clone(),
                limits: Default::default(),
                unkept: 0,
            }));
        }
        assert_eq!(retained_bytes(&s), 1024 + 10 * 100_000);
        let mut kept = 0;
        for seen in 0..1 {
            let mut at = on_time(&staged, seen);
            at.retained = kept;
            kept += check_sample(&staged, Role::Client, at, &s).unwrap();
        }
        let mut at = on_time(&staged, 1);
        at.retained = kept;
        let e = check_sample(&staged, Role::Client, at, &s)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("its samples up to interval 0 hold 2002048 bytes, more than the {} its first 2 intervals allow", 3 * per)
        );
    }
}
