//! Attacks on the control channel and on third-party parts, as SECURITY.md lists them: a
//! rogue controller (the library's session with hand-made parts, or raw frames), a party
//! on the path that rewrites frames, and a counting victim that must see no packet.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::bridge::{Bridged, FLEET_PORT};
use common::rogue::{self, Answer};
use common::*;
use sonde_proto::{Grant, Key, ThirdParty};
use sonde_results::{StreamSpec, TestSpec};

const VICTIM: &str = "198.18.0.3";

fn one_connection() -> TestSpec {
    TestSpec::Stream(StreamSpec {
        connections: 1,
        ..Default::default()
    })
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Packets from the agent's address to the victim's, counted in the client namespace.
fn victim_count(lab: &Lab) -> u64 {
    count(lab, "victim")
}

/// What the counters of nftables table `table` in the client namespace counted.
fn count(lab: &Lab, table: &str) -> u64 {
    nft_counted(&lab.client, table, "packets")
}

/// The victim: a second address in the client namespace, and a table `victim` counting
/// every packet the agent's address sends it.
fn add_victim(lab: &Lab) {
    lab.client_cmd(
        "ip",
        &[
            "addr",
            "add",
            &format!("{VICTIM}/24"),
            "dev",
            &lab.client_if,
        ],
    );
    lab.client_cmd("nft", &["add", "table", "inet", "victim"]);
    lab.client_cmd(
        "nft",
        &["add chain inet victim input { type filter hook input priority 0 ; }"],
    );
    let rule = format!(
        "add rule inet victim input ip saddr {} ip daddr {VICTIM} counter",
        lab.server_addr
    );
    lab.client_cmd("nft", &[&rule]);
}

/// An agent in the server namespace taking client parts, and its control address.
fn client_part_agent(lab: &Lab) -> (Agent, SocketAddr) {
    let mut agent_cmd = Lab::in_ns(&lab.server, SONDE);
    agent_cmd
        .args(["serve", "--bind", lab.server_addr, "--port", "0"])
        .args(["--allow", "third-party"]);
    let agent = Agent::start(agent_cmd);
    let a: SocketAddr = format!("{}:{}", lab.server_addr, agent.port)
        .parse()
        .unwrap();
    (agent, a)
}

#[test]
fn a_client_part_sends_nothing_to_a_host_that_did_not_grant_it() {
    let Some(lab) = Lab::needing(&["nft", "ping"]) else {
        return;
    };
    // The victim, with a listener on the port the attacks aim at.
    add_victim(&lab);
    let _listener = rogue::in_netns(&lab.client, || TcpListener::bind((VICTIM, 40000)).unwrap());
    let (_agent, a) = client_part_agent(&lab);
    let victim: SocketAddr = format!("{VICTIM}:40000").parse().unwrap();
    let key = rogue::harness_key();
    let other = Key::from_file_bytes(b"not the fleet's key, long enough").unwrap();
    let source: std::net::IpAddr = lab.server_addr.parse().unwrap();
    let part = |server: SocketAddr, grant: Option<Grant>| ThirdParty::Client {
        server,
        cookie: 7,
        grant,
    };
    let later = now_s() + 30;
    let own = SocketAddr::new(source, 40000);
    let attacks: Vec<(&str, ThirdParty, Option<Key>, &str)> = vec![
        (
            "no grant",
            part(victim, None),
            Some(key.clone()),
            "no grant",
        ),
        (
            "a grant made with another key",
            part(victim, Some(Grant::new(&other, source, victim, 7, later))),
            Some(key.clone()),
            "not made with this agent's key",
        ),
        (
            "a grant for another server",
            part(
                victim,
                Some(Grant::new(
                    &key,
                    source,
                    "198.18.0.1:40001".parse().unwrap(),
                    7,
                    later,
                )),
            ),
            Some(key.clone()),
            "grant is for server",
        ),
        (
            "a grant for another cookie",
            part(victim, Some(Grant::new(&key, source, victim, 8, later))),
            Some(key.clone()),
            "grant is for cookie",
        ),
        (
            "an expired grant",
            part(
                victim,
                Some(Grant::new(&key, source, victim, 7, now_s() - 600)),
            ),
            Some(key.clone()),
            "expired",
        ),
        (
            "the agent's own loopback",
            part("127.0.0.1:5301".parse().unwrap(), None),
            Some(key.clone()),
            "loopback",
        ),
        (
            "the unspecified address",
            part("0.0.0.0:40000".parse().unwrap(), None),
            Some(key.clone()),
            "unspecified",
        ),
        (
            "a multicast group",
            part("224.0.0.1:40000".parse().unwrap(), None),
            Some(key.clone()),
            "multicast",
        ),
        (
            "the broadcast address",
            part("255.255.255.255:40000".parse().unwrap(), None),
            Some(key.clone()),
            "broadcast",
        ),
        (
            "a well-known port",
            part(format!("{VICTIM}:53").parse().unwrap(), None),
            Some(key.clone()),
            "well-known port",
        ),
        (
            "the agent's own address, with a grant made with the key",
            part(own, Some(Grant::new(&key, source, own, 7, later))),
            Some(key.clone()),
            "an address of this host",
        ),
        ("no key at all", part(victim, None), None, "requires a key"),
        (
            "another key",
            part(victim, None),
            Some(other.clone()),
            "could not prove",
        ),
    ];
    let tried = attacks.len();
    for (what, p, k, expect) in attacks {
        let answer = rogue::in_netns(&lab.client, move || {
            rogue::setup(a, one_connection(), Some(p), k)
        });
        match answer {
            Answer::Refused(e) => assert!(e.contains(expect), "{what}: {e}"),
            Answer::Ready { .. } => panic!("{what}: the agent took the client part"),
        }
    }
    thread::sleep(Duration::from_millis(300));
    let reached = victim_count(&lab);
    // The counter counts: the agent's host pings the victim once.
    lab.server_cmd(
        "ping",
        &["-c", "1", "-W", "2", "-I", lab.server_addr, VICTIM],
    );
    assert!(
        victim_count(&lab) >= 1,
        "the victim's counter counts nothing"
    );
    eprintln!("third-party attacks tried: {tried}, packets that reached the victim: {reached}");
    assert_eq!(reached, 0, "packets from the agent reached the victim");
}

/// Frames of a control stream: 4-byte length, then the payload.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut p = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut p).ok()?;
    let mut f = len.to_vec();
    f.extend(p);
    Some(f)
}

/// A proxy on loopback in front of `agent` that passes frames through `up` (controller to
/// agent) and `down` (agent to controller), each given the frame's index.
fn rewriting_proxy(
    agent: u16,
    up: fn(usize, Vec<u8>) -> Vec<u8>,
    down: fn(usize, Vec<u8>) -> Vec<u8>,
) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        let a = TcpStream::connect(("127.0.0.1", agent)).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream, f: fn(usize, Vec<u8>) -> Vec<u8>| {
            thread::spawn(move || {
                let mut n = 0;
                while let Some(frame) = read_frame(&mut from) {
                    if to.write_all(&f(n, frame)).is_err() {
                        break;
                    }
                    n += 1;
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            })
        };
        pipe(c.try_clone().unwrap(), a.try_clone().unwrap(), up);
        pipe(a, c, down);
    });
    port
}

fn as_is(_: usize, f: Vec<u8>) -> Vec<u8> {
    f
}

fn stream_through(port: u16) -> std::process::Output {
    let mut c = sonde_cmd();
    c.args([
        "stream",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "-t",
        "0.5",
        "--no-save",
    ]);
    run(c)
}

#[test]
fn a_party_on_the_path_cannot_change_what_the_agent_is_told() {
    let agent = Agent::on_loopback();
    // Frames up: 0 Hello, 1 Auth, 2 Setup (sealed): one bit of the spec flipped.
    let flip = |n: usize, mut f: Vec<u8>| {
        if n == 2 {
            let at = f.len() / 2;
            f[at] ^= 1;
        }
        f
    };
    let o = stream_through(rewriting_proxy(agent.port, flip, as_is));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("integrity check"), "{}", stderr(&o));

    // Down: the Welcome's challenge and proof removed (a downgrade to no key).
    let strip = |n: usize, f: Vec<u8>| {
        if n != 0 {
            return f;
        }
        let mut v: serde_json::Value = serde_json::from_slice(&f[4..]).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("challenge");
        o.remove("proof");
        let p = serde_json::to_vec(&v).unwrap();
        let mut out = (p.len() as u32).to_be_bytes().to_vec();
        out.extend(p);
        out
    };
    let o = stream_through(rewriting_proxy(agent.port, as_is, strip));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not ask for a key"),
        "{}",
        stderr(&o)
    );

    // Through an honest proxy the same test runs.
    let o = stream_through(rewriting_proxy(agent.port, as_is, as_is));
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_unauthenticated_peer_learns_only_the_banner_and_sets_up_nothing() {
    let agent = Agent::on_loopback();
    let mut s = TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let frame = |v: serde_json::Value| {
        let p = serde_json::to_vec(&v).unwrap();
        let mut f = (p.len() as u32).to_be_bytes().to_vec();
        f.extend(p);
        f
    };
    let hello = serde_json::json!({"type": "hello", "magic": "netsonde", "version": 3,
        "software": "rogue", "nonce": "11".repeat(32), "agent": "127.0.0.1"});
    s.write_all(&frame(hello)).unwrap();
    let welcome = read_frame(&mut s).unwrap();
    let w: serde_json::Value = serde_json::from_slice(&welcome[4..]).unwrap();
    assert_eq!(w["type"], "welcome");
    assert!(w["challenge"].is_string() && w["proof"].is_string(), "{w}");
    assert!(
        w.get("capabilities").is_none() && w.get("command").is_none(),
        "{w}"
    );
    let setup = serde_json::json!({"type": "setup", "spec": serde_json::to_value(one_connection()).unwrap()});
    s.write_all(&frame(setup)).unwrap();
    let err = read_frame(&mut s).unwrap();
    let e: serde_json::Value = serde_json::from_slice(&err[4..]).unwrap();
    assert_eq!(e["error"]["kind"], "auth_required", "{e}");
}

/// A table `name` counting the agent's packets to the victim that match `what`.
fn victim_counter(lab: &Lab, name: &str, what: &str) {
    lab.client_cmd("nft", &["add", "table", "inet", name]);
    let chain = format!("add chain inet {name} input {{ type filter hook input priority 0 ; }}");
    lab.client_cmd("nft", &[&chain]);
    let rule = format!(
        "add rule inet {name} input ip saddr {} ip daddr {VICTIM} {what} counter",
        lab.server_addr
    );
    lab.client_cmd("nft", &[&rule]);
}

/// A key holder makes grants that check out (its own, with the fleet's key) and aims
/// client parts of every kind at a host that is no agent: a plain TCP listener and a
/// silent UDP socket on port 40000, nothing on 40001. The client agent challenges the
/// target's data port first (UDP beside TCP data, TCP beside UDP data) and sends nothing
/// more: at most `target::UDP_TRIES` (3) challenge datagrams of 48 bytes, or one challenge
/// connection (at most 6 TCP packets), per part, and no packet of the data's transport.
#[test]
fn a_key_holders_grant_alone_cannot_aim_a_client_part() {
    use sonde_results::{PpsSpec, RrSpec, Transport};
    let Some(lab) = Lab::needing(&["nft", "ping"]) else {
        return;
    };
    add_victim(&lab);
    victim_counter(&lab, "ktcp", "meta l4proto tcp");
    victim_counter(&lab, "kudp", "meta l4proto udp");
    // UDP datagrams other than a 48-byte challenge (UDP length 56): data.
    victim_counter(&lab, "kudpdata", "udp length != 56");
    let _plain = rogue::in_netns(&lab.client, || {
        let t = TcpListener::bind((VICTIM, 40000)).unwrap();
        let u = std::net::UdpSocket::bind((VICTIM, 40000)).unwrap();
        (t, u)
    });
    let (_agent, a) = client_part_agent(&lab);
    let key = rogue::harness_key();
    let source: std::net::IpAddr = lab.server_addr.parse().unwrap();
    let rr = |udp: bool| RrSpec {
        transport: if udp { Transport::Udp } else { Transport::Tcp },
        ..Default::default()
    };
    let pps = TestSpec::Pps(PpsSpec {
        rate_pps: Some(1000.0),
        ..Default::default()
    });
    // (what, spec, port, data over UDP)
    let attacks: Vec<(&str, TestSpec, u16, bool)> = vec![
        ("stream at a plain listener", one_connection(), 40000, false),
        (
            "TCP ping at a plain listener",
            TestSpec::Ping(rr(false)),
            40000,
            false,
        ),
        (
            "UDP ping at a silent socket",
            TestSpec::Ping(rr(true)),
            40000,
            true,
        ),
        (
            "UDP rpc at a silent socket",
            TestSpec::Rpc(rr(true)),
            40000,
            true,
        ),
        ("pps at a silent socket", pps.clone(), 40000, true),
        ("stream at a closed port", one_connection(), 40001, false),
        ("pps at a closed port", pps, 40001, true),
    ];
    let tried = attacks.len();
    for (what, spec, port, udp_data) in attacks {
        let before = |t| count(&lab, t);
        let (tcp0, udp0, data0) = (before("ktcp"), before("kudp"), before("kudpdata"));
        let victim: SocketAddr = format!("{VICTIM}:{port}").parse().unwrap();
        let grant = Grant::new(&key, source, victim, 7, now_s() + 30);
        let part = ThirdParty::Client {
            server: victim,
            cookie: 7,
            grant: Some(grant),
        };
        let k = key.clone();
        let t0 = std::time::Instant::now();
        let answer = rogue::in_netns(&lab.client, move || {
            rogue::setup(a, spec, Some(part), Some(k))
        });
        match answer {
            Answer::Refused(e) => assert!(e.contains("did not prove"), "{what}: {e}"),
            Answer::Ready { .. } => panic!("{what}: the agent took the client part"),
        }
        thread::sleep(Duration::from_millis(200));
        let (tcp, udp, data) = (
            count(&lab, "ktcp") - tcp0,
            count(&lab, "kudp") - udp0,
            count(&lab, "kudpdata") - data0,
        );
        eprintln!(
            "{what}: refused in {:.1} s; {tcp} TCP and {udp} UDP packets reached the victim",
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(data, 0, "{what}: UDP data reached the victim");
        if udp_data {
            assert_eq!(udp, 0, "{what}: UDP packets reached the victim");
            assert!(tcp <= 6, "{what}: {tcp} TCP packets of a challenge");
        } else {
            assert_eq!(tcp, 0, "{what}: TCP packets reached the victim");
            assert!((1..=3).contains(&udp), "{what}: {udp} challenges");
        }
    }
    eprintln!("key-holder attacks tried: {tried}");
}

/// A TCP forwarder at `listen` (inside namespace `ns`) to `to`, for every connection.
fn relay(ns: &str, listen: SocketAddr, to: SocketAddr) {
    let l = rogue::in_netns(ns, move || TcpListener::bind(listen).unwrap());
    let ns = ns.to_string();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let ns = ns.clone();
            let Ok(up) = rogue::in_netns(&ns, move || TcpStream::connect(to)) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                })
            };
            pipe(c.try_clone().unwrap(), up.try_clone().unwrap());
            pipe(up, c);
        }
    });
}

/// `nft ARGS` in namespace `ns`.
fn nft_in(ns: &str, args: &str) {
    let o = run({
        let mut c = Lab::in_ns(ns, "nft");
        c.arg(args);
        c
    });
    assert!(o.status.success(), "nft {args}: {}", stderr(&o));
}

/// The controller dials 198.18.2.3:5302, where a relay hands its session to agent B of
/// the same fleet (same key): B refuses a Hello for an address that is not its own, so
/// the test fails naming the dialled address (with Hello rewritten to B's own address, the
/// controller refuses B's proof: `proto keyed::a_session_relayed_to_another_agent_fails_its_proof`).
/// Direct, B serves; and agent A behind a NAT at 198.18.2.3 (every other port of it
/// forwarded to A) serves through it once told it is reached there (`--reached-at`).
#[test]
fn a_session_relayed_to_another_agent_is_refused() {
    let Some(lab) = Bridged::new(3) else { return };
    if !need_tools(&["nft", "sysctl"]) {
        return;
    }
    let _b = lab.start_agent(2);
    let (nat, a, b) = (Bridged::addr(3), Bridged::addr(1), Bridged::addr(2));
    let _a = lab.start_agent_with(1, &["--reached-at", &nat]);
    let at = |ip: &str, port: u16| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };
    let router = &lab.hosts[2];
    relay(router, at(&nat, 5302), at(&b, 5301));
    run({
        let mut c = Lab::in_ns(router, "sysctl");
        c.args(["-qw", "net.ipv4.ip_forward=1"]);
        c
    });
    nft_in(router, "add table ip nat");
    nft_in(
        router,
        "add chain ip nat pre { type nat hook prerouting priority dstnat ; }",
    );
    nft_in(
        router,
        "add chain ip nat post { type nat hook postrouting priority srcnat ; }",
    );
    nft_in(
        router,
        &format!("add rule ip nat pre ip daddr {nat} tcp dport != 5302 dnat to {a}"),
    );
    nft_in(
        router,
        &format!("add rule ip nat post ip daddr {a} masquerade"),
    );
    let ping = |host: &str, port: &str| {
        run(lab.controller(&[
            "ping",
            host,
            "--port",
            port,
            "-t",
            "0.3",
            "--warmup",
            "0",
            "--no-save",
        ]))
    };
    let o = ping(&nat, "5302");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("dialled \"198.18.2.3\", which is not this agent")
            && stderr(&o).contains("--reached-at"),
        "{}",
        stderr(&o)
    );
    let o = ping(&b, FLEET_PORT);
    assert!(o.status.success(), "direct: {}", stderr(&o));
    let o = ping(&nat, FLEET_PORT);
    assert!(o.status.success(), "behind a NAT: {}", stderr(&o));
}
