//! The data plane is no reflector and no thief, tried as an attacker would: a rogue
//! controller (the library's own session, so that it speaks whatever the protocol is)
//! takes a UDP test's data port and cookie from the agent, then aims hostile datagrams at
//! the echo from the client namespace and counts what comes back; the XDP program of an
//! `--engine xdp` test leaves other hosts' packets to the same port, and the host's port
//! 53, to the kernel; a client told to steer a well-known port refuses before sending.

use crate::common;

use std::net::{TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use common::data_rogue::*;
use common::*;
use sonde_proto::{AgentEvent, AgentSession, Session, Timeouts};
use sonde_results::{RrSpec, TestSpec, Timing, Transport};
use sonde_run::control::Link;

/// Gives the client namespace [`OTHER_ADDR`] too: a second source the agent did not agree to.
fn add_other_addr(lab: &Lab) {
    let cidr = format!("{OTHER_ADDR}/24");
    lab.client_cmd("ip", &["addr", "add", &cidr, "dev", &lab.client_if]);
}

fn udp_ping(engine: &str) -> TestSpec {
    let mut r = RrSpec {
        transport: Transport::Udp,
        request_bytes: MESSAGE as u32,
        response_bytes: MESSAGE as u32,
        timing: Timing {
            warmup_ms: 0,
            ..Timing::measuring(4_000)
        },
        ..Default::default()
    };
    r.execution.engine = engine.parse().unwrap();
    TestSpec::Ping(r)
}

/// The hostile datagrams from the test's own address: 1 byte, short, oversized, and
/// full-length with another cookie. Returns how many were sent.
fn hostile(s: &UdpSocket, cookie: u64) -> usize {
    let sorts = [
        vec![0x01u8],
        request(MESSAGE - 1, 1, cookie),
        request(1000, 2, cookie),
        request(MESSAGE, 3, cookie ^ 1),
    ];
    send_each(s, &sorts)
}

/// Bytes waiting in the agent's kernel socket on UDP `port` (the Recv-Q `ss` shows):
/// what the kernel, not the XDP program, took for that port.
fn kernel_queued(lab: &Lab, port: u16) -> u64 {
    let ss = lab.server_cmd("ss", &["-Huan"]);
    let line = ss
        .lines()
        .find(|l| {
            l.split_whitespace()
                .nth(3)
                .is_some_and(|a| a.ends_with(&format!(":{port}")))
        })
        .unwrap_or_else(|| panic!("no socket on port {port}: {ss}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn the_udp_echo_answers_only_whole_requests_with_the_cookie() {
    let Some(lab) = Lab::new() else { return };
    add_other_addr(&lab);
    let agent = lab.start_agent();
    let rogue = Rogue::start(&lab, &agent, udp_ping("kernel")).unwrap();
    let (data, cookie) = (rogue.data, rogue.cookie);
    let s = socket_in(&lab.client, CLIENT_ADDR, data);
    let mut sent = hostile(&s, cookie);
    // A full, correct request from another address on the link: not the test's peer.
    let other = socket_in(&lab.client, OTHER_ADDR, data);
    for _ in 0..EACH {
        other.send(&request(MESSAGE, 9, cookie)).unwrap();
    }
    sent += EACH;
    let back = replies(&s, Duration::from_millis(300));
    // The one correct request between the two waits. The agent counts answers in its
    // window, which opens once it has taken Start (by now, 0.3 s on) and closes at Stop;
    // the echo counts an answer after its send returns, so the test may hold the answer
    // before it is counted: the wait after it gives the count 0.3 s to land before Stop.
    // (Asked last, right before Stop, the count once missed it under load: messages 0.)
    assert_answered(&s, cookie);
    let back_other = replies(&other, Duration::from_millis(300));
    assert_eq!(
        (back.len(), back_other.len()),
        (0, 0),
        "{back:?} {back_other:?}"
    );
    let server = rogue.finish();
    let rr = server.rr().cloned().expect("the echo's figures");
    eprintln!(
        "{sent} hostile datagrams: 0 answered; the agent counted {}",
        rr.foreign
    );
    assert_eq!(rr.foreign, sent as u64, "every dropped datagram is counted");
    assert_eq!(rr.messages, 1, "only the correct request was answered");
}

#[test]
fn an_answer_larger_than_its_request_needs_the_agents_ratio() {
    let Some(lab) = Lab::new() else { return };
    let agent = lab.start_agent();
    let rpc = |resp: &str| {
        let args = [
            "--udp",
            "--req-size",
            "64",
            "--resp-size",
            resp,
            "-t",
            "0.5",
            "--warmup",
            "0",
            "--no-save",
            "--json",
        ];
        run(lab.sonde(&agent, "rpc", &args))
    };
    let o = rpc("1024");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--max-udp-reply-ratio 16"),
        "names the flag and the ratio: {}",
        stderr(&o)
    );
    // The agent refuses it itself, not only the controller's CLI.
    let mut spec = udp_ping("kernel");
    if let TestSpec::Ping(r) = &mut spec {
        r.response_bytes = 65_000;
    }
    let e = Rogue::start(&lab, &agent, spec).err().expect("refused");
    assert!(e.to_string().contains("--max-udp-reply-ratio"), "{e}");
    // An equal answer runs, and an agent that allows more runs the larger one.
    assert!(rpc("64").status.success());
    drop(agent);
    let agent = lab.start_agent_with(&["--max-udp-reply-ratio", "16"]);
    let args = [
        "--udp",
        "--req-size",
        "64",
        "--resp-size",
        "1024",
        "-t",
        "0.5",
    ];
    let args = [&args[..], &["--warmup", "0", "--no-save", "--json"]].concat();
    let doc = doc_of(&run(lab.sonde(&agent, "rpc", &args)));
    assert_eq!(doc["end"]["rejected_requests"], 0, "{}", doc["end"]);
}

#[test]
fn the_xdp_program_takes_only_the_tests_flow() {
    let Some(lab) = Lab::new() else { return };
    if !skip_unless(
        "AF_XDP",
        sonde_engine::xdp::available().err().map(|e| e.to_string()),
    ) {
        return;
    }
    add_other_addr(&lab);
    let dns = in_netns(&lab.server, || {
        let s = UdpSocket::bind(format!("{}:53", lab.server_addr)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        s
    });
    let agent = lab.start_agent_with(&["--allow", "xdp"]);
    let rogue = Rogue::start(&lab, &agent, udp_ping("xdp")).unwrap();
    let (data, cookie) = (rogue.data, rogue.cookie);
    assert_eq!(kernel_queued(&lab, data.port()), 0);
    // The test's flow: steered to the echo, which drops and counts the hostile ones.
    let s = socket_in(&lab.client, CLIENT_ADDR, data);
    let sent = hostile(&s, cookie);
    // Another host to the same port, and the test's peer to the host's DNS port: both
    // are the kernel's.
    let other = socket_in(&lab.client, OTHER_ADDR, data);
    let to_dns = socket_in(
        &lab.client,
        CLIENT_ADDR,
        format!("{}:53", lab.server_addr).parse().unwrap(),
    );
    for _ in 0..EACH {
        other.send(&request(MESSAGE, 9, cookie)).unwrap();
        to_dns.send(b"dns?").unwrap();
    }
    let back = replies(&s, Duration::from_millis(500));
    let dns_got = replies(&dns, Duration::from_millis(100)).len();
    assert_eq!(back.len(), 0, "hostile datagrams answered: {back:?}");
    assert_eq!(replies(&other, Duration::from_millis(100)).len(), 0);
    assert_eq!(dns_got, EACH, "the host's port 53 kept its packets");
    // The other host's reached the agent's kernel socket (the echo, below, counted only
    // the test flow's hostile datagrams: none of the other host's was steered to it).
    let queued = kernel_queued(&lab, data.port());
    assert!(queued > 0, "the other host's datagrams reached the kernel");
    assert_answered(&s, cookie);
    let server = rogue.finish();
    let program = server
        .bypass
        .clone()
        .and_then(|b| b.program)
        .unwrap_or_default();
    assert!(
        program.contains(&format!("from {CLIENT_ADDR} to {}", lab.server_addr)),
        "{program}"
    );
    let rejected = server.rr().map(|r| r.foreign);
    eprintln!("{sent} hostile: 0 answered, the echo dropped {rejected:?}; {queued} bytes of the other host's and {dns_got} DNS datagrams reached the kernel");
    assert_eq!(
        rejected,
        Some(sent as u64),
        "only the test flow reached the echo"
    );
}

/// An agent that answers any Setup with `Ready` on `data_port`, as a hostile agent (or a
/// rewriter on the path) would.
fn lying_agent(listener: TcpListener, data_port: u16) {
    listener.set_nonblocking(true).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("no controller came: {e}"),
        }
    };
    stream.set_nonblocking(false).unwrap();
    let caps = sonde_run::kind::capabilities();
    let mut session = AgentSession::new(
        "sonde liar",
        "liar",
        &caps,
        Timeouts::default(),
        Instant::now(),
    )
    .require_key(rogue::harness_key(), nonce());
    let mut link = Link::new(stream).unwrap();
    let mut readied = false;
    while Instant::now() < until {
        if link.send(&mut session).is_err() {
            return;
        }
        if link.step(&mut session, Some(until), None).is_err() {
            return; // The controller hung up: what the test waits for.
        }
        while let Some(ev) = session.poll_event() {
            if let (AgentEvent::Setup { .. }, false) = (ev, readied) {
                session.ready(data_port, 1, Instant::now()).unwrap();
                readied = true;
            }
        }
    }
}

#[test]
fn a_client_refuses_to_steer_a_well_known_port() {
    let Some(lab) = Lab::new() else { return };
    if !skip_unless(
        "AF_XDP",
        sonde_engine::xdp::available().err().map(|e| e.to_string()),
    ) {
        return;
    }
    let (listener, dns) = in_netns(&lab.server, || {
        let l = TcpListener::bind(format!("{}:0", lab.server_addr)).unwrap();
        let d = UdpSocket::bind(format!("{}:53", lab.server_addr)).unwrap();
        d.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        (l, d)
    });
    let port = listener.local_addr().unwrap().port();
    let liar = std::thread::spawn(move || lying_agent(listener, 53));
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["ping", lab.server_addr, "--port", &port.to_string()])
        .args(["--udp", "--engine", "xdp", "-t", "1", "--no-save"]);
    let o = run(cmd);
    liar.join().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("port 53") && err.contains("well-known") && err.contains("no agent flag"),
        "{err}"
    );
    assert_eq!(
        replies(&dns, Duration::from_millis(200)).len(),
        0,
        "nothing sent to port 53"
    );
    let link = stdout(&run({
        let mut c = Lab::in_ns(&lab.client, "ip");
        c.args(["link", "show", &lab.client_if]);
        c
    }));
    assert!(
        !link.contains("xdp"),
        "no program left on the client: {link}"
    );
}

/// A UDP rpc client part (4 connections, 8 requests in flight each) whose every request
/// is dropped before the serving agent (an nftables rule at its host that counts, then
/// drops, the client agent's datagrams): the client agent's record counts each request it
/// sent, as many as reached the serving host, every one lost, and the bytes they carried
/// are those requests of 64 bytes (plus 28 bytes of IPv4 and UDP headers each).
#[test]
fn a_client_parts_unanswered_udp_requests_are_counted() {
    let Some((lab, a, b)) = common::bridge::Bridged::counting_udp(true) else {
        return;
    };
    let (_a, _b) = (lab.start_agent(1), lab.start_agent(2));
    let server = &lab.hosts[1];
    let rpc = ["rpc", "--udp", "-C", "4", "-W", "8"];
    let run_for = ["-t", "1", "--warmup", "0", "--json", "--no-save"];
    let part = common::bridge::part(&a, &b);
    let o = run(lab.controller(&[&rpc[..], &part, &run_for].concat()));
    let doc = doc_of(&o);
    let at_victim = nft_counted(server, "victim", "packets");
    let bytes = nft_counted(server, "victim", "bytes");
    let end = &doc["end"];
    let sent = end["client"]["requests_sent"].as_u64().unwrap();
    eprintln!("unanswered UDP requests: {sent} reported sent, {at_victim} at the serving host");
    assert!(sent >= 32, "{end}");
    assert_eq!(sent, at_victim, "{end}");
    assert_eq!(end["lost_messages"].as_u64(), Some(sent), "{end}");
    assert_eq!(bytes, sent * (64 + 28), "{end}");
}
