//! The AF_XDP engine's kernel side on a real veth pair inside a network namespace: frames
//! sent from one AF_XDP socket reach the other through the redirect program, only those
//! of the test's port; other traffic goes on to the kernel; the program is gone when its
//! owner drops it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use sonde_engine::xdp::frame::{payload_offset, udp_frame, Endpoints};
use sonde_engine::xdp::{attach, ifindex, AttachMode, Port, Steer, Xsk, XskConfig};

const PORT: u16 = 47_001;
const OTHER_PORT: u16 = 47_002;
const MAC_A: [u8; 6] = [2, 0, 0x5d, 0, 0, 0xa];
const MAC_B: [u8; 6] = [2, 0, 0x5d, 0, 0, 0xb];

/// A namespace with a veth pair xa <-> xb in it; deleted on drop.
struct Netns(String);

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Netns {
    fn new() -> Option<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || Command::new("ip").arg("-V").output().is_err() {
            assert!(std::env::var("CI").is_err(), "needs root and ip in CI");
            eprintln!("SKIPPED: needs root and ip");
            return None;
        }
        let prefix = std::env::var("SONDE_TEST_NETNS_PREFIX").unwrap_or_else(|_| "sonde".into());
        let ns = Netns(format!("{prefix}-xdp-{}", std::process::id()));
        ip(&["netns", "add", &ns.0]);
        let mac = |m: [u8; 6]| m.map(|b| format!("{b:02x}")).join(":");
        let (a, b) = (mac(MAC_A), mac(MAC_B));
        ip(&[
            "-n", &ns.0, "link", "add", "xa", "address", &a, "type", "veth", "peer", "name", "xb",
            "address", &b,
        ]);
        for dev in ["xa", "xb", "lo"] {
            ip(&["-n", &ns.0, "link", "set", dev, "up"]);
        }
        Some(ns)
    }

    /// Moves the calling thread into the namespace.
    fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: f is an open namespace file; only this thread moves.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
    }

    fn xdp_on(&self, dev: &str) -> bool {
        let o = Command::new("ip")
            .args(["-n", &self.0, "link", "show", dev])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

fn frames_to(port: u16) -> Vec<u8> {
    let e = Endpoints {
        src_mac: MAC_A,
        dst_mac: MAC_B,
        src: "198.18.0.1:40000".parse().unwrap(),
        dst: SocketAddr::new("198.18.0.2".parse().unwrap(), port),
    };
    udp_frame(&e, 18)
}

/// Sends `sent` frames from an AF_XDP socket on xa to the program and socket on xb, one in
/// ten to another port; returns (frames of the test's port received, others received,
/// the attach mode, whether xb's socket is zero-copy).
fn exchange(ns: &Netns, mode: AttachMode, sent: u32) -> (u32, u32, AttachMode, bool) {
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter();
            let (a, b) = (ifindex("xa").unwrap(), ifindex("xb").unwrap());
            let flow = Steer::new(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                Port::To(PORT),
            )
            .unwrap();
            let prog = attach(b, flow, 1, Some(mode)).unwrap();
            let mut rx = Xsk::open(b, 0, XskConfig::default(), None).unwrap();
            prog.route_queue(0, rx.fd()).unwrap();
            assert!(ns.xdp_on("xb"), "program attached");
            let mut tx = Xsk::open(a, 0, XskConfig::default(), None).unwrap();
            let (ours, other) = (frames_to(PORT), frames_to(OTHER_PORT));
            let seq_at = payload_offset(&"198.18.0.2:1".parse().unwrap());
            let (mut queued, mut seq) = (0u32, 0u32);
            let (mut got, mut others) = (0u32, 0u32);
            let want = sent - sent / 10;
            let deadline = Instant::now() + Duration::from_secs(5);
            while (queued < sent || got < want) && Instant::now() < deadline {
                queued += tx.send(64.min(sent - queued), |f| {
                    seq += 1;
                    let t = if seq % 10 == 0 { &other } else { &ours };
                    f[..t.len()].copy_from_slice(t);
                    f[seq_at..seq_at + 4].copy_from_slice(&seq.to_be_bytes());
                    t.len()
                });
                rx.recv(256, |f| {
                    if f[36..38] == PORT.to_be_bytes() {
                        got += 1;
                    } else {
                        others += 1;
                    }
                });
            }
            let st = rx.stats().unwrap();
            assert_eq!((st.rx_dropped, st.rx_ring_full), (0, 0), "{mode:?}: {st:?}");
            (got, others, prog.mode, rx.zero_copy)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn only_the_tests_port_reaches_the_socket_and_the_program_leaves_with_its_owner() {
    let Some(ns) = Netns::new() else { return };
    let sent = 2000u32;
    for mode in [AttachMode::Native, AttachMode::Generic] {
        let (got, others, attached, zero_copy) = exchange(&ns, mode, sent);
        assert_eq!(
            got,
            sent - sent / 10,
            "{mode:?}: frames of the test's port received"
        );
        assert_eq!(
            others, 0,
            "{mode:?}: frames of another port are the kernel's"
        );
        assert_eq!(attached, mode);
        assert!(!zero_copy, "veth has no zero-copy");
        assert!(
            !ns.xdp_on("xb"),
            "{mode:?}: the program left with its owner"
        );
    }
}
