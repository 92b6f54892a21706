//! `sonde pps --iperf3 -R` against Debian's real `iperf3 -s`, across two namespaces: the
//! iperf3 server sends UDP, we receive and count. Ground truth is nftables on our input:
//! a named counter sees every data datagram that reached this host, a second rule drops
//! datagrams by sequence number (iperf3's 32-bit counter, 8 bytes into the payload) and
//! counts them. Our received count must be exactly what was let through, the loss exactly
//! what was dropped; the sender's figures are the iperf3 server's, marked as its own;
//! the jitter is ours, per interval and at the end, marked as measured by us.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

/// One-sided margin between our packets in an interval and iperf3's in the interval of
/// the same index: the 1 %. The two ends' edges now fall within a millisecond of
/// each other (a control one-way trip and a wake-up), so an edge moves at most one paced
/// batch a flow from one interval to the next: 4 of 1000 a flow, 0.4 %. (Until the
/// control socket's wait was a ppoll, our edges woke 4-8 ms late on SO_RCVTIMEO's jiffies:
/// our first interval ran +0.4 to +1.0 % long, the last as much short.)
const WITHIN: f64 = 0.01;

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// On `ns`'s input: counter `arrived` for every datagram of iperf3's UDP streams from
/// port 5201 (longer than the 4-byte connect reply), then a drop of those numbered `seqs`.
fn count_and_drop(ns: &str, seqs: &str) {
    let nft = |args: &[&str]| common::nft::nft(ns, args);
    nft(&["add", "table", "inet", "iperf3rev"]);
    nft(&["add", "counter", "inet", "iperf3rev", "arrived"]);
    nft(&["add", "counter", "inet", "iperf3rev", "dropped"]);
    let chain = "{ type filter hook input priority 0 ; }";
    nft(&["add", "chain", "inet", "iperf3rev", "in", chain]);
    let rule = |tail: &[&str]| {
        let head = [
            "add",
            "rule",
            "inet",
            "iperf3rev",
            "in",
            "udp",
            "sport",
            "5201",
        ];
        nft(&[&head[..], tail].concat());
    };
    rule(&["udp", "length", "gt", "100", "counter", "name", "arrived"]);
    rule(&["@th,128,32", seqs, "counter", "name", "dropped", "drop"]);
}

#[test]
fn pps_iperf3_reverse_counts_what_reached_us_exactly() {
    let Some(lab) = Lab::needing(&["iperf3", "nft", "ss"]) else {
        return;
    };
    // Datagrams 100, 700 and 1500 of each of the two streams (1000 a second each).
    count_and_drop(&lab.client, "{ 100, 700, 1500 }");
    let (doc, json) = common::serve_proc::pps_against_iperf3_server(
        &lab,
        &[
            "-R", "--flows", "2", "--rate", "2000", "--size", "242", "-t", "2", "--warmup", "0",
        ],
    );
    let arrived = nft_named_counter(&lab.client, "iperf3rev", "arrived");
    let dropped = nft_named_counter(&lab.client, "iperf3rev", "dropped");
    assert_eq!(dropped, 6, "three datagrams of each stream dropped");
    eprintln!("nftables: {arrived} arrived, {dropped} dropped");
    assert_eq!(doc["start"]["spec"]["reverse"], true, "{}", doc["start"]);
    let p = &doc["end"]["packets"];
    assert_eq!(doc["end"]["partial"], false, "{}", doc["end"]);
    // Ours: the receiver, in the document's server place, measured here.
    let rx = &p["receiver"];
    assert_eq!(rx["measured_by"], "server");
    assert!(!rx["host"].as_str().unwrap().starts_with("iperf3"), "{rx}");
    assert_eq!(
        rx["total_packets"].as_u64(),
        Some(arrived - dropped),
        "ours against nftables' count of what was let through: {rx}"
    );
    assert_eq!(p["socket_drops"].as_u64(), Some(0), "{p}");
    // Theirs: the sender, the iperf3 server's own count, marked as its.
    let tx = &p["sender"];
    assert!(
        tx["host"]
            .as_str()
            .unwrap()
            .starts_with("iperf3 server (iperf 3."),
        "{tx}"
    );
    let sent = json["end"]["sum"]["packets"].as_u64().unwrap();
    assert_eq!(tx["total_packets"].as_u64(), Some(sent), "{tx}");
    assert_eq!(sent, arrived, "everything it sent reached our input");
    assert_eq!(p["lost_packets"].as_u64(), Some(dropped), "{p}");
    // The jitter: ours, measured by the receiver (a veth: well under a millisecond).
    let j = &p["jitter"];
    assert_eq!(j["measured_by"], "server", "{j}");
    assert_eq!(j["host"], rx["host"], "{j}");
    let ours = f(&j["jitter_ms"]);
    eprintln!("jitter: ours {ours:.4} ms");
    assert!(ours > 0.0 && ours < 5.0, "{j}");
    let per: Vec<f64> = j["per_flow_ms"].as_array().unwrap().iter().map(f).collect();
    assert_eq!(per.len(), 2, "{j}");
    assert!((ours - (per[0] + per[1]) / 2.0).abs() < 1e-9, "{j}");
    // Per interval: our received packets against the iperf3 server's sent ones, and our
    // jitter in each.
    let intervals = doc["intervals"].as_array().unwrap();
    let our = common::serve_proc::our_packets(&doc, "receiver");
    let their = common::serve_proc::their_packets(&json);
    common::serve_proc::intervals_within(&our, &their, "-R", WITHIN);
    for i in intervals {
        let jm = f(&i["receiver"]["jitter_ms"]);
        assert!(jm > 0.0 && jm < 5.0, "{i}");
    }
}

/// The UDP counter `name` of namespace `ns` (/proc/net/snmp): the kernel's own count.
fn udp_counter(ns: &str, name: &str) -> u64 {
    let o = Lab::in_ns(ns, "cat")
        .arg("/proc/net/snmp")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    let at = names.split_whitespace().position(|n| n == name).unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Process `pid`'s UDP sockets connected to port 5201 (iperf3's streams), in the order
/// they were made (their inodes'), as descriptors of ours (pidfd_getfd): the same sockets.
fn stream_sockets(pid: u32) -> Vec<std::net::UdpSocket> {
    use std::os::fd::FromRawFd;
    let udp = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).unwrap_or_default();
    let streams: Vec<u64> = udp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if !f.get(2)?.ends_with(":1451") {
                return None;
            }
            f.get(9)?.parse().ok()
        })
        .collect();
    let mut fds: Vec<(u64, i32)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            let inode: u64 = inode.parse().ok()?;
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            streams.contains(&inode).then_some((inode, fd))
        })
        .collect();
    // A socket may have several descriptors (the receivers' own count keeps a second).
    fds.sort_unstable();
    fds.dedup_by_key(|(inode, _)| *inode);
    // SAFETY: plain syscalls; a descriptor returned is ours alone.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    let ours = fds
        .into_iter()
        .map(|(_, fd)| {
            let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) } as i32;
            assert!(got >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
            unsafe { std::net::UdpSocket::from_raw_fd(got) }
        })
        .collect();
    unsafe { libc::close(pidfd) };
    ours
}

/// The kernel's drop count of socket `s` (SO_MEMINFO's SK_MEMINFO_DROPS); the test holds
/// the sum of every socket's to the namespace's RcvbufErrors.
fn socket_drops(s: &std::net::UdpSocket) -> u64 {
    sonde_engine::sockopt::socket_drops(s).unwrap()
}

/// `-R --flows 2`, the second stream's socket shrunk (from outside, through a descriptor
/// of the same socket) to the least receive buffer the kernel allows while the iperf3
/// server sends its paced bursts: that socket overflows, and the document's socket drops
/// are every stream socket's, equal to the namespace's RcvbufErrors and to the loss.
/// Before, only the first stream's port was read: 0.
#[test]
fn pps_iperf3_reverse_counts_every_stream_sockets_drops() {
    let Some(lab) = Lab::needing(&["iperf3", "ss"]) else {
        return;
    };
    let mut server = common::serve_proc::iperf3_server_in_lab(&lab);
    let before = udp_counter(&lab.client, "RcvbufErrors");
    let mut sonde = common::serve_proc::KillOnDrop(
        Lab::in_ns(&lab.client, SONDE)
            .args(["pps", SERVER_ADDR, "--iperf3", "-R", "--json", "--no-save"])
            .args(["--flows", "2", "--rate", "10000", "--size", "1042"])
            .args(["-t", "2", "--warmup", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let pid = sonde.0.id();
    let mut stdout = sonde.0.stdout.take().unwrap();
    let printed = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut v);
        v
    });
    let t = std::time::Instant::now();
    let socks = loop {
        let s = stream_sockets(pid);
        if s.len() == 2 || t.elapsed() > Duration::from_secs(5) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(socks.len(), 2, "the two streams' sockets");
    // After our receivers gave each socket its large buffer (right after the handshake).
    std::thread::sleep(Duration::from_millis(100));
    socket2::SockRef::from(&socks[1])
        .set_recv_buffer_size(1)
        .unwrap();
    let status = wait_with_timeout(&mut sonde.0, Duration::from_secs(20)).expect("sonde ends");
    assert!(status.success(), "sonde pps --iperf3 -R: {status}");
    let doc: serde_json::Value = serde_json::from_slice(&printed.join().unwrap()).unwrap();
    wait_with_timeout(&mut server, Duration::from_secs(10)).expect("iperf3 -s ends");
    let kernel = udp_counter(&lab.client, "RcvbufErrors") - before;
    let each: Vec<u64> = socks.iter().map(socket_drops).collect();
    let p = &doc["end"]["packets"];
    eprintln!(
        "kernel: {kernel} RcvbufErrors, per socket {each:?}; ours {} socket drops, {} lost",
        p["socket_drops"], p["lost_packets"]
    );
    assert!(each[1] > 0, "the shrunk socket overflowed: {each:?}");
    assert_eq!(each[0] + each[1], kernel, "every drop a receive buffer's");
    assert_eq!(p["socket_drops"].as_u64(), Some(kernel), "{p}");
    assert_eq!(p["lost_packets"].as_u64(), Some(kernel), "{p}");
}
