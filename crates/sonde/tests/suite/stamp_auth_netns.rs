//! Authenticated STAMP from an agent (`sonde stamp ROUTER --from AGENT --authenticated`):
//! stamp-suite's reflector under a key stands for the router, and the agent signs with its
//! operator's key (`serve --stamp-sender-key-file`), never one from the controller. The
//! right key gets every answer; a wrong one gets none, each answer counted as rejected;
//! an agent holding no key is not asked.

use crate::common;

use std::path::Path;

use common::data_rogue::OTHER_ADDR;
use common::stamp_lab::{
    plant, stamp_agent, stamp_key_file, stamp_suite, SuiteReflector, STAMP_PORT,
};
use common::{nft_counted, run, stderr, stdout, temp_file, Lab, CLIENT_ADDR, SONDE};
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

/// `sonde fleet` of the agents on CLIENT_ADDR and OTHER_ADDR and the reflector, one
/// authenticated stamp test of 40 packets.
fn fleet_run(lab: &Lab) -> std::process::Output {
    let text = format!(
        "name = \"auth\"\nport = 5301\n\
         [[agent]]\nname = \"a1\"\naddress = \"{CLIENT_ADDR}\"\n\
         [[agent]]\nname = \"a2\"\naddress = \"{OTHER_ADDR}\"\n\
         [[stamp_target]]\nname = \"r1\"\naddress = \"{}:{STAMP_PORT}\"\n\
         [[test]]\ntype = \"stamp\"\nauthenticated = true\nrate = 200\ncount = 40\nwait = 0.5\n",
        lab.server_addr
    );
    let path = temp_file("stamp-auth-fleet.toml");
    std::fs::write(&path, text).unwrap();
    let db = temp_file("stamp-auth-fleet.db");
    let mut cmd = Lab::in_ns(&lab.client, SONDE);
    cmd.args([
        "fleet",
        path.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ])
    .arg("--ndjson");
    run(cmd)
}

/// The agent's end of one authenticated run of 40 packets under `key` to stamp-suite's
/// reflector keyed with `reflector_key` (None: unauthenticated), with `arrived`: what
/// reached the agent's host from the reflector (nftables).
fn one_run(lab: &Lab, exe: &Path, key: &Path, reflector_key: Option<&str>) -> Value {
    let _reflector = SuiteReflector::keyed(&lab.server, lab.server_addr, exe, reflector_key);
    one_run_to(lab, key)
}

/// [`one_run`] to whatever reflector listens.
fn one_run_to(lab: &Lab, key: &Path) -> Value {
    let rule = ["udp", "sport", STAMP_PORT, "counter"];
    plant(&lab.client, "answers", "input", &rule);
    let targets = format!("{}/32", lab.server_addr);
    let flags = ["--stamp-targets", &targets, "--stamp-sender-key-file"];
    let _agent = stamp_agent(
        &lab.client,
        CLIENT_ADDR,
        &[&flags[..], &[key.to_str().unwrap()]].concat(),
    );
    let o = from_agent(lab);
    let d: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&o), stderr(&o)));
    let mut e = d["end"]["stamp"].clone();
    // A run without one answer exits 1 (issue 51), one with answers 0.
    let want = if u(&e["received"]) == 0 { 1 } else { 0 };
    assert_eq!(o.status.code(), Some(want), "{e}");
    e["arrived"] = nft_counted(&lab.client, "answers", "packets").into();
    assert_eq!(
        (u(&e["sent"]), &e["authenticated"]),
        (40, &Value::Bool(true)),
        "{e}"
    );
    e
}

/// (received, lost, rejected answers, answers arrived) of a run's end.
fn counts(e: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| u(&e[k]);
    (
        n("received"),
        n("lost"),
        n("rejected_answers"),
        n("arrived"),
    )
}

#[test]
fn an_agents_own_key_gets_every_answer_a_wrong_one_none_and_no_key_no_run() {
    let Some(lab) = Lab::needing(&["nft", "ss"]) else {
        return;
    };
    let Some(exe) = stamp_suite() else { return };
    let (good, wrong) = (
        stamp_key_file("router-key", KEY_HEX),
        stamp_key_file("wrong-key", WRONG_HEX),
    );
    let ok = one_run(&lab, &exe, &good, Some(KEY_HEX));
    assert_eq!(counts(&ok), (40, 0, 0, 40), "{ok}");
    // Under the wrong key stamp-suite answers nothing (it checks the test packets'
    // HMAC): all 40 lost, and no answer counted, rejected or taken, that never came.
    let bad = one_run(&lab, &exe, &wrong, Some(KEY_HEX));
    assert_eq!(counts(&bad), (0, 40, 0, 0), "{bad}");
    // sonde's own reflector, unauthenticated, answers every packet unsigned: each answer
    // arrives and is rejected, none taken, all 40 lost.
    let plain = {
        let mut cmd = Lab::in_ns(&lab.server, SONDE);
        let bind = format!("{}:{STAMP_PORT}", lab.server_addr);
        cmd.args([
            "serve",
            "--bind",
            lab.server_addr,
            "--port",
            "0",
            "--stamp",
            &bind,
        ])
        .args(["--stamp-allow", "198.18.0.0/24"]);
        let _reflector = common::Agent::start(cmd);
        one_run_to(&lab, &good)
    };
    assert_eq!(counts(&plain), (0, 40, 40, 40), "{plain}");
    // A fleet's stamp test asks the same with `authenticated = true`, of a1 and of a2 (a
    // fleet has two agents) on a second address of the same host.
    let _reflector = SuiteReflector::keyed(&lab.server, lab.server_addr, &exe, Some(KEY_HEX));
    let cidr = format!("{OTHER_ADDR}/24");
    lab.client_cmd("ip", &["addr", "add", &cidr, "dev", &lab.client_if]);
    let targets = format!("{}/32", lab.server_addr);
    let flags = [
        "--stamp-targets",
        &targets,
        "--stamp-sender-key-file",
        good.to_str().unwrap(),
    ];
    let _a1 = stamp_agent(&lab.client, CLIENT_ADDR, &flags);
    let _a2 = stamp_agent(&lab.client, OTHER_ADDR, &flags);
    let o = fleet_run(&lab);
    assert!(o.status.success(), "{}", stderr(&o));
    let docs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "one document per pair");
    for f in &docs {
        let e = &f["end"]["stamp"];
        assert_eq!(
            (u(&e["received"]), &e["authenticated"]),
            (40, &Value::Bool(true)),
            "{f}"
        );
    }
    drop((_a1, _a2));
    eprintln!(
        "right key: 40 sent, 40 answered, P50 {} ns; wrong key: 0 arrived, 40 lost; unauthenticated reflector: 40 arrived, 40 rejected, 40 lost; fleet: 2 x 40 answered",
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
