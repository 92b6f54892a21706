//! Every limit of `sonde serve` attacked by a rogue controller (a `ClientSession` over a
//! TcpStream with a hand-built spec, or the CLI with hostile flags): each is refused with
//! the agent flag that would allow it named; budgets are shared by concurrent tests; one
//! source's idle connections keep no other controller out; a test hook is off the wire;
//! SIGTERM ends the agent within a second even mid-stall. The agent's RSS and threads are
//! printed under each abuse (the figures in SECURITY.md).

use crate::common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::rogue::{self, Answer};
use common::*;
use sonde_proto::ThirdParty;
use sonde_results::{PpsSpec, RrSpec, Stall, StreamSpec, TestSpec, Timing, Transport};

/// A rogue controller's test that reached `Ready`: it holds the agent's slot and budget
/// until dropped.
struct Held {
    _conn: TcpStream,
}

/// Sends `spec` (and `part`) with the harness's key, as a controller would, up to
/// `Ready`; the agent's refusal in words otherwise.
fn rogue(port: u16, spec: TestSpec, part: Option<ThirdParty>) -> Result<Held, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    match rogue::setup(addr, spec, part, Some(rogue::harness_key())) {
        Answer::Ready { conn, .. } => Ok(Held { _conn: conn }),
        Answer::Refused(e) => Err(e),
    }
}

/// Refused, with `flag` named in the refusal.
fn refused(port: u16, spec: TestSpec, part: Option<ThirdParty>, flag: &str) -> String {
    let what = format!("{spec:?}");
    match rogue(port, spec, part) {
        Ok(_) => panic!("admitted, should be refused naming {flag}: {what}"),
        Err(e) => {
            assert!(e.contains(flag), "refusal should name {flag}: {e}");
            e
        }
    }
}

/// The agent's VmRSS (KiB) and threads, from /proc/PID/status.
fn rss_and_threads(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

fn report(abuse: &str, pid: u32) {
    let (rss, threads) = rss_and_threads(pid);
    eprintln!("FIGURE agent under '{abuse}': VmRSS {rss} KiB, {threads} threads");
}

fn short() -> Timing {
    Timing {
        duration_ms: 500,
        warmup_ms: 100,
        cooldown_ms: 0,
        interval_ms: 500,
    }
}

fn stream(rate: Option<f64>) -> TestSpec {
    TestSpec::Stream(StreamSpec {
        timing: short(),
        rate_bits_per_s: rate,
        ..Default::default()
    })
}

fn rpc(connections: u32, threads: u32, rate: f64) -> TestSpec {
    TestSpec::Rpc(RrSpec {
        connections,
        server_threads: Some(threads),
        rate_per_s: Some(rate),
        timing: short(),
        ..Default::default()
    })
}

fn pps(rx_threads: u32, rate: Option<f64>) -> TestSpec {
    TestSpec::Pps(PpsSpec {
        rx_threads,
        rate_pps: rate,
        timing: short(),
        ..Default::default()
    })
}

#[test]
fn every_limit_refuses_a_rogue_controller_naming_its_flag() {
    let agent = Agent::on_loopback_with(&[
        "--max-bitrate",
        "100M",
        "--max-threads",
        "16",
        "--max-memory",
        "256M",
    ]);
    let (port, pid) = (agent.port, agent.child.id());
    report("idle", pid);
    let stalled = TestSpec::Rpc(RrSpec {
        server_stall: Some(Stall {
            after_ms: 0,
            stall_ms: u64::MAX,
        }),
        ..match rpc(1, 1, 100.0) {
            TestSpec::Rpc(r) => r,
            _ => unreachable!(),
        }
    });
    // A controller cannot make an agent lie about its clock without --test-hooks.
    let shifted = TestSpec::Ping(RrSpec {
        stages: true,
        server_clock_shift_ns: Some(-500_000_000),
        ..match rpc(1, 1, 100.0) {
            TestSpec::Rpc(r) => r,
            _ => unreachable!(),
        }
    });
    let endless = TestSpec::Stream(StreamSpec {
        timing: Timing {
            duration_ms: u64::MAX - 1_000,
            ..short()
        },
        rate_bits_per_s: Some(1e6),
        ..Default::default()
    });
    let udp_flood = TestSpec::Ping(RrSpec {
        transport: Transport::Udp,
        request_bytes: 65_507,
        rate_per_s: Some(1e6),
        timing: short(),
        ..Default::default()
    });
    let cases = [
        ("unpaced stream", stream(None), "--max-bitrate"),
        ("1 Gbit/s stream", stream(Some(1e9)), "--max-bitrate"),
        ("rpc at 1 M/s x 64 B", rpc(1, 1, 1e6), "--max-bitrate"),
        ("UDP ping 64 KB x 1 M/s", udp_flood, "--max-bitrate"),
        ("unpaced pps", pps(1, None), "--max-bitrate"),
        ("rpc of 64 threads", rpc(64, 64, 100.0), "--max-threads"),
        (
            "pps of 15 receive threads",
            pps(15, Some(1000.0)),
            "--max-memory",
        ),
        ("duration near 2^64", endless, "--max-duration"),
        ("server_stall without hooks", stalled, "--test-hooks"),
        ("a shifted clock without hooks", shifted, "--test-hooks"),
    ];
    for (abuse, spec, flag) in cases {
        let e = refused(port, spec, None, flag);
        eprintln!("{abuse}: {e}");
        report(abuse, pid);
    }
    // A spec within every limit is still admitted: the refusals held nothing.
    rogue(port, stream(Some(50e6)), None).expect("a paced stream under the cap");
    rogue(port, rpc(8, 8, 100.0), None).expect("8 threads under --max-threads 16");
}

#[test]
fn a_client_part_is_capped_by_max_client_bitrate() {
    // The default cap (1G) refuses a client part asking for more, before any packet.
    let agent = Agent::on_loopback_with(&["--allow", "third-party"]);
    let part = ThirdParty::Client {
        server: SocketAddr::from(([198, 18, 255, 1], 5999)),
        cookie: 1,
        grant: None,
    };
    let e = refused(
        agent.port,
        stream(Some(10e9)),
        Some(part),
        "--max-client-bitrate",
    );
    eprintln!("10 Gbit/s client part: {e}");
    report("client part over the cap", agent.child.id());
}

#[test]
fn concurrent_tests_share_the_thread_and_memory_budget() {
    let agent = Agent::on_loopback_with(&["--max-threads", "8", "--max-memory", "80M"]);
    let port = agent.port;
    let first = rogue(port, rpc(6, 6, 100.0), None).expect("6 of 8 threads");
    report("a test holding 6 threads", agent.child.id());
    let e = refused(port, rpc(4, 4, 100.0), None, "--max-threads");
    assert!(e.contains("beside 6"), "{e}");
    drop(first);
    drop(wait_admitted(port, || rpc(4, 4, 100.0)));
    // Four pps receivers book 4 x 18 MiB of the 80 MiB; a fifth does not fit beside.
    let first = wait_admitted(port, || pps(4, Some(1000.0)));
    report("a test holding 72 MiB", agent.child.id());
    refused(port, pps(1, Some(1000.0)), None, "--max-memory");
    drop(first);
    wait_admitted(port, || pps(1, Some(1000.0)));
}

/// Admitted once the agent has freed the bookings of tests whose controllers left.
fn wait_admitted(port: u16, spec: impl Fn() -> TestSpec) -> Held {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        match rogue(port, spec(), None) {
            Ok(h) => return h,
            Err(e) if Instant::now() > until => panic!("budget never released: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A TCP connection to 127.0.0.1:`port` from source address 127.0.1.2.
fn connect_from_127_0_1_2(port: u16) -> TcpStream {
    connect_from(
        [127, 0, 1, 2],
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    )
    .unwrap()
}

#[test]
fn idle_connections_from_one_source_do_not_keep_another_out() {
    let agent = Agent::on_loopback_with(&[]);
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| connect_from_127_0_1_2(agent.port))
        .collect();
    // Four hold the address's handshake places; of the rest, four wait at the door for a
    // Hello whose ticket would prove the key, at most 0.5 s, and the others are pushed
    // out (told busy) at once as each newer one comes.
    std::thread::sleep(Duration::from_millis(700));
    report("40 idle connections from 127.0.1.2", agent.child.id());
    // All but four were told "busy" (or closed) by then.
    let answered = idle
        .iter()
        .filter(|c| {
            let mut c = *c;
            c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut b = [0u8; 256];
            c.read(&mut b).is_ok()
        })
        .count();
    assert!(answered >= 36, "only {answered} of 40 answered at once");
    let started = Instant::now();
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "0.5", &[]));
    let o = run(c);
    let took = started.elapsed();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        took < Duration::from_secs(5),
        "the controller waited {took:?}"
    );
    eprintln!("FIGURE controller at 127.0.0.1 served in {took:?} beside 40 idle peers");
    drop(idle);
}

#[test]
fn a_test_hook_from_the_cli_is_refused_without_test_hooks() {
    let agent = Agent::on_loopback_with(&[]);
    let mut c = sonde_cmd();
    c.args(agent.short_test("rpc", "0.5", &["--server-stall", "100:100000"]));
    let o = run(c);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--test-hooks"), "{}", stderr(&o));
}

#[test]
fn a_capped_agent_runs_a_paced_stream_and_refuses_an_unpaced_one() {
    let agent = Agent::on_loopback_with(&["--max-bitrate", "200M"]);
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "0.5", &[]));
    let o = run(c);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--max-bitrate") && stderr(&o).contains("--rate"),
        "{}",
        stderr(&o)
    );
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "2", &["-P", "2", "--rate", "100M", "--json"]));
    let doc = doc_of(&run(c));
    let got = doc["end"]["receiver"]["bits_per_second"].as_f64().unwrap();
    eprintln!(
        "FIGURE stream paced at 100 Mbit/s received {:.1} Mbit/s",
        got / 1e6
    );
    assert!(
        got < 110e6 && got > 50e6,
        "{got} bit/s for a 100 Mbit/s pace"
    );
}

/// Sends SIGTERM to the agent; how long it took to exit, if within `limit`.
fn term(agent: &mut Agent, limit: Duration) -> Option<Duration> {
    let pid = agent.child.id() as i32;
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_with_timeout(&mut agent.child, limit).map(|_| t.elapsed())
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
            after.split_whitespace().nth(1) == Some(&pid.to_string())
        })
        .collect()
}

#[test]
fn sigterm_ends_the_agent_within_a_second_mid_stall_and_mid_test() {
    for (what, agent_args, test, extra) in [
        (
            "a stalled rpc",
            &["--test-hooks"][..],
            "rpc",
            &["--server-stall", "300:100000", "--rate", "1000"][..],
        ),
        ("a stream", &[][..], "stream", &[][..]),
    ] {
        let mut agent = Agent::on_loopback_with(agent_args);
        let pid = agent.child.id();
        let mut c = sonde_cmd();
        c.args(agent.short_test(test, "5", extra));
        let mut controller = c.spawn_keeping(Keep::Nothing);
        std::thread::sleep(Duration::from_millis(1500));
        report(&format!("{what} in progress"), pid);
        let children = children_of(pid);
        let took = term(&mut agent, Duration::from_secs(1));
        let _ = controller.kill();
        let _ = controller.wait();
        let took =
            took.unwrap_or_else(|| panic!("the agent outlived SIGTERM by 1 s during {what}"));
        eprintln!("FIGURE agent exited {took:?} after SIGTERM during {what}");
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        for c in children {
            assert!(
                !std::path::Path::new(&format!("/proc/{c}")).exists(),
                "child {c} of the agent survived"
            );
        }
    }
}

#[test]
fn a_stalled_test_whose_controller_vanishes_frees_the_agent() {
    let agent = Agent::on_loopback_with(&["--test-hooks", "--max-tests", "1"]);
    let mut c = sonde_cmd();
    c.args(agent.short_test(
        "rpc",
        "5",
        &["--server-stall", "300:100000", "--rate", "1000"],
    ));
    let mut controller = c.spawn_keeping(Keep::Nothing);
    std::thread::sleep(Duration::from_millis(1500));
    let _ = controller.kill();
    let _ = controller.wait();
    // The one test slot comes back once the agent sees its controller gone and stops the
    // stalled worker; a new controller is served.
    let started = Instant::now();
    loop {
        let mut c = sonde_cmd();
        c.args(agent.short_test("stream", "0.5", &[]));
        let o = run(c);
        if o.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the agent stayed wedged: {}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "FIGURE agent served a new controller {:?} after a stalled test's controller vanished",
        started.elapsed()
    );
    report("after a vanished stalled test", agent.child.id());
}

/// Bytes nftables table `victim` counted in namespace `ns`.
fn counted_bytes(ns: &str) -> u64 {
    nft_counted(ns, "victim", "bytes")
}

/// Four pps client parts of 30 Mbit/s at once from an agent with `--max-client-bitrate
/// 40M` (the red team's attack, four parts adding up): the first is admitted, the others
/// are refused naming the flag and what the running part holds, and the bytes the serving
/// host received from the client agent over the run stay within 40 Mbit/s for the test's
/// 2 s (without the shared budget: 4 x 30 Mbit/s, 30 MB).
#[test]
fn client_parts_together_stay_within_max_client_bitrate() {
    let Some((lab, a, b)) = common::bridge::Bridged::counting_udp(false) else {
        return;
    };
    let _a = lab.start_agent_with(1, &["--max-client-bitrate", "40M"]);
    let _b = lab.start_agent(2);
    let server = &lab.hosts[1];
    let pps = [
        "--size",
        "1000",
        "--rate",
        "3750",
        "-t",
        "2",
        "--warmup",
        "0",
        "--no-save",
    ];
    let part = [&["pps"][..], &common::bridge::part(&a, &b), &pps].concat();
    let started = Instant::now();
    let parts: Vec<_> = (0..4)
        .map(|_| {
            let mut c = lab.controller(&part);
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<_> = parts
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let took = started.elapsed().as_secs_f64();
    let ran = outs.iter().filter(|o| o.status.success()).count();
    let refusals: Vec<String> = outs
        .iter()
        .filter(|o| !o.status.success())
        .map(stderr)
        .collect();
    let bytes = counted_bytes(server);
    eprintln!(
        "4 client parts of 30 Mbit/s: {ran} ran, {} refused; {bytes} B at the serving host in {took:.1} s",
        refusals.len()
    );
    assert!(ran >= 1, "none ran: {refusals:?}");
    assert!(refusals.len() >= 2, "{ran} of 4 ran beside each other");
    for e in &refusals {
        assert!(
            e.contains("--max-client-bitrate") && e.contains("running client parts"),
            "{e}"
        );
    }
    // The parts that ran sent (the counter counts) and, together, no more than the cap
    // allows for their 2 s (and a little for packets in flight at the ends).
    assert!(bytes > 5_000_000, "{bytes} B");
    assert!(
        bytes <= (40e6 / 8.0 * 2.2) as u64,
        "{bytes} B over 40 Mbit/s for 2 s"
    );
}

/// A pps spec asking the agent to send (`-R`, `--bidir`: an iperf3 far end's options)
/// from a rogue controller: refused naming the flag, where before the agent ran it
/// forward under a spec saying otherwise; the same spec one way is admitted.
#[test]
fn a_pps_spec_asking_the_agent_to_send_is_refused_naming_its_flag() {
    let agent = Agent::on_loopback_with(&[]);
    let one_way = || PpsSpec {
        rate_pps: Some(1000.0),
        timing: short(),
        ..Default::default()
    };
    let cases = [
        (
            "-R",
            PpsSpec {
                reverse: true,
                ..one_way()
            },
        ),
        (
            "--bidir",
            PpsSpec {
                bidir: true,
                ..one_way()
            },
        ),
    ];
    for (flag, spec) in cases {
        let e = refused(agent.port, TestSpec::Pps(spec), None, flag);
        eprintln!("{flag}: {e}");
        assert!(e.contains("--iperf3"), "{e}");
    }
    rogue(agent.port, TestSpec::Pps(one_way()), None).expect("a pps test one way");
}
