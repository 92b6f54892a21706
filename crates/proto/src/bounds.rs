//! What a controller keeps of an agent's `Interval` frames is bounded by the spec it sent:
//! a rogue agent holding the key could otherwise send 4 MiB frames without end and fill
//! the controller's memory. Beyond these bounds a sample is a protocol error that ends the
//! test (partial, with what was measured until then).

use sonde_results::{IntervalSample, SampleSection, TestSpec};

/// The longest encoded histogram a sample may carry. A histogram of `new_histogram`'s
/// bounds with every bucket counted differently encodes to less than this (see the test),
/// so only a rogue agent's exceeds it.
pub const MAX_HISTOGRAM_CHARS: usize = 512 << 10;

/// Samples an agent may send in a test: one per interval of the window, and one partial.
pub fn most_intervals(spec: &TestSpec) -> u64 {
    spec.timing().intervals().saturating_add(1)
}

/// Connections a sample may describe: the test's own.
pub fn most_connections(spec: &TestSpec) -> usize {
    let n = match spec {
        TestSpec::Stream(s) => s.total_connections(),
        TestSpec::Ping(r) | TestSpec::Rpc(r) => r.connections,
        TestSpec::Pps(p) => p.flows,
        // Not run over a session (a load's phases run as their own kinds): the most any
        // test may open.
        TestSpec::Load(_) | TestSpec::Watch(_) | TestSpec::Stamp(_) => {
            sonde_results::spec::MAX_CONNECTIONS
        }
    };
    n as usize
}

/// Why the `seen`-th sample (counted from 0) of a test of `spec` is beyond its bounds.
pub fn check_sample(spec: &TestSpec, seen: u64, sample: &IntervalSample) -> Result<(), String> {
    let most = most_intervals(spec);
    if seen >= most {
        return Err(format!(
            "it sent more interval samples than the test's {most} ({} intervals and a partial one)",
            most - 1
        ));
    }
    let own = matches!(
        (spec, &sample.section),
        (TestSpec::Stream(_), SampleSection::Stream(_))
            | (TestSpec::Ping(_) | TestSpec::Rpc(_), SampleSection::Rr(_))
            | (TestSpec::Pps(_), SampleSection::Pps(_))
    );
    if !own {
        return Err(format!(
            "its interval {} is not a {} test's sample",
            sample.index,
            spec.name()
        ));
    }
    let conns = most_connections(spec);
    let described = sample.stream().map_or(0, |s| s.tcp.len());
    if described > conns {
        return Err(format!(
            "its interval {} describes {described} connections, more than the test's {conns}",
            sample.index,
        ));
    }
    // The round trips' histogram, and each stage's (seven at most: the stages are keys).
    let rr = sample.rr();
    let stages = rr.and_then(|r| r.stages.as_ref());
    let summaries = rr
        .and_then(|r| r.latency_ns.as_ref())
        .into_iter()
        .chain(stages.into_iter().flat_map(|s| s.ns.values()));
    let mut histograms = summaries.filter_map(|l| l.histogram.as_ref());
    if let Some(h) = histograms.find(|h| h.len() > MAX_HISTOGRAM_CHARS) {
        return Err(format!(
            "its interval {} carries a histogram of {} bytes, more than {MAX_HISTOGRAM_CHARS}",
            sample.index,
            h.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::latency::{encode, new_histogram, MAX_LATENCY_NS};
    use sonde_results::tcp::TcpSample;
    use sonde_results::{Direction, RrSample, StreamSample, StreamSpec};

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

    #[test]
    fn the_spec_bounds_samples_and_their_connections() {
        let s = spec();
        assert_eq!(most_intervals(&s), 11);
        assert_eq!(most_connections(&s), 8);
        for seen in 0..11 {
            check_sample(&s, seen, &sample(8)).unwrap();
        }
        let e = check_sample(&s, 11, &sample(1)).unwrap_err();
        assert!(
            e.contains("more interval samples than the test's 11"),
            "{e}"
        );
        let e = check_sample(&s, 0, &sample(9)).unwrap_err();
        assert!(e.contains("9 connections, more than the test's 8"), "{e}");
        // Another kind's sample: a rogue agent's, refused.
        let mut rr = sample(0);
        rr.section = SampleSection::Rr(Default::default());
        let e = check_sample(&s, 0, &rr).unwrap_err();
        assert!(e.contains("is not a stream test's sample"), "{e}");
    }

    #[test]
    fn the_largest_real_histogram_fits_and_a_larger_one_is_refused() {
        // Every bucket counted, each differently: the most a real interval encodes.
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
        let ping = TestSpec::Ping(Default::default());
        let mut summary = sonde_results::latency::LatencySummary::of(&h).unwrap();
        let mut s = sample(0);
        s.section = SampleSection::Rr(RrSample {
            messages: 1,
            latency_ns: Some(summary.clone()),
            stages: None,
            oneway: None,
        });
        check_sample(&ping, 0, &s).unwrap();
        summary.histogram = Some("A".repeat(MAX_HISTOGRAM_CHARS + 1));
        s.section = SampleSection::Rr(RrSample {
            messages: 1,
            latency_ns: Some(summary.clone()),
            stages: None,
            oneway: None,
        });
        let e = check_sample(&ping, 0, &s).unwrap_err();
        assert!(e.contains("histogram of 524289 bytes"), "{e}");
        // A stage's histogram is held to the same bound.
        let mut stages = sonde_results::stages::Stages::default();
        stages
            .ns
            .insert(sonde_results::stages::Stage::ServerWake, summary.clone());
        s.section = SampleSection::Rr(RrSample {
            messages: 1,
            latency_ns: None,
            stages: Some(stages),
            oneway: None,
        });
        let e = check_sample(&ping, 0, &s).unwrap_err();
        assert!(e.contains("histogram of 524289 bytes"), "{e}");
    }
}
