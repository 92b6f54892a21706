//! Ctrl-C and SIGTERM on the responsiveness test's two sides: `sonde rpm URL` cut by
//! SIGINT stops within a look of its stop flag and keeps what it measured (stored, printed,
//! marked partial, exit 3), and `serve --rpm` stops on SIGTERM and on SIGINT while a client
//! holds a large download, exit 0, as `serve`'s other services do. Loopback, h2c.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::rpm_end::Endpoint;
use common::{scratch_db, sonde_cmd, sonde_into, stdout, Serial};

fn signal(child: &Child, sig: i32) {
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Waits for `child` at most `limit`: its exit status and how long after `from`.
fn wait(child: &mut Child, from: Instant, limit: Duration) -> (std::process::ExitStatus, Duration) {
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st, from.elapsed());
        }
        if from.elapsed() > limit {
            let _ = child.kill();
            panic!("still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_during_sonde_rpm_keeps_what_was_measured_marked_partial() {
    let _serial = Serial::take();
    let ep = Endpoint::start(None, "127.0.0.1", &["--rpm-h2c"]);
    let db = scratch_db().with_file_name("rpm-signals.db");
    // A stage of at most 30 s that cannot settle before 64 intervals (12.8 s; on a quiet
    // machine MAD 4 settled loopback's within 2.5 s): only the signal ends it in time.
    let mut child = sonde_cmd()
        .env("SONDE_DB", &db)
        .args(["rpm", &ep.base, "--download-only", "--json"])
        .args(["--interval", "200ms", "--stage-limit", "30", "--mad", "64"])
        .args(["--max-connections", "2", "--max-probes", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let sent = Instant::now();
    signal(&child, libc::SIGINT);
    let (status, after) = wait(&mut child, sent, Duration::from_secs(5));
    let out = child.wait_with_output().unwrap();
    eprintln!("sonde rpm stopped {after:?} after SIGINT, {status}");
    assert_eq!(
        status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(after < Duration::from_secs(1), "{after:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["end"]["partial"], true, "{doc}");
    let r = &doc["end"]["rpm"];
    assert_eq!(r["idle"]["count"], 20, "{r}");
    let intervals = r["download"]["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 3, "{r}");
    assert!(
        r["download"]["duration_ms"].as_u64().unwrap() < 5_000,
        "{r}"
    );
    // Stored as it was printed, partial.
    let show = sonde_into(&db, &["results", "show", "1"]);
    let stored: serde_json::Value = serde_json::from_str(&stdout(&show)).unwrap();
    assert_eq!(stored["end"]["partial"], true);
    assert_eq!(stored["end"]["rpm"]["download"], r["download"]);
}

#[test]
fn serve_rpm_stops_on_sigterm_and_sigint_while_a_download_is_held() {
    let _serial = Serial::take();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut ep = Endpoint::start(None, "127.0.0.1", &["--rpm-h2c"]);
        // A raw client holds a large download, reading nothing.
        let mut a = common::h2_raw::Attacker::connect(
            format!("127.0.0.1:{}", ep.port()).parse().unwrap(),
            &[],
            true,
        );
        let block = common::h2_raw::request_block(false, "/large");
        assert!(a.send(&common::h2_raw::frame(
            common::h2_raw::HEADERS,
            common::h2_raw::END_HEADERS | common::h2_raw::END_STREAM,
            1,
            &block
        )));
        let t0 = Instant::now();
        while a.seen.data_bytes.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(3), "no download");
            std::thread::sleep(Duration::from_millis(10));
        }
        let sent = Instant::now();
        signal(&ep.child, sig);
        let (status, after) = wait(&mut ep.child, sent, Duration::from_secs(3));
        eprintln!("serve --rpm stopped {after:?} after signal {sig}: {status}");
        assert!(status.success(), "signal {sig}: {status}: {}", ep.log());
        assert!(after < Duration::from_secs(1), "{after:?}");
        // Its connection went with it.
        assert!(a.wait_cut(Duration::from_secs(5)).is_some());
    }
}
