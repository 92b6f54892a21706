//! `sonde rpm`'s upload through a real bottleneck, the mirror of `rpm_netns`'s download:
//! client, router, server in namespaces; the router holds every packet toward the client
//! 10 ms (the acknowledgements: the base round trip) and shapes toward the server with tbf
//! at 20 Mbit/s and a 60 kB queue, where what it cannot pass it drops and the sending
//! client feels nothing but TCP's own signals. `sonde rpm --upload-only` measures
//! `sonde serve --rpm`; its upload goodput (the bytes the server's TCP acknowledged,
//! `TCP_INFO`) is the shaper's payload rate, and its document carries the upload's figures
//! with their counts.

use crate::common;

use std::time::Duration;

use common::delay_line::{DelayLine, Ways};
use common::rpm_end::{route_congestion, Endpoint, SHORT};
use common::{scratch_db, skip_unless, sonde_into, stderr, stdout, Lab, SONDE};
use serde_json::Value;

const RATE_BPS: f64 = 20e6;
const BASE_MS: f64 = 10.0;
/// The TCP payload of a 1514-byte frame (tbf counts the Ethernet header).
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;
/// `short_rpm`'s MAD (the draft's default): the intervals of the final window.
const MAD: usize = 4;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn rpm_upload_goodput_is_the_shapers_rate_and_the_document_counts_it() {
    let Some(lab) = Lab::routed(&["tc", "ss"]) else {
        return;
    };
    let line = DelayLine::routed(&lab, "rpmupdl", Ways::ToClient);
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(BASE_MS as u64));
    lab.router_tbf("20mbit", "4kb", "60000");
    // The sender is the client here: loss-based, as `rpm_netns`'s senders are made (by
    // route: see `route_congestion`). The namespace would take this machine's BBR, whose
    // goodput through this queue swings as nginx's did in `rpm_netns` (RPM_UPLOAD_CC=bbr:
    // its 150 ms intervals 9.3-25.7 Mbit/s, and a stage that settled on 3 self probes).
    let cc = std::env::var("RPM_UPLOAD_CC").unwrap_or_else(|_| "cubic".into());
    route_congestion(&lab.client, Some(&cc));
    let ep = Endpoint::start(
        Some(&lab.server),
        lab.server_addr,
        &["--rpm-allow", "198.18.0.0/15"],
    );
    // Stored (a store of this test's own), as any run: its text on stdout, its document
    // read back.
    let db = scratch_db().with_file_name("rpm-upload.db");
    let _ = std::fs::remove_file(&db);
    let out = Lab::in_ns(&lab.client, SONDE)
        .env("SONDE_DB", &db)
        .args(["rpm", &ep.base, "--insecure", "--upload-only"])
        .args(SHORT)
        .output()
        .unwrap();
    line.stop();
    assert!(out.status.success(), "sonde rpm: {}", stderr(&out));
    let text = stdout(&out);
    let doc: Value = serde_json::from_slice(&sonde_into(&db, &["results", "show", "1"]).stdout)
        .expect("the stored document");
    let end = &doc["end"]["rpm"];
    if std::env::var("RPM_DEBUG").is_ok() {
        eprintln!("{}", serde_json::to_string(end).unwrap());
    }
    assert_eq!(doc["test"], "rpm");
    assert!(end["download"].is_null(), "a download ran: {end}");
    let up = &end["upload"];

    // 1. Goodput: the shaper's payload rate within 5 %. What is counted is TCP payload
    //    acknowledged, so the TLS records' 22 bytes and the HTTP/2 frames' 9 around each
    //    4-12 kB chunk are in it (0.3-0.8 %), as the Ethernet, IP and TCP headers are not.
    let payload = RATE_BPS * PAYLOAD_SHARE;
    let g = f(&up["goodput_bits_per_second"]);
    let rows = up["intervals"].as_array().expect("intervals");
    let each: Vec<String> = rows
        .iter()
        .map(|r| format!("{:.2}", f(&r["goodput_bits_per_second"]) / 1e6))
        .collect();
    eprintln!(
        "upload: goodput {:.2} Mbit/s of {:.2} over {} connections; intervals {}",
        g / 1e6,
        payload / 1e6,
        up["connections"],
        each.join(" ")
    );
    assert!(
        (g / payload - 1.0).abs() < 0.05,
        "upload goodput {:.2} Mbit/s, the shaper's payload rate {:.2}",
        g / 1e6,
        payload / 1e6
    );

    // 2. The figures and their counts: each component sampled, no more kept than taken;
    //    the final window's probes are the last MAD intervals' (each counts a foreign
    //    probe once, by its HTTP round trip, and a self probe); the connections are the
    //    last interval's; the run's pooled RPM is the upload's, the only direction run.
    let r = &up["responsiveness"];
    for part in ["tcp", "tls", "http", "loaded"] {
        let (count, kept) = (f(&r[part]["count"]), f(&r[part]["kept"]));
        assert!(count >= 4.0 && kept >= 1.0 && kept <= count, "{part}: {r}");
        assert!(f(&r[part]["trimmed_mean_ms"]) >= BASE_MS, "{part}: {r}");
    }
    assert!(rows.len() >= MAD, "{} intervals", rows.len());
    let window: f64 = rows[rows.len() - MAD..]
        .iter()
        .map(|r| f(&r["probes"]))
        .sum();
    assert_eq!(
        f(&r["http"]["count"]) + f(&r["loaded"]["count"]),
        window,
        "the final window's probes: {r}"
    );
    assert_eq!(up["connections"], rows[rows.len() - 1]["connections"]);
    let last = &rows[rows.len() - 1]["moving_goodput_bits_per_second"];
    assert_eq!(f(last), g, "goodput is the last moving average");
    assert_eq!(end["responsiveness"]["rpm"], r["rpm"]);
    assert!(f(&r["rpm"]) > 0.0 && f(&up["duration_ms"]) > 0.0);
    for k in ["goodput_confidence", "rpm_confidence"] {
        assert!(up[k].is_string(), "{k}: {up}");
    }

    // 3. The text says the same figures and counts; the export carries the upload's RPM
    //    and goodput (the client is the source: forward), and no download.
    let heading = format!(
        "upload: {:.1} Mbit/s over {} connections",
        g / 1e6,
        up["connections"]
    );
    assert!(text.contains(&heading), "{heading}: {text}");
    for part in ["tcp", "tls", "http", "loaded"] {
        let counts = format!("({} samples, {} kept)", r[part]["count"], r[part]["kept"]);
        let line = text.lines().find(|l| l.trim_start().starts_with(part));
        assert!(
            line.is_some_and(|l| l.contains(&counts)),
            "{part} {counts}: {text}"
        );
    }
    assert!(!text.contains("download:"), "{text}");
    let om = stdout(&sonde_into(
        &db,
        &["results", "export", "1", "--format", "openmetrics"],
    ));
    let sample = |family: &str, direction: &str| -> Option<f64> {
        let line = om.lines().find(|l| {
            l.starts_with(&format!("{family}{{"))
                && l.contains(&format!("direction=\"{direction}\""))
        })?;
        line.split(' ').nth(1)?.parse().ok()
    };
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= 1e-6 * b);
    assert!(close(sample("sonde_rpm", "upload"), f(&r["rpm"])), "{om}");
    assert!(
        close(sample("sonde_throughput_bits_per_second", "forward"), g),
        "{om}"
    );
    assert!(sample("sonde_rpm", "download").is_none(), "{om}");
}
