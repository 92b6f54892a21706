//! The io_uring UDP echo attacked as a rogue controller would: it is no reflector (other
//! sources, wrong cookies, short, truncated and oversized datagrams, a burst that empties
//! its ring of buffers); and an agent that cannot run io_uring runs the kernel engine for
//! a default and keeps serving.

use crate::common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::agent_proc::rings;
use common::data_rogue::*;
use common::*;

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
    send_each(s, &sorts)
}

/// [`assert_answered`], then short waits for what follows.
fn answered(s: &UdpSocket, cookie: u64) {
    assert_answered(s, cookie);
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
        answered(&s, cookie);
        let server = rogue.finish();
        let rr = server.rr().cloned().expect("the echo's figures");
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
