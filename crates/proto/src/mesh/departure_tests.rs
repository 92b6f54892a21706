//! A probe's departure by the kernel's transmit stamp ([`Prober::departed`]): its round
//! trip and its T1 in the one-way figures count from the stamp; a stamp after the answer
//! changes nothing; each first answer is counted by where its T1 came from.

use sonde_results::mesh::{Answer, Verdict};

use super::prober_tests::{at, clocks, fleet, next_probe, prober, Far, A, B, MS, REAL0};
use super::*;

#[test]
fn a_stamped_departure_times_the_round_trip_and_the_forward_delay() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut far = Far::new(B, Some(fleet()));
    // The same host's reflector: one clock, so the one-way figures are exact.
    far.boot_id = [1; 16];
    let mut now = 0;
    let (probe, bytes) = next_probe(&mut p, &mut now);
    // Written (T1) and given as sent at `now`; the kernel stamped it 2 ms later (the
    // send waited). There 3 ms after T1, held 1 ms, back 6 ms after T1.
    assert!(p.departed(probe.to, probe.seq, 2 * MS));
    assert!(!p.departed(probe.to, probe.seq, 2 * MS), "a second stamp");
    let answer = far.answer(&bytes, REAL0 + now + 3 * MS, REAL0 + now + 4 * MS);
    let got = p.handle_answer(at(B), &answer, clocks(now + 6 * MS), None);
    let first = |rtt_ns| {
        Matched::Answer(Answer::First {
            reordered: false,
            rtt_ns,
        })
    };
    assert_eq!(got, first(3 * MS), "6 - 2 late - 1 held");
    assert!(!p.departed(probe.to, probe.seq, MS), "answered already");
    assert_eq!(
        p.departures(),
        Departures {
            kernel: 1,
            process: 0
        }
    );
    // The window closes: forward 3 - 2 = 1 ms (not 3), reverse 6 - 4 = 2 ms.
    now += 10_001 * MS;
    p.handle_timeout(now);
    let e = p.peers().get(&at(B)).unwrap();
    let Some(Verdict::Delays(f)) = e.stats.shown.last_oneway else {
        panic!("{:?}", e.stats.shown.last_oneway)
    };
    assert!((f.forward_p50_s - 0.001).abs() < 1e-9, "{f:?}");
    assert!((f.reverse_p50_s - 0.002).abs() < 1e-9, "{f:?}");

    // The next probe gets no stamp before its answer: timed by its clock read, counted.
    let (probe, bytes) = next_probe(&mut p, &mut now);
    let answer = far.answer(&bytes, REAL0 + now + 3 * MS, REAL0 + now + 4 * MS);
    let got = p.handle_answer(at(B), &answer, clocks(now + 6 * MS), None);
    assert_eq!(got, first(5 * MS), "6 - 1 held");
    // Its stamp, late: nothing moves.
    assert!(!p.departed(probe.to, probe.seq, 2 * MS));
    assert!(!p.departed(at(B), probe.seq + 9, 2 * MS), "never sent");
    assert!(!p.departed(at(A), probe.seq, 2 * MS), "not a peer");
    assert_eq!(
        p.departures(),
        Departures {
            kernel: 1,
            process: 1
        }
    );
}
