//! The io_uring engine attacked as a rogue controller would: a test the agent admitted
//! under `--max-memory`/`--max-threads` takes no more than it admitted (the agent's peak
//! RSS and its threads measured while it runs); the io_uring UDP echo is no reflector
//! (other sources, wrong cookies, short, truncated and oversized datagrams, a burst that
//! empties its ring of buffers); a test whose controller vanishes leaves no thread and no
//! ring behind, and the agent serves the next one.

mod common;

use std::fs::File;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use sonde_engine::udp_match::{stamp_cookie, REQUEST_HEADER_BYTES};
use sonde_proto::{ClientEvent, ClientSession, Session, Timeouts};
use sonde_results::{RrSpec, SideResult, TestSpec, Timing, Transport};
use sonde_run::control::Link;
use sonde_run::controller::{handshake, ControllerError};
use sonde_run::signals::Interrupt;

/// A field of /proc/PID/status (`VmHWM:`, `VmRSS:`, `Threads:`), 0 when gone.
fn status(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The io_uring instances the process holds open.
fn rings(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("io_uring"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The process's threads io_uring made (`iou-sqp-*` pollers, `iou-wrk-*` io-wq workers).
fn uring_threads(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("iou-"))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

/// Runs `sonde ARGS` against the loopback agent, sampling the agent's threads meanwhile:
/// the command's output, the most threads seen and the most of them io_uring's own.
fn run_sampling(agent: &Agent, args: &[String]) -> (std::process::Output, u64) {
    let (o, peak, _) = run_sampling_uring(agent, args);
    (o, peak)
}

fn run_sampling_uring(agent: &Agent, args: &[String]) -> (std::process::Output, u64, u64) {
    let pid = agent.child.id();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let iou = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak, iou) = (done.clone(), peak.clone(), iou.clone());
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(30);
            while !done.load(Ordering::Relaxed) && Instant::now() < until {
                peak.fetch_max(status(pid, "Threads:"), Ordering::Relaxed);
                iou.fetch_max(uring_threads(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let mut c = sonde_cmd();
    c.args(args);
    let o = run(c);
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    (o, peak.load(Ordering::Relaxed), iou.load(Ordering::Relaxed))
}

const MIB: u64 = 1 << 20;

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
    let peak = status(pid, "VmHWM:") * 1024;
    eprintln!(
        "FIGURE uring rpc 4 x 1 MiB under --max-memory 96M: agent VmRSS idle {} MiB, peak {} MiB",
        idle / MIB,
        peak / MIB
    );
    assert!(
        peak.saturating_sub(idle) <= budget,
        "the agent took {} MiB over idle for a test admitted under {} MiB",
        peak.saturating_sub(idle) / MIB,
        budget / MIB
    );
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
    let peak = status(pid, "VmHWM:") * 1024;
    eprintln!(
        "FIGURE uring stream 600 x 1-byte buffers under --max-memory 8M: {} (agent VmRSS idle {} KiB, peak {} KiB)",
        if o.status.success() { "admitted" } else { "refused" },
        idle / 1024,
        peak / 1024
    );
    if !o.status.success() {
        assert!(stderr(&o).contains("--max-memory"), "{}", stderr(&o));
        return;
    }
    assert!(
        peak.saturating_sub(idle) <= 8 * MIB,
        "the agent took {} KiB over idle for a test admitted under 8 MiB",
        peak.saturating_sub(idle) / 1024
    );
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

// The io_uring UDP echo as a reflector, from the lab's client namespace.

/// A second address on the client's side: "another host" on the agent's link.
const OTHER_ADDR: &str = "198.18.0.3";
const MESSAGE: usize = 64;
/// Datagrams of each hostile sort sent.
const EACH: usize = 5;
/// Datagrams of the burst from another address: more than the echo's ring has buffers.
const BURST: usize = 2000;

fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(format!("/var/run/netns/{ns}")).unwrap();
            // SAFETY: a namespace file we opened; only this thread moves.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}

fn nonce() -> [u8; sonde_proto::CHALLENGE_BYTES] {
    let mut n = [0u8; sonde_proto::CHALLENGE_BYTES];
    std::io::Read::read_exact(&mut File::open("/dev/urandom").unwrap(), &mut n).unwrap();
    n
}

fn udp_ping_uring(sqpoll: bool) -> TestSpec {
    let mut r = RrSpec {
        transport: Transport::Udp,
        request_bytes: MESSAGE as u32,
        response_bytes: MESSAGE as u32,
        sqpoll,
        timing: Timing {
            warmup_ms: 0,
            ..Timing::measuring(4_000)
        },
        ..Default::default()
    };
    r.execution.engine = sonde_results::Engine::Uring;
    TestSpec::Ping(r)
}

/// A controller that runs no workers: it takes the data port and the cookie, says Start,
/// and leaves the data plane to the test.
struct Rogue {
    link: Link,
    session: ClientSession,
    agent: SocketAddr,
    data: SocketAddr,
    cookie: u64,
}

impl Rogue {
    fn start(lab: &Lab, agent: &Agent, spec: TestSpec) -> Result<Rogue, ControllerError> {
        let addr: SocketAddr = format!("{}:{}", lab.server_addr, agent.port)
            .parse()
            .unwrap();
        let control = in_netns(&lab.client, || TcpStream::connect(addr).unwrap());
        Rogue::over(control, addr, spec, |_| ())
    }

    /// Hello to Start over `control`; `before_start` gets the data port and cookie once
    /// the agent is ready (to open data connections).
    fn over(
        control: TcpStream,
        addr: SocketAddr,
        spec: TestSpec,
        before_start: impl FnOnce(SocketAddr),
    ) -> Result<Rogue, ControllerError> {
        let mut link = Link::new(control).unwrap();
        let mut session = ClientSession::new(
            spec,
            "sonde security test",
            "rogue controller",
            Timeouts::default(),
            Instant::now(),
        )
        .with_nonce(nonce())
        .with_key(Some(rogue::harness_key()));
        let h = handshake(&mut link, &mut session, addr, &Interrupt::none())?;
        before_start(SocketAddr::new(addr.ip(), h.data_port));
        session.start(Instant::now()).unwrap();
        link.send(&mut session).unwrap();
        Ok(Rogue {
            link,
            session,
            agent: addr,
            data: SocketAddr::new(addr.ip(), h.data_port),
            cookie: h.cookie,
        })
    }

    fn finish(mut self) -> SideResult {
        self.session.stop(Instant::now()).unwrap();
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            self.link.send(&mut self.session).unwrap();
            let step = self.link.step(&mut self.session, Some(until), None);
            while let Some(ev) = self.session.poll_event() {
                if let ClientEvent::Results(r) = ev {
                    return *r;
                }
            }
            step.unwrap_or_else(|e| panic!("agent at {}: {e}", self.agent));
        }
        panic!("no results from {} in 15 s", self.agent)
    }
}

fn socket_in(ns: &str, from: &str, to: SocketAddr) -> UdpSocket {
    in_netns(ns, || {
        let s = UdpSocket::bind(format!("{from}:0")).unwrap();
        s.connect(to).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        s
    })
}

fn request(len: usize, seq: u64, cookie: u64) -> Vec<u8> {
    let mut d = vec![0x5au8; len.max(REQUEST_HEADER_BYTES)];
    d[..8].copy_from_slice(&seq.to_le_bytes());
    stamp_cookie(&mut d, cookie);
    d.truncate(len);
    d
}

fn replies(s: &UdpSocket, wait: Duration) -> Vec<usize> {
    let (until, mut buf, mut got) = (Instant::now() + wait, [0u8; 70_000], Vec::new());
    while Instant::now() < until {
        if let Ok(n) = s.recv(&mut buf) {
            got.push(n);
        }
    }
    got
}

/// From the test's own address: 1 byte, short, a byte too long, larger than the echo's
/// receive buffers (truncated there), 65,000 bytes, and full-length with another cookie.
fn hostile(s: &UdpSocket, cookie: u64) -> usize {
    let sorts = [
        vec![0x01u8],
        request(MESSAGE - 1, 1, cookie),
        request(MESSAGE + 1, 2, cookie),
        request(MESSAGE + 400, 3, cookie),
        request(65_000, 4, cookie),
        request(MESSAGE, 5, cookie ^ 1),
    ];
    for d in &sorts {
        for _ in 0..EACH {
            s.send(d).unwrap();
        }
    }
    sorts.len() * EACH
}

fn assert_answered(s: &UdpSocket, cookie: u64) {
    s.send(&request(MESSAGE, 42, cookie)).unwrap();
    let mut buf = [0u8; 2048];
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let n = s
        .recv(&mut buf)
        .expect("an answer to the test's own request");
    assert_eq!(n, MESSAGE, "answer as large as the request");
    assert_eq!(&buf[..8], &42u64.to_le_bytes(), "the request echoed");
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
}

#[test]
fn the_uring_udp_echo_answers_only_whole_requests_with_the_cookie() {
    for sqpoll in [false, true] {
        let Some(lab) = Lab::new() else { return };
        let cidr = format!("{OTHER_ADDR}/24");
        lab.client_cmd("ip", &["addr", "add", &cidr, "dev", &lab.client_if]);
        let agent = lab.start_agent();
        let rogue = Rogue::start(&lab, &agent, udp_ping_uring(sqpoll)).unwrap();
        let (data, cookie) = (rogue.data, rogue.cookie);
        let s = socket_in(&lab.client, CLIENT_ADDR, data);
        let mut sent = hostile(&s, cookie);
        // Correct requests from another address on the link, as a burst larger than the
        // echo's ring of buffers (bounded: BURST datagrams, paced over about 200 ms).
        let other = socket_in(&lab.client, OTHER_ADDR, data);
        let t = Instant::now();
        for i in 0..BURST {
            other.send(&request(MESSAGE, 9, cookie)).unwrap();
            if i % 100 == 99 {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(t.elapsed() < Duration::from_secs(5));
        }
        sent += BURST;
        let back = replies(&s, Duration::from_millis(500));
        let back_other = replies(&other, Duration::from_millis(100));
        assert_eq!(
            (back.len(), back_other.len()),
            (0, 0),
            "sqpoll {sqpoll}: {back:?} {back_other:?}"
        );
        // The echo still answers its test after all that.
        assert_answered(&s, cookie);
        let server = rogue.finish();
        let rr = server.rr.expect("the echo's figures");
        eprintln!(
            "FIGURE uring echo (sqpoll {sqpoll}): {sent} hostile datagrams, 0 answered; counted {} foreign",
            rr.foreign
        );
        assert_eq!(rr.messages, 1, "only the correct request was answered");
        assert!(
            rr.foreign <= sent as u64,
            "foreign {} of {sent} sent",
            rr.foreign
        );
    }
}

// An agent that cannot run io_uring (a seccomp filter refuses io_uring_setup).

/// Installs, in the child about to exec, a seccomp filter that fails io_uring_setup with
/// EPERM (x86_64 only; other arches' calls pass).
fn forbid_io_uring(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const NR_IO_URING_SETUP: u32 = 425;
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_RET | BPF_K.
    const LD: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const RET: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let filter = [
        op(LD, 0, 0, 4), // seccomp_data.arch
        op(JEQ, 0, 3, AUDIT_ARCH_X86_64),
        op(LD, 0, 0, 0), // seccomp_data.nr
        op(JEQ, 0, 1, NR_IO_URING_SETUP),
        op(RET, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(RET, 0, 0, SECCOMP_RET_ALLOW),
    ];
    // SAFETY: only async-signal-safe calls (prctl) between fork and exec; the filter
    // outlives them (moved into the closure).
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A controller's default (io_uring for rpc, for `--zerocopy`, for `--sqpoll`) against
/// an agent that cannot run it: the agent runs the kernel engine and says why, refuses
/// `--engine uring` naming the reason, and keeps serving.
#[test]
fn an_agent_without_io_uring_runs_the_kernel_engine_for_a_default() {
    if std::env::consts::ARCH != "x86_64" {
        return;
    }
    let _serial = Serial::take();
    let mut cmd = sonde_cmd();
    cmd.args(["serve", "--bind", "127.0.0.1", "--port", "0"]);
    forbid_io_uring(&mut cmd);
    let agent = Agent::start(cmd);
    let pid = agent.child.id();
    for extra in [
        &[][..],
        &["--sqpoll"][..],
        &["--udp", "--sqpoll", "-C", "4"][..],
    ] {
        let args: Vec<&str> = extra
            .iter()
            .copied()
            .chain(["--json", "--no-save"])
            .collect();
        let mut c = sonde_cmd();
        c.args(agent.short_test("rpc", "0.3", &args));
        let o = run(c);
        eprintln!(
            "rpc {extra:?} against an agent without io_uring: {}",
            stderr(&o)
        );
        if o.status.success() {
            let doc = doc_of(&o);
            let server = &doc["end"]["server"];
            assert_eq!(server["engine"], "kernel", "{extra:?}: {server}");
        } else {
            assert!(
                stderr(&o).contains("io_uring") || stderr(&o).contains("uring"),
                "{extra:?}: a refusal that says why: {}",
                stderr(&o)
            );
        }
    }
    for (test, extra) in [
        ("rpc", &["--engine", "uring"][..]),
        ("stream", &["--engine", "uring", "--zerocopy"][..]),
    ] {
        let args: Vec<&str> = extra.iter().copied().chain(["--no-save"]).collect();
        let mut c = sonde_cmd();
        c.args(agent.short_test(test, "0.3", &args));
        let o = run(c);
        eprintln!(
            "{test} {extra:?} against an agent without io_uring: {}",
            stderr(&o)
        );
        assert!(
            !o.status.success(),
            "{test} {extra:?} ran on an agent without io_uring"
        );
        assert!(stderr(&o).contains("uring"), "{}", stderr(&o));
    }
    // --zerocopy without --engine asks for io_uring by default.
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "0.3", &["--zerocopy", "--json", "--no-save"]));
    let o = run(c);
    eprintln!(
        "stream --zerocopy against an agent without io_uring: {}",
        stderr(&o)
    );
    assert_eq!(rings(pid), 0);
    let mut c = sonde_cmd();
    c.args(agent.short_test("stream", "0.3", &["--no-save"]));
    let o = run(c);
    assert!(o.status.success(), "the agent still serves: {}", stderr(&o));
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
    let peak = status(pid, "VmHWM:") * 1024;
    eprintln!(
        "FIGURE uring UDP echo of 65,000-byte answers under --max-memory 16M: {} (agent VmRSS idle {} MiB, peak {} MiB)",
        if o.status.success() { "admitted" } else { "refused" },
        idle / MIB,
        peak / MIB
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        peak.saturating_sub(idle) <= budget,
        "the agent took {} MiB over idle for a test admitted under {} MiB",
        peak.saturating_sub(idle) / MIB,
        budget / MIB
    );
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
        server.rr.as_ref().map_or(0, |r| r.messages)
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
