//! `sonde load`: phase after phase, a UDP ping, a TCP ping and (but in idle) the load run
//! at once as three tests against the same agent, each on its own connections; their
//! documents become the load's ([`sonde_results::document::load`]). A phase whose tests
//! could not all start ends the run there, with what was measured, marked partial.

use std::time::Instant;

use sonde_results::document::load::{self, PhaseRun};
use sonde_results::{Document, LoadSpec, Phase, TestSpec, Transport};

use crate::controller::ControllerError;
use crate::signals::Interrupt;

/// Runs one test of a phase to its document; called from one thread per test.
pub type RunTest<'a> = dyn Fn(&TestSpec) -> Result<Document, ControllerError> + Sync + 'a;

/// Runs every phase of `spec` through `run` and builds the load's document. `done` sees
/// each phase as it ends. Errors only when nothing at all started.
pub fn run_load(
    spec: &LoadSpec,
    command: &str,
    run: &RunTest<'_>,
    interrupt: &Interrupt,
    done: &mut dyn FnMut(&PhaseRun),
) -> Result<Document, ControllerError> {
    let started = Instant::now();
    let mut runs: Vec<PhaseRun> = Vec::new();
    let mut error = None;
    for &phase in &spec.phases {
        if interrupt.is_set() {
            error = Some("interrupted (Ctrl-C)".to_string());
            break;
        }
        let offset_s = started.elapsed().as_secs_f64();
        let (r, first_error) = run_phase(spec, phase, offset_s, run);
        if runs.is_empty() && r.udp.is_none() && r.tcp.is_none() && r.load.is_none() {
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        let stop = !r.errors.is_empty();
        done(&r);
        runs.push(r);
        if stop {
            break;
        }
    }
    if error.is_none() && interrupt.is_set() {
        error = Some("interrupted (Ctrl-C)".to_string());
    }
    Ok(load::build(spec, command, &runs, error).expect("a phase ran, or its error returned"))
}

/// One phase: its tests on their own threads, joined; also the first error as it came.
fn run_phase(
    spec: &LoadSpec,
    phase: Phase,
    offset_s: f64,
    run: &RunTest<'_>,
) -> (PhaseRun, Option<ControllerError>) {
    let tests = [
        ("UDP ping", Some(TestSpec::Ping(spec.ping(Transport::Udp)))),
        ("TCP ping", Some(TestSpec::Ping(spec.ping(Transport::Tcp)))),
        ("load", spec.load_of(phase)),
    ];
    let results: Vec<Option<Result<Document, ControllerError>>> = std::thread::scope(|s| {
        let handles: Vec<_> = tests
            .iter()
            .map(|(_, t)| t.as_ref().map(|t| s.spawn(move || run(t))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.map(|h| h.join().expect("a test thread does not panic")))
            .collect()
    });
    let mut errors = Vec::new();
    let mut first = None;
    let mut docs = tests.iter().zip(results).map(|((what, _), r)| match r? {
        Ok(d) => Some(d),
        Err(e) => {
            errors.push(format!("{} phase, {what}: {e}", phase.as_str()));
            first.get_or_insert(e);
            None
        }
    });
    let (udp, tcp, load) = (
        docs.next().flatten(),
        docs.next().flatten(),
        docs.next().flatten(),
    );
    drop(docs);
    let r = PhaseRun {
        phase,
        offset_s,
        udp,
        tcp,
        load,
        errors,
    };
    (r, first)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use sonde_results::document::{End, RrEnd, Section};
    use sonde_results::latency::{new_histogram, LatencySummary};

    use super::*;

    /// A document of `spec` with a round trip of `rtt_ns` (pings) and nothing else.
    fn doc(spec: &TestSpec, rtt_ns: Option<u64>) -> Document {
        let rr = RrEnd {
            latency_ns: rtt_ns.map(|v| {
                let mut h = new_histogram();
                h.record(v).unwrap();
                LatencySummary::of(&h).unwrap()
            }),
            requests_per_second: Some(1000.0),
            ..Default::default()
        };
        let end = End::new(false, None, Section::Rr(rr));
        crate::tests::local_doc(spec, end)
    }

    /// Pings see 100 µs while a load runs beside them, 10 µs otherwise; the load is an rpc
    /// (a stream's document needs real sides).
    struct Fake {
        loaded: AtomicBool,
        calls: AtomicUsize,
        fail_from_call: usize,
    }

    impl Fake {
        fn run(&self, spec: &TestSpec) -> Result<Document, ControllerError> {
            if self.calls.fetch_add(1, Ordering::SeqCst) >= self.fail_from_call {
                return Err(ControllerError::Interrupted);
            }
            match spec {
                TestSpec::Ping(_) => {
                    std::thread::sleep(Duration::from_millis(40));
                    let rtt = if self.loaded.load(Ordering::SeqCst) {
                        100_000
                    } else {
                        10_000
                    };
                    Ok(doc(spec, Some(rtt)))
                }
                _ => {
                    self.loaded.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(80));
                    self.loaded.store(false, Ordering::SeqCst);
                    Ok(doc(spec, None))
                }
            }
        }
    }

    fn rpc_load() -> LoadSpec {
        LoadSpec {
            load: Box::new(TestSpec::Rpc(Default::default())),
            phases: vec![Phase::Idle, Phase::Both],
            ..LoadSpec::default()
        }
    }

    fn fake(fail_from_call: usize) -> Fake {
        Fake {
            loaded: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            fail_from_call,
        }
    }

    #[test]
    fn pings_run_beside_the_load_and_the_added_latency_is_against_idle() {
        let f = fake(usize::MAX);
        let mut seen = Vec::new();
        let d = run_load(
            &rpc_load(),
            "sonde load",
            &|s| f.run(s),
            &Interrupt::none(),
            &mut |r| seen.push(r.phase),
        )
        .unwrap();
        assert_eq!(seen, [Phase::Idle, Phase::Both]);
        assert_eq!(d.test, sonde_results::spec::TestName::Load);
        assert_eq!(d.start.command, "sonde load");
        assert!(matches!(d.start.spec, TestSpec::Load(_)));
        let l = d.end.load().unwrap();
        assert_eq!(l.phases.len(), 2);
        // HDR's 3 significant digits.
        assert!(
            l.phases[0]
                .udp_rtt_ns
                .as_ref()
                .unwrap()
                .p50
                .abs_diff(10_000)
                < 20
        );
        assert_eq!(l.phases[1].load.requests_per_second, Some(1000.0));
        assert!(l.phases[1].start_s >= l.phases[0].start_s + 0.03);
        assert_eq!(l.added_latency.len(), 2, "both pings");
        for a in &l.added_latency {
            assert_eq!(a.phase, Phase::Both);
            let want = 90_000i64;
            assert!((a.p50_added_ns - want).abs() < 200, "{a:?}");
        }
        assert!(!d.end.partial, "{:?}", d.end.error);
    }

    #[test]
    fn a_phase_that_cannot_start_ends_the_run_partial_with_the_phases_before() {
        // Idle runs two tests; the third call (the next phase's first) fails.
        let f = fake(2);
        let d = run_load(
            &rpc_load(),
            "sonde load",
            &|s| f.run(s),
            &Interrupt::none(),
            &mut |_| {},
        )
        .unwrap();
        assert!(d.end.partial);
        assert!(
            d.end.error.as_deref().unwrap().starts_with("both phase"),
            "{:?}",
            d.end.error
        );
        let l = d.end.load().unwrap();
        assert_eq!(l.phases.len(), 2);
        assert!(!l.phases[0].partial);
        assert!(l.phases[1].partial);
        // Nothing started at all: the first error is the run's.
        let f = fake(0);
        let e = run_load(
            &rpc_load(),
            "x",
            &|s| f.run(s),
            &Interrupt::none(),
            &mut |_| {},
        );
        assert!(matches!(e, Err(ControllerError::Interrupted)));
    }
}
