//! Authenticated STAMP from an agent (`sonde stamp ROUTER --from AGENT --authenticated`):
//! stamp-suite's reflector under a key stands for the router, and the agent signs with its
//! operator's key (`serve --stamp-sender-key-file`), never one from the controller. The
//! right key gets every answer; a wrong one gets none, each answer counted as rejected;
//! an agent holding no key is not asked.

mod common;

use common::stamp_lab::{
    plant, stamp_agent, stamp_key_file, stamp_suite, SuiteReflector, STAMP_PORT,
};
use common::{doc_of, nft_counted, run, stderr, Lab, CLIENT_ADDR, SONDE};
use serde_json::Value;

const KEY_HEX: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const WRONG_HEX: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `sonde stamp` of 40 packets from the agent on CLIENT_ADDR, authenticated.
fn from_agent(lab: &Lab) -> std::process::Output {
    let target = format!("{}:{STAMP_PORT}", lab.server_addr);
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args(["stamp", &target, "--from", CLIENT_ADDR, "--port", "5301"])
        .args(["--authenticated", "-r", "200", "-n", "40", "--wait", "0.5"])
        .args(["--json", "--no-save"]);
    run(cmd)
}

#[test]
fn an_agents_own_key_gets_every_answer_a_wrong_one_none_and_no_key_no_run() {
    let Some(lab) = Lab::needing(&["nft", "ss"]) else {
        return;
    };
    let Some(exe) = stamp_suite() else { return };
    let _reflector = SuiteReflector::keyed(&lab.server, lab.server_addr, &exe, Some(KEY_HEX));
    let targets = format!("{}/32", lab.server_addr);
    let (good, wrong) = (
        stamp_key_file("router-key", KEY_HEX),
        stamp_key_file("wrong-key", WRONG_HEX),
    );
    let mut answered = Vec::new();
    for key in [&good, &wrong] {
        // What reaches the agent's host from the reflector, counted afresh each run.
        let rule = ["udp", "sport", STAMP_PORT, "counter"];
        plant(&lab.client, "answers", "input", &rule);
        let flags = ["--stamp-targets", &targets, "--stamp-sender-key-file"];
        let agent = stamp_agent(
            &lab.client,
            CLIENT_ADDR,
            &[&flags[..], &[key.to_str().unwrap()]].concat(),
        );
        let d = doc_of(&from_agent(&lab));
        drop(agent);
        let mut e = d["end"]["stamp"].clone();
        e["arrived"] = nft_counted(&lab.client, "answers", "packets").into();
        assert_eq!(
            (u(&e["sent"]), e["authenticated"].clone()),
            (40, Value::Bool(true)),
            "{e}"
        );
        answered.push(e);
    }
    let (ok, bad) = (&answered[0], &answered[1]);
    assert_eq!(
        (
            u(&ok["received"]),
            u(&ok["lost"]),
            u(&ok["rejected_answers"])
        ),
        (40, 0, 0),
        "{ok}"
    );
    // Under the wrong key stamp-suite answers nothing (it checks the test packets'
    // HMAC): all 40 lost, and no answer counted, rejected or taken, that never came.
    assert_eq!(
        (
            u(&bad["received"]),
            u(&bad["lost"]),
            u(&bad["rejected_answers"]),
            u(&bad["arrived"])
        ),
        (0, 40, 0, 0),
        "{bad}"
    );
    eprintln!(
        "right key: 40 sent, 40 answered, P50 {} ns; wrong key: 40 sent, 0 arrived, 0 answered, 40 lost",
        ok["latency_ns"]["p50"],
    );
    // An agent holding no key: the controller does not ask, and says which flag.
    let _agent = stamp_agent(&lab.client, CLIENT_ADDR, &["--stamp-targets", &targets]);
    let o = from_agent(&lab);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--stamp-sender-key-file"),
        "{}",
        stderr(&o)
    );
}
