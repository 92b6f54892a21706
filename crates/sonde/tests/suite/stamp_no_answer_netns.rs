//! `sonde stamp` where nothing reflects (issue 51): to a closed port (the host answers
//! ICMP port unreachable) and to a silent address (nftables drops the packets on the
//! receiver's input). It said "lost 10 of 10", "reflector not synchronised (its S bit is
//! unset)" and a note on a stateless reflector, and exited 0; now it says nothing
//! answered and what the network said, prints and stores no property of a reflector that
//! never spoke, and exits 1; from an agent (`--from`) too.

use crate::common;

use common::*;
use serde_json::Value;

/// `sonde stamp TO -r 20 -n 10 EXTRA` from the client namespace into the store `db`: its
/// exit code, its stdout and the stored document (`results show ID`).
fn unanswered(
    lab: &Lab,
    to: &str,
    extra: &[&str],
    db: &std::path::Path,
    id: u32,
) -> (Option<i32>, String, Value) {
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["stamp", to, "-r", "20", "-n", "10", "--wait", "0.3"])
        .args(extra)
        .args(["--db", db.to_str().unwrap()]);
    let o = run(cmd);
    let shown = sonde_into(db, &["results", "show", &id.to_string()]);
    let doc: Value = serde_json::from_str(&stdout(&shown))
        .unwrap_or_else(|e| panic!("run {id} not stored ({e}): {}", stderr(&o)));
    (o.status.code(), stdout(&o), doc)
}

/// What no answer can tell is neither printed nor stored.
fn nothing_of_a_reflector(text: &str, doc: &Value) {
    for never in [
        "S bit",
        "stateless",
        "synchronised",
        "round trip",
        "lost 10",
    ] {
        assert!(!text.contains(never), "'{never}' said: {text}");
    }
    let e = &doc["end"]["stamp"];
    assert_eq!(
        (e["sent"].as_u64(), e["received"].as_u64()),
        (Some(10), Some(0))
    );
    for absent in ["clock", "notes", "latency_ns", "oneway", "lost_forward"] {
        assert!(e.get(absent).is_none(), "{absent} stored: {e}");
    }
    assert_eq!(e["stateful"], false);
}

#[test]
fn stamp_to_a_closed_port_or_a_silent_address_says_nothing_answered_and_fails() {
    let Some(lab) = Lab::needing(&["nft"]) else {
        return;
    };
    let db = temp_file("stamp-no-answer.db");
    // A closed port: the server's kernel answers each packet with ICMP port unreachable.
    let closed = format!("{SERVER_ADDR}:8999");
    let (code, text, doc) = unanswered(&lab, &closed, &[], &db, 1);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("no answer from {closed}: 10 packets sent, none answered; its host says nothing listens on that port (ICMP port unreachable, ")),
        "{text}"
    );
    nothing_of_a_reflector(&text, &doc);
    let e = &doc["end"]["stamp"];
    assert_eq!(e["no_answer"], "port_unreachable");
    assert!(e["port_unreachable"].as_u64().unwrap() >= 1, "{e}");

    // A silent address: the same packets dropped on the server's input, no ICMP.
    lab.server_nft_rule(&["udp", "dport", "8998", "counter", "drop"]);
    let silent = format!("{SERVER_ADDR}:8998");
    let (code, text, doc) = unanswered(&lab, &silent, &[], &db, 2);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("no answer from {silent}: 10 packets sent, none answered; nothing came back, not even an ICMP error")),
        "{text}"
    );
    nothing_of_a_reflector(&text, &doc);
    let e = &doc["end"]["stamp"];
    assert_eq!(e["no_answer"], "silent");
    assert!(e.get("port_unreachable").is_none(), "{e}");
    assert!(
        lab.server_nft_count() >= 10,
        "the drop rule saw the packets"
    );

    // From an agent (`--from`): the agent in the server namespace sends to the client's
    // closed port; the controller says the same and exits 1.
    let agent = lab.start_agent_with(&["--stamp-targets", "198.18.0.1/32"]);
    let port = agent.port.to_string();
    let closed = format!("{CLIENT_ADDR}:8999");
    let from = ["--from", SERVER_ADDR, "--port", port.as_str()];
    let (code, text, doc) = unanswered(&lab, &closed, &from, &db, 3);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("no answer from {closed}: 10 packets sent, none answered; its host says nothing listens on that port")),
        "{text}"
    );
    nothing_of_a_reflector(&text, &doc);
    assert_eq!(doc["end"]["stamp"]["no_answer"], "port_unreachable");
    // The agent's document, assembled with the controller's record of where it ran
    // (`Document::relayed`): the agent as reached, when the controller had it.
    let start = &doc["start"];
    assert_eq!(
        start["client_agent"]["address"],
        format!("{SERVER_ADDR}:{port}")
    );
    assert!(start["client_agent"]["command"]
        .as_str()
        .is_some_and(|c| c.contains("serve")));
    // An agent's own STAMP document has no end time (`Document::local`): this is ours.
    assert!(start["finished_at"].is_string(), "{start}");
}
