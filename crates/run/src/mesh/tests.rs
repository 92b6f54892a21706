//! Two mesh agents in memory, each its prober's machine and its reflector, exchanging
//! over a simulated network with simulated time: what each agent's figures say of the
//! other is what the network did, loss by direction included.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use sonde_proto::mesh::{stamp_key, Clocks, Listed, Matched, Peer, Prober};
use sonde_proto::stamp::tlv::Checked;
use sonde_proto::stamp::{ErrorEstimate, TimeFormat, Timestamp, AUTH_BASE_BYTES};
use sonde_proto::Key;
use sonde_results::mesh::Answer;

use super::config::MeshConfig;
use super::keys::Keys;
use super::peers::Source;
use super::reflector::{MeshReflector, Times};
use crate::stamp::marks::answer_tos;

const MS: u64 = 1_000_000;
const REAL0: u64 = 1_780_000_000_000_000_000;
/// The port every prober sends from here (a reflector's is 862).
const PROBER_PORT: u16 = 40_000;
/// One way across the simulated network, and a reflector's hold.
const ONE_WAY: u64 = MS;
const HOLD: u64 = MS / 2;

struct Agent {
    ip: IpAddr,
    /// What its probes leave with (0: unmarked).
    tos: u8,
    prober: Prober,
    reflector: MeshReflector,
}

impl Agent {
    fn new(ip: &str, peer: &str, mesh: &Key, ssid: u16) -> Agent {
        Agent::marked(ip, peer, mesh, ssid, None)
    }

    /// An agent whose probes leave with `tos`, its reflector granting that class: the
    /// prober's machine and the reflector as `serve --mesh` derives them from [`config`].
    fn marked(ip: &str, peer: &str, mesh: &Key, ssid: u16, tos: Option<u8>) -> Agent {
        let ip: IpAddr = ip.parse().unwrap();
        let cfg = config(ip, mesh, ssid, tos);
        let mut prober = Prober::new(cfg.prober(ssid, u64::from(ssid), None));
        let peer_ip: IpAddr = peer.parse().unwrap();
        let peer = Peer {
            addr: SocketAddr::new(peer_ip, 862),
            open: false,
            labels: Default::default(),
        };
        prober.set_list(0, vec![Listed { peer, from: ip }]);
        let keys = Keys::new(stamp_key(mesh), ip);
        let mut reflector = MeshReflector::new(Some(keys), cfg.reflect(), cfg.labels.clone());
        reflector.listed([peer_ip]);
        reflector.set_dscp_policy(cfg.dscp_policy());
        Agent {
            ip,
            tos: tos.unwrap_or(0),
            prober,
            reflector,
        }
    }
}

/// The agent at `ip` as an operator would set it: 10 probes a second, each lost after
/// 100 ms (and settled either way 500 ms after), a minute's window, its reflector
/// answering 1000 a second (100 to one source), labelled `rack=r{ssid}`.
pub(super) fn config(ip: IpAddr, mesh: &Key, ssid: u16, tos: Option<u8>) -> MeshConfig {
    MeshConfig {
        source: Source::File(PathBuf::new()),
        port: 862,
        bind: ip,
        name: ip.to_string(),
        labels: [("rack".to_string(), format!("r{ssid}"))].into(),
        rate: 10.0,
        budget: 100.0,
        refresh: Duration::from_secs(1),
        timeout: Duration::from_millis(100),
        window: Duration::from_secs(60),
        reflect_max: 1000.0,
        key: Some(mesh.clone()),
        tos,
        // The follow-up's path, through both agents' sockets in memory.
        follow_up: true,
    }
}

pub(super) fn mesh_key() -> Key {
    Key::from_file_bytes(b"0123456789abcdef-mesh-key").unwrap()
}

/// A datagram on the wire: when it arrives, from where, to where.
struct Datagram {
    at_ns: u64,
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
    /// Its TOS byte as it arrives.
    tos: u8,
}

/// Runs `agents` for `secs` simulated seconds (1 ms steps), then long enough for every
/// probe to settle; `drop` says which datagrams the network loses (`to_reflector`, the
/// sender's number for a probe, the reflector's for an answer).
fn run(agents: &mut [Agent; 2], secs: u64, drop: impl Fn(IpAddr, bool, u32) -> bool) {
    run_marked(agents, secs, drop, |_, _, tos| tos)
}

/// [`run`], and `path` says what TOS byte a datagram from an address (a probe, or not:
/// an answer) sent with a TOS arrives with.
fn run_marked(
    agents: &mut [Agent; 2],
    secs: u64,
    drop: impl Fn(IpAddr, bool, u32) -> bool,
    path: impl Fn(IpAddr, bool, u8) -> u8,
) {
    let mut wire: VecDeque<Datagram> = VecDeque::new();
    let mut buf = vec![0; 2048];
    let est = ErrorEstimate::unknown(TimeFormat::Ntp);
    let end = secs * 1000 * MS;
    let mut t = 0;
    while t < end + 2_000 * MS {
        let clocks = Clocks {
            mono_ns: t,
            real_ns: REAL0 + t,
        };
        for a in agents.iter_mut().filter(|_| t < end) {
            while let Some(p) = a.prober.poll_probe(clocks, est, &mut buf) {
                a.prober.sent(p.to, p.seq, t);
                if !drop(a.ip, true, p.seq) {
                    wire.push_back(Datagram {
                        at_ns: t + ONE_WAY,
                        from: SocketAddr::new(a.ip, PROBER_PORT),
                        to: p.to,
                        bytes: buf[..p.len].to_vec(),
                        tos: path(a.ip, true, a.tos),
                    });
                }
            }
        }
        while wire.front().is_some_and(|d| d.at_ns <= t) {
            let d = wire.pop_front().unwrap();
            let a = agents.iter_mut().find(|a| a.ip == d.to.ip()).unwrap();
            // Each timed by its arrival, as the kernel's receive stamp times it.
            let arrived = Clocks {
                mono_ns: d.at_ns,
                real_ns: REAL0 + d.at_ns,
            };
            if d.to.port() == PROBER_PORT {
                let tos = Some(d.tos);
                let got = a
                    .prober
                    .handle_marked_answer(d.from, &d.bytes, arrived, tos, None);
                assert!(
                    matches!(got, Matched::Answer(Answer::First { .. })),
                    "{got:?}"
                );
                continue;
            }
            let ts = |ns| Timestamp::from_unix_ns(ns, TimeFormat::Ntp);
            let times = Times {
                mono_ns: t,
                receive: ts(arrived.real_ns),
                transmit: ts(arrived.real_ns + HOLD),
                estimate: est,
                ttl: 64,
                tos: Some(d.tos),
            };
            let mut out = vec![0; 2048];
            let Some((n, _)) = a.reflector.answer(d.from, &d.bytes, times, &mut out) else {
                panic!("{} refused a probe from {}", a.ip, d.from)
            };
            let numbered = a.reflector.reflected as u32 - 1;
            if !drop(a.ip, false, numbered) {
                wire.push_back(Datagram {
                    at_ns: d.at_ns + HOLD + ONE_WAY,
                    from: d.to,
                    to: d.from,
                    // Marked as the socket loop marks it, from its filled CoS TLV.
                    tos: path(a.ip, false, answer_tos(&out[AUTH_BASE_BYTES..n])),
                    bytes: out[..n].to_vec(),
                });
            }
        }
        for a in agents.iter_mut() {
            a.prober.handle_timeout(t);
        }
        t += MS;
    }
}

fn agents() -> [Agent; 2] {
    let mesh = mesh_key();
    [
        Agent::new("198.18.5.1", "198.18.5.2", &mesh, 1),
        Agent::new("198.18.5.2", "198.18.5.1", &mesh, 2),
    ]
}

#[test]
fn two_agents_in_memory_count_every_probe_time_each_round_trip_and_learn_labels() {
    let mut a = agents();
    run(&mut a, 3, |_, _, _| false);
    for (i, agent) in a.iter().enumerate() {
        let e = agent.prober.peers().values().next().unwrap();
        let s = &e.stats.shown;
        assert!((29..=30).contains(&s.sent), "{}", s.sent);
        assert_eq!(s.settled.answered, s.sent);
        assert_eq!(s.settled.lost_forward + s.settled.lost_reverse, 0);
        assert_eq!(s.rtt.count, s.sent);
        // Two ways across, the reflector's hold taken out: 2 ms each.
        let mean_s = s.rtt.sum_s / s.rtt.count as f64;
        assert!((mean_s - 2e-3).abs() < 1e-9, "{mean_s}");
        let other = if i == 0 { "r2" } else { "r1" };
        assert_eq!(e.learned.get("rack").map(String::as_str), Some(other));
        assert_eq!(agent.reflector.refused, 0);
    }
}

/// A's probes to B numbered 5, 10, ..., 35 are lost on the way there, B's answers numbered
/// 3, 10, 17, 24 on the way back (then none, so that a later answer closes every gap):
/// A's figures for B split the loss exactly so, and B's for A see none.
#[test]
fn two_agents_in_memory_tell_which_way_each_probe_was_lost() {
    let mut a = agents();
    let (ip_a, ip_b) = (a[0].ip, a[1].ip);
    run(&mut a, 5, |ip, to_reflector, n| match (ip, to_reflector) {
        (ip, true) if ip == ip_a => n > 0 && n < 40 && n % 5 == 0,
        (ip, false) if ip == ip_b => n < 30 && n % 7 == 3,
        _ => false,
    });
    let s = &a[0].prober.peers().values().next().unwrap().stats.shown;
    let sent = s.sent;
    assert!(sent >= 49, "{sent}");
    assert_eq!(
        (
            s.settled.lost_forward,
            s.settled.lost_reverse,
            s.settled.lost_unknown
        ),
        (7, 4, 0),
        "{:?} of {sent}",
        s.settled
    );
    assert_eq!(s.settled.answered, sent - 11);
    let back = &a[1].prober.peers().values().next().unwrap().stats.shown;
    assert_eq!(back.settled.answered, back.sent);
}

/// Both agents probe EF with ECT(0); the path bleaches EF to CS0 from A to B only (A's
/// probes and A's answers) and sets CE on every third of B's answers to A. A sees forward
/// bleached and reverse kept, B the mirror, each count exact; CE is on A's reverse only.
/// Unmarked agents (the tests above) count no marks at all.
#[test]
fn two_marked_agents_in_memory_see_which_way_the_path_bleaches_and_marks_ce() {
    let ef0 = 46 << 2 | 2;
    let mesh = mesh_key();
    let mut a = [
        Agent::marked("198.18.5.1", "198.18.5.2", &mesh, 1, Some(ef0)),
        Agent::marked("198.18.5.2", "198.18.5.1", &mesh, 2, Some(ef0)),
    ];
    let ip_a = a[0].ip;
    let answers = std::cell::Cell::new(0u32);
    run_marked(
        &mut a,
        3,
        |_, _, _| false,
        |from, probe, tos| {
            if from == ip_a {
                return tos & 3;
            }
            if probe {
                return tos;
            }
            answers.set(answers.get() + 1);
            if answers.get().is_multiple_of(3) {
                tos | 3
            } else {
                tos
            }
        },
    );
    let [sa, sb] = [&a[0], &a[1]].map(|x| &x.prober.peers().values().next().unwrap().stats.shown);
    let (na, nb) = (sa.settled.answered, sb.settled.answered);
    assert!(na >= 29 && nb >= 29, "{na} {nb}");
    let (fa, ra) = (
        sa.marks.forward.as_ref().unwrap(),
        sa.marks.reverse.as_ref().unwrap(),
    );
    assert_eq!((fa.packets, fa.dscp_bleached, fa.ce), (na, na, 0));
    assert_eq!(
        (ra.packets, ra.dscp_kept, ra.ce),
        (na, na, u64::from(answers.get() / 3))
    );
    let (fb, rb) = (
        sb.marks.forward.as_ref().unwrap(),
        sb.marks.reverse.as_ref().unwrap(),
    );
    assert_eq!((fb.packets, fb.dscp_kept, fb.ce), (nb, nb, 0));
    assert_eq!((rb.packets, rb.dscp_bleached, rb.ce), (nb, nb, 0));
    assert_eq!(
        sa.marks.words(),
        ["the path bleaches DSCP 46 (EF) to 0 forward only".to_string(),
         format!("CE on 33 % of packets reverse ({} of {na} sent ECT): an AQM or a congested queue marks here", na / 3)]
    );
}

/// The reflector's answers: the first tells nothing (zero), the second its session's
/// first answer's stamp, under the HMAC TLV and the reflector's own key; another
/// session of the same address is told nothing of it.
#[test]
fn the_reflectors_next_answer_tells_the_last_ones_stamp_under_its_key() {
    use super::reflector::Rate;
    use sonde_proto::mesh::{address_key, marks, probe_key};
    use sonde_proto::stamp::TimestampMethod;
    use sonde_proto::stamp::{follow_up, FollowUp, Mode, SenderPacket, StampKey};

    let mesh = StampKey::new(b"0123456789abcdef0123").unwrap();
    let own: std::net::IpAddr = "198.18.2.100".parse().unwrap();
    let rate = Rate {
        per_s: 1e6,
        burst: 1e6,
        per_source: 1_000,
    };
    let mut r = MeshReflector::new(Some(Keys::new(mesh.clone(), own)), rate, Default::default());
    let from: SocketAddr = "198.18.2.1:5000".parse().unwrap();
    let k = probe_key(&mesh, from.ip(), own);
    let mine = address_key(&mesh, own);
    let ask = |r: &mut MeshReflector, seq: u32, ssid: u16, ms: u64| {
        let mut b = vec![0; AUTH_BASE_BYTES + 64];
        let n = marks::put_request(&mut b[AUTH_BASE_BYTES..], Some(&k), seq, None, false, true);
        b.truncate(AUTH_BASE_BYTES + n.unwrap());
        let p = SenderPacket {
            seq,
            ssid,
            ..Default::default()
        };
        p.write(Mode::Authenticated(&k), &mut b).unwrap();
        let t = Times {
            mono_ns: ms * MS,
            receive: Timestamp::from_unix_ns(REAL0 + ms * MS, TimeFormat::Ntp),
            transmit: Timestamp::from_unix_ns(REAL0 + ms * MS + MS, TimeFormat::Ntp),
            estimate: ErrorEstimate::unknown(TimeFormat::Ntp),
            ttl: 64,
            tos: None,
        };
        let mut out = [0u8; 512];
        let (n, written) = r.answer(from, &b, t, &mut out).unwrap();
        let key = r.follow_ups.next_key();
        r.follow_ups.left(written.expect("the probe asked"), true);
        let number = u32::from_be_bytes(out[..4].try_into().unwrap());
        let area = &out[AUTH_BASE_BYTES..n];
        (
            key,
            Checked::new(area, Some(&mine), number).and_then(follow_up::find),
            area.to_vec(),
        )
    };
    let (key, told, _) = ask(&mut r, 0, 1, 0);
    assert_eq!(told, None, "a first answer: zero");
    // Answer 0 (T3 at 1 ms) really left 41 ms after its probe came.
    r.follow_ups.stamp(key, REAL0 + 41 * MS);
    let (_, told, area) = ask(&mut r, 1, 1, 1000);
    let stamp = Timestamp::from_unix_ns(REAL0 + 41 * MS, TimeFormat::Ntp);
    let want = FollowUp {
        seq: 0,
        timestamp: stamp,
        mode: TimestampMethod::Software,
    };
    assert_eq!(told, Some(want));
    assert_eq!(
        Checked::new(&area, Some(&k), 1).and_then(follow_up::find),
        None,
        "not under the probe's key"
    );
    let (_, told, _) = ask(&mut r, 0, 2, 1000);
    assert_eq!(told, None, "another session");
}

/// Both of an IPv4 mesh's sockets never fragment (`IP_PMTUDISC_PROBE`): the kernel writes
/// no IP ID for their datagrams (what that means on the wire: `sonde_engine::sockopt`'s
/// test).
#[test]
fn an_ipv4_meshs_sockets_send_unfragmentable_datagrams() {
    let mut cfg = config("127.0.0.1".parse().unwrap(), &mesh_key(), 1, None);
    cfg.port = 0;
    let (reflector, prober) = super::sockets(&cfg).unwrap();
    for s in [&reflector, &prober] {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a live socket, a live int and its size.
        let r = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(s),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!((r, v), (0, libc::IP_PMTUDISC_PROBE));
    }
}
