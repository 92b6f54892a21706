//! The mesh's marks on a real network (issue 57): two agents in two racks, probing each
//! other EF with ECT(0) (`--mesh-dscp ef --mesh-ecn ect0`, keyed), the router between them
//! bleaching EF on everything rack r1 sends to rack r2 (h1's probes and h1's answers, a
//! table and counter each) and setting CE on every 4th answer h2 sends back. Each agent's
//! `/metrics` must say so per direction, exactly as the rules' counters: h1 sees its
//! forward bleached and its reverse kept with CE, h2 its forward kept and its reverse
//! bleached. The named family says the same with the classes' names and the fate
//! (`sent_class="ef",arrived_class="cs0",fate="bleached"`).

use crate::common;

use std::time::Duration;

use common::mesh_lab::{series, wait_until, MeshLab, STAMP_PORT};
use common::stamp_lab::plant;
use common::{need_tools, nft_counted, run, stderr, temp_file};

/// Stops every probe at the router, before the marking rules see it (priority -10): from
/// then the counters hold, and every probe they counted is answered.
fn stop_probes(lab: &MeshLab) {
    let nft = |args: &[&str]| {
        let out = lab.in_router("nft").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "nft {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    nft(&["add", "table", "inet", "mmstop"]);
    let chain = "{ type filter hook forward priority -10 ; }";
    nft(&["add", "chain", "inet", "mmstop", "c", chain]);
    nft(&[
        "add", "rule", "inet", "mmstop", "c", "udp", "dport", STAMP_PORT, "drop",
    ]);
}

#[test]
fn a_pair_that_bleaches_ef_one_way_shows_per_direction_in_the_metrics_exactly_as_the_router_counted(
) {
    if !need_tools(&["python3", "nft"]) {
        return;
    }
    let Some(lab) = MeshLab::new(1) else { return };
    let (h1, h2) = (lab.host_addr(1), lab.host_addr(2));
    let from_h1 = ["ip", "saddr", h1.as_str(), "ip", "daddr", h2.as_str()];
    let bleach = ["ip", "dscp", "ef", "counter", "ip", "dscp", "set", "cs0"];
    let probes = [&from_h1[..], &["udp", "dport", STAMP_PORT], &bleach].concat();
    let answers = [&from_h1[..], &["udp", "sport", STAMP_PORT], &bleach].concat();
    let ce = [
        &["ip", "saddr", h2.as_str(), "udp", "sport", STAMP_PORT][..],
        &[
            "numgen", "inc", "mod", "4", "==", "0", "counter", "ip", "ecn", "set", "ce",
        ],
    ]
    .concat();
    plant(&lab.router, "mmprobes", "forward", &probes);
    plant(&lab.router, "mmanswers", "forward", &answers);
    plant(&lab.router, "mmce", "forward", &ce);
    let list = temp_file("mesh-marks-peers");
    std::fs::write(&list, format!("{h1}\n{h2}\n")).unwrap();
    let marked = [
        "--mesh-dscp",
        "ef",
        "--mesh-ecn",
        "ect0",
        "--mesh-rate",
        "20",
        "--mesh-timeout",
        "0.5",
    ];
    // h2 first, and h1 only once h2's reflector listens: a probe of h1's that reached h2
    // before would be counted by the router and answered by nobody (1 in 2 runs).
    let mut agents = vec![lab.start_agent(2, list.to_str().unwrap(), &marked)];
    wait_until("h2's reflector listens", Duration::from_secs(10), || {
        let o = common::Lab::in_ns(&lab.hosts[1], "ss")
            .args(["-Hlun", "sport", "=", &format!(":{STAMP_PORT}")])
            .output()
            .unwrap();
        match String::from_utf8_lossy(&o.stdout).trim().is_empty() {
            false => Ok(()),
            true => Err("not yet".into()),
        }
    });
    agents.push(lab.start_agent(1, list.to_str().unwrap(), &marked));
    let _ = std::fs::remove_file(&list);
    // A few dozen probes each way, then none.
    wait_until(
        "probes cross the router",
        Duration::from_secs(10),
        || match nft_counted(&lab.router, "mmprobes", "packets") {
            n if n >= 30 => Ok(()),
            n => Err(format!("{n} bleached probes")),
        },
    );
    stop_probes(&lab);
    std::thread::sleep(Duration::from_millis(300));
    let counted = |t| nft_counted(&lab.router, t, "packets");
    let (bleached_probes, bleached_answers, ce) =
        (counted("mmprobes"), counted("mmanswers"), counted("mmce"));
    assert!(bleached_answers >= 30 && ce >= 7, "{bleached_answers} {ce}");
    let fam = "sonde_mesh_marks_packets_total";
    let dir = |way: &str, sent: &str, arrived: &str| {
        format!("direction=\"{way}\",sent_dscp=\"{sent}\",arrived_dscp=\"{arrived}\"")
    };
    // The same counts by class name, with what the path did.
    let named = "sonde_mesh_dscp_fate_packets_total";
    let fate = |way: &str, arrived: (&str, &str), what: &str| {
        format!(
            "direction=\"{way}\",sent_dscp=\"46\",sent_class=\"ef\",arrived_dscp=\"{}\",arrived_class=\"{}\",fate=\"{what}\"",
            arrived.0, arrived.1
        )
    };
    wait_until(
        "each direction's marks as the router's counters",
        Duration::from_secs(5),
        || {
            let (m1, m2) = (lab.scrape(1), lab.scrape(2));
            let v = |text: &str, family: &str, dst: &str, extra: &str| {
                series(text, family, dst, extra).unwrap_or(-1.0) as i64
            };
            let answered1 = v(&m1, "sonde_mesh_probes_answered_total", &h2, "");
            let answered2 = v(&m2, "sonde_mesh_probes_answered_total", &h1, "");
            let got = [
                v(&m1, fam, &h2, &dir("forward", "46", "0")),
                v(&m1, fam, &h2, &dir("forward", "46", "46")),
                v(&m1, fam, &h2, &dir("reverse", "46", "46")),
                v(
                    &m1,
                    "sonde_mesh_ce_packets_total",
                    &h2,
                    "direction=\"reverse\"",
                ),
                v(
                    &m1,
                    "sonde_mesh_ce_packets_total",
                    &h2,
                    "direction=\"forward\"",
                ),
                v(&m2, fam, &h1, &dir("forward", "46", "46")),
                v(&m2, fam, &h1, &dir("reverse", "46", "0")),
                v(&m1, named, &h2, &fate("forward", ("0", "cs0"), "bleached")),
                v(&m1, named, &h2, &fate("reverse", ("46", "ef"), "kept")),
                v(&m2, named, &h1, &fate("reverse", ("0", "cs0"), "bleached")),
                v(
                    &m2,
                    "sonde_mesh_ce_packets_total",
                    &h1,
                    "direction=\"reverse\"",
                ),
            ];
            let want = [
                bleached_probes as i64,
                -1,
                answered1,
                ce as i64,
                0,
                answered2,
                bleached_answers as i64,
                bleached_probes as i64,
                answered1,
                bleached_answers as i64,
                0,
            ];
            // Every probe the router counted was answered (none lost): the answered counts are
            // the counters too.
            let all = answered1 == bleached_probes as i64 && answered2 == bleached_answers as i64;
            match got == want && all {
                true => Ok(()),
                false => Err(format!(
                    "got {got:?}, want {want:?} (answered {answered1}, {answered2})"
                )),
            }
        },
    );
    eprintln!(
        "mesh marks: {bleached_probes} probes and {bleached_answers} answers bleached, {ce} CE, each exact per direction"
    );
}

/// `--mesh-dscp` in network control (CS6, CS7) is refused at start, exit 1, naming the flag
/// and `--allow-dscp`, before any socket: the agent never sends one such probe.
#[test]
fn a_mesh_marked_network_control_is_refused_at_start_naming_the_flags() {
    let list = temp_file("mesh-marks-cs6");
    std::fs::write(&list, "198.18.0.2\n").unwrap();
    for class in ["cs6", "CS7"] {
        let o = run({
            let mut c = common::sonde_cmd();
            c.args(["serve", "--bind", "127.0.0.1", "--port", "0"])
                .args(["--mesh", list.to_str().unwrap(), "--mesh-port", "0"])
                .args(["--mesh-dscp", class]);
            c
        });
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(
            e.contains("--mesh-dscp") && e.contains("--allow-dscp"),
            "{e}"
        );
    }
    let _ = std::fs::remove_file(&list);
}
