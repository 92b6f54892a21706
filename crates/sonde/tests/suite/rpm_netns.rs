//! Responsiveness (IETF IPPM draft) through a real bottleneck: client, router, server in
//! namespaces; the router holds every packet toward the server 10 ms (the base round trip)
//! and shapes toward the client with tbf at 20 Mbit/s, its queue short (60 kB: 24 ms to
//! drain) or deep (300 kB: 120 ms). `sonde rpm` measures `sonde serve --rpm` with the short
//! queue, the deep one, the short again, then nginx (an implementation no one here wrote,
//! configured as the draft says), and Cloudflare's `mach` measures `sonde serve --rpm`.

use crate::common;

use std::time::Duration;

use common::delay_line::{DelayLine, Ways};
use common::rpm_end::{route_congestion, Endpoint, Nginx};
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

/// Cubic's multiplicative decrease: after a loss a flow's window is this share of what
/// filled the path.
const CUBIC_BETA: f64 = 0.7;
/// The bandwidth-delay product of the base round trip, bytes (25 kB).
const BDP_BYTES: f64 = RATE_BPS / 8.0 * BASE_MS / 1e3;
/// The shaper's burst, bytes: what may pass ahead of the queue.
const BURST_BYTES: f64 = 4096.0;
/// What the client may add to a round trip it times beyond the path's: its one debug-build
/// thread sees a completion late while it handles the load. The slowest part seen, HTTP
/// through the deep queue at 122.7 ms, was 1.1 ms over the base and the full queue's and
/// burst's drain (4 runs at load 6-10), so 10 ms leaves a loaded machine room.
const CLIENT_SLACK_MS: f64 = 10.0;

/// The band a foreign probe's TCP handshake falls in through a tail-drop queue of
/// `bytes` kept full by cubic senders, ms. At least the base and what the queue holds
/// when every flow has just backed off at once (the window CUBIC_BETA of BDP + queue,
/// less the BDP in flight: 34.5 of 60 kB, 202.5 of 300 kB); at most the base, the full
/// queue's and the burst's drain, and CLIENT_SLACK_MS. A trimmed mean averages the
/// sawtooth between the two (a run at load 15 whose client could not fill the queue, 66
/// ms through the deep one, is a client-bound run, run again).
fn handshake_band_ms(bytes: f64) -> (f64, f64) {
    let least = (CUBIC_BETA * (BDP_BYTES + bytes) - BDP_BYTES).max(0.0);
    (
        BASE_MS + drain_ms(least),
        BASE_MS + drain_ms(bytes + BURST_BYTES) + CLIENT_SLACK_MS,
    )
}

/// What [`rpm_through`] holds a run to.
#[derive(Clone, Copy)]
struct Claims {
    /// The shaper's rate within 5 %.
    goodput: bool,
    /// Each handshake part's band, and the loaded bound.
    bands: bool,
}

/// Every claim: through a queue our own server keeps.
const ALL: Claims = Claims {
    goodput: true,
    bands: true,
};

/// `rpm` through a queue of `bytes`, run again (at most 3 runs in all) while the run
/// missed one of its `claims`: because the client was the bottleneck (goodput under
/// CLIENT_BOUND of the shaper's), or, at the shaper's rate, because one part's trimmed
/// mean of a few handshakes took one of this 2-CPU machine's hiccups (ci56: TLS 51.8 ms
/// where TCP took 30.2 and HTTP 31.2, the band 23.8-45.6). A path that breaks a claim
/// breaks it in each run. A goodput over the shaper's is never run again: it was nginx's
/// sockets taking the namespace's BBR, not the cubic this test meant (see part 2).
fn rpm_through(lab: &Lab, url: &str, bytes: f64, claims: Claims) -> Value {
    let Claims { goodput, bands } = claims;
    let payload = RATE_BPS * PAYLOAD_SHARE;
    let (low, high) = handshake_band_ms(bytes);
    for attempt in 1.. {
        let doc = rpm(lab, url);
        let r = &end(&doc)["download"]["responsiveness"];
        let ms = |part: &str| f(&r[part]["trimmed_mean_ms"]);
        let (tcp, tls, http, loaded) = (ms("tcp"), ms("tls"), ms("http"), loaded_ms(&doc));
        let g = f(&end(&doc)["download"]["goodput_bits_per_second"]);
        let lawful = !bands
            || [tcp, tls, http].iter().all(|t| (low..high).contains(t))
                && loaded < loaded_bound_ms(bytes);
        let rate_ok = !goodput || (g / payload - 1.0).abs() < 0.05;
        if (lawful && rate_ok) || g > 1.05 * payload || attempt == 3 {
            return doc;
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let why = match g < CLIENT_BOUND * payload {
            true => "the client was the bottleneck",
            false => "at the shaper's rate, a part outside its band",
        };
        eprintln!(
            "{url} run {attempt}: goodput {:.2} of {:.2} Mbit/s at load {}, TCP {tcp:.1} ms, TLS {tls:.1}, HTTP {http:.1}, loaded {loaded:.1} ms: {why}; again",
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
    let short1 = rpm_through(&lab, &url, SHORT_BYTES, ALL);
    set_queue(&lab, "change", DEEP_BYTES);
    let bands = Claims {
        goodput: false,
        bands: true,
    };
    let deep = rpm_through(&lab, &url, DEEP_BYTES, bands);
    set_queue(&lab, "change", SHORT_BYTES);
    let short2 = rpm_through(&lab, &url, SHORT_BYTES, ALL);
    // nginx has no congestion setting of its own; cubic by its route, as ours is.
    route_congestion(&lab.server, Some("cubic"));
    let nginx = Nginx::start(&lab.server, lab.server_addr, 8443);
    // Its goodput and idle round trip are the claims made of it, not the bands.
    let goodput = Claims {
        goodput: true,
        bands: false,
    };
    let theirs = rpm_through(&lab, &nginx.base, SHORT_BYTES, goodput);

    // 1. A foreign probe's TCP handshake, and its TLS and HTTP round trips, take the base
    //    plus what the queue holds: within `handshake_band_ms` of the planted queue; the
    //    loaded round trip at least the band's floor and at most `loaded_bound_ms` (a self
    //    probe also waits behind its own connection's unsent 5 ms and a chunk, behind a
    //    lost segment's recovery, and behind the client's one thread: 55-110 ms where the
    //    handshake took 30-45 with the short queue, on a machine at load 15). A run the
    //    client could not load (`CLIENT_BOUND`), or one that missed a band, is run again
    //    (`rpm_through`), and named if it fails.
    let runs = [
        ("short", &short1, SHORT_BYTES),
        ("deep", &deep, DEEP_BYTES),
        ("short again", &short2, SHORT_BYTES),
    ];
    for (name, doc, bytes) in runs {
        let r = &end(doc)["download"]["responsiveness"];
        if std::env::var("RPM_DEBUG").is_ok() {
            eprintln!("{}", serde_json::to_string(end(doc)).unwrap());
        }
        let (loaded, drain) = (loaded_ms(doc), drain_ms(bytes));
        let ms = |part: &str| f(&r[part]["trimmed_mean_ms"]);
        let (low, high) = handshake_band_ms(bytes);
        let predicted = 60_000.0 / (BASE_MS + drain);
        eprintln!(
            "{name}: TCP {:.1} ms, TLS {:.1}, HTTP {:.1}, loaded {loaded:.1} (band {low:.1}-{high:.1}: base {BASE_MS} + drain {drain:.0}); RPM {:.0} (foreign {:.0}, predicted {predicted:.0}; self {:.0})",
            ms("tcp"),
            ms("tls"),
            ms("http"),
            f(&r["rpm"]),
            f(&r["foreign_rpm"]),
            f(&r["self_rpm"])
        );
        let g = f(&end(doc)["download"]["goodput_bits_per_second"]);
        let cause = match g < CLIENT_BOUND * RATE_BPS * PAYLOAD_SHARE {
            true => "the client was the bottleneck, not the shaper: a loaded machine",
            false => "at the shaper's rate",
        };
        for part in ["tcp", "tls", "http"] {
            assert!(
                (low..high).contains(&ms(part)),
                "{name}: {part} {:.1} ms outside {low:.1}-{high:.1} (goodput {g:.0}: {cause})",
                ms(part)
            );
        }
        assert!(
            loaded > low && loaded < loaded_bound_ms(bytes),
            "{name}: loaded {loaded:.1} ms outside {low:.1}-{:.0} (goodput {g:.0}: {cause})",
            loaded_bound_ms(bytes)
        );
        for part in ["tcp", "tls", "http", "loaded"] {
            assert!(
                f(&r[part]["count"]) >= 4.0,
                "{name}: {part} has too few samples: {r}"
            );
        }
    }
    // The order is exact: every latency grows with the deep queue and shrinks again, every
    // RPM falls and rises. The foreign RPM falls and rises by at least what the bands
    // allow (the deep band's floor over the short one's ceiling: 91.0 / 45.6 ms, 2.0
    // times). The whole RPM's self part has no such band (`loaded_bound_ms` is loose), so
    // it is held to the same 2 times as measured, not derived (self 57.9 -> 158.3 ms, 2.7
    // times, BENCHMARKS).
    let (low_deep, _) = handshake_band_ms(DEEP_BYTES);
    let (_, high_short) = handshake_band_ms(SHORT_BYTES);
    let rr = |d: &Value| end(d)["download"]["responsiveness"].clone();
    for part in ["tcp", "tls", "http", "loaded"] {
        let at = |d: &Value| f(&rr(d)[part]["trimmed_mean_ms"]);
        assert!(
            at(&short1) < at(&deep) && at(&short2) < at(&deep),
            "{part}: {:.1}, {:.1}, {:.1} ms",
            at(&short1),
            at(&deep),
            at(&short2)
        );
    }
    for (rpm, fall) in [
        ("foreign_rpm", low_deep / high_short),
        ("rpm", 2.0),
        ("self_rpm", 1.0),
    ] {
        let at = |d: &Value| f(&rr(d)[rpm]);
        let (a, b, c) = (at(&short1), at(&deep), at(&short2));
        assert!(
            a > fall * b && c > fall * b,
            "{rpm} {a:.0}, {b:.0}, {c:.0}: fell {:.2} and rose {:.2} times, not {fall:.2}",
            a / b,
            c / b
        );
    }

    // 2. Goodput: the shaper's payload rate, within 5 %, with the short queue (nginx's
    //    too), no run repeated for reading over it. With the deep one the round trip is 130
    //    ms and a 2 s stage's last intervals still hold part of the ramp (17.3 of 19.1
    //    Mbit/s when tried). nginx's sockets used to take the namespace's BBR, which over
    //    this 60 kB queue retransmits ten times what cubic does (500-1,014 segments a run
    //    against 60-88): the final 600 ms window read -12.1 to +12.9 % of the shaper's
    //    rate, 4 runs of 18 outside 5 % (what each loss's hole held came when the
    //    retransmission filled it; the kernel's in-order count alike);
    //    with cubic by its route, -3.0 to +3.9 %, none of 18 (alternating, load 6-10).
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
