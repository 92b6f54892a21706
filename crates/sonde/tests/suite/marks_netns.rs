//! What the path does to the marks, per direction (issue 57): a router namespace between
//! client and agent whose nftables rules re-mark DSCP, bleach it and set CE on every Nth
//! packet of one direction, each rule with its own counter; every figure of sonde's is
//! asserted exactly against those counters.

use crate::common;

use common::stamp_lab::{plant, stamp_suite, SuiteReflector, STAMP_PORT};
use common::*;
use serde_json::Value;

const PACKETS: u64 = 40;

/// The router's rules, a table each so that each counter is its own: forward, every
/// test packet re-marked AF41 and every 5th CE; reverse, every 3rd answer bleached.
fn plant_rules(lab: &Lab) -> String {
    let (router, _) = lab.router.clone().expect("a routed lab");
    let fwd = ["udp", "dport", STAMP_PORT];
    let rev = ["udp", "sport", STAMP_PORT];
    let remark = [&fwd[..], &["counter", "ip", "dscp", "set", "af41"]].concat();
    let ce = [
        &fwd[..],
        &[
            "numgen", "inc", "mod", "5", "==", "0", "counter", "ip", "ecn", "set", "ce",
        ],
    ]
    .concat();
    let bleach = [
        &rev[..],
        &[
            "numgen", "inc", "mod", "3", "==", "0", "counter", "ip", "dscp", "set", "cs0",
        ],
    ]
    .concat();
    plant(&router, "mkremark", "forward", &remark);
    plant(&router, "mkce", "forward", &ce);
    plant(&router, "mkbleach", "forward", &bleach);
    router
}

/// `sonde stamp` from the client namespace to the agent's reflector port: its document.
fn stamp(lab: &Lab, args: &[&str]) -> Value {
    let target = format!("{}:{STAMP_PORT}", lab.server_addr);
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["stamp", &target, "--json", "--no-save", "--wait", "0.5"])
        .args(["--count", &PACKETS.to_string(), "--rate", "400"])
        .args(args);
    doc_of(&run(cmd))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Packets of a direction's transitions from (dscp, ecn) to (dscp, ecn).
fn moved(way: &Value, from: (u64, &str), to: (u64, &str)) -> u64 {
    way["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            (u(&t["sent_dscp"]), t["sent_ecn"].as_str().unwrap()) == from
                && (u(&t["arrived_dscp"]), t["arrived_ecn"].as_str().unwrap()) == to
        })
        .map(|t| u(&t["packets"]))
        .sum()
}

/// The run's figures against the rules' counters, each direction, and the intervals'
/// figures adding up to the run's.
fn assert_exact(router: &str, doc: &Value) {
    let end = &doc["end"]["stamp"];
    assert_eq!(
        (u(&end["sent"]), u(&end["received"])),
        (PACKETS, PACKETS),
        "{end}"
    );
    let (remarked, ce, bleached) = (
        nft_counted(router, "mkremark", "packets"),
        nft_counted(router, "mkce", "packets"),
        nft_counted(router, "mkbleach", "packets"),
    );
    assert_eq!(
        (remarked, ce, bleached),
        (40, 8, 14),
        "the rules' own counts"
    );
    let fwd = &end["marks"]["forward"];
    assert_eq!(u(&fwd["packets"]), remarked, "{fwd}");
    assert_eq!(u(&fwd["dscp_remarked"]), remarked, "{fwd}");
    assert_eq!((u(&fwd["ce"]), u(&fwd["ect_sent"])), (ce, PACKETS), "{fwd}");
    assert_eq!(moved(fwd, (46, "ect0"), (34, "ce")), ce, "{fwd}");
    assert_eq!(
        moved(fwd, (46, "ect0"), (34, "ect0")),
        remarked - ce,
        "{fwd}"
    );
    let rev = &end["marks"]["reverse"];
    assert_eq!(u(&rev["packets"]), PACKETS, "{rev}");
    assert_eq!(u(&rev["dscp_bleached"]), bleached, "{rev}");
    assert_eq!(u(&rev["dscp_kept"]), PACKETS - bleached, "{rev}");
    assert_eq!((u(&rev["ce"]), u(&rev["ecn_changed"])), (0, 0), "{rev}");
    assert_eq!(moved(rev, (46, "ect0"), (0, "ect0")), bleached, "{rev}");
    let mut sums = [0u64; 3];
    for iv in doc["intervals"].as_array().unwrap() {
        let m = &iv["stamp"]["marks"];
        sums[0] += m["forward"]["packets"].as_u64().unwrap_or(0);
        sums[1] += m["forward"]["ce"].as_u64().unwrap_or(0);
        sums[2] += m["reverse"]["dscp_bleached"].as_u64().unwrap_or(0);
    }
    assert_eq!(sums, [PACKETS, ce, bleached]);
}

#[test]
fn stamp_counts_each_directions_marks_exactly_against_the_routers_rules() {
    let Some(lab) = Lab::routed(&["nft"]) else {
        return;
    };
    let reflector = format!("{}:{STAMP_PORT}", lab.server_addr);
    // EF allowed on the answers: the router remarks some requests to AF41 on the way,
    // and the reverse direction is measured from the EF the sender asked for.
    let _agent = lab.start_agent_with(&[
        "--stamp",
        &reflector,
        "--stamp-allow",
        "198.18.0.1/32",
        "--stamp-allow-dscp",
        "ef",
    ]);
    let router = plant_rules(&lab);
    let doc = stamp(&lab, &["--dscp", "EF", "--ecn", "ect0"]);
    assert_exact(&router, &doc);
    // The summary says it in words, each direction (the rules planted afresh: their
    // counters and numgen from 0).
    plant_rules(&lab);
    let target = format!("{}:{STAMP_PORT}", lab.server_addr);
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args([
        "stamp",
        &target,
        "--no-save",
        "--wait",
        "0.5",
        "--count",
        "40",
    ])
    .args(["--rate", "400", "--dscp", "EF", "--ecn", "ect0"]);
    let out = run(cmd);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    for line in [
        "marks: the path re-marks DSCP 46 (EF) to 34 (AF41) forward\n",
        "marks: the path bleaches DSCP 46 (EF) to 0 on 35 % of packets reverse\n",
        "marks: CE on 20 % of packets forward (8 of 40 sent ECT)",
        "40 packets: DSCP kept 0, bleached 0, re-marked 40; CE 8 of 40 sent ECT",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

/// stamp-suite 1.0.0's reflector fills the Class of Service TLV (its --cos is the
/// sender's switch) and marks its answers as DSCP1/EC1 ask: the same counts through it.
#[test]
fn stamp_suites_reflector_reports_the_same_marks() {
    let Some(lab) = Lab::routed(&["nft", "ss"]) else {
        return;
    };
    let Some(exe) = stamp_suite() else { return };
    let _suite = SuiteReflector::start(&lab.server, lab.server_addr, &exe);
    let router = plant_rules(&lab);
    let doc = stamp(&lab, &["--dscp", "EF", "--ecn", "ect0", "--stateful"]);
    assert_exact(&router, &doc);
}

/// pps, the agent counting each datagram by the TOS it arrived with: forward CE on every
/// 7th and the DSCP bleached on every 4th (from the 2nd) of the test's UDP, exact against
/// the rules' counters; the control connection (TCP) is not counted by them.
#[test]
fn pps_receiver_counts_the_marks_exactly_against_the_routers_rules() {
    pps_marks_exact(&[], &[]);
}

/// The same over AF_XDP (`--engine xdp`): the sender's frames carry the TOS byte it
/// writes into them, and the receiver reads each frame's from its IP header; the router's
/// counters (which see the frames as any packets) are the same exact measure.
#[test]
fn pps_over_af_xdp_marks_its_frames_and_counts_them_exactly() {
    pps_marks_exact(&["--allow", "xdp"], &["--engine", "xdp"]);
}

/// A pps run marked AF41/ECT(1) across the router's rules (the agent started with
/// `agent_args`, the run given `extra`), each of the receiver's counts against theirs.
fn pps_marks_exact(agent_args: &[&str], extra: &[&str]) {
    let Some(lab) = Lab::routed(&["nft"]) else {
        return;
    };
    let (router, _) = lab.router.clone().expect("a routed lab");
    let agent = lab.start_agent_with(agent_args);
    let to = ["meta", "l4proto", "udp", "ip", "daddr", lab.server_addr];
    let every = |n: &'static str, hit: &'static str, set: &[&'static str]| {
        let rule = [&["numgen", "inc", "mod", n, "==", hit, "counter"][..], set].concat();
        [&to[..], &rule[..]].concat()
    };
    plant(
        &router,
        "mkall",
        "forward",
        &[&to[..], &["counter"]].concat(),
    );
    plant(
        &router,
        "mkce",
        "forward",
        &every("7", "0", &["ip", "ecn", "set", "ce"]),
    );
    plant(
        &router,
        "mkbleach",
        "forward",
        &every("4", "1", &["ip", "dscp", "set", "cs0"]),
    );
    let args = [
        "--rate",
        "2000",
        "--flows",
        "2",
        "-t",
        "1",
        "--warmup",
        "0.2",
        "-i",
        "0.25",
        "--dscp",
        "af41",
        "--ecn",
        "ect1",
        "--json",
        "--no-save",
    ];
    let doc = doc_of(&run(lab.sonde(&agent, "pps", &[&args[..], extra].concat())));
    let end = &doc["end"]["packets"];
    let engine = extra.last().copied().unwrap_or("kernel");
    assert_eq!(end["receiver"]["engine"], engine, "{end}");
    let how = match engine {
        "xdp" => "marks read from each frame's IP header by the AF_XDP receiver",
        _ => "marks counted in the kernel by a socket filter",
    };
    assert!(doc.to_string().contains(how), "{how}: {}", doc["end"]);
    let (all, ce, bleached) = (
        nft_counted(&router, "mkall", "packets"),
        nft_counted(&router, "mkce", "packets"),
        nft_counted(&router, "mkbleach", "packets"),
    );
    eprintln!("pps {engine}: {all} packets through the router, CE {ce}, bleached {bleached}");
    assert!(all > 1000, "{all} packets through the router");
    assert_eq!(u(&doc["end"]["lost_packets"]), 0, "{end}");
    let fwd = &end["marks"]["forward"];
    assert_eq!(u(&fwd["packets"]), all, "{fwd}");
    assert_eq!(u(&fwd["ce"]), ce, "{fwd}");
    assert_eq!(u(&fwd["dscp_bleached"]), bleached, "{fwd}");
    assert_eq!(u(&fwd["dscp_kept"]), all - bleached, "{fwd}");
    // Each pair's packets add up to each rule's (which packets both rules hit is not
    // fixed: two senders' packets cross the router on two CPUs, each rule its own numgen).
    let pair = |d, e| moved(fwd, (34, "ect1"), (d, e));
    assert_eq!(pair(0, "ce") + pair(34, "ce"), ce, "{fwd}");
    assert_eq!(pair(0, "ce") + pair(0, "ect1"), bleached, "{fwd}");
    assert_eq!(
        pair(0, "ce") + pair(0, "ect1") + pair(34, "ce") + pair(34, "ect1"),
        all
    );
    assert!(
        end["marks"].get("reverse").is_none(),
        "pps has no reverse direction"
    );
    // Each interval's arrivals: the rules' every 7th (CE) and every 4th (bleached) of
    // the router's packets, so n packets hold n/7 and n/4 of them to within the packets
    // crossing the interval's edge (a receive batch counted at the edge, two flows on two
    // CPUs): 3 packets. The router has no counter per interval; the whole test's counts
    // above are its exact ones, and the intervals (the window) a part of them.
    let mut sums = [0u64; 3];
    let intervals = doc["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 4, "{} intervals", intervals.len());
    for iv in intervals {
        let m = &iv["receiver"]["marks"];
        let (n, ce, bleached) = (u(&m["packets"]), u(&m["ce"]), u(&m["dscp_bleached"]));
        assert!(n > 100, "{iv}");
        assert!((7 * ce).abs_diff(n) <= 7 * 3, "CE {ce} of {n}: {iv}");
        assert!(
            (4 * bleached).abs_diff(n) <= 4 * 3,
            "bleached {bleached} of {n}: {iv}"
        );
        assert_eq!(u(&m["ect_sent"]), n, "{iv}");
        for (sum, v) in sums.iter_mut().zip([n, ce, bleached]) {
            *sum += v;
        }
    }
    assert!(
        sums[0] <= all && sums[1] <= ce && sums[2] <= bleached,
        "{sums:?}"
    );
}

/// Ping and rpc over UDP, each end counting what it received by the TOS it arrived with:
/// forward (requests) every 5th set CE and every 4th re-marked AF11 by the router, reverse
/// (answers) every 3rd bleached. Each direction's counts exact against the rules' own,
/// over the whole test (the agent counts every request it answers; the client every
/// answer matched to a request, none late or foreign here). rpc on both its engines: io_uring's
/// workers read no TOS, so a socket filter counts each end's datagrams in the kernel.
#[test]
fn ping_and_rpc_over_udp_count_each_directions_marks_exactly() {
    let Some(lab) = Lab::routed(&["nft"]) else {
        return;
    };
    let (router, _) = lab.router.clone().expect("a routed lab");
    let agent = lab.start_agent();
    let fwd = ["meta", "l4proto", "udp", "ip", "daddr", lab.server_addr];
    let rev = ["meta", "l4proto", "udp", "ip", "saddr", lab.server_addr];
    let every = |way: &[&'static str], n: &'static str, set: &[&'static str]| {
        let rule = [&["numgen", "inc", "mod", n, "==", "0", "counter"][..], set].concat();
        [way, &rule[..]].concat()
    };
    for (kind, extra) in [
        ("ping", &["--udp", "--rate", "300"][..]),
        ("rpc", &["--udp", "-C", "2", "--engine", "kernel"][..]),
        ("rpc", &["--udp", "-C", "2", "--engine", "uring"][..]),
    ] {
        plant(
            &router,
            "mkfall",
            "forward",
            &[&fwd[..], &["counter"]].concat(),
        );
        plant(
            &router,
            "mkrall",
            "forward",
            &[&rev[..], &["counter"]].concat(),
        );
        plant(
            &router,
            "mkce",
            "forward",
            &every(&fwd, "5", &["ip", "ecn", "set", "ce"]),
        );
        let remark = every(&fwd, "4", &["ip", "dscp", "set", "af11"]);
        plant(&router, "mkremark", "forward", &remark);
        let bleach = every(&rev, "3", &["ip", "dscp", "set", "cs0"]);
        plant(&router, "mkbleach", "forward", &bleach);
        let mut args = vec!["-t", "1", "--warmup", "0", "--dscp", "ef", "--ecn", "ect0"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--json", "--no-save"]);
        let doc = doc_of(&run(lab.sonde(&agent, kind, &args)));
        let count = |t| nft_counted(&router, t, "packets");
        let (fall, rall) = (count("mkfall"), count("mkrall"));
        let (ce, remarked, bleached) = (count("mkce"), count("mkremark"), count("mkbleach"));
        eprintln!("{kind}: forward {fall} (CE {ce}, AF11 {remarked}), reverse {rall} (bleached {bleached})");
        assert!(fall > 100, "{kind}: {fall} requests through the router");
        let m = &doc["end"]["marks"];
        let (f, r) = (&m["forward"], &m["reverse"]);
        let sides = (
            &doc["end"]["client"]["notes"],
            &doc["end"]["server"]["notes"],
        );
        assert!(
            f.is_object() && r.is_object(),
            "{kind} {extra:?}: marks {m}, notes {sides:?}"
        );
        assert_eq!(u(&f["packets"]), fall, "{kind}: {f}");
        assert_eq!(u(&f["ect_sent"]), fall, "{kind}: {f}");
        assert_eq!(u(&f["ce"]), ce, "{kind}: {f}");
        assert_eq!(u(&f["dscp_remarked"]), remarked, "{kind}: {f}");
        assert_eq!(u(&f["dscp_kept"]), fall - remarked, "{kind}: {f}");
        let pair = |d, e| moved(f, (46, "ect0"), (d, e));
        assert_eq!(pair(10, "ce") + pair(46, "ce"), ce, "{kind}: {f}");
        assert_eq!(pair(10, "ce") + pair(10, "ect0"), remarked, "{kind}: {f}");
        assert_eq!(u(&r["packets"]), rall, "{kind}: {r}");
        assert_eq!(u(&r["dscp_bleached"]), bleached, "{kind}: {r}");
        assert_eq!(u(&r["dscp_kept"]), rall - bleached, "{kind}: {r}");
        assert_eq!((u(&r["ce"]), u(&r["ecn_changed"])), (0, 0), "{kind}: {r}");
        assert_eq!(moved(r, (46, "ect0"), (0, "ect0")), bleached, "{kind}: {r}");
        let filtered = doc
            .to_string()
            .contains("the uring engine's workers reading none");
        assert_eq!(
            filtered,
            extra.contains(&"uring"),
            "{kind} {extra:?}: {}",
            doc["end"]
        );
    }
}

/// IPv6 (IPV6_TCLASS set, IPV6_RECVTCLASS read), on ::1 in one namespace of the lab's
/// (the test network is 198.18.0.0/15 and loopback only, so no IPv6 router): nftables'
/// `ip6` rules on the input hook mark what both ends receive, every 5th datagram CE and
/// every 4th re-marked AF11. A rule sees both directions, so each count is the sum of the
/// two directions', exact.
#[test]
fn udp_ping_over_ipv6_counts_the_traffic_class_exactly() {
    let Some(lab) = Lab::needing(&["nft"]) else {
        return;
    };
    let ns = &lab.server;
    let up = Lab::in_ns(ns, "ip")
        .args(["link", "set", "lo", "up"])
        .output()
        .unwrap();
    assert!(up.status.success(), "lo up: {}", stderr(&up));
    let mut serve = Lab::in_ns(ns, SONDE);
    serve.args(["serve", "--bind", "::1", "--port", "0"]);
    let agent = Agent::start(serve);
    let v6 = ["meta", "l4proto", "udp", "ip6", "daddr", "::1"];
    let every = |n: &'static str, set: &[&'static str]| {
        let rule = [&["numgen", "inc", "mod", n, "==", "0", "counter"][..], set].concat();
        [&v6[..], &rule[..]].concat()
    };
    plant(ns, "mk6all", "input", &[&v6[..], &["counter"]].concat());
    plant(
        ns,
        "mk6ce",
        "input",
        &every("5", &["ip6", "ecn", "set", "ce"]),
    );
    plant(
        ns,
        "mk6remark",
        "input",
        &every("4", &["ip6", "dscp", "set", "af11"]),
    );
    let port = agent.port.to_string();
    let mut cmd = Lab::in_ns(ns, SONDE);
    cmd.args(["ping", "::1", "--port", &port, "-t", "1", "--warmup", "0"])
        .args(["--udp", "--rate", "300", "--dscp", "ef", "--ecn", "ect1"])
        .args(["--json", "--no-save"]);
    let doc = doc_of(&run(cmd));
    let count = |t| nft_counted(ns, t, "packets");
    let (all, ce, remarked) = (count("mk6all"), count("mk6ce"), count("mk6remark"));
    eprintln!("IPv6: {all} datagrams, CE {ce}, AF11 {remarked}");
    assert!(all > 200, "{all} datagrams");
    let m = &doc["end"]["marks"];
    let (f, r) = (&m["forward"], &m["reverse"]);
    let both = |key: &str| u(&f[key]) + u(&r[key]);
    assert_eq!(u(&f["packets"]), u(&r["packets"]), "{m}");
    assert_eq!(both("packets"), all, "{m}");
    assert_eq!(both("ce"), ce, "{m}");
    assert_eq!(both("dscp_remarked"), remarked, "{m}");
    assert_eq!(both("dscp_kept"), all - remarked, "{m}");
    let pair = |way: &Value, d, e| moved(way, (46, "ect1"), (d, e));
    assert_eq!(
        pair(f, 46, "ect1")
            + pair(r, 46, "ect1")
            + pair(f, 10, "ce")
            + pair(r, 10, "ce")
            + pair(f, 10, "ect1")
            + pair(r, 10, "ect1")
            + pair(f, 46, "ce")
            + pair(r, 46, "ce"),
        all,
        "{m}"
    );
}

/// Sums `key` of every connection's ECN over the intervals of one side.
fn tcp_ecn_sum(doc: &Value, side: &str, key: &str) -> Option<u64> {
    let mut sum = None;
    for iv in doc["intervals"].as_array().unwrap() {
        for t in iv[side]["tcp"].as_array().into_iter().flatten() {
            if let Some(n) = t["ecn"][key].as_u64() {
                *sum.get_or_insert(0) += n;
            }
        }
    }
    sum
}

/// Sums `key` of the whole connections' ECN (read after their last byte) of one side.
fn tcp_ecn_total(doc: &Value, side: &str, key: &str) -> u64 {
    let conns = doc["end"][side]["connections"]["per_connection"]
        .as_array()
        .unwrap_or_else(|| panic!("{side}'s connections"));
    conns
        .iter()
        .map(|c| {
            let ecn = &c["ecn"];
            ecn[key]
                .as_u64()
                .unwrap_or_else(|| panic!("{side}'s connection ecn.{key}: {c}"))
        })
        .sum()
}

/// TCP with ECN negotiated on both hosts (`net.ipv4.tcp_ecn=1`, per namespace; this
/// kernel refuses 3, AccECN, though its TCP_INFO has the AccECN counters): the router sets
/// CE on every 50th ECT data segment. The receiver's tcpi_received_ce counts every
/// CE-marked segment it took in (its GRO off: one per packet; retransmissions are sent
/// not-ECT, so the rule never sees them), since the handshake: the connection's count
/// read after its last byte is the rule's exactly, and its CE bytes (tcpi_received_ce_bytes,
/// payload only) are the rule's bytes less 52 per packet (IPv4 20, TCP 20, timestamps
/// 12). The intervals cover only the measured window, without the cool-down's segments
/// (what the 342 of 522 this test once asserted was): their sum is the window's part.
/// The sender's tcpi_delivered_ce is classic ECN's (every segment acked under ECE, until
/// its CWR is seen): at least one per CE mark.
#[test]
fn tcp_counts_the_routers_ce_marks_each_side() {
    let Some(lab) = Lab::routed(&["nft", "ethtool"]) else {
        return;
    };
    let (router, toward_agent) = lab.router.clone().expect("a routed lab");
    // One segment per packet through the router (no GSO at the sender, no GRO on the
    // router's way in), so that a rule's packet is a TCP segment.
    let toward_client = format!("{}rc", lab.client_if);
    for (ns, dev, what) in [
        (&lab.client, &lab.client_if, "tso"),
        (&lab.client, &lab.client_if, "gso"),
        (&router, &toward_client, "gro"),
        (&router, &toward_agent, "gso"),
        (&lab.server, &lab.server_if, "gro"),
    ] {
        let out = Lab::in_ns(ns, "ethtool")
            .args(["-K", dev, what, "off"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ethtool {dev} {what}: {}",
            stderr(&out)
        );
    }
    for ns in [&lab.client, &lab.server] {
        let out = Lab::in_ns(ns, "sh")
            .args(["-c", "echo 1 > /proc/sys/net/ipv4/tcp_ecn"])
            .output()
            .unwrap();
        assert!(out.status.success(), "tcp_ecn: {}", stderr(&out));
    }
    let agent = lab.start_agent();
    let port = agent.port.to_string();
    let rule = [
        "ip",
        "daddr",
        lab.server_addr,
        "tcp",
        "dport",
        "!=",
        &port,
        "ip",
        "ecn",
        "{",
        "ect0,",
        "ect1",
        "}",
        "numgen",
        "inc",
        "mod",
        "50",
        "==",
        "0",
        "counter",
        "ip",
        "ecn",
        "set",
        "ce",
    ];
    plant(&router, "mkce", "forward", &rule);
    let args = [
        "-t",
        "1",
        "--warmup",
        "0",
        "-b",
        "200M",
        "--dscp",
        "af11",
        "--json",
        "--no-save",
    ];
    let doc = doc_of(&run(lab.stream(&agent, &args)));
    let (ce, ce_bytes) = (
        nft_counted(&router, "mkce", "packets"),
        nft_counted(&router, "mkce", "bytes"),
    );
    assert!(ce > 10, "{ce} CE marks set");
    let received = tcp_ecn_total(&doc, "receiver", "received_ce");
    let received_bytes = tcp_ecn_total(&doc, "receiver", "received_ce_bytes");
    let delivered = tcp_ecn_total(&doc, "sender", "delivered_ce");
    eprintln!("router CE {ce} ({ce_bytes} bytes), receiver received_ce {received} ({received_bytes} bytes), sender delivered_ce {delivered}");
    assert_eq!(received, ce, "the receiver's CE segments, whole connection");
    assert_eq!(received_bytes, ce_bytes - 52 * ce, "its CE payload bytes");
    let window = tcp_ecn_sum(&doc, "receiver", "received_ce").expect("the window's received_ce");
    assert!(
        window > 0 && window <= received,
        "window {window} of {received}"
    );
    assert!(
        delivered >= received,
        "delivered_ce {delivered} of {received}"
    );
}
