//! The reflector's real departure (T3) from its next answer's Follow-Up Telemetry TLV
//! (`held`): each answer is booked one answer later, corrected when that answer's
//! follow-up names it, by the clock read otherwise; per peer; never by a forged one.

use sonde_results::mesh::{Answer, Verdict};

use super::prober_tests::{clocks, fleet, next_probe, prober, prober_with, Far, B, MS, REAL0};
use super::*;
use crate::stamp::{FollowUp, TimeFormat, Timestamp, TimestampMethod};

const C: &str = "198.18.3.3";

/// A peer's host: its reflector (the codec's), and when its last answer really left.
struct Host {
    far: Far,
    answered: u32,
    last: Option<FollowUp>,
}

impl Host {
    fn new(addr: &str) -> Host {
        let mut far = Far::new(addr, Some(fleet()));
        // This host's boot id: one clock, so the one-way figures are exact.
        far.boot_id = [1; 16];
        Host {
            far,
            answered: 0,
            last: None,
        }
    }

    /// Its answer to the probe `bytes` sent at `now`: there 3 ms later, its clock read 1 ms
    /// after that (T3, written in), the answer out `queued_ns` after the read (a hold in
    /// its qdisc, a late send), back 2 ms later. It tells what `tell` makes of its last
    /// answer's follow-up. The answer and when it came (the ledger's clock).
    fn answer(
        &mut self,
        bytes: &[u8],
        now: u64,
        queued_ns: u64,
        tell: impl FnOnce(Option<FollowUp>) -> Option<FollowUp>,
    ) -> (Vec<u8>, u64) {
        let t3 = REAL0 + now + 4 * MS;
        let told = tell(self.last);
        let answer = self
            .far
            .answer_telling(bytes, REAL0 + now + 3 * MS, t3, told);
        self.last = Some(FollowUp {
            seq: self.answered,
            timestamp: Timestamp::from_unix_ns(t3 + queued_ns, TimeFormat::Ntp),
            mode: TimestampMethod::Software,
        });
        self.answered += 1;
        (answer, now + 6 * MS + queued_ns)
    }
}

fn rtts(p: &Prober, addr: &str) -> (u64, f64) {
    let r = &p
        .peers()
        .get(&super::prober_tests::at(addr))
        .unwrap()
        .stats
        .shown
        .rtt;
    (r.count, r.sum_s)
}

fn near(got: (u64, f64), want: (u64, f64)) -> bool {
    got.0 == want.0 && (got.1 - want.1).abs() < 1e-9
}

fn reflections(stamp: u64, clock: u64) -> Reflections {
    Reflections { stamp, clock }
}

/// Two peers probed in turn; B's first answer waits 40 ms in its host's qdisc. Its round
/// trip is 46 ms with 1 ms of hold written in; B's next answer's follow-up says it left
/// 41 ms after its receive: booked 5 ms, and its backward delay 2 ms, not 42. C's answers,
/// numbered as B's, correct nothing of B's.
#[test]
fn a_send_held_on_the_reflectors_host_is_taken_out_by_its_next_answers_follow_up() {
    let mut p = prober(Some(fleet()), &[(B, false), (C, false)]);
    let (mut b, mut c) = (Host::new(B), Host::new(C));
    let mut now = 0;
    let mut returned = Vec::new();
    for _ in 0..4 {
        let (probe, bytes) = next_probe(&mut p, &mut now);
        let (host, queued) = match probe.to.ip().to_string() == B {
            true => {
                let queued = if b.answered == 0 { 40 * MS } else { 0 };
                (&mut b, queued)
            }
            false => (&mut c, 0),
        };
        let (answer, back) = host.answer(&bytes, now, queued, |last| last);
        returned.push(p.handle_answer(probe.to, &answer, clocks(back), None));
    }
    let first = |ms| {
        Matched::Answer(Answer::First {
            reordered: false,
            rtt_ns: ms * MS,
        })
    };
    // What each answer itself says: B's first, 45 ms.
    let mut said: Vec<_> = returned.clone();
    said.sort_by_key(|m| format!("{m:?}"));
    assert_eq!(said, [first(45), first(5), first(5), first(5)]);
    // Booked: B's first corrected (5 ms, not 45), C's first by its follow-up too (no
    // hold: 5 ms); each peer's second held for the next.
    assert!(near(rtts(&p, B), (1, 0.005)), "{:?}", rtts(&p, B));
    assert!(near(rtts(&p, C), (1, 0.005)), "{:?}", rtts(&p, C));
    assert_eq!(p.reflections(), reflections(2, 0));
    // No next answer: the held ones by their clock read, once two periods (200 ms) passed
    // (and the window closes at 10 s).
    now += 10_001 * MS;
    p.handle_timeout(now);
    assert_eq!(p.reflections(), reflections(2, 2));
    assert!(near(rtts(&p, B), (2, 0.010)));
    let e = p.peers().get(&super::prober_tests::at(B)).unwrap();
    let Some(Verdict::Delays(f)) = e.stats.shown.last_oneway else {
        panic!("{:?}", e.stats.shown.last_oneway)
    };
    assert!((f.reverse_p50_s - 0.002).abs() < 1e-9, "{f:?}");
    assert!((f.forward_p50_s - 0.003).abs() < 1e-9, "{f:?}");
}

/// An answer held until its deadline, two periods (200 ms) after it came, on the
/// settling grid: not booked before, booked by its clock read at it.
#[test]
fn without_a_next_answer_the_held_one_is_booked_by_its_clock_at_its_deadline() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut b = Host::new(B);
    let mut now = 0;
    let (probe, bytes) = next_probe(&mut p, &mut now);
    let (answer, back) = b.answer(&bytes, now, 40 * MS, |last| last);
    p.handle_answer(probe.to, &answer, clocks(back), None);
    let due = back + 200 * MS;
    p.handle_timeout(due - 1);
    assert_eq!((rtts(&p, B).0, p.reflections()), (0, reflections(0, 0)));
    assert!(p.poll_timeout() <= due.div_ceil(prober::TICK_NS) * prober::TICK_NS);
    p.handle_timeout(due.div_ceil(prober::TICK_NS) * prober::TICK_NS);
    assert!(
        near(rtts(&p, B), (1, 0.045)),
        "uncorrected: {:?}",
        rtts(&p, B)
    );
    assert_eq!(p.reflections(), reflections(0, 1));
}

/// The next answer without a follow-up (zero), with one for another answer, or with one
/// before the clock read or as long as the round trip: the held answer by its clock read.
#[test]
fn a_missing_or_wrong_follow_up_books_the_answer_by_its_clock_read() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut b = Host::new(B);
    let mut now = 0;
    type Tell = fn(Option<FollowUp>) -> Option<FollowUp>;
    let tells: [Tell; 5] = [
        |last| last,
        |_| None,
        |last| {
            last.map(|f| FollowUp {
                seq: f.seq + 1,
                ..f
            })
        },
        |last| {
            last.map(|f| FollowUp {
                timestamp: Timestamp(f.timestamp.0 - (1 << 28)),
                ..f
            })
        },
        |last| {
            last.map(|f| FollowUp {
                timestamp: Timestamp(f.timestamp.0 + (1 << 30)),
                ..f
            })
        },
    ];
    for tell in tells {
        let (probe, bytes) = next_probe(&mut p, &mut now);
        let (answer, back) = b.answer(&bytes, now, 40 * MS, tell);
        p.handle_answer(probe.to, &answer, clocks(back), None);
    }
    // The first answered held; each next one books the one before uncorrected.
    assert_eq!(p.reflections(), reflections(0, 4));
    assert!(near(rtts(&p, B), (4, 4.0 * 0.045)), "{:?}", rtts(&p, B));
}

/// A follow-up rewritten on the way (under the answer's HMAC TLV, which then fails) or
/// signed under another key moves nothing: the answer still counts, its predecessor is
/// booked by its clock read. The true one, next, corrects.
#[test]
fn a_forged_follow_up_moves_no_figure() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut b = Host::new(B);
    let mut now = 0;
    let mut exchange = |p: &mut Prober, forge: bool| {
        let (probe, bytes) = next_probe(p, &mut now);
        let (mut answer, back) = b.answer(&bytes, now, 40 * MS, |last| last);
        if forge {
            // Its follow-up's timestamp says the answer before left 1 ms after its clock
            // read (a rogue shortening the round trip): the first TLV after the base.
            let at = crate::stamp::AUTH_BASE_BYTES + 4 + 4;
            let told = u64::from_be_bytes(answer[at..at + 8].try_into().unwrap());
            let told = Timestamp(told).to_unix_ns(TimeFormat::Ntp);
            let fake = Timestamp::from_unix_ns(told - 39 * MS, TimeFormat::Ntp);
            answer[at..at + 8].copy_from_slice(&fake.to_bytes());
        }
        p.handle_answer(probe.to, &answer, clocks(back), None)
    };
    assert!(matches!(exchange(&mut p, false), Matched::Answer(_)));
    let got = exchange(&mut p, true);
    assert!(
        matches!(got, Matched::Answer(Answer::First { .. })),
        "{got:?}"
    );
    assert_eq!(p.reflections(), reflections(0, 1));
    assert!(near(rtts(&p, B), (1, 0.045)));
    exchange(&mut p, false);
    assert_eq!(p.reflections(), reflections(1, 1));
    assert!(near(rtts(&p, B), (2, 0.045 + 0.005)));
}

/// Without follow-ups (the default, `--mesh-follow-up` off) a probe carries no Follow-Up
/// Telemetry TLV (the first, asking for labels, is the 412 bytes it was before them), and
/// each first answer is booked at once, T3 its reflector's clock read: B's first, held
/// 40 ms in its host, is booked at the 45 ms it says, and counted by the clock.
#[test]
fn without_follow_ups_probes_carry_none_and_answers_are_booked_at_once_by_the_clock() {
    let mut p = prober_with(Some(fleet()), &[(B, false)], false);
    let mut b = Host::new(B);
    let mut now = 0;
    let (probe, bytes) = next_probe(&mut p, &mut now);
    let tlvs = crate::stamp::tlv::iter(&bytes[crate::stamp::AUTH_BASE_BYTES..]);
    let kinds: Vec<u8> = tlvs.map(|t| t.unwrap().kind).collect();
    assert!(
        !kinds.contains(&crate::stamp::tlv::TYPE_FOLLOW_UP_TELEMETRY),
        "{kinds:?}"
    );
    assert_eq!(bytes.len(), 412);
    let (answer, back) = b.answer(&bytes, now, 40 * MS, |last| last);
    p.handle_answer(probe.to, &answer, clocks(back), None);
    assert!(near(rtts(&p, B), (1, 0.045)), "{:?}", rtts(&p, B));
    assert_eq!(p.reflections(), reflections(0, 1));
}

/// The HMACs a keyed probe costs, follow-ups asked or not (SHA-256 is most of the mesh's
/// cost per packet beside the system calls). Asked: the prober signs the TLVs and the
/// base (2); the reflector checks the base and the TLVs, then signs the TLVs, once, with
/// its labels and follow-up in them, and the base (4); the prober checks the base and the
/// TLVs, once for everything it reads from them (2). Not asked, a bare probe: 1, 2, 1.
#[test]
fn a_probe_costs_two_hmacs_sent_four_answered_and_two_read() {
    use crate::stamp::mac_count::macs_in;
    for (follow_up, want) in [(true, [2, 4, 2]), (false, [1, 2, 1])] {
        let mut p = super::test_machine::prober_with(Some(fleet()), &[(B, false)], follow_up);
        let mut b = Host::new(B);
        let mut now = 0;
        // The first exchange learns the labels and the peer's key; the second is steady.
        for round in 0..3 {
            let ((probe, bytes), sent) = macs_in(|| next_probe(&mut p, &mut now));
            let (answer, answered) = macs_in(|| b.far.answer_telling(&bytes, now, now, b.last));
            let back = clocks(now + MS);
            let (got, read) = macs_in(|| p.handle_answer(probe.to, &answer, back, None));
            assert!(
                matches!(got, Matched::Answer(Answer::First { .. })),
                "{got:?}"
            );
            if round > 0 {
                assert_eq!([sent, answered, read], want, "follow-ups {follow_up}");
            }
            b.last = Some(FollowUp {
                seq: round,
                timestamp: Timestamp::from_unix_ns(REAL0 + now, TimeFormat::Ntp),
                mode: TimestampMethod::Software,
            });
            now += MS;
        }
    }
}
