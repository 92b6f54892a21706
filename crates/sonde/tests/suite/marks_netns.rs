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
    let Some(lab) = Lab::routed(&["nft"]) else {
        return;
    };
    let (router, _) = lab.router.clone().expect("a routed lab");
    let agent = lab.start_agent();
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
        "--dscp",
        "af41",
        "--ecn",
        "ect1",
        "--json",
        "--no-save",
    ];
    let doc = doc_of(&run(lab.sonde(&agent, "pps", &args)));
    let end = &doc["end"]["packets"];
    let (all, ce, bleached) = (
        nft_counted(&router, "mkall", "packets"),
        nft_counted(&router, "mkce", "packets"),
        nft_counted(&router, "mkbleach", "packets"),
    );
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

/// TCP with ECN negotiated on both hosts (`net.ipv4.tcp_ecn=1`, per namespace; this
/// kernel refuses 3, AccECN, though its TCP_INFO has the AccECN counters): the router sets
/// CE on every 50th ECT data segment; the receiver's TCP_INFO counts the window's part of
/// those CE marks (tcpi_received_ce) and the sender the segments acked under ECE
/// (tcpi_delivered_ce): seen each side, not exact (the window is not the connection).
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
    let ce = nft_counted(&router, "mkce", "packets");
    assert!(ce > 10, "{ce} CE marks set");
    let received = tcp_ecn_sum(&doc, "receiver", "received_ce");
    let delivered = tcp_ecn_sum(&doc, "sender", "delivered_ce");
    eprintln!(
        "router CE {ce}, receiver received_ce {received:?}, sender delivered_ce {delivered:?}"
    );
    // The intervals cover the measured window, the router's counter the whole
    // connection: the window's CE marks are a part of the router's, none invented.
    let received = received.expect("the receiver's tcpi_received_ce");
    assert!(received > 0 && received <= ce, "{received} of {ce}");
    // Classic ECN: ECE stays set until the sender's CWR, so every segment acked meanwhile
    // counts as delivered CE: at least one per CE mark, never fewer.
    assert!(delivered.expect("tcpi_delivered_ce") >= received);
}
