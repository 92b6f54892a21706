//! `sonde lab`: runs the standard measurements in its own namespaces and leaves nothing
//! behind, also when interrupted.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn lab_namespaces(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("sonde-lab{pid}-")))
        .map(String::from)
        .collect()
}

#[test]
fn lab_runs_and_cleans_up() {
    // Lab::new only checks that namespaces can be made here (and fails in CI if not).
    let Some(_probe) = Lab::new() else { return };
    let dir = temp_file("lab-out");
    // Its claims are the lab's (all eight run, their documents, notes and summary, nothing
    // left behind), none a figure that needs length: 0.2 s each without warm-up (26 s
    // with 0.5 s after the default 1 s of warm-up, BENCHMARKS.md).
    let child = sonde_cmd()
        .args(["lab", "-t", "0.2", "--warmup", "0", "--output-dir"])
        .arg(&dir)
        .spawn_keeping(Keep::Both);
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let text = stdout(&o);
    assert!(o.status.success(), "{text}{}", stderr(&o));
    assert!(text.contains("two namespaces over veth"), "{text}");
    for m in [
        "stream -P 1",
        "stream -P 8",
        "ping ",
        "ping --udp",
        "rpc -C 8 -W 8",
        "pps --engine xdp",
        "load -P 4",
        "latency under load",
    ] {
        assert!(text.contains(m), "{m} missing: {text}");
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 8);
    // Both pings measured the tool's floor: under the lab's table, and in each summary.
    for socket in ["stream", "seqpacket"] {
        let floor = format!("tool floor (in-process echo over a Unix {socket} socket");
        assert_eq!(text.matches(&floor).count(), 2, "{floor}: {text}");
    }
    once_per_run(&text);
    one_host_figures_in_the_summary(&text, &dir);
    stages_by_default(&text, &dir);
    assert!(lab_namespaces(pid).is_empty(), "namespaces left behind");
    let _ = std::fs::remove_dir_all(dir);
}

/// The default-engine note: once per run for each engine chosen by default (kernel,
/// io_uring), not once per side of each of the eight measurements.
fn once_per_run(text: &str) {
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("chosen by default"))
        .collect();
    let mut distinct = notes.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(notes.len(), distinct.len(), "a note said twice: {notes:#?}");
    assert!(!notes.is_empty() && notes.len() <= 2, "{notes:#?}");
    assert!(
        notes.iter().all(|n| n.starts_with("note: client: engine ")),
        "{notes:#?}"
    );
}

/// The pings and the rpc split their round trips into stages without being asked (sampled,
/// the default): each prints its stages table, and its document states the sampling.
fn stages_by_default(text: &str, dir: &std::path::Path) {
    let tables = text
        .matches("messages split from both ends' kernel timestamps")
        .count();
    assert_eq!(
        tables, 3,
        "ping, ping --udp and rpc each print stages: {text}"
    );
    let mut staged = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
        let stages = &doc["end"]["stages"];
        if stages.is_object() {
            assert!(stages["sampled_every"].as_u64().unwrap() > 1, "{stages}");
            staged.push(doc["test"].as_str().unwrap().to_string());
        }
    }
    staged.sort();
    assert_eq!(staged, ["ping", "ping", "rpc"], "the documents with stages");
}

/// Both lab namespaces share this host: each stream's row shows the host's CPU busy and
/// cycles per byte from its document's `end.one_host`, where the sides hold none.
fn one_host_figures_in_the_summary(text: &str, dir: &std::path::Path) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let streams: Vec<serde_json::Value> = files
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .filter(|d: &serde_json::Value| d["test"] == "stream")
        .collect();
    let summary = &text[text.find("== lab summary").expect("the lab summary")..];
    let rows: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("│ stream"))
        .collect();
    assert_eq!(rows.len(), streams.len(), "{summary}");
    for (doc, row) in streams.iter().zip(rows) {
        let host = &doc["end"]["one_host"];
        assert!(host.is_object(), "both ends on this host: {doc}");
        assert!(doc["end"]["sender"]["cpu"]["host"].is_null());
        let cpu = &host["cpu"]["host"];
        let busy =
            100.0 - cpu["idle_percent"].as_f64().unwrap() - cpu["iowait_percent"].as_f64().unwrap();
        let busy = format!("{:.0}%", busy.max(0.0));
        let cycles = format!("{:.2}", host["cycles_per_byte"].as_f64().unwrap());
        assert!(row.contains(&busy), "host CPU busy {busy} missing: {row}");
        assert!(row.contains(&cycles), "cycles/byte {cycles} missing: {row}");
    }
    assert!(summary.contains("both ends ran on one host"), "{summary}");
}

#[test]
fn lab_interrupted_still_cleans_up() {
    let Some(_probe) = Lab::new() else { return };
    let mut child = sonde_cmd()
        .args(["lab", "-t", "10"])
        .spawn_keeping(Keep::Nothing);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        lab_namespaces(pid).len(),
        2,
        "lab did not build its namespaces"
    );
    // Ctrl-C on a terminal reaches the whole process group; here, the lab and its client.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    for p in child_pids(pid) {
        unsafe { libc::kill(p, libc::SIGINT) };
    }
    let status = wait_with_timeout(&mut child, Duration::from_secs(10)).expect("lab did not stop");
    assert_eq!(status.code(), Some(3));
    assert!(lab_namespaces(pid).is_empty(), "namespaces left behind");
}

/// Over loopback, with `--only` its pings alone (the rest is `lab_runs_and_cleans_up`'s):
/// it says so, runs just those, and a test it does not know is refused naming the flag.
#[test]
fn lab_over_loopback_says_so() {
    let _serial = Serial::take();
    let o = run({
        let mut c = sonde_cmd();
        c.args(["lab", "-t", "0.3", "--loopback", "--only", "ping"]);
        c
    });
    let text = stdout(&o);
    assert!(o.status.success(), "{text}{}", stderr(&o));
    assert!(text.contains("over loopback (127.0.0.1)"), "{text}");
    assert!(text.contains("== lab summary (loopback) =="), "{text}");
    let ran: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("== ") && !l.starts_with("== lab"))
        .collect();
    assert_eq!(
        ran,
        ["== ping --self-noise ==", "== ping --udp --self-noise =="],
        "{text}"
    );
    let o = run({
        let mut c = sonde_cmd();
        c.args(["lab", "--loopback", "--only", "ping,iperf"]);
        c
    });
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--only") && stderr(&o).contains("iperf"),
        "{}",
        stderr(&o)
    );
}

/// Direct children of `pid`, from /proc.
fn child_pids(pid: u32) -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        if after.split_whitespace().nth(1) == Some(&pid.to_string()) {
            out.push(p);
        }
    }
    out
}
