//! The prober machine against a reflector made of the codec (as an agent's answers, and
//! as a rogue's), in memory with simulated time: one test per guard the red team tested.

use std::net::{IpAddr, SocketAddr};

use sonde_results::mesh::{Answer, Judging};

use super::prober::{send_slot, tick_at, TICK_NS};
use super::*;
use crate::stamp::{
    ErrorEstimate, FollowUp, Mode, Reflection, ReflectorPacket, SenderPacket, StampKey, SyncSource,
    TimeFormat, Timestamp, TimestampInfo, AUTH_BASE_BYTES,
};
use crate::Key;

/// The real-time clock at the ledger's 0 (2026).
pub(super) const REAL0: u64 = 1_780_000_000_000_000_000;
pub(super) const B: &str = "198.18.3.2";
const C: &str = "198.18.3.3";

pub(super) use super::test_machine::{at, ip, prober, prober_with, A, MS};

pub(super) fn fleet() -> StampKey {
    stamp_key(&Key::from_file_bytes(b"0123456789abcdef-fleet").unwrap())
}

pub(super) fn clocks(mono_ns: u64) -> Clocks {
    Clocks {
        mono_ns,
        real_ns: REAL0 + mono_ns,
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A peer's reflector as the codec makes one: it answers probes from `A` signed under
/// the key of both addresses, under its own address key, numbering what it reflects.
pub(super) struct Far {
    ip: IpAddr,
    mesh: Option<StampKey>,
    numbered: u32,
    labels: Labels,
    pub(super) boot_id: [u8; 16],
}

impl Far {
    pub(super) fn new(addr: &str, mesh: Option<StampKey>) -> Far {
        Far {
            ip: ip(addr),
            mesh,
            numbered: 0,
            labels: labels(&[("rack", "r2")]),
            boot_id: [2; 16],
        }
    }

    /// Its answer to `probe` received at `in_ns` and sent at `out_ns` (real time).
    pub(super) fn answer(&mut self, probe: &[u8], in_ns: u64, out_ns: u64) -> Vec<u8> {
        self.answer_telling(probe, in_ns, out_ns, None)
    }

    /// [`Far::answer`] telling `told` in the probe's Follow-Up Telemetry TLV, as the
    /// mesh's reflector does (`reflect_probe`).
    pub(super) fn answer_telling(
        &mut self,
        probe: &[u8],
        in_ns: u64,
        out_ns: u64,
        told: Option<FollowUp>,
    ) -> Vec<u8> {
        let theirs = self.mesh.as_ref().map(|m| probe_key(m, ip(A), self.ip));
        let mine = self.mesh.as_ref().map(|m| address_key(m, self.ip));
        let mode = theirs
            .as_ref()
            .map_or(Mode::Unauthenticated, Mode::Authenticated);
        let answer = mine
            .as_ref()
            .map_or(Mode::Unauthenticated, Mode::Authenticated);
        let ts = |ns| Timestamp::from_unix_ns(ns, TimeFormat::Ntp);
        let how = Reflection {
            seq: Some(self.numbered),
            receive: ts(in_ns),
            transmit: ts(out_ns),
            estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
            ttl: 64,
            info: TimestampInfo::software(SyncSource::Ntp),
            boot_id: Some(self.boot_id),
            tos: None,
            dscp_policy: Default::default(),
        };
        let mut out = vec![0; probe.len()];
        let asked = SenderPacket::read(probe, mode).expect("a probe it answers");
        let own = Own {
            labels: &self.labels,
            told,
        };
        reflect_probe(&asked, probe, (mode, answer), &how, own, &mut out).expect("room");
        self.numbered += 1;
        out
    }
}

/// Runs the machine's clock on to the next probe, sends it (at once, at `now`), and
/// returns it and its bytes.
pub(super) fn next_probe(p: &mut Prober, now: &mut u64) -> (Probe, Vec<u8>) {
    let mut buf = vec![0; 2048];
    for _ in 0..1000 {
        let est = ErrorEstimate::unknown(TimeFormat::Ntp);
        if let Some(probe) = p.poll_probe(clocks(*now), est, &mut buf) {
            p.sent(probe.to, probe.seq, *now);
            return (probe, buf[..probe.len].to_vec());
        }
        *now = p.poll_timeout().max(*now + 1);
        p.handle_timeout(*now);
    }
    panic!("no probe due")
}

/// What the metrics show of the peer at `addr`: sent, answered, duplicates, RTT samples.
fn figures(p: &Prober, addr: &str) -> (u64, u64, u64, u64) {
    let s = &p.peers().get(&at(addr)).unwrap().stats.shown;
    (s.sent, s.settled.answered, s.duplicates, s.rtt.count)
}

#[test]
fn an_answer_counts_once_net_of_the_reflectors_hold_and_its_labels_are_learned() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut far = Far::new(B, Some(fleet()));
    let mut now = 0;
    let (probe, bytes) = next_probe(&mut p, &mut now);
    assert_eq!((probe.to, probe.seq), (at(B), 0));
    assert!(bytes.len() > AUTH_BASE_BYTES, "the first asks for labels");
    // 3 ms there, held 5 ms, 2 ms back: a 5 ms round trip.
    let answer = far.answer(&bytes, REAL0 + now + 3 * MS, REAL0 + now + 8 * MS);
    let back = clocks(now + 10 * MS);
    let first = p.handle_answer(at(B), &answer, back, None);
    assert_eq!(
        first,
        Matched::Answer(Answer::First {
            reordered: false,
            rtt_ns: 5 * MS
        })
    );
    // A replayed answer: a duplicate once (the network's copy would be one), then nothing.
    assert_eq!(
        p.handle_answer(at(B), &answer, back, None),
        Matched::Answer(Answer::Duplicate)
    );
    for _ in 0..100 {
        assert_eq!(
            p.handle_answer(at(B), &answer, back, None),
            Matched::Answer(Answer::Unknown)
        );
    }
    // Its round trip booked two periods on (no next answer: `follow_up_tests`).
    p.handle_timeout(now + 400 * MS);
    assert_eq!(figures(&p, B), (1, 1, 1, 1));
    let e = p.peers().get(&at(B)).unwrap();
    assert_eq!(e.learned, labels(&[("rack", "r2")]));
    assert!(!e.one_clock(), "another host's boot id");
    // Labels known: the next probes are bare, until one in LABELS_EVERY.
    let (_, bytes) = next_probe(&mut p, &mut now);
    let bare = crate::stamp::follow_up::FOLLOW_UP_TLV + tlv::HEADER_BYTES + 16;
    assert_eq!(bytes.len(), AUTH_BASE_BYTES + bare, "the follow-up, signed");
}

/// A forgery in every shape the red team sent: unauthenticated, under another fleet's
/// key, under the mesh key itself, and another peer's true answer re-sent from this
/// peer's address. None reads, none moves a figure.
#[test]
fn a_forged_answer_or_another_peers_answer_is_unchecked_and_counts_nothing() {
    let mut p = prober(Some(fleet()), &[(B, false), (C, false)]);
    let mut now = 0;
    let (mut to_b, mut to_c) = (None, None);
    while to_b.is_none() || to_c.is_none() {
        let (probe, bytes) = next_probe(&mut p, &mut now);
        let slot = if probe.to == at(B) {
            &mut to_b
        } else {
            &mut to_c
        };
        *slot = Some(bytes);
    }
    let (to_b, to_c) = (to_b.unwrap(), to_c.unwrap());
    let asked = SenderPacket::read(
        &to_b,
        Mode::Authenticated(&probe_key(&fleet(), ip(A), ip(B))),
    )
    .unwrap();
    let forged = ReflectorPacket {
        seq: asked.seq,
        sender_seq: asked.seq,
        ssid: asked.ssid,
        receive: Timestamp::from_unix_ns(REAL0 + now, TimeFormat::Ntp),
        timestamp: Timestamp::from_unix_ns(REAL0 + now, TimeFormat::Ntp),
        sender_timestamp: asked.timestamp,
        ..Default::default()
    };
    let other_fleet = stamp_key(&Key::from_file_bytes(b"0123456789abcdef-other").unwrap());
    let mut forgeries = Vec::new();
    for mode in [
        Mode::Unauthenticated,
        Mode::Authenticated(&other_fleet),
        Mode::Authenticated(&fleet()),
        Mode::Authenticated(&address_key(&fleet(), ip(C))),
    ] {
        let mut out = vec![0; mode.base_bytes()];
        forged.write(mode, &mut out).unwrap();
        forgeries.push(out);
    }
    // C's reflector's true answer to C's probe, re-sent from B's address.
    let mut c = Far::new(C, Some(fleet()));
    forgeries.push(c.answer(&to_c, REAL0 + now, REAL0 + now));
    for f in &forgeries {
        let got = p.handle_answer(at(B), f, clocks(now + MS), None);
        assert_eq!(got, Matched::Unchecked, "{} bytes", f.len());
    }
    assert_eq!(
        p.handle_answer(at(B), b"junk", clocks(now + MS), None),
        Matched::Unchecked
    );
    p.handle_timeout(now + 2_000 * MS);
    let (sent, answered, dup, rtt) = figures(&p, B);
    assert!(sent >= 1);
    assert_eq!((answered, dup, rtt), (0, 0, 0));
    assert!(p.peers().get(&at(B)).unwrap().learned.is_empty());
}

#[test]
fn an_answer_from_an_address_not_listed_counts_nowhere() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut now = 0;
    let (_, bytes) = next_probe(&mut p, &mut now);
    let answer = Far::new(B, Some(fleet())).answer(&bytes, REAL0 + now, REAL0 + now);
    for from in [at(C), SocketAddr::new(ip(B), 863)] {
        assert_eq!(
            p.handle_answer(from, &answer, clocks(now + MS), None),
            Matched::NotListed,
            "{from}"
        );
    }
    p.handle_timeout(now + 2_000 * MS);
    assert_eq!(figures(&p, B).1, 0);
}

/// A keyless rogue holding a peer's address echoes each probe: without a key the echo
/// reads as an answer, with zeros where a reflector writes its receive time. With a key
/// it does not even check (a probe's key is not an answer's).
#[test]
fn an_echoed_probe_is_refused_for_its_zero_receive_time_without_a_key() {
    for (key, want) in [
        (None, Matched::NoReceiveTime),
        (Some(fleet()), Matched::Unchecked),
    ] {
        let mut p = prober(key, &[(B, false)]);
        let mut now = 0;
        for _ in 0..5 {
            let (_, bytes) = next_probe(&mut p, &mut now);
            assert_eq!(p.handle_answer(at(B), &bytes, clocks(now + MS), None), want);
        }
        p.handle_timeout(now + 2_000 * MS);
        let (sent, answered, dup, rtt) = figures(&p, B);
        assert_eq!((sent, answered, dup, rtt), (5, 0, 0, 0), "{want:?}");
    }
}

/// An answer for another prober's session (its SSID) is not this one's; an `open` peer
/// (an agent-less reflector) keeps no session, so its answers count whatever they say.
#[test]
fn another_sessions_answer_is_refused_except_from_an_open_peer() {
    for (key, open, want_counted) in [
        (Some(fleet()), false, false),
        (None, false, false),
        (Some(fleet()), true, true),
    ] {
        let mut p = prober(key.clone(), &[(B, open)]);
        let mut far = Far::new(B, key.clone().filter(|_| !open));
        let mut now = 0;
        let (_, mut bytes) = next_probe(&mut p, &mut now);
        // The same probe as another prober (SSID 9) of this host sends it.
        let theirs = key
            .as_ref()
            .filter(|_| !open)
            .map(|m| probe_key(m, ip(A), ip(B)));
        let mode = theirs
            .as_ref()
            .map_or(Mode::Unauthenticated, Mode::Authenticated);
        let mut asked = SenderPacket::read(&bytes, mode).unwrap();
        asked.ssid = 9;
        asked.write(mode, &mut bytes).unwrap();
        if open {
            let answer = far.answer(&bytes, REAL0 + now, REAL0 + now);
            let got = p.handle_answer(at(B), &answer, clocks(now + MS), None);
            assert!(
                matches!(got, Matched::Answer(Answer::First { .. })),
                "{got:?}"
            );
            continue;
        }
        let answer = far.answer(&bytes, REAL0 + now, REAL0 + now);
        let got = p.handle_answer(at(B), &answer, clocks(now + MS), None);
        assert_eq!(got, Matched::OtherSession);
        p.handle_timeout(now + 2_000 * MS);
        assert_eq!(figures(&p, B).1, u64::from(want_counted));
    }
}

/// An answer after its probe's deadline, after it settled as lost, or before the probe's
/// departure was given counts nothing; the loss stays one loss.
#[test]
fn a_late_answer_after_settling_or_before_its_send_counts_nothing() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut far = Far::new(B, Some(fleet()));
    let mut now = 0;
    let (_, first) = next_probe(&mut p, &mut now);
    let sent_at = now;
    let late = far.answer(&first, REAL0 + now, REAL0 + now);
    // Past its 100 ms deadline, before and after it settled (500 ms more, on the
    // settling grid).
    let got = p.handle_answer(at(B), &late, clocks(sent_at + 150 * MS), None);
    assert_eq!(got, Matched::Answer(Answer::Unknown));
    p.handle_timeout(sent_at + 1_000 * MS);
    let s = p.peers().get(&at(B)).unwrap().stats.shown.settled;
    assert_eq!((s.answered, s.lost_unknown), (0, 1), "{s:?}");
    let got = p.handle_answer(at(B), &late, clocks(sent_at + 1_100 * MS), None);
    assert_eq!(got, Matched::Answer(Answer::Unknown));
    // Polled but not yet given as sent: its answer is not one.
    let mut buf = vec![0; 2048];
    let est = ErrorEstimate::unknown(TimeFormat::Ntp);
    let mut t = sent_at + 1_100 * MS;
    let probe = loop {
        if let Some(pr) = p.poll_probe(clocks(t), est, &mut buf) {
            break pr;
        }
        t += MS;
    };
    let early = far.answer(&buf[..probe.len], REAL0 + t, REAL0 + t);
    let got = p.handle_answer(at(B), &early, clocks(t), None);
    assert_eq!(got, Matched::Answer(Answer::Unknown));
    p.sent(probe.to, probe.seq, t);
    let got = p.handle_answer(at(B), &early, clocks(t + MS), None);
    assert!(
        matches!(got, Matched::Answer(Answer::First { .. })),
        "{got:?}"
    );
    p.handle_timeout(t + 2_000 * MS);
    let s = p.peers().get(&at(B)).unwrap().stats.shown.settled;
    assert_eq!((s.answered, s.lost_unknown), (1, 1), "{s:?}");
}

/// A probe whose send failed is never `sent`: the next probe carries its number again,
/// and the ledger has no gap (a gap would read as loss).
#[test]
fn a_probe_never_sent_leaves_no_gap() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    let mut buf = vec![0; 2048];
    let est = ErrorEstimate::unknown(TimeFormat::Ntp);
    let mut t = 0;
    let mut seqs = Vec::new();
    while seqs.len() < 2 {
        if let Some(pr) = p.poll_probe(clocks(t), est, &mut buf) {
            seqs.push(pr.seq);
        }
        t += MS;
    }
    assert_eq!(seqs, [0, 0], "an unsent number goes again");
    assert_eq!(figures(&p, B).0, 0);
    // A departure given for a number it did not poll changes nothing.
    p.sent(at(B), 5, t);
    p.sent(at(C), 0, t);
    assert_eq!(figures(&p, B).0, 0);
}

/// An answer to `probe` (unauthenticated) carrying a Labels TLV of a rogue's choosing.
fn open_answer_with_labels(probe: &[u8], at_ns: u64, text: &str) -> Vec<u8> {
    let asked = SenderPacket::read(probe, Mode::Unauthenticated).unwrap();
    let ts = Timestamp::from_unix_ns(at_ns, TimeFormat::Ntp);
    let answer = ReflectorPacket {
        seq: asked.seq,
        sender_seq: asked.seq,
        ssid: asked.ssid,
        receive: ts,
        timestamp: ts,
        sender_timestamp: asked.timestamp,
        sender_ttl: 255,
        ..Default::default()
    };
    let base = Mode::Unauthenticated.base_bytes();
    let mut out = vec![0u8; base + 4 + text.len()];
    answer.write(Mode::Unauthenticated, &mut out).unwrap();
    let value = crate::stamp::tlv::put(&mut out[base..], TYPE_LABELS, text.len()).unwrap();
    value.copy_from_slice(text.as_bytes());
    out
}

/// Labels and the boot id are believed under a verified HMAC TLV only: an open peer's
/// answer carries none that count (M3), a keyed one's with a changed label none either
/// (its answer still counts: the base is signed apart). The same boot id: one clock.
#[test]
fn labels_and_the_boot_id_are_learned_only_under_a_verified_hmac() {
    let mut p = prober(Some(fleet()), &[(B, false), (C, true)]);
    let mut far_b = Far::new(B, Some(fleet()));
    far_b.boot_id = [1; 16];
    let mut now = 0;
    let (mut tampered, mut open_answered) = (false, 0);
    for _ in 0..6 {
        let (probe, bytes) = next_probe(&mut p, &mut now);
        let answer = if probe.to == at(C) {
            open_answered += 1;
            open_answer_with_labels(&bytes, REAL0 + now, "evil=v1\nrack=forged\n")
        } else {
            let mut answer = far_b.answer(&bytes, REAL0 + now, REAL0 + now);
            if !tampered {
                // The first answer's label changed on the way: r2 -> r9.
                let i = AUTH_BASE_BYTES
                    + answer[AUTH_BASE_BYTES..]
                        .windows(2)
                        .position(|w| w == b"r2")
                        .unwrap();
                answer[i + 1] = b'9';
                tampered = true;
                let got = p.handle_answer(probe.to, &answer, clocks(now + MS), None);
                assert!(
                    matches!(got, Matched::Answer(Answer::First { .. })),
                    "{got:?}"
                );
                let b = p.peers().get(&at(B)).unwrap();
                assert!(b.learned.is_empty() && !b.one_clock());
                continue;
            }
            answer
        };
        let got = p.handle_answer(probe.to, &answer, clocks(now + MS), None);
        assert!(
            matches!(got, Matched::Answer(Answer::First { .. })),
            "{got:?}"
        );
    }
    let b = p.peers().get(&at(B)).unwrap();
    assert_eq!(b.learned, labels(&[("rack", "r2")]));
    assert!(b.one_clock(), "its reflector runs on this host");
    let c = p.peers().get(&at(C)).unwrap();
    assert!(open_answered >= 1);
    assert!(
        c.learned.is_empty(),
        "an open peer's labels: {:?}",
        c.learned
    );
    assert!(c.labels().is_empty());
}

/// The list changes: a new peer starts within a period, a gone one leaves with its
/// figures, the budget is shared; a peer whose probes leave from another address now is
/// probed under the new address's key.
#[test]
fn a_new_list_adds_removes_shares_the_budget_and_follows_a_route() {
    let mut p = prober(Some(fleet()), &[(B, false)]);
    assert_eq!(p.rate_per_s(), 10.0);
    let mut now = 0;
    next_probe(&mut p, &mut now);
    let peer = |addr: &str, from: &str| Listed {
        peer: Peer {
            addr: at(addr),
            open: false,
            labels: Default::default(),
        },
        from: ip(from),
    };
    // Twenty peers at 10/s would be 200/s: each gets 5 of the 100.
    let many: Vec<Listed> = (10..30)
        .map(|i| peer(&format!("198.18.4.{i}"), A))
        .collect();
    let change = p.set_list(now, many);
    assert_eq!(change, ListChange { added: 20, gone: 1 });
    assert!(p.peers().get(&at(B)).is_none());
    assert_eq!(p.rate_per_s(), 100.0);
    let change = p.set_list(now, vec![peer(B, "198.18.3.9")]);
    assert_eq!((change.added, change.gone), (1, 20));
    let (_, bytes) = next_probe(&mut p, &mut now);
    let moved = probe_key(&fleet(), ip("198.18.3.9"), ip(B));
    assert!(SenderPacket::read(&bytes, Mode::Authenticated(&moved)).is_ok());
    let change = p.set_list(now, vec![peer(B, A)]);
    assert_eq!(change, ListChange::default());
    let (_, bytes) = next_probe(&mut p, &mut now);
    let back = probe_key(&fleet(), ip(A), ip(B));
    assert!(SenderPacket::read(&bytes, Mode::Authenticated(&back)).is_ok());
    p.unreachable(at(B), Unreachable::Port);
    p.unreachable(at(B), Unreachable::Host);
    p.unreachable(at(C), Unreachable::Host);
    let u = p.peers().get(&at(B)).unwrap().stats.shown.unreachable;
    assert_eq!((u.port, u.host), (1, 1));
}

/// Every peer is probed at its rate, each probe within its send slot, and the machine
/// asks to be called no later than the next probe's slot or settling.
#[test]
fn each_peer_is_probed_at_its_rate_and_the_timeout_says_when() {
    let peers: Vec<String> = (10..20).map(|i| format!("198.18.4.{i}")).collect();
    let list: Vec<(&str, bool)> = peers.iter().map(|p| (p.as_str(), false)).collect();
    let mut p = prober(Some(fleet()), &list);
    let mut buf = vec![0; 2048];
    let est = ErrorEstimate::unknown(TimeFormat::Ntp);
    let (mut now, mut sent, mut wakeups) = (0, 0, 0);
    while now < 10_000 * MS {
        while let Some(pr) = p.poll_probe(clocks(now), est, &mut buf) {
            p.sent(pr.to, pr.seq, now);
            sent += 1;
        }
        p.handle_timeout(now);
        let next = p.poll_timeout();
        assert!(next > now, "{next} at {now}");
        now = next;
        wakeups += 1;
    }
    // 10 peers at 10/s for 10 s (the first probes within the first period).
    assert!((995..=1000).contains(&sent), "{sent}");
    assert!(wakeups <= 500, "{wakeups} wake-ups");
    for e in p.peers().values() {
        assert!(
            (99..=100).contains(&e.stats.shown.sent),
            "{}",
            e.stats.shown.sent
        );
    }
}

/// A peer with something to settle is settled in the wake-up that sees it, whenever
/// that is; one with nothing due yet on the first grid point after its due time.
#[test]
fn a_peer_due_is_settled_now_not_moved_to_the_next_grid_point() {
    let judging = Judging::default();
    let mut stats = sonde_results::mesh::PeerStats::new(0, &judging);
    stats.on_sent(0, 0);
    let waiting = stats.next_tick_ns();
    assert_eq!(tick_at(&stats, MS), waiting.div_ceil(200 * MS) * 200 * MS);
    stats.on_answer(0, 0, MS, 0);
    // Answered: due now. A probe sent 4 ms after a grid point does not move it on.
    assert_eq!(tick_at(&stats, 404 * MS), 404 * MS);
    stats.on_sent(1, 404 * MS);
    assert_eq!(tick_at(&stats, 404 * MS), 404 * MS);
    stats.tick(404 * MS);
    assert!(tick_at(&stats, 404 * MS + 1) > 404 * MS + 1);
}

#[test]
fn a_send_slot_divides_the_settling_grid_and_stays_under_half_the_period() {
    for (rate, slot_ms) in [
        (0.1, 200.0),
        (1.0, 200.0),
        (2.0, 200.0),
        (10.0, 50.0),
        (100.0, 3.125),
    ] {
        let period = prober::period_ns(rate);
        let slot = send_slot(period);
        assert_eq!(slot as f64 / 1e6, slot_ms, "at {rate}/s");
        assert_eq!(TICK_NS % slot, 0);
        assert!(slot <= period / 2);
    }
    assert_eq!(send_slot(3), 1, "at least a nanosecond");
}
