//! The io_uring engine attacked as a rogue controller would: a test the agent admitted
//! under `--max-memory`/`--max-threads` takes no more than it admitted (the agent's peak
//! RSS and its threads measured while it runs); the io_uring UDP echo is no reflector
//! (other sources, wrong cookies, short, truncated and oversized datagrams, a burst that
//! empties its ring of buffers); a test whose controller vanishes leaves no thread and no
//! ring behind, and the agent serves the next one.

use crate::common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::agent_proc::*;
use common::data_rogue::*;
use common::*;
use sonde_results::{RrSpec, TestSpec, Timing};

/// An rpc over io_uring with 1 MiB messages on four agent workers: admitted under a
/// 96 MiB budget (the agent estimates about 52 MiB for it), it must not take more than
/// that. The echo used to keep 64 answers per worker (64 MiB each), 5x what it admitted.
#[test]
fn a_uring_echo_takes_no_more_memory_than_the_agent_admitted() {
    let budget = 96 * MIB;
    let agent = Agent::on_loopback_with(&["--max-memory", "96M"]);
    let pid = agent.child.id();
    let idle = status(pid, "VmRSS:") * 1024;
    let args = agent.short_test(
        "rpc",
        "1",
        &[
            "--engine",
            "uring",
            "-C",
            "4",
            "--threads",
            "4",
            "--server-threads",
            "4",
            "-m",
            "1048576",
            "--no-save",
        ],
    );
    let (o, _) = run_sampling(&agent, &args);
    assert!(o.status.success(), "admitted and run: {}", stderr(&o));
    let what = "uring rpc 4 x 1 MiB under --max-memory 96M";
    assert_peak_within(pid, idle, budget, what);
}

/// A uring stream of 1-byte buffers on 600 connections into one agent worker: the
/// agent admits it under a small budget, and its ring of receive buffers must fit it.
#[test]
fn a_uring_stream_of_tiny_buffers_stays_within_the_agents_memory() {
    let agent = Agent::on_loopback_with(&["--max-memory", "8M"]);
    let pid = agent.child.id();
    let idle = status(pid, "VmRSS:") * 1024;
    let args = agent.short_test(
        "stream",
        "1",
        &[
            "--engine",
            "uring",
            "-P",
            "600",
            "--threads",
            "4",
            "--server-threads",
            "1",
            "-l",
            "1",
            "--sndbuf",
            "1",
            "--rcvbuf",
            "1",
            "--no-save",
        ],
    );
    let (o, _) = run_sampling(&agent, &args);
    if !o.status.success() {
        eprintln!("FIGURE uring stream 600 x 1-byte buffers under --max-memory 8M: refused");
        assert!(stderr(&o).contains("--max-memory"), "{}", stderr(&o));
        return;
    }
    let what = "uring stream 600 x 1-byte buffers under --max-memory 8M";
    assert_peak_within(pid, idle, 8 * MIB, what);
}

/// `--sqpoll` on many connections: the agent's threads during the test stay within what
/// a kernel-engine test of the same workers takes plus the polling threads it admitted
/// (no io-wq workers, no thread per connection).
#[test]
fn uring_threads_stay_within_what_the_agent_admitted() {
    let agent = Agent::on_loopback_with(&["--max-threads", "4"]);
    let idle = status(agent.child.id(), "Threads:");
    let common = ["-C", "64", "--threads", "1", "--server-threads", "2"];
    let kernel: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--engine", "kernel", "--no-save"])
        .collect();
    let (o, kernel_peak) = run_sampling(&agent, &agent.short_test("rpc", "1", &kernel));
    assert!(o.status.success(), "{}", stderr(&o));
    let uring: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--engine", "uring", "--sqpoll", "--no-save"])
        .collect();
    let (o, uring_peak, iou) = run_sampling_uring(&agent, &agent.short_test("rpc", "1", &uring));
    eprintln!(
        "FIGURE agent threads: idle {idle}, kernel rpc -C 64 on 2 workers {kernel_peak}, uring --sqpoll {uring_peak} ({iou} of io_uring's)"
    );
    assert!(iou <= 2, "{iou} io_uring threads, 2 pollers admitted");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        uring_peak <= kernel_peak + 2,
        "io_uring took {} threads beyond the kernel engine's, 2 admitted",
        uring_peak - kernel_peak
    );
    // The pollers end with their rings, shortly after the test.
    let (pid, t) = (agent.child.id(), Instant::now());
    while uring_threads(pid) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "io_uring pollers outlived their test by 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "FIGURE the pollers were gone {:?} after the controller's end",
        t.elapsed()
    );
    // Streams both ways on 64 connections (send_zc on the agent's side): io_uring makes
    // no thread of its own (no io-wq worker: every socket operation waits in a poll).
    for extra in [&["-R", "--zerocopy"][..], &[][..]] {
        let args: Vec<&str> = ["-P", "64", "--threads", "2", "--server-threads", "2"]
            .into_iter()
            .chain(["-l", "64K", "--engine", "uring", "--no-save"])
            .chain(extra.iter().copied())
            .collect();
        let (o, peak, iou) = run_sampling_uring(&agent, &agent.short_test("stream", "1", &args));
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        eprintln!("FIGURE agent threads: uring stream -P 64 {extra:?} on 2 workers: {peak}, {iou} of io_uring's");
        assert_eq!(
            iou, 0,
            "stream {extra:?}: io_uring threads the agent did not admit"
        );
    }
    // Too many with --sqpoll: refused naming the flag.
    let too_many: Vec<&str> = ["-C", "4", "--server-threads", "3"]
        .into_iter()
        .chain(["--engine", "uring", "--sqpoll", "--no-save"])
        .collect();
    let mut c = sonde_cmd();
    c.args(agent.short_test("rpc", "0.5", &too_many));
    let o = run(c);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--max-threads"), "{}", stderr(&o));
}

/// A uring test whose controller is killed mid-test (TCP and UDP, with and without
/// `--sqpoll`): the agent ends its workers and closes its rings, then serves the next.
#[test]
fn a_vanished_controller_leaves_no_uring_worker_or_ring() {
    let agent = Agent::on_loopback_with(&["--max-tests", "1"]);
    let pid = agent.child.id();
    // Idle after one whole test (whatever the agent keeps between tests, it has then).
    let mut c = sonde_cmd();
    c.args(agent.short_test("rpc", "0.3", &["--engine", "uring", "--no-save"]));
    assert!(run(c).status.success());
    std::thread::sleep(Duration::from_millis(300));
    let idle = status(pid, "Threads:");
    for extra in [
        &["-C", "8"][..],
        &["--udp", "-C", "8"][..],
        &["-C", "8", "--sqpoll"][..],
        &["--udp", "--sqpoll"][..],
    ] {
        let args: Vec<&str> = extra
            .iter()
            .copied()
            .chain(["--engine", "uring", "--server-threads", "2", "--no-save"])
            .collect();
        let mut c = sonde_cmd();
        c.args(agent.short_test("rpc", "5", &args));
        let mut controller = c.spawn_keeping(Keep::Nothing);
        std::thread::sleep(Duration::from_millis(1200));
        let busy = (status(pid, "Threads:"), rings(pid));
        let _ = controller.kill();
        let _ = controller.wait();
        let started = Instant::now();
        loop {
            let now = (status(pid, "Threads:"), rings(pid));
            if now.0 <= idle && now.1 == 0 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{extra:?}: 10 s after its controller vanished the agent still has {} threads \
                 (idle {idle}) and {} rings",
                now.0,
                now.1
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "FIGURE {extra:?}: mid-test {} threads, {} rings; all gone {:?} after the controller died",
            busy.0,
            busy.1,
            started.elapsed()
        );
        assert!(busy.1 > 0, "the test ran on io_uring");
        let mut c = sonde_cmd();
        c.args(agent.short_test("rpc", "0.3", &["--engine", "uring", "--no-save"]));
        let o = run(c);
        assert!(o.status.success(), "the next test: {}", stderr(&o));
    }
}

/// `--max-bitrate` holds for what the agent sends over io_uring (copies and `send_zc`):
/// a reverse stream paced at 100 Mbit/s under a 200 Mbit/s cap carries no more.
#[test]
fn a_uring_sender_on_the_agent_keeps_to_the_admitted_rate() {
    let agent = Agent::on_loopback_with(&["--max-bitrate", "200M"]);
    for extra in [&[][..], &["--zerocopy", "-l", "256K"][..]] {
        let args: Vec<&str> = [
            "-R",
            "-P",
            "2",
            "--rate",
            "100M",
            "--engine",
            "uring",
            "--json",
            "--no-save",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
        let mut c = sonde_cmd();
        c.args(agent.short_test("stream", "2", &args));
        let doc = doc_of(&run(c));
        let got = doc["end"]["receiver"]["bits_per_second"].as_f64().unwrap();
        eprintln!(
            "FIGURE uring stream -R {extra:?} paced at 100 Mbit/s: {:.1} Mbit/s",
            got / 1e6
        );
        assert!(got < 110e6, "{got} bit/s for a 100 Mbit/s pace");
        // Unpaced: refused naming the flag.
        let mut c = sonde_cmd();
        let unpaced: Vec<&str> = ["-R", "--engine", "uring", "--no-save"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        c.args(agent.short_test("stream", "0.5", &unpaced));
        let o = run(c);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("--max-bitrate"), "{}", stderr(&o));
    }
}

/// An operator who allows large UDP answers (`--max-udp-reply-ratio`): the io_uring echo
/// keeps an answer per receive buffer, and those must stay within what the agent
/// admitted (it kept 256 answers of the answer's size: 16 MiB at 65,000 bytes).
#[test]
fn a_uring_udp_echo_of_large_answers_stays_within_the_agents_memory() {
    let budget = 16 * MIB;
    let agent = Agent::on_loopback_with(&["--max-udp-reply-ratio", "1100", "--max-memory", "16M"]);
    let pid = agent.child.id();
    let idle = status(pid, "VmRSS:") * 1024;
    let args = agent.short_test(
        "rpc",
        "0.5",
        &[
            "--udp",
            "--engine",
            "uring",
            "--req-size",
            "64",
            "--resp-size",
            "65000",
            "--no-save",
        ],
    );
    let (o, _) = run_sampling(&agent, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let what = "uring UDP echo of 65,000-byte answers under --max-memory 16M";
    assert_peak_within(pid, idle, budget, what);
}

/// A data connection that sends requests and never reads an answer: the io_uring echo's
/// send waits on a full socket. The test still ends when its time is up, its worker and
/// ring go, and the agent serves the next test.
#[test]
fn a_peer_that_never_reads_does_not_hold_a_uring_echo() {
    let agent = Agent::on_loopback_with(&["--max-tests", "1"]);
    let pid = agent.child.id();
    let message = 64 << 10;
    let mut r = RrSpec {
        request_bytes: message,
        response_bytes: message,
        timing: Timing {
            warmup_ms: 0,
            ..Timing::measuring(1_000)
        },
        ..Default::default()
    };
    r.execution.engine = sonde_results::Engine::Uring;
    let addr = SocketAddr::from(([127, 0, 0, 1], agent.port));
    let control = TcpStream::connect(addr).unwrap();
    let mut data = None;
    let rogue = Rogue::over(control, addr, TestSpec::Rpc(r), |at| {
        // Its header (the test's cookie) is written once the cookie is known, below.
        let s = TcpStream::connect(at).unwrap();
        s.set_write_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        data = Some(s);
    })
    .unwrap();
    let mut s = data.take().unwrap();
    let header = sonde_proto::DataHeader {
        cookie: rogue.cookie,
        index: 0,
    }
    .encode();
    std::io::Write::write_all(&mut s, &header).unwrap();
    // Requests, never reading: bounded to 400 (25 MiB) and to what the sockets take in 2 s.
    let request = vec![0x5au8; message as usize];
    let t = Instant::now();
    let mut sent = 0;
    while sent < 400 && t.elapsed() < Duration::from_secs(2) {
        match std::io::Write::write_all(&mut s, &request) {
            Ok(()) => sent += 1,
            Err(_) => break,
        }
    }
    let busy = (status(pid, "Threads:"), rings(pid));
    let t = Instant::now();
    let server = rogue.finish();
    eprintln!(
        "FIGURE a peer that never reads: {sent} requests of 64 KiB sent; mid-test {} threads, {} rings; results {:?} after Stop ({} answered)",
        busy.0,
        busy.1,
        t.elapsed(),
        server.rr().map_or(0, |r| r.messages)
    );
    drop(s);
    let t = Instant::now();
    while rings(pid) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the echo's ring outlived its test by 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = sonde_cmd();
    c.args(agent.short_test("rpc", "0.3", &["--engine", "uring", "--no-save"]));
    let o = run(c);
    assert!(o.status.success(), "the next test: {}", stderr(&o));
}
