//! Issue 52's H1, run again: silent connections without the key, from addresses of
//! 198.18.0.0/15 in several /24s, reconnecting each time the agent closes them, hold its
//! handshake places. An agent in a namespace of its own (198.18.210.1) and everyone else in
//! another (the attackers' addresses, the key holder's), on one bridge. Before the fix a
//! key holder the agent did not remember (never proven, or the agent restarted) was told
//! "busy" from any network, and one at the attackers' own address even when remembered;
//! and the controller gave up at the first "busy". Now a key holder's `Hello` carries a
//! ticket that takes a place no stranger can, so each gets in at its first try.

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use sonde_proto::{encode, FrameDecoder, Message, PeerError, MAGIC, PROTOCOL_VERSION};
use sonde_run::netns::{self, Namespace};

const AGENT: &str = "198.18.210.1";
const PORT: u16 = 5301;
/// The red team's eight addresses in two /24s; with a network now holding a quarter of
/// the 32 places, eight more in two more /24s fill the rest.
const ATTACKERS: [[u8; 4]; 16] = [
    [198, 18, 200, 10],
    [198, 18, 200, 11],
    [198, 18, 200, 12],
    [198, 18, 200, 13],
    [198, 18, 201, 10],
    [198, 18, 201, 11],
    [198, 18, 201, 12],
    [198, 18, 201, 13],
    [198, 18, 202, 10],
    [198, 18, 202, 11],
    [198, 18, 202, 12],
    [198, 18, 202, 13],
    [198, 18, 203, 10],
    [198, 18, 203, 11],
    [198, 18, 203, 12],
    [198, 18, 203, 13],
];
/// A key holder in a network of its own.
const KEY_HOLDER: [u8; 4] = [198, 18, 204, 10];
/// A keyless stranger in yet another: told busy while the attack holds every place.
const STRANGER: [u8; 4] = [198, 18, 205, 10];

/// The agent's namespace and the outside's, on a bridge; deleted on drop.
struct AcceptLab {
    agent_ns: String,
    outside: Namespace,
    outside_if: String,
    _made: Vec<Namespace>,
    _serial: Serial,
}

impl AcceptLab {
    fn new(test: &str) -> Option<AcceptLab> {
        if !need_tools(&["ip"]) {
            return None;
        }
        let serial = Serial::take();
        let tag = format!("ra{}{test}", std::process::id() % 100_000);
        let pre = netns_prefix();
        let made = (|| -> Result<AcceptLab, String> {
            let e = |e: netns::NetnsError| e.to_string();
            let bridge = Namespace::add(&format!("{pre}-{tag}-br")).map_err(e)?;
            let agent = Namespace::add(&format!("{pre}-{tag}-ag")).map_err(e)?;
            let outside = Namespace::add(&format!("{pre}-{tag}-out")).map_err(e)?;
            bridge
                .ip(&["link", "add", "br0", "type", "bridge"])
                .map_err(e)?;
            bridge.ip(&["link", "set", "br0", "up"]).map_err(e)?;
            for (ns, dev) in [(&agent, format!("{tag}a")), (&outside, format!("{tag}o"))] {
                let port = format!("{dev}p");
                netns::veth(ns.name(), &dev, bridge.name(), &port).map_err(e)?;
                for args in [
                    &["link", "set", &port, "master", "br0"][..],
                    &["link", "set", &port, "up"],
                ] {
                    bridge.ip(args).map_err(e)?;
                }
                ns.ip(&["link", "set", &dev, "up"]).map_err(e)?;
            }
            let (a_if, o_if) = (format!("{tag}a"), format!("{tag}o"));
            agent.address(&a_if, &format!("{AGENT}/24")).map_err(e)?;
            agent
                .ip(&["route", "add", "198.18.0.0/15", "dev", &a_if])
                .map_err(e)?;
            for a in ATTACKERS.iter().chain([&KEY_HOLDER, &STRANGER]) {
                let cidr = format!("{}.{}.{}.{}/32", a[0], a[1], a[2], a[3]);
                outside.address(&o_if, &cidr).map_err(e)?;
            }
            let agent_ns = agent.name().to_string();
            let lab = AcceptLab {
                agent_ns,
                outside,
                outside_if: o_if,
                _made: vec![bridge, agent],
                _serial: serial,
            };
            lab.controller_at(KEY_HOLDER)?;
            Ok(lab)
        })();
        skip_unless("root and network namespaces", made.as_ref().err().cloned())
            .then(|| made.unwrap())
    }

    /// The key holder's controller sends from `addr` (the route's source toward the agent).
    fn controller_at(&self, a: [u8; 4]) -> Result<(), String> {
        let src = format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
        let dev = &self.outside_if;
        let args = [
            "route",
            "replace",
            "198.18.210.0/24",
            "dev",
            dev,
            "src",
            &src,
        ];
        self.outside.ip(&args).map_err(|e| e.to_string())
    }

    fn start_agent(&self) -> Agent {
        let mut cmd = Lab::in_ns(&self.agent_ns, SONDE);
        cmd.args(["serve", "--bind", AGENT, "--port", &PORT.to_string()]);
        Agent::start(cmd)
    }

    /// A short `sonde ping` from the outside (the key holder, with the harness's key):
    /// whether it succeeded, and whether it was told busy on the way (its log says so
    /// when it tries again).
    fn ping(&self) -> (bool, bool) {
        let mut c = Lab::in_ns(self.outside.name(), SONDE);
        c.args(["ping", AGENT, "--port", &PORT.to_string(), "-t", "0.3"])
            .args(["--warmup", "0.1", "--no-save"]);
        let o = run(c);
        let err = stderr(&o);
        if !o.status.success() {
            eprintln!("ping failed: {err}");
        }
        (o.status.success(), err.contains("is busy; trying again"))
    }

    /// Runs `per_address` silent connections from each of `from` (reconnecting as soon as
    /// the agent closes one) while `during` runs, inside the outside namespace.
    fn under_attack<T: Send>(
        &self,
        from: &[[u8; 4]],
        per_address: usize,
        during: impl FnOnce() -> T + Send,
    ) -> (T, usize) {
        let to = SocketAddr::from(([198, 18, 210, 1], PORT));
        let (stop, made) = (AtomicBool::new(false), AtomicUsize::new(0));
        self.outside
            .run_inside(|| {
                std::thread::scope(|s| {
                    for &a in from {
                        for _ in 0..per_address {
                            let (stop, made) = (&stop, &made);
                            s.spawn(move || silent_loop(a, to, stop, made));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(500));
                    let out = during();
                    stop.store(true, Ordering::Relaxed);
                    (out, made.load(Ordering::Relaxed))
                })
            })
            .unwrap()
    }
}

/// One attacker: connects from `from`, says nothing, holds on until the agent closes,
/// and again, until `stop` (at most 30 s).
fn silent_loop(from: [u8; 4], to: SocketAddr, stop: &AtomicBool, made: &AtomicUsize) {
    let until = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        let Ok(mut c) = connect_from(from, to) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        made.fetch_add(1, Ordering::Relaxed);
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 512];
        while !stop.load(Ordering::Relaxed) {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
    }
}

/// Whether a keyless `Hello` from `from` is told busy (the places it may take are held),
/// tried up to ten times: the attackers leave a place free for a moment as they reconnect.
fn keyless_is_busy(from: [u8; 4]) -> bool {
    let to = SocketAddr::from(([198, 18, 210, 1], PORT));
    let hello = encode(&Message::Hello {
        magic: MAGIC.into(),
        version: PROTOCOL_VERSION,
        software: "stranger".into(),
        nonce: "5a".repeat(32),
        agent: AGENT.into(),
        ticket: None,
    })
    .unwrap();
    (0..10).any(|_| {
        std::thread::sleep(Duration::from_millis(30));
        let Ok(mut c) = connect_from(from, to) else {
            return false;
        };
        let _ = c.write_all(&hello);
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut d = FrameDecoder::default();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = c.read(&mut buf) {
            d.push(&buf[..n]);
            if let Ok(Some(m)) = d.next_message() {
                return matches!(
                    m,
                    Message::Error {
                        error: PeerError::Busy
                    }
                );
            }
        }
        false
    })
}

/// Under `attack` (silent connections from each address, four each): whether a keyless
/// stranger from `stranger` was told busy, and the key holder's pings (succeeded, told
/// busy on the way).
fn pings_under(
    lab: &AcceptLab,
    attack: &[[u8; 4]],
    stranger: [u8; 4],
    pings: usize,
) -> (bool, Vec<(bool, bool)>, usize) {
    let ((busy, outcomes), made) = lab.under_attack(attack, 4, || {
        let busy = keyless_is_busy(stranger);
        let outcomes: Vec<(bool, bool)> = (0..pings).map(|_| lab.ping()).collect();
        (busy, outcomes)
    });
    (busy, outcomes, made)
}

fn assert_all_in_at_once(what: &str, outcomes: &[(bool, bool)]) {
    for (k, &(ok, told_busy)) in outcomes.iter().enumerate() {
        assert!(ok, "{what}: ping {k} failed");
        assert!(
            !told_busy,
            "{what}: ping {k} was told busy (got in by trying again, not by its ticket)"
        );
    }
}

#[test]
fn redteam_accept_a_key_holder_from_another_network_gets_in_while_strangers_hold_every_place() {
    let Some(lab) = AcceptLab::new("net") else {
        return;
    };
    let _agent = lab.start_agent();
    let (busy, outcomes, made) = pings_under(&lab, &ATTACKERS, STRANGER, 3);
    eprintln!("FIGURE 16 addresses in four /24s, 4 silent connections each ({made} connections): a keyless stranger of a fifth /24 busy: {busy}; a key holder never proven, from a sixth: {outcomes:?} (ok, told busy)");
    assert!(
        busy,
        "the attack did not fill the agent's places: the test proves nothing"
    );
    assert_all_in_at_once("a key holder the agent never saw", &outcomes);
}

#[test]
fn redteam_accept_a_key_holder_gets_in_after_the_agent_restarts() {
    let Some(lab) = AcceptLab::new("rst") else {
        return;
    };
    let mut agent = lab.start_agent();
    assert_eq!(lab.ping(), (true, false), "proven once, before the restart");
    agent.kill();
    let _agent = lab.start_agent();
    let (busy, outcomes, made) = pings_under(&lab, &ATTACKERS, STRANGER, 2);
    eprintln!("FIGURE after a restart, under the same attack ({made} connections): stranger busy: {busy}; the key holder: {outcomes:?}");
    assert!(busy, "the attack did not fill the agent's places");
    assert_all_in_at_once("a key holder after the agent's restart", &outcomes);
}

#[test]
fn redteam_accept_a_key_holder_sharing_its_address_with_four_silent_attackers_gets_in() {
    let Some(lab) = AcceptLab::new("addr") else {
        return;
    };
    let shared = ATTACKERS[0];
    lab.controller_at(shared).unwrap();
    let _agent = lab.start_agent();
    assert_eq!(
        lab.ping(),
        (true, false),
        "proven once, as the red team's was"
    );
    // Four silent connections from the key holder's own address: a keyless Hello from it
    // is told busy.
    let (busy, outcomes, made) = pings_under(&lab, &[shared], shared, 3);
    eprintln!("FIGURE 4 silent connections at the key holder's address ({made} connections): a keyless Hello from it busy: {busy}; the key holder: {outcomes:?}");
    assert!(busy, "the attackers did not hold the address's places");
    assert_all_in_at_once("a key holder at the attackers' address", &outcomes);
}

#[test]
fn redteam_accept_a_controller_tries_a_busy_agent_again_and_is_served() {
    // One test at a time: a second controller arriving while the first runs is told busy,
    // and tries again until the first ends (issue 52: it gave up at once).
    let agent = Agent::on_loopback_with(&["--max-tests", "1"]);
    let mut first = sonde_cmd();
    first.args(agent.short_test("ping", "1.5", &["--no-save"]));
    let mut first = first.spawn_keeping(Keep::Nothing);
    std::thread::sleep(Duration::from_millis(700));
    let mut second = sonde_cmd();
    second.args(agent.short_test("ping", "0.3", &["--no-save"]));
    let t0 = Instant::now();
    let o = run(second);
    let took = t0.elapsed();
    let err = stderr(&o);
    let first = wait_with_timeout(&mut first, Duration::from_secs(10)).expect("the first ends");
    eprintln!("FIGURE the second controller, told busy, was served after {took:?}:\n{err}");
    assert!(first.success());
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("is busy; trying again in 0.1 s (for up to 5 s in all)"),
        "{err}"
    );
}
