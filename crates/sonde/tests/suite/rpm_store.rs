//! `sonde rpm` is a kind like any: its run is a document (`test` "rpm", its section under
//! `end.rpm`) that the store keeps, `results list` and `show` read back, `compare` compares
//! by its metrics and `report` renders; and its certificate check refuses a self-signed
//! endpoint unless `--insecure` says so. Loopback, against `sonde serve --rpm`.

use crate::common;

use common::rpm_end::Endpoint;
use common::{scratch_db, sonde_into, stderr, stdout, Serial};

#[test]
fn an_rpm_run_is_stored_listed_shown_compared_and_reported() {
    let _serial = Serial::take();
    let ep = Endpoint::start(None, "127.0.0.1", &[]);
    let db = scratch_db().with_file_name("rpm-store.db");
    let run = |label: &str| {
        let o = sonde_into(
            &db,
            &[
                "rpm",
                &ep.base,
                "--insecure",
                "--download-only",
                "--interval",
                "100ms",
                "--stage-limit",
                "0.8",
                "--max-connections",
                "2",
                "--label",
                label,
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let text = run("a");
    assert!(
        text.contains("RPM") && text.contains("loaded") && text.contains("tls"),
        "{text}"
    );
    run("b");
    let list = stdout(&sonde_into(&db, &["results", "list"]));
    assert!(list.contains("rpm") && list.contains(" RPM"), "{list}");
    let show = sonde_into(&db, &["results", "show", "1"]);
    let doc: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(doc["test"], "rpm");
    let r = &doc["end"]["rpm"];
    assert!(r["responsiveness"]["rpm"].as_f64().unwrap() > 0.0, "{r}");
    assert_eq!(r["tls_version"], "TLSv1_3");
    assert_eq!(r["insecure"], true);
    assert_eq!(doc["start"]["spec"]["params"]["mnp"], 2);
    let cmp = sonde_into(&db, &["compare", "a", "b", "--json"]);
    assert!(cmp.status.success(), "{}", stderr(&cmp));
    let rows: serde_json::Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let metrics: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["metric"].as_str().unwrap())
        .collect();
    assert!(
        metrics.contains(&"rpm") && metrics.contains(&"download_mbit_per_s"),
        "{metrics:?}"
    );
    let html = db.with_file_name("rpm-report.html");
    let report = sonde_into(&db, &["report", "1", "2", "-o", html.to_str().unwrap()]);
    assert!(report.status.success(), "{}", stderr(&report));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("sonde rpm"), "the report names the run");

    // Without --insecure its self-signed certificate is refused, naming the way out.
    let o = sonde_into(&db, &["rpm", &ep.base, "--no-save"]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("does not verify") && e.contains("--insecure"),
        "{e}"
    );
    assert!(
        ep.fingerprint.as_ref().is_some_and(|f| f.len() == 64),
        "{:?}",
        ep.fingerprint
    );
}
