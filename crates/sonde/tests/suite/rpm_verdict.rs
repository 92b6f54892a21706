//! `sonde rpm`'s own evidence: the client's TCP_INFO of its load-generating connections
//! per interval and each direction's verdict, against `sonde serve --rpm` through planted
//! limits in namespaces (client, router, server). The upload through a tbf shaper with a
//! 60 kB queue (24 ms to drain at 20 Mbit/s) over a 10 ms base is the network's, with the
//! queue in the client's smoothed RTT and retransmissions; the download into a client
//! whose receive buffer is capped (`net.ipv4.tcp_rmem` in its namespace) under a shaper
//! five times faster than it can go is the receiver's window.

use crate::common;

use std::time::Duration;

use common::delay_line::{DelayLine, Ways};
use common::rpm_end::{route_congestion, Endpoint, SHORT};
use common::{scratch_db, skip_unless, sonde_into, stderr, stdout, Lab, SONDE};
use serde_json::Value;

const RATE_BPS: f64 = 20e6;
const BASE_MS: f64 = 10.0;
const QUEUE_BYTES: f64 = 60_000.0;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The server's TCP_INFO readings of a direction's connections, every interval's.
fn server_samples(direction: &Value) -> Vec<&Value> {
    direction["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["server_tcp"].as_array().into_iter().flatten())
        .collect()
}

fn drain_ms(bytes: f64, rate: f64) -> f64 {
    bytes * 8.0 / rate * 1e3
}

/// `sonde rpm BASE --insecure ARGS SHORT` in the client namespace, stored in a store of
/// this test's own: its stdout, and its document read back from the store.
fn stored_rpm(
    lab: &Lab,
    base: &str,
    args: &[&str],
    name: &str,
) -> (String, Value, std::path::PathBuf) {
    let db = scratch_db().with_file_name(format!("{name}.db"));
    let _ = std::fs::remove_file(&db);
    let out = Lab::in_ns(&lab.client, SONDE)
        .env("SONDE_DB", &db)
        .args(["rpm", base, "--insecure"])
        .args(args)
        .args(SHORT)
        .output()
        .unwrap();
    assert!(out.status.success(), "sonde rpm: {}", stderr(&out));
    let doc: Value = serde_json::from_slice(&sonde_into(&db, &["results", "show", "1"]).stdout)
        .expect("the stored document");
    if std::env::var("RPM_DEBUG").is_ok() {
        eprintln!("{}", serde_json::to_string(&doc["end"]["rpm"]).unwrap());
    }
    (stdout(&out), doc, db)
}

/// Every loaded interval's samples of the direction (all intervals but the first).
fn samples(dir: &Value) -> Vec<&Value> {
    let rows = dir["intervals"].as_array().expect("intervals");
    rows.iter()
        .skip(1)
        .flat_map(|r| r["tcp"].as_array().into_iter().flatten())
        .collect()
}

/// The evidence of a verdict, by figure.
fn evidence<'a>(v: &'a Value, figure: &str) -> Option<&'a Value> {
    v["evidence"]
        .as_array()?
        .iter()
        .find(|e| e["figure"] == figure)
}

/// The run's verdict (`end.limited_by`, what the limits table, `sonde show` and
/// OpenMetrics read) is the one measured direction's, each figure named by its path under
/// `end.rpm` and each sentence by the direction; the text (where it was printed) ends with
/// it, and the stored run's report marks that direction's row as the run's.
fn the_runs_verdict_is(doc: &Value, way: &str, text: Option<&str>, md: &str) {
    let run = &doc["end"]["limited_by"];
    let own = &doc["end"]["rpm"][way]["limited_by"];
    assert!(own.is_object(), "no {way} verdict: {doc}");
    assert_eq!(
        (&run["verdict"], &run["strength"]),
        (&own["verdict"], &own["strength"]),
        "the run's {run} against the {way}'s {own}"
    );
    let (r, o) = (
        run["evidence"].as_array().unwrap(),
        own["evidence"].as_array().unwrap(),
    );
    assert_eq!(r.len(), o.len(), "{run}");
    for (r, o) in r.iter().zip(o) {
        let figure = format!("{way}.{}", o["figure"].as_str().unwrap());
        assert_eq!(r["figure"], figure.as_str(), "{r}");
        assert_eq!(
            (&r["value"], &r["measured_by"]),
            (&o["value"], &o["measured_by"])
        );
        let said = format!("{way}: {}", o["text"].as_str().unwrap());
        assert_eq!(r["text"], said.as_str(), "{r}");
    }
    let verdict = format!(
        "({}), the {way}'s verdict",
        own["verdict"].as_str().unwrap()
    );
    if let Some(text) = text {
        let line = text.lines().find(|l| l.starts_with("limited by: "));
        assert!(
            line.is_some_and(|l| l.contains(&verdict)),
            "the summary's line {verdict}: {text}"
        );
    }
    let row = format!("rpm {way} (the run's verdict)");
    assert!(md.contains(&row), "{row}: {md}");
}

#[test]
fn rpm_upload_through_a_shaper_is_the_networks_with_the_queue_in_tcp_info() {
    let Some(lab) = Lab::routed(&["tc"]) else {
        return;
    };
    let line = DelayLine::routed(&lab, "rpmvrdl", Ways::ToClient);
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(BASE_MS as u64));
    lab.router_tbf("20mbit", "4kb", &format!("{}", QUEUE_BYTES as u64));
    // Loss-based, as rpm_upload's client (see `route_congestion`).
    route_congestion(&lab.client, Some("cubic"));
    let ep = Endpoint::start(
        Some(&lab.server),
        lab.server_addr,
        &["--rpm-allow", "198.18.0.0/15"],
    );
    let (text, doc, db) = stored_rpm(&lab, &ep.base, &["--upload-only"], "rpm-verdict-up");
    line.stop();
    let up = &doc["end"]["rpm"]["upload"];
    let t = &up["tcp_info"];
    let v = &up["limited_by"];
    let drain = drain_ms(QUEUE_BYTES, RATE_BPS);
    let (srtt, min) = (
        f(&t["srtt_us"]["median"]) / 1e3,
        f(&t["min_rtt_us"]["median"]) / 1e3,
    );
    let all = samples(up);
    let share = |k: &str| {
        t[k]["median"]
            .as_f64()
            .map_or("absent".into(), |v| format!("{v:.0} %"))
    };
    eprintln!(
        "upload: the client's busy {}, rwnd-limited {}, sndbuf-limited {} (median connection)",
        share("busy_percent"),
        share("rwnd_limited_percent"),
        share("sndbuf_limited_percent")
    );
    let retrans: f64 = all.iter().map(|s| f(&s["retransmits"])).sum();
    eprintln!(
        "upload: {:.2} Mbit/s, {} connections; client srtt {srtt:.1} ms (min {min:.1}, queue drain {drain:.1}); {retrans} retransmits; verdict {} ({}): {}",
        f(&up["goodput_bits_per_second"]) / 1e6,
        t["connections"],
        v["verdict"],
        v["strength"],
        v["evidence"]
    );

    // 1. The client's samples are the sender's, every loaded interval of each connection.
    assert!(!all.is_empty(), "no TCP_INFO: {up}");
    assert!(all.iter().all(|s| s["transfer"] == "send"), "{up}");
    assert!(
        all.iter().all(|s| s["busy_percent"].is_number()),
        "the kernel reports tcpi_busy_time here: {up}"
    );

    // 2. What was planted: the base under the minimum, the queue above it. Cubic keeps a
    //    tail-drop queue between its back-off and full, so the median smoothed RTT stands
    //    at least a quarter of the drain above the planted base and at most the drain and
    //    10 ms (the debug-build client late on its completions) above it; the queue
    //    overflows, so segments are retransmitted. (tcpi_min_rtt is no base here: a
    //    connection opened into the full queue never saw the empty path; measured against
    //    it, 32.9 - 27.1 ms fell under the quarter once in five runs.)
    assert!(
        min >= BASE_MS * 0.9,
        "min RTT {min:.1} ms under the base {BASE_MS}"
    );
    assert!(
        srtt - BASE_MS >= drain / 4.0 && srtt - BASE_MS <= drain + 10.0,
        "srtt {srtt:.1} ms, min {min:.1}: the queue's drain is {drain:.1} ms"
    );
    assert!(
        retrans > 0.0,
        "no retransmits through a full tail-drop queue"
    );

    // 3. The verdict names the network, with the queue in its evidence.
    assert_eq!(v["verdict"], "network", "{v}");
    assert!(f(&v["strength"]) >= 0.5, "{v}");
    let e = evidence(v, "tcp_info.srtt_us").expect("the smoothed RTT in the evidence");
    assert_eq!(
        (&e["end"], &e["measured_by"]),
        (&"sender".into(), &"client".into())
    );
    assert_eq!(f(&e["value"]), f(&t["srtt_us"]["median"]));

    // The server's readings of the same connections: the upload's receiver.
    let far = server_samples(up);
    assert!(
        !far.is_empty() && far.iter().all(|s| s["transfer"] == "receive"),
        "{up}"
    );

    // 4. The text says it, and the stored run's report renders it.
    assert!(text.contains("limited by the network"), "{text}");
    assert!(text.contains("client TCP_INFO (sender)"), "{text}");
    let md = db.with_extension("md");
    let out = sonde_into(&db, &["report", "1", "-o", md.to_str().unwrap()]);
    assert!(out.status.success(), "report: {}", stderr(&out));
    let md = std::fs::read_to_string(&md).unwrap();
    let row = md.lines().find(|l| l.contains("rpm upload"));
    assert!(
        row.is_some_and(|l| l.contains("the network (network)") && l.contains("smoothed RTT")),
        "the report's verdict row: {md}"
    );
    // 5. The run's own verdict is the upload's (the one direction measured).
    the_runs_verdict_is(&doc, "upload", Some(&text), &md);
    assert_eq!(doc["end"]["limited_by"]["verdict"], "network");
}

/// The client's receive buffer's cap, bytes (`tcp_rmem`'s maximum): its window is at most
/// this much, so 4 connections over a 30 ms round trip carry at most 4 × 16 kB / 30 ms.
const RMEM_MAX: u32 = 16384;
const DOWN_BASE_MS: f64 = 30.0;
const DOWN_RATE_BPS: f64 = 100e6;

#[test]
fn rpm_download_into_a_capped_client_buffer_is_the_receivers_window() {
    let Some(lab) = Lab::routed(&["tc", "sysctl"]) else {
        return;
    };
    let line = DelayLine::routed(&lab, "rpmvrdd", Ways::ToServer);
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(DOWN_BASE_MS as u64));
    let rc = format!("{}rc", lab.client_if);
    lab.router_cmd(
        "tc",
        &[
            "qdisc", "add", "dev", &rc, "root", "tbf", "rate", "100mbit", "burst", "16kb", "limit",
            "300000",
        ],
    );
    let rmem = format!("4096 8192 {RMEM_MAX}");
    let set = Lab::in_ns(&lab.client, "sysctl")
        .args(["-w", &format!("net.ipv4.tcp_rmem={rmem}")])
        .output()
        .unwrap();
    assert!(set.status.success(), "tcp_rmem: {}", stderr(&set));
    let ep = Endpoint::start(
        Some(&lab.server),
        lab.server_addr,
        &["--rpm-allow", "198.18.0.0/15"],
    );
    let (json, doc, db) = stored_rpm(
        &lab,
        &ep.base,
        &["--download-only", "--json"],
        "rpm-verdict-down",
    );
    line.stop();
    let down = &doc["end"]["rpm"]["download"];
    let t = &down["tcp_info"];
    let v = &down["limited_by"];
    let g = f(&down["goodput_bits_per_second"]);
    let wnd = f(&t["rcv_wnd_bytes"]["max"]);
    eprintln!(
        "download: {:.2} Mbit/s of the shaper's {:.0}, {} connections; client rcv_wnd max {wnd:.0} bytes (rmem max {RMEM_MAX}); verdict {} ({}): {}",
        g / 1e6,
        DOWN_RATE_BPS / 1e6,
        down["connections"],
        v["verdict"],
        v["strength"],
        v["evidence"]
    );
    let all = samples(down);
    assert!(!all.is_empty(), "no TCP_INFO: {down}");
    assert!(all.iter().all(|s| s["transfer"] == "receive"), "{down}");
    // The server (ours) gave each connection's own readings: the sender's, waiting on
    // the client's window, the same cause seen from the far end.
    let server = &down["server_tcp_info"];
    let rwnd = f(&server["rwnd_limited_percent"]["median"]);
    eprintln!(
        "download: the server (sender) rwnd-limited {rwnd:.0} %, busy {:.0} %, {} connections",
        f(&server["busy_percent"]["median"]),
        server["connections"]
    );
    let far = server_samples(down);
    assert!(
        !far.is_empty() && far.iter().all(|s| s["transfer"] == "send"),
        "{down}"
    );
    // TCP's chronograph charges only the time the sender found the window shut when it
    // tried to send (48 % seen here; the verdict without the cap is the network's), so
    // a fifth is the bar.
    assert!(rwnd >= 20.0, "the server rwnd-limited {rwnd:.0} %");
    let by_server =
        v["evidence"].as_array().unwrap().iter().find(|e| {
            e["measured_by"] == "server" && e["figure"] == "tcp_info.rwnd_limited_percent"
        });
    assert!(
        by_server.is_some(),
        "the server's chronograph in the evidence: {v}"
    );
    // What was planted: the window under the cap, the shaper far from full.
    assert!(
        wnd <= RMEM_MAX as f64,
        "rcv_wnd {wnd} over tcp_rmem's {RMEM_MAX}"
    );
    assert!(
        g < DOWN_RATE_BPS / 2.0,
        "goodput {g}: the shaper, not the window"
    );
    // The window is the cause: each connection carried its window per base round trip.
    let median_wnd = f(&t["rcv_wnd_bytes"]["median"]);
    let by_window = f(&down["connections"]) * median_wnd * 8.0 / (DOWN_BASE_MS / 1e3);
    assert!(
        (g / by_window - 1.0).abs() < 0.25,
        "goodput {g:.0}, connections × window / base {by_window:.0}"
    );
    assert_eq!(v["verdict"], "receiver_window", "{v}");
    let e = evidence(v, "tcp_info.rcv_wnd_bytes").expect("the window in the evidence");
    assert_eq!(
        (&e["end"], &e["measured_by"]),
        (&"receiver".into(), &"client".into())
    );
    // `--json` printed what was stored; the stored run's report names the window.
    let printed: Value = serde_json::from_str(&json).expect("--json's document");
    assert_eq!(printed["end"]["rpm"]["download"]["limited_by"], *v);
    assert_eq!(printed["end"]["rpm"]["download"]["tcp_info"], *t);
    let md = db.with_extension("md");
    let out = sonde_into(&db, &["report", "1", "-o", md.to_str().unwrap()]);
    assert!(out.status.success(), "report: {}", stderr(&out));
    let md = std::fs::read_to_string(&md).unwrap();
    let row = md.lines().find(|l| l.contains("rpm download"));
    assert!(
        row.is_some_and(|l| l.contains("the receiver's window") && l.contains("advertised")),
        "the report's verdict row: {md}"
    );
    // The run's own verdict is the download's, as `--json` printed it too.
    the_runs_verdict_is(&doc, "download", None, &md);
    assert_eq!(printed["end"]["limited_by"], doc["end"]["limited_by"]);
    assert_eq!(doc["end"]["limited_by"]["verdict"], "receiver_window");
}

/// `GET /sonde/tcp_info` answers the asking connection's own TCP_INFO: a fresh connection
/// asking while another client's download moves megabytes gets figures of a few hundred
/// bytes (its own handshake and request), never the loaded connections'.
#[test]
fn the_servers_tcp_info_is_the_asking_connections_own() {
    let found = std::process::Command::new("curl").arg("--version").output();
    if !skip_unless("curl", found.err().map(|e| e.to_string())) {
        return;
    }
    let _serial = common::Serial::take();
    let ep = Endpoint::start(None, "127.0.0.1", &[]);
    let rpm = common::sonde_cmd()
        .args([
            "rpm",
            &ep.base,
            "--insecure",
            "--download-only",
            "--json",
            "--no-save",
        ])
        .args([
            "--interval",
            "150ms",
            "--stage-limit",
            "2.5",
            "--max-connections",
            "4",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("{}/sonde/tcp_info", ep.base);
    let out = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", &url])
        .output()
        .unwrap();
    let rpm = rpm.wait_with_output().unwrap();
    assert!(rpm.status.success(), "sonde rpm: {}", stderr(&rpm));
    let mine: Value = serde_json::from_slice(&out.stdout).expect("a reading");
    let doc: Value = serde_json::from_slice(&rpm.stdout).unwrap();
    let down = &doc["end"]["rpm"]["download"];
    let moved = f(&down["goodput_bits_per_second"]) / 8.0 * f(&down["duration_ms"]) / 1e3;
    eprintln!(
        "the asking connection: {} bytes acked, {} received; the loaded ones moved {:.0} MB",
        mine["bytes_acked"],
        mine["bytes_received"],
        moved / 1e6
    );
    assert!(
        moved > 10e6,
        "the other client's download moved {moved:.0} bytes"
    );
    assert!(f(&mine["bytes_acked"]) < 64e3, "{mine}");
    assert!(f(&mine["bytes_received"]) < 4e3, "{mine}");
    let far = down["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["server_tcp"].as_array().is_some_and(|s| !s.is_empty()))
        .count();
    assert!(
        far > 0,
        "the loaded client got its own connections' readings: {down}"
    );
}
