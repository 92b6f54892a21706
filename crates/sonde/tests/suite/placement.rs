//! `--cpus auto` and `--server-cpus auto` (the default): each side places its workers
//! itself, within the CPU mask it inherited, and the result records where they ran.

use crate::common;

use std::process::Command;

use common::*;

#[test]
fn auto_placement_is_recorded_and_respects_taskset() {
    let agent = Agent::on_loopback();
    let o = run({
        let mut c = sonde_cmd();
        let auto = [
            "-P",
            "2",
            "--cpus",
            "auto",
            "--server-cpus",
            "auto",
            "--json",
        ];
        c.args(agent.short_test("stream", "0.5", &auto));
        c
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let online = std::thread::available_parallelism().unwrap().get();
    for side in ["sender", "receiver"] {
        let cpus = doc["end"][side]["pinned_cpus"]
            .as_array()
            .unwrap_or_else(|| panic!("{side} not pinned"));
        assert_eq!(cpus.len(), 2);
        assert!(cpus.iter().all(|c| (c.as_u64().unwrap() as usize) < online));
    }
    assert_eq!(doc["start"]["spec"]["server_cpus_auto"], true);
    // With more than one core, the two ends start from opposite ends of the core list.
    if online > 1 {
        assert_ne!(
            doc["end"]["sender"]["pinned_cpus"][0],
            doc["end"]["receiver"]["pinned_cpus"][0]
        );
    }
    // The controller's inherited mask (taskset) bounds its choice; more workers than the
    // cores it may use are left unpinned.
    let last = (online - 1).to_string();
    for (conns, want) in [
        ("1", serde_json::json!([online - 1])),
        ("2", serde_json::Value::Null),
    ] {
        let o = run({
            let mut c = Command::new("taskset");
            c.args(["-c", &last, SONDE])
                .args(agent.short_test("stream", "0.5", &["-P", conns, "--json"]))
                .env("SONDE_DB", scratch_db())
                .env(KEY_ENV, key_file());
            c
        });
        assert!(o.status.success(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["end"]["sender"]["pinned_cpus"], want, "-P {conns}");
    }
}
