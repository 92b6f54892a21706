//! Tests between agents and fleets of them: four namespaces on a bridge are four hosts, a
//! fifth is the controller.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use common::bridge::{Bridged, FLEET_PORT};
use common::{doc_of, key_file, run, stderr, temp_file, Keep, SpawnKeeping, KEY_ENV, SHORT_RPC};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

fn at(s: &serde_json::Value) -> OffsetDateTime {
    OffsetDateTime::parse(s.as_str().expect("a time"), &Rfc3339).unwrap()
}

#[test]
fn a_third_party_test_runs_between_two_agents_and_the_controller_sends_none_of_it() {
    let Some(lab) = Bridged::new(2) else { return };
    let (_a, _b) = (lab.start_agent(1), lab.start_agent(2));
    let before = lab.controller_tx_bytes();
    let (from, to) = (Bridged::addr(1), Bridged::addr(2));
    let o = run(lab.controller(&[
        "stream",
        "--from",
        &from,
        "--to",
        &to,
        "--port",
        FLEET_PORT,
        "-t",
        "1",
        "-i",
        "0.5",
        "--warmup",
        "0.2",
        "--cooldown",
        "0",
        "--json",
        "--no-save",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = doc_of(&o);
    let sent = lab.controller_tx_bytes() - before;
    let end = &doc["end"];
    let bytes = end["receiver"]["bytes"].as_u64().unwrap();
    assert!(bytes > 10_000_000, "{end}");
    assert_eq!(end["sender"]["measured_by"], "client");
    assert_eq!(end["receiver"]["measured_by"], "server");
    // Each side's window is its own; over the whole test every byte sent was received.
    let total = |side: &str| end[side]["total_bytes"].as_u64().unwrap();
    assert_eq!(total("sender"), total("receiver"), "{end}");
    // The control connections only: a few kB against the test's hundreds of MB.
    assert!(
        sent < 200_000,
        "the controller sent {sent} B for a {bytes} B test"
    );
    let start = &doc["start"];
    assert_eq!(
        start["client_agent"]["address"],
        format!("{from}:{FLEET_PORT}")
    );
    assert!(start["client_agent"]["command"]
        .as_str()
        .unwrap()
        .contains("serve"));
    assert!(start["server_command"].as_str().unwrap().contains("serve"));
    assert_eq!(start["server_address"], format!("{to}:{FLEET_PORT}"));
    assert!(at(&start["finished_at"]) > at(&start["started_at"]));
    assert_eq!(doc["intervals"].as_array().unwrap().len(), 2);

    // A request/response test the same way: every request answered, both sides counted.
    let ends = ["rpc", "--from", &to, "--to", &from, "--port", FLEET_PORT];
    let o = run(lab.controller(&[&ends[..], &SHORT_RPC, &["--json", "--no-save"]].concat()));
    assert!(
        o.status.success(),
        "{} {}",
        stderr(&o),
        String::from_utf8_lossy(&o.stdout)
    );
    let end = &doc_of(&o)["end"];
    assert!(
        end["requests_per_second"].as_f64().unwrap() > 100.0,
        "{end}"
    );
    assert_eq!(end["unanswered_requests"].as_u64().unwrap_or(0), 0, "{end}");

    // UDP kinds: their challenge is answered over TCP beside the data port.
    for args in [&["ping", "--udp"][..], &["pps", "--rate", "20000"][..]] {
        let mut all = args.to_vec();
        all.extend(["--from", &from, "--to", &to, "--port", FLEET_PORT]);
        all.extend(["-t", "0.5", "--warmup", "0.2", "--json", "--no-save"]);
        let o = run(lab.controller(&all));
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
}

/// What the fleet tests run: the claims are the scheduler's (rounds, pairs, failures, keys),
/// none of them a figure, so each run is as short as a run can be that still measures
/// (0.2 s, no warm-up or cool-down: 24 runs of 0.5 s with 0.2 s of warm-up and the
/// stream's 0.5 s cool-down took 20.6 s of the mesh test, now 10.2 s; BENCHMARKS.md).
const TESTS: &str = "[[test]]\ntype = \"stream\"\nduration = 0.2\nwarmup = 0\ncooldown = 0\n";

fn fleet_file(tests: &str) -> std::path::PathBuf {
    let mut text = format!("name = \"mesh\"\nport = {FLEET_PORT}\n");
    for k in 1..=4 {
        let zone = if k <= 2 { "a" } else { "b" };
        text += &format!(
            "[[agent]]\nname = \"h{k}\"\naddress = \"{}\"\nlabels = {{ zone = \"{zone}\" }}\n",
            Bridged::addr(k)
        );
    }
    let path = temp_file("fleet.toml");
    std::fs::write(&path, text + tests).unwrap();
    path
}

fn stored(db: &std::path::Path, lab: &Bridged) -> Vec<serde_json::Value> {
    let o = run(lab.controller(&["results", "export", "--db", db.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice::<Vec<serde_json::Value>>(&o.stdout).unwrap()
}

#[test]
fn a_mesh_of_twelve_pairs_runs_in_six_rounds_and_no_host_is_in_two_tests_at_once() {
    let Some(lab) = Bridged::new(4) else { return };
    let _agents: Vec<_> = (1..=4).map(|k| lab.start_agent(k)).collect();
    let file = fleet_file(&format!(
        "{TESTS}[[test]]\ntype = \"ping\"\nduration = 0.2\nwarmup = 0\n"
    ));
    let db = temp_file("fleet.db");
    let o = run(lab.controller(&[
        "fleet",
        file.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--ndjson",
    ]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("12 pairs x 2 run(s) in 6 round(s)"),
        "{}",
        stderr(&o)
    );
    let lines = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(lines, 24, "one NDJSON document per run");
    let docs = stored(&db, &lab);
    assert_eq!(docs.len(), 24);
    let mut pairs = BTreeMap::new();
    let mut busy: BTreeMap<String, Vec<(OffsetDateTime, OffsetDateTime)>> = BTreeMap::new();
    for d in &docs {
        let s = &d["start"];
        let f = &s["fleet"];
        assert!(!d["end"]["partial"].as_bool().unwrap(), "{}", d["end"]);
        assert!(f["round"].as_u64().unwrap() <= 7, "{f}");
        let (src, dst) = (
            f["source"].as_str().unwrap(),
            f["destination"].as_str().unwrap(),
        );
        let zone = |h: &str| if h <= "h2" { "a" } else { "b" };
        assert_eq!(f["source_labels"]["zone"], zone(src));
        assert_eq!(f["destination_labels"]["zone"], zone(dst));
        *pairs.entry((src.to_string(), dst.to_string())).or_insert(0) += 1;
        let span = (at(&s["started_at"]), at(&s["finished_at"]));
        for h in [src, dst] {
            busy.entry(h.to_string()).or_default().push(span);
        }
    }
    assert_eq!(pairs.len(), 12, "every ordered pair: {pairs:?}");
    assert!(
        pairs.values().all(|&n| n == 2),
        "stream and ping each: {pairs:?}"
    );
    // The report draws both matrices, a filled cell per pair, and groups them by zone.
    let (html, md) = (temp_file("fleet.html"), temp_file("fleet.md"));
    for out in [&html, &md] {
        let o = run(lab.controller(&[
            "report",
            "mesh",
            "--db",
            db.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]));
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let page = std::fs::read_to_string(&html).unwrap();
    let fleet = &page[page
        .find("<section id=\"fleet\">")
        .expect("a fleet section")..];
    let fleet = &fleet[..fleet.find("</section>").unwrap()];
    assert_eq!(
        fleet.matches("fill=\"hsl(").count(),
        24,
        "12 pairs x 2 figures"
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("| zone | a | b | "), "{md}");
    assert!(md.contains("RTT P50, µs (median per pair"), "{md}");
    for (host, mut spans) in busy {
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{host} in two tests at once: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
}

#[test]
fn an_agent_killed_mid_fleet_fails_its_pairs_only_and_resume_runs_only_what_is_missing() {
    let Some(lab) = Bridged::new(4) else { return };
    let mut agents: Vec<_> = (1..=4).map(|k| lab.start_agent(k)).collect();
    let file = fleet_file(TESTS);
    let db = temp_file("fleet.db");
    let args = [
        "fleet",
        file.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ];
    let mut fleet = lab.controller(&args).spawn_keeping(Keep::Both);
    let mut log = Vec::new();
    let mut lines = BufReader::new(fleet.stderr.take().unwrap()).lines();
    // Kill host 4's agent once the first round is over.
    for line in lines.by_ref() {
        let line = line.unwrap();
        let first_round_over = line.starts_with("round 1/6 done");
        log.push(line);
        if first_round_over {
            agents[3].kill();
            break;
        }
    }
    log.extend(lines.map(|l| l.unwrap()));
    let status = fleet.wait().unwrap();
    let log = log.join("\n");
    assert_eq!(status.code(), Some(1), "{log}");
    // Host 4 is in 6 of the 12 pairs, one of them in round 1, before the kill.
    let h4_in_first = log
        .lines()
        .any(|l| l.starts_with("[round 1/6]") && l.contains("h4"));
    assert!(h4_in_first, "{log}");
    let failed: Vec<&str> = log.lines().filter(|l| l.contains(": failed")).collect();
    assert_eq!(failed.len(), 5, "{log}");
    assert!(
        failed.iter().all(|l| l.contains("h4")),
        "only host 4's pairs fail: {log}"
    );
    assert!(
        log.contains("7 run(s) stored, 0 already stored, 5 failed"),
        "{log}"
    );
    assert_eq!(stored(&db, &lab).len(), 7);

    // Back up, resumed: only the five missing runs.
    agents[3] = lab.start_agent(4);
    let o = run(lab.controller(&[&args[..], &["--resume"]].concat()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("5 run(s) stored, 7 already stored, 0 failed"),
        "{}",
        stderr(&o)
    );
    let docs = stored(&db, &lab);
    assert_eq!(docs.len(), 12);
    let mut seen: Vec<_> = docs
        .iter()
        .map(|d| {
            format!(
                "{}>{}",
                d["start"]["fleet"]["source"], d["start"]["fleet"]["destination"]
            )
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 12, "no pair twice");
}

/// A key file (0600) holding `text`.
fn key_with(text: &str) -> std::path::PathBuf {
    common::key_files::key_file_at(temp_file("other.key"), text)
}

#[test]
fn fleet_key_file_wins_over_the_files_key_file_and_is_the_key_proven() {
    let Some(lab) = Bridged::new(2) else { return };
    let _agents: Vec<_> = (1..=2).map(|k| lab.start_agent(k)).collect();
    let mut text =
        format!("name = \"keyed\"\nport = {FLEET_PORT}\nkey_file = \"/nonexistent/fleet.key\"\n");
    for k in 1..=2 {
        text += &format!(
            "[[agent]]\nname = \"h{k}\"\naddress = \"{}\"\n",
            Bridged::addr(k)
        );
    }
    let file = temp_file("keyed.toml");
    std::fs::write(&file, text + TESTS).unwrap();
    let db = temp_file("keyed.db");
    // The controller has no SONDE_KEY_FILE: only the flag or the file can give a key.
    let fleet = |extra: &[&str]| {
        let mut args = vec![
            "fleet",
            file.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ];
        args.extend(extra);
        let mut c = lab.controller(&args);
        c.env_remove(KEY_ENV);
        run(c)
    };
    // Without the flag the file's key_file is read, and named when it is missing.
    let o = fleet(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--key-file /nonexistent/fleet.key"),
        "{}",
        stderr(&o)
    );
    // The flag wins: the file's key file is not read, and both runs prove the agents' key.
    let key = key_file().to_str().unwrap();
    let o = fleet(&["--key-file", key]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("2 run(s) stored, 0 already stored, 0 failed"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stored(&db, &lab).len(), 2);
    // Another key on the flag: the agents refuse it, so the flag's key is the one proven.
    let other = key_with("0123456789abcdef0123456789abcdef");
    let o = fleet(&["--key-file", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 run(s) stored, 0 already stored, 2 failed"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stored(&db, &lab).len(), 2);
}
