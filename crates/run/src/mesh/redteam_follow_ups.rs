//! The red team against follow-ups (RFC 8972 §4.7's Follow-Up Telemetry TLV), in memory:
//! real probers' machines and a real reflector (`MeshReflector`, its `FollowUps`), the
//! reflector's kernel stamps simulated (each answer left `QUEUED` after its clock read),
//! and a party without the key on the wire between them that captures, re-sends,
//! reorders, duplicates and drops answers, or (keyless) sends probes from a listed address.
//! Each test states the figures the prober must book whatever the attacker does: a
//! probe's round trip is `NET` by the answer's stamp, `NET + QUEUED` by its clock read, and
//! nothing else.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use sonde_proto::mesh::{stamp_key, Clocks, Listed, Matched, Peer, Prober};
use sonde_proto::stamp::{
    ErrorEstimate, Mode, SenderPacket, SessionId, TimeFormat, Timestamp, BASE_BYTES,
};
use sonde_results::mesh::Answer;

use super::keys::Keys;
use super::reflector::{MeshReflector, Rate, Times};
use super::tests::{config, mesh_key};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const REAL0: u64 = 1_780_000_000_000_000_000;
const PROBER_PORT: u16 = 40_000;
const ONE_WAY: u64 = MS;
/// From the probe's arrival to the reflector's clock read (T3, written in).
const HOLD: u64 = MS / 2;
/// From that read to the answer's real departure (its kernel stamp): a wait in the
/// reflector host's qdisc.
const QUEUED: u64 = 5 * MS;
/// The round trip outside the hosts.
const NET: u64 = 2 * ONE_WAY;

const A: &str = "198.18.7.1";
const B: &str = "198.18.7.2";
const C: &str = "198.18.7.3";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ts(ns: u64) -> Timestamp {
    Timestamp::from_unix_ns(ns, TimeFormat::Ntp)
}

fn clocks(t: u64) -> Clocks {
    Clocks {
        mono_ns: t,
        real_ns: REAL0 + t,
    }
}

/// The prober at `from` listing B's reflector, keyed, asking follow-ups, 50 probes a
/// second (a period of 20 ms, lost after 100 ms), its session `ssid`.
fn prober(from: &str, ssid: u16) -> Prober {
    let mut cfg = config(ip(from), &mesh_key(), ssid, None);
    (cfg.rate, cfg.budget) = (50.0, 100.0);
    let mut p = Prober::new(cfg.prober(ssid, u64::from(ssid) + from.len() as u64, None));
    let peer = Peer {
        addr: SocketAddr::new(ip(B), 862),
        open: false,
        labels: Default::default(),
    };
    p.set_list(
        0,
        vec![Listed {
            peer,
            from: ip(from),
        }],
    );
    p
}

/// B's reflector, keyed (or keyless, listing `listed`), answering far more than any test
/// sends.
fn reflector(keyed: bool, listed: &[&str]) -> MeshReflector {
    let keys = keyed.then(|| Keys::new(stamp_key(&mesh_key()), ip(B)));
    let rate = Rate {
        per_s: 1e9,
        burst: 1e9,
        per_source: 1_000_000_000,
    };
    let mut r = MeshReflector::new(keys, rate, Default::default());
    r.listed(listed.iter().map(|a| ip(a)));
    r
}

/// B answers `probe` from `from`, arrived at `t`: its clock read HOLD later, its kernel
/// stamp QUEUED after that, read before its next request (as the socket loop does).
fn answer(r: &mut MeshReflector, from: SocketAddr, probe: &[u8], t: u64) -> Option<Vec<u8>> {
    let times = Times {
        mono_ns: t,
        receive: ts(REAL0 + t),
        transmit: ts(REAL0 + t + HOLD),
        estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
        ttl: 64,
        tos: None,
    };
    let mut out = vec![0; 2048];
    let (n, written) = r.answer(from, probe, times, &mut out)?;
    if let Some(w) = written {
        let key = r.follow_ups.next_key();
        r.follow_ups.left(w, true);
        r.follow_ups.stamp(key, REAL0 + t + HOLD + QUEUED);
    }
    out.truncate(n);
    Some(out)
}

/// A genuine answer on its way: to prober `to` (an index), for its probe `seq`, arriving
/// at `at`.
struct Genuine {
    to: usize,
    seq: u32,
    at: u64,
    bytes: Vec<u8>,
}

/// Runs `probers` (at `addrs`) against B's reflector `r` for `ms` ms (then 1 s to
/// settle), prober `i` starting at `starts[i]`; each genuine answer goes through
/// `attacker`, which says what reaches each prober when (from B's address): the answer
/// as it came, or not, or later, or with other datagrams. Every datagram each prober
/// read and what it made of it.
fn run(
    probers: &mut [Prober],
    addrs: &[&str],
    starts: &[u64],
    r: &mut MeshReflector,
    ms: u64,
    mut attacker: impl FnMut(Genuine) -> Vec<(u64, usize, Vec<u8>)>,
) -> Vec<Vec<Matched>> {
    let mut wire: BTreeMap<(u64, u64), (usize, Vec<u8>)> = BTreeMap::new();
    let mut order = 0;
    let mut matched = vec![Vec::new(); probers.len()];
    let mut buf = vec![0; 2048];
    let est = ErrorEstimate::unknown(TimeFormat::Ntp);
    let b = SocketAddr::new(ip(B), 862);
    let mut t = 0;
    while t < (ms + 1_000) * MS {
        for (i, p) in probers.iter_mut().enumerate() {
            if t < starts[i] || t >= ms * MS {
                continue;
            }
            while let Some(probe) = p.poll_probe(clocks(t), est, &mut buf) {
                p.sent(probe.to, probe.seq, t);
                let from = SocketAddr::new(ip(addrs[i]), PROBER_PORT);
                let Some(bytes) = answer(r, from, &buf[..probe.len], t + ONE_WAY) else {
                    continue;
                };
                let at = t + NET + HOLD + QUEUED;
                let g = Genuine {
                    to: i,
                    seq: probe.seq,
                    at,
                    bytes,
                };
                for (at, to, bytes) in attacker(g) {
                    order += 1;
                    wire.insert((at, order), (to, bytes));
                }
            }
        }
        while let Some(e) = wire.first_entry().filter(|e| e.key().0 <= t) {
            let ((at, _), (to, bytes)) = e.remove_entry();
            let got = probers[to].handle_answer(b, &bytes, clocks(at), None);
            matched[to].push(got);
        }
        for p in probers.iter_mut() {
            p.handle_timeout(t);
        }
        t += 100 * US;
    }
    matched
}

/// What prober `p` booked of B: (answered, RTT samples, their sum in ns, duplicates,
/// lost either way).
fn booked(p: &Prober) -> (u64, u64, u64, u64, u64) {
    let s = &p.peers().values().next().unwrap().stats.shown;
    let lost = s.settled.lost_forward + s.settled.lost_reverse + s.settled.lost_unknown;
    let sum = (s.rtt.sum_s * 1e9).round() as u64;
    (s.settled.answered, s.rtt.count, sum, s.duplicates, lost)
}

/// The round trips booked are each NET (by the follow-up) or NET + QUEUED (by the clock
/// read), plus `extra_ns` in all of what the attacker really delayed: the sum says so
/// to the nanosecond's rounding, and the counts by T3's origin add up to the samples.
fn assert_only_true_t3s(p: &Prober, extra_ns: u64) {
    let (_, count, sum, _, _) = booked(p);
    let r = p.reflections();
    assert_eq!(r.stamp + r.clock, count, "{r:?}");
    let want = r.stamp * NET + r.clock * (NET + QUEUED) + extra_ns;
    assert!(
        sum.abs_diff(want) <= count,
        "booked {sum} ns over {count} round trips, want {want} ({r:?})"
    );
}

/// Attack 1. Every answer of B's to A is captured and, 0.2 ms after each genuine one
/// comes, the last ten captured (this one among them) are re-sent from B's address: a
/// follow-up re-read later names an answer already booked or held. A books exactly what
/// it would without them (every answer by its stamp but the last, by its clock at the
/// end); each probe is one duplicate at most.
#[test]
fn redteam_follow_up_replayed_answers_book_nothing_twice_and_no_wrong_t3() {
    let mut p = [prober(A, 7)];
    let mut r = reflector(true, &[]);
    let mut captured: Vec<Vec<u8>> = Vec::new();
    let got = run(&mut p, &[A], &[0], &mut r, 2_000, |g| {
        captured.push(g.bytes.clone());
        let mut out = vec![(g.at, g.to, g.bytes)];
        let replays = captured.iter().rev().take(10);
        out.extend(replays.map(|c| (g.at + 200 * US, 0, c.clone())));
        out
    });
    let (answered, count, _, dup, lost) = booked(&p[0]);
    let firsts = got[0]
        .iter()
        .filter(|m| matches!(m, Matched::Answer(Answer::First { .. })))
        .count() as u64;
    eprintln!(
        "{} datagrams read, {firsts} first answers; booked {:?}, {:?}",
        got[0].len(),
        booked(&p[0]),
        p[0].reflections()
    );
    assert!(answered >= 99 && lost == 0, "{:?}", booked(&p[0]));
    assert_eq!((firsts, count), (answered, answered));
    assert!(dup <= answered);
    assert_eq!(p[0].reflections().clock, 1, "only the last, at the end");
    assert_only_true_t3s(&p[0], 0);
}

/// Attack 2. On the path, answers are reordered (every 4th held back 25 ms, past the
/// next one: within the 100 ms timeout), duplicated (every 3rd, twice) and dropped (every
/// 7th): "the session's next answer" is then not the one after. A books each round trip
/// by a true T3 only (the reordered ones by their clock read), their delays as they
/// really were; most still by their stamps.
#[test]
fn redteam_follow_up_reordered_duplicated_or_dropped_answers_pair_no_wrong_t3() {
    const LATE: u64 = 25 * MS;
    let mut p = [prober(A, 7)];
    let mut r = reflector(true, &[]);
    let mut delayed = 0;
    run(&mut p, &[A], &[0], &mut r, 4_000, |g| match g.seq {
        s if s % 7 == 6 => vec![],
        s if s % 4 == 1 => {
            delayed += 1;
            vec![(g.at + LATE, g.to, g.bytes)]
        }
        s if s % 3 == 0 => vec![(g.at, g.to, g.bytes.clone()), (g.at + US, g.to, g.bytes)],
        _ => vec![(g.at, g.to, g.bytes)],
    });
    let (answered, count, _, dup, lost) = booked(&p[0]);
    let refl = p[0].reflections();
    eprintln!("booked {:?}, {refl:?}, {delayed} delayed", booked(&p[0]));
    assert!(answered >= 150 && count == answered, "{:?}", booked(&p[0]));
    assert!(lost >= 25 && dup >= 25, "{lost} {dup}");
    assert!(refl.stamp >= answered / 3, "{refl:?}");
    assert_only_true_t3s(&p[0], delayed * LATE);
}

/// Attack 1, into another session. A and C are two probers of one keyed mesh whose
/// random SSIDs happen to be equal (16 bits: among 300 agents, likely a pair); both probe
/// B. B's answers to A are signed under B's address key alone. A party without the key
/// captures them (on A's path) and, as soon as C sends its probe of a number it holds
/// A's answer for (A started 1 s earlier, so its numbers are ahead), re-sends that answer
/// to C from B's address. C must count none: its round trips, duplicates and booked T3s
/// are its own answers' only.
#[test]
fn redteam_follow_up_an_answer_to_another_prober_of_the_same_ssid_is_not_counted() {
    let mut p = [prober(A, 7), prober(C, 7)];
    let mut r = reflector(true, &[]);
    let mut captured: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut replayed = 0;
    let got = run(&mut p, &[A, C], &[0, 1_000 * MS], &mut r, 3_000, |g| {
        if g.to == 0 {
            captured.insert(g.seq, g.bytes.clone());
            return vec![(g.at, 0, g.bytes)];
        }
        let mut out = vec![(g.at, 1, g.bytes)];
        if let Some(a) = captured.get(&g.seq) {
            replayed += 1;
            // It arrives 0.5 ms after C's probe left, before B's own answer.
            out.push((g.at - NET - HOLD - QUEUED + 500 * US, 1, a.clone()));
        }
        out
    });
    let (answered, count, _, dup, lost) = booked(&p[1]);
    let counted = got[1]
        .iter()
        .filter(|m| matches!(m, Matched::Answer(_)))
        .count();
    eprintln!(
        "{replayed} of A's answers re-sent to C; C read {} datagrams, {counted} as answers; \
         booked {:?}, {:?}",
        got[1].len(),
        booked(&p[1]),
        p[1].reflections()
    );
    assert!(replayed >= 90, "{replayed}");
    assert!(answered >= 90 && lost == 0, "{:?}", booked(&p[1]));
    assert_eq!((count, dup), (answered, 0), "A's answers counted at C");
    assert_eq!(counted as u64, answered);
    assert_only_true_t3s(&p[1], 0);
}

/// A keyless probe (as a spoofer sends it) from `from` with `ssid`, carrying the zeroed
/// Follow-Up Telemetry TLV.
fn keyless_probe(ssid: u16, seq: u32) -> Vec<u8> {
    let mut b = vec![0; BASE_BYTES + 64];
    let n =
        sonde_proto::mesh::marks::put_request(&mut b[BASE_BYTES..], None, seq, None, false, true);
    b.truncate(BASE_BYTES + n.unwrap());
    let p = SenderPacket {
        seq,
        ssid,
        ..Default::default()
    };
    p.write(Mode::Unauthenticated, &mut b).unwrap();
    b
}

/// Attack 3. A keyless mesh (`--insecure-no-key`) whose reflector B lists 20 peers
/// (198.18.7.10-29), each answered once, and two more, X and Y. A spoofer sends probes
/// asking follow-ups from X's and Y's addresses (which the allowlist passes), each with
/// a new SSID (cycling through all 65,536 of each): 200,000 answers (at the default
/// `--mesh-reflect-max` of 10,000 a second, 20 s of a mesh of 1,000 peers). Every listed
/// peer's session must still tell its last answer's stamp next, and the follow-ups
/// remembered stay within the codec's sessions per source address. Before the fix the
/// 65,536 follow-ups were any address's, one forgotten for each new: the peers' lost.
#[test]
fn redteam_follow_up_spoofed_sessions_evict_no_listed_peers_follow_up() {
    const X: &str = "198.18.7.8";
    const Y: &str = "198.18.7.9";
    let peers: Vec<String> = (10..30).map(|k| format!("198.18.7.{k}")).collect();
    let mut listed: Vec<&str> = peers.iter().map(String::as_str).collect();
    listed.extend([X, Y]);
    let mut r = reflector(false, &listed);
    let session = |k: usize| SessionId {
        addr: ip(&peers[k]),
        port: 0,
        ssid: 7,
    };
    let from = |k: usize| SocketAddr::new(ip(&peers[k]), PROBER_PORT);
    let told = |r: &MeshReflector, k| r.follow_ups.told(session(k), TimeFormat::Ntp);
    for k in 0..peers.len() {
        answer(&mut r, from(k), &keyless_probe(7, 0), MS).unwrap();
    }
    let want: Vec<_> = (0..peers.len()).map(|k| told(&r, k)).collect();
    assert!(
        want.iter().all(|w| w.is_some_and(|f| f.seq == 0)),
        "{want:?}"
    );
    let mut t = 2 * MS;
    for k in 0..200_000u32 {
        let spoofed = SocketAddr::new(ip(if k % 2 == 0 { X } else { Y }), 5_000);
        let ssid = (k / 2) as u16;
        answer(&mut r, spoofed, &keyless_probe(ssid, 0), t).unwrap();
        t += 10 * US;
    }
    let remembered = r.follow_ups.sessions();
    let kept = (0..peers.len()).filter(|&k| told(&r, k) == want[k]).count();
    eprintln!(
        "after 200,000 spoofed sessions: {remembered} follow-ups remembered, {kept} of {} \
         listed peers' kept",
        peers.len()
    );
    assert_eq!(kept, peers.len(), "listed peers' follow-ups forgotten");
    let bound = (peers.len() + 2) * super::reflector::PER_SOURCE;
    assert!(remembered <= bound, "{remembered} > {bound}");
    // Each peer's next answer tells it.
    for (k, want) in want.iter().enumerate() {
        let next = answer(&mut r, from(k), &keyless_probe(7, 1), t).unwrap();
        let tlvs = sonde_proto::stamp::tlv::Checked::new(&next[BASE_BYTES..], None, 1);
        let got = tlvs.and_then(sonde_proto::stamp::follow_up::find);
        assert_eq!(got, *want);
    }
}
