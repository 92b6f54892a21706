//! Responsiveness (IETF IPPM draft) through a real bottleneck: client, router, server in
//! namespaces; the router holds every packet toward the server 10 ms (the base round trip)
//! and shapes toward the client with tbf at 20 Mbit/s, its queue short (60 kB: 24 ms to
//! drain) or deep (300 kB: 120 ms). `sonde rpm` measures `sonde serve --rpm` with the short
//! queue, the deep one, the short again, then nginx (an implementation no one here wrote,
//! configured as the draft says), and Cloudflare's `mach` measures `sonde serve --rpm`.

use crate::common;

use std::time::Duration;

use common::delay_line::{DelayLine, Ways};
use common::rpm_end::{Endpoint, Nginx};
use common::{skip_unless, Lab};
use serde_json::Value;

const RATE_BPS: f64 = 20e6;
const BASE_MS: f64 = 10.0;
const SHORT_BYTES: f64 = 60_000.0;
const DEEP_BYTES: f64 = 300_000.0;
/// The TCP payload of a 1514-byte frame (tbf counts the Ethernet header): what of the
/// shaper's rate a transfer can carry.
const PAYLOAD_SHARE: f64 = 1448.0 / 1514.0;

fn drain_ms(bytes: f64) -> f64 {
    bytes * 8.0 / RATE_BPS * 1e3
}

/// The rpm section of a document (`end.rpm`), or the whole value.
fn end(v: &Value) -> &Value {
    v.get("end").and_then(|e| e.get("rpm")).unwrap_or(v)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

use common::rpm_end::short_rpm as rpm;

fn set_queue(lab: &Lab, op: &str, limit: f64) {
    let rc = format!("{}rc", lab.client_if);
    let limit = format!("{}", limit as u64);
    lab.router_cmd(
        "tc",
        &[
            "qdisc", op, "dev", &rc, "root", "tbf", "rate", "20mbit", "burst", "4kb", "limit",
            &limit,
        ],
    );
}

/// The loaded round trip (`http_l`), ms.
fn loaded_ms(doc: &Value) -> f64 {
    f(&end(doc)["download"]["responsiveness"]["loaded"]["trimmed_mean_ms"])
}

/// The most a loaded round trip may take through a queue of `bytes`: the base and the
/// full queue's drain, then the margin: one more base + drain (a self probe behind a
/// lost segment of its own connection waits for its fast retransmission) and 30 ms (the
/// server's 5 ms of unsent and its 5 ms chunk, and the client's one debug-build thread).
/// The first version, with 200-550 ms queued above the socket, failed it.
fn loaded_bound_ms(bytes: f64) -> f64 {
    2.0 * (BASE_MS + drain_ms(bytes)) + 30.0
}

/// Goodput under this share of the shaper's payload rate: the client, not the shaper, was
/// the bottleneck (at load 15 its one debug-build thread cannot read 20 Mbit/s: 17.8 of
/// 19.1 seen), so the queue was not kept full and the run says little of its drain time.
/// At the shaper, cubic keeps 97-98 % (18.65 of 19.13).
const CLIENT_BOUND: f64 = 0.95;

/// `rpm` through a queue of `bytes`, run again (at most 3 runs in all) while a run missed
/// its claims (the drain law; with `goodput`, the shaper's rate within 5 %) with its
/// goodput under the shaper's: the client, not the queue, was then what it measured.
fn rpm_through(lab: &Lab, url: &str, bytes: f64, goodput: bool) -> Value {
    let payload = RATE_BPS * PAYLOAD_SHARE;
    for attempt in 1.. {
        let doc = rpm(lab, url);
        let r = &end(&doc)["download"]["responsiveness"];
        let (tcp, loaded) = (f(&r["tcp"]["trimmed_mean_ms"]), loaded_ms(&doc));
        let g = f(&end(&doc)["download"]["goodput_bits_per_second"]);
        let lawful = tcp > BASE_MS + 0.5 * drain_ms(bytes) && loaded < loaded_bound_ms(bytes);
        let rate_ok = !goodput || (g / payload - 1.0).abs() < 0.05;
        // Over the shaper's rate by more than 5 %: an earlier window's bytes counted in
        // this one (against nginx, 20.09-21.35 of 19.13 in 1 to 3 runs of 4 here: its
        // cubic windows over a 60 kB queue lose, and what the loss held back arrives in a
        // lump), so that run says nothing of the rate; run again, as for a client bound.
        let over = g > (1.0 + 0.05) * payload;
        if (lawful && rate_ok) || (g > CLIENT_BOUND * payload && !over) || attempt == 3 {
            return doc;
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let why = match over {
            true => "a window counted bytes of an earlier one",
            false => "the client was the bottleneck",
        };
        eprintln!(
            "{url} run {attempt}: goodput {:.2} of {:.2} Mbit/s at load {}, TCP {tcp:.1} ms, loaded {loaded:.1} ms: {why}; again",
            g / 1e6,
            payload / 1e6,
            load.split(' ').next().unwrap_or("?")
        );
    }
    unreachable!()
}

#[test]
fn rpm_falls_and_rises_with_the_queues_drain_time_and_other_implementations_agree() {
    let Some(lab) = Lab::routed(&["tc", "nginx", "openssl", "gzip", "ss"]) else {
        return;
    };
    let line = DelayLine::routed(&lab, "rpmdl", Ways::ToServer);
    if !skip_unless("/dev/net/tun", line.as_ref().err().cloned()) {
        return;
    }
    let line = line.unwrap();
    line.set_hold(Duration::from_millis(BASE_MS as u64));
    set_queue(&lab, "add", SHORT_BYTES);
    let ep = Endpoint::start(
        Some(&lab.server),
        lab.server_addr,
        // Loss-based, as the drain-time law assumes: a sender that fills the queue. This
        // machine's default, BBR, paces at the bottleneck's rate and keeps it near empty
        // (and lost 37 % of its segments to this shallow queue when tried).
        &["--rpm-allow", "198.18.0.0/15", "--rpm-congestion", "cubic"],
    );
    let url = ep.base.clone();
    let short1 = rpm_through(&lab, &url, SHORT_BYTES, true);
    set_queue(&lab, "change", DEEP_BYTES);
    let deep = rpm_through(&lab, &url, DEEP_BYTES, false);
    set_queue(&lab, "change", SHORT_BYTES);
    let short2 = rpm_through(&lab, &url, SHORT_BYTES, true);
    let nginx = Nginx::start(&lab.server, lab.server_addr, 8443);
    let theirs = rpm_through(&lab, &nginx.base, SHORT_BYTES, true);

    // 1. A foreign probe's TCP handshake takes the base plus the queue's drain time, within
    //    the band a tail-drop queue under TCP's sawtooth keeps (more than half full); the
    //    loaded round trip at least that much and at most `loaded_bound_ms` (a self probe
    //    also waits behind its own connection's unsent 5 ms and a chunk, behind a lost
    //    segment's recovery, and behind the client's one thread: 55-110 ms where the
    //    handshake took 30-45 with the short queue, on a machine at load 15); the foreign
    //    RPM follows 60000 / (base + drain), and the whole RPM falls and rises. A run the
    //    client could not load (`CLIENT_BOUND`) is run again, and named if it fails.
    for (name, doc, bytes) in [
        ("short", &short1, SHORT_BYTES),
        ("deep", &deep, DEEP_BYTES),
        ("short again", &short2, SHORT_BYTES),
    ] {
        let r = &end(doc)["download"]["responsiveness"];
        if std::env::var("RPM_DEBUG").is_ok() {
            eprintln!("{}", serde_json::to_string(end(doc)).unwrap());
        }
        let (loaded, tcp, drain) = (
            loaded_ms(doc),
            f(&r["tcp"]["trimmed_mean_ms"]),
            drain_ms(bytes),
        );
        let predicted = 60_000.0 / (BASE_MS + drain);
        eprintln!(
            "{name}: TCP handshake {tcp:.1} ms, loaded {loaded:.1} ms (base {BASE_MS} + drain {drain:.0}); RPM {:.0}, predicted {predicted:.0}",
            f(&r["rpm"])
        );
        assert!(
            tcp > BASE_MS + 0.5 * drain,
            "{name}: TCP handshake {tcp:.1} ms, drain {drain:.0} ms (goodput {:.0}: if far under the shaper's, the client was the bottleneck)",
            f(&end(doc)["download"]["goodput_bits_per_second"])
        );
        let g = f(&end(doc)["download"]["goodput_bits_per_second"]);
        let cause = match g < CLIENT_BOUND * RATE_BPS * PAYLOAD_SHARE {
            true => "the client was the bottleneck, not the shaper: a loaded machine",
            false => "at the shaper's rate",
        };
        assert!(
            loaded > BASE_MS + 0.5 * drain,
            "{name}: loaded {loaded:.1} ms, drain {drain:.0} ms (goodput {g:.0}: {cause})"
        );
        assert!(
            loaded < loaded_bound_ms(bytes),
            "{name}: loaded {loaded:.1} ms over {:.0} (goodput {g:.0}: {cause})",
            loaded_bound_ms(bytes)
        );
        for part in ["tcp", "tls", "http", "loaded"] {
            assert!(
                f(&r[part]["count"]) >= 4.0,
                "{name}: {part} has too few samples: {r}"
            );
        }
    }
    let total = |d: &Value| f(&end(d)["download"]["responsiveness"]["rpm"]);
    assert!(total(&deep) < 0.5 * total(&short1), "RPM did not fall");
    assert!(
        total(&short2) > 2.0 * total(&deep),
        "RPM did not rise again"
    );

    // 2. Goodput: the shaper's payload rate, within 5 %, with the short queue (nginx's
    //    too). With the deep one the round trip is 130 ms and a 2 s stage's last intervals
    //    still hold part of the ramp (17.3 of 19.1 Mbit/s when tried).
    let payload = RATE_BPS * PAYLOAD_SHARE;
    for (name, doc) in [
        ("short", &short1),
        ("short again", &short2),
        ("nginx", &theirs),
    ] {
        let g = f(&end(doc)["download"]["goodput_bits_per_second"]);
        eprintln!(
            "{name}: goodput {:.2} Mbit/s of {:.2}",
            g / 1e6,
            payload / 1e6
        );
        assert!((g / payload - 1.0).abs() < 0.05, "{name}: goodput {g}");
    }

    // 3. Against nginx, the same client finds the same idle round trip within 10 % (its
    //    run against ours just before: the delay line's own time drifts with the
    //    machine's load over a test).
    let idle = |d: &Value| f(&end(d)["idle"]["trimmed_mean_ms"]);
    let (ours, nginx_idle) = (idle(&short2), idle(&theirs));
    eprintln!("idle: sonde serve --rpm {ours:.2} ms, nginx {nginx_idle:.2} ms");
    assert!(
        (nginx_idle / ours - 1.0).abs() < 0.10,
        "{ours} vs {nginx_idle}"
    );
    assert_eq!(end(&theirs)["tls_version"], "TLSv1_3");
    line.stop();
}

/// nginx's redirecting, compressing and wrong configurations are refused, each by name.
#[test]
fn a_redirect_a_compressed_answer_and_a_foreign_config_are_named() {
    let Some(lab) = Lab::needing(&["nginx", "openssl", "gzip", "ss"]) else {
        return;
    };
    let nginx = Nginx::start(&lab.server, common::SERVER_ADDR, 8443);
    let run = |path: &str| {
        let out = Lab::in_ns(&lab.client, common::SONDE)
            .args([
                "rpm",
                &format!("{}{path}", nginx.base),
                "--insecure",
                "--no-save",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{path} was taken");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run("/redirect/.well-known/nq");
    assert!(e.contains("redirects (301"), "{e}");
    let e = run("/gz/.well-known/nq");
    assert!(
        e.contains("Content-Encoding gzip") && e.contains("identity"),
        "{e}"
    );
    let e = run("/bad/.well-known/nq");
    assert!(
        e.contains("not the draft's configuration") && e.contains("version 2"),
        "{e}"
    );
    // Its certificate is nobody's: refused unless --insecure says so.
    let out = Lab::in_ns(&lab.client, common::SONDE)
        .args(["rpm", &nginx.base, "--no-save"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("does not verify") && e.contains("--insecure"),
        "{e}"
    );
}
