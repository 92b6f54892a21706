//! Issue 51: a mesh agent's `open` peer that answers nothing tells whether its host said
//! "port unreachable" (ICMP) or stayed silent. In the lab's two namespaces the agent (the
//! server) lists two open peers on the client's side: 198.18.0.1, where nothing listens
//! on the port (its kernel answers ICMP port unreachable), and 198.18.0.3, whose probes an
//! nftables rule drops on the client's input (silent).

use crate::common;

use std::time::Duration;

use common::data_rogue::OTHER_ADDR;
use common::mesh_rogue::{add_other_addr, mesh_agent, of_destination, scrape, STAMP_PORT};
use common::{nft_named_counter, run, stderr, temp_file, Lab, CLIENT_ADDR};

/// Packets counted by the rule that drops the silent peer's probes.
fn dropped(ns: &str) -> u64 {
    nft_named_counter(ns, "meshicmp", "silent")
}

#[test]
fn mesh_icmp_an_open_peers_closed_port_counts_port_unreachable_and_a_silent_one_none() {
    let Some(lab) = Lab::needing(&["nft", "python3"]) else {
        return;
    };
    add_other_addr(&lab);
    let rules = temp_file("mesh-icmp.nft");
    std::fs::write(
        &rules,
        format!(
            "table inet meshicmp {{\n counter silent {{ }}\n chain input {{\n  type filter hook input priority 0;\n  ip daddr {OTHER_ADDR} udp dport {STAMP_PORT} counter name silent drop\n }}\n}}\n"
        ),
    )
    .unwrap();
    let o = run({
        let mut c = Lab::in_ns(&lab.client, "nft");
        c.arg("-f").arg(&rules);
        c
    });
    assert!(o.status.success(), "nft: {}", stderr(&o));
    let list = temp_file("mesh-icmp-list");
    std::fs::write(
        &list,
        format!("{CLIENT_ADDR}:{STAMP_PORT} open\n{OTHER_ADDR}:{STAMP_PORT} open\n"),
    )
    .unwrap();
    let _a = mesh_agent(&lab, list.to_str().unwrap(), &["--mesh-rate", "20"]);
    std::thread::sleep(Duration::from_millis(2500));
    let text = scrape(&lab);
    let of = |family: &str, ip: &str| of_destination(&text, family, ip);
    let closed = of("sonde_mesh_icmp_port_unreachable_total", CLIENT_ADDR);
    let silent = of("sonde_mesh_icmp_port_unreachable_total", OTHER_ADDR)
        + of("sonde_mesh_icmp_host_unreachable_total", OTHER_ADDR);
    let sent = (
        of("sonde_mesh_probes_sent_total", CLIENT_ADDR),
        of("sonde_mesh_probes_sent_total", OTHER_ADDR),
    );
    let dropped = dropped(&lab.client);
    eprintln!("FIGURE mesh icmp: closed port {closed} port unreachable of {} probes; silent peer {silent} of {} ({dropped} dropped on its input)", sent.0, sent.1);
    // Neither answered.
    for ip in [CLIENT_ADDR, OTHER_ADDR] {
        assert_eq!(of("sonde_mesh_probes_answered_total", ip), 0.0, "{text}");
    }
    // The kernel rate-limits its port unreachables (a burst of 6, then one a second per
    // destination): a few of the 40-odd probes.
    assert!(
        closed >= 3.0 && closed <= sent.0,
        "{closed} of {}:\n{text}",
        sent.0
    );
    assert_eq!(
        of("sonde_mesh_icmp_host_unreachable_total", CLIENT_ADDR),
        0.0
    );
    // The silent peer was probed (its probes reached its input and were dropped there)
    // and counts no ICMP error.
    assert!(sent.1 >= 20.0 && dropped >= 20, "{sent:?} {dropped}");
    assert_eq!(silent, 0.0, "{text}");
}
