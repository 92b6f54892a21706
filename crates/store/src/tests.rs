use super::*;
use sonde_results::document::Inputs;
use sonde_results::{HostInfo, Role, SideResult, StreamSpec, TestSpec};

fn doc(command: &str) -> Document {
    let spec = TestSpec::Stream(StreamSpec::default());
    let side = SideResult::new(Role::Client, HostInfo::default(), 1.0, (1, None), vec![]);
    Document::build(Inputs {
        server_command: Some("sonde serve".into()),
        server_address: "198.18.0.2:5301".into(),
        started_at: "2026-11-22T00:00:00Z".into(),
        software: "sonde test".into(),
        server: Some(&side),
        ..Inputs::new(&spec, command, &side)
    })
}

/// A scratch database path; the file and SQLite's -wal and -shm beside it are removed
/// when dropped, also when the test fails.
struct TempDb(std::path::PathBuf);

impl std::ops::Deref for TempDb {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDb {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

fn temp_db(name: &str) -> TempDb {
    let p = std::env::temp_dir().join(format!("sonde-store-{}-{name}.db", std::process::id()));
    let _ = std::fs::remove_file(&p);
    TempDb(p)
}

#[test]
fn round_trip_with_labels() {
    let path = temp_db("rt");
    let s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let a = s.save(&doc("sonde stream a"), Some("an-on")).unwrap();
    let b = s.save(&doc("sonde stream b"), Some("an-off")).unwrap();
    let all = s.list(None).unwrap();
    assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), vec![b, a]);
    let on = s.list(Some("an-on")).unwrap();
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].document, doc("sonde stream a"));
    assert_eq!(on[0].label.as_deref(), Some("an-on"));
    assert_eq!(s.get(b).unwrap().command, "sonde stream b");
    assert!(matches!(s.get(999), Err(StoreError::NoSuchRun(999))));
    assert!(!s.has_suite_item("suite#0").unwrap());
    s.save_for_suite(&doc("sonde stream c"), Some("an-on"), Some("suite#0"))
        .unwrap();
    assert!(s.has_suite_item("suite#0").unwrap());
}

#[test]
fn runs_are_named_by_label_or_id() {
    let path = temp_db("named");
    let s = Store::open(&path).unwrap();
    let a = s.save(&doc("sonde stream a"), Some("base")).unwrap();
    assert_eq!(s.named("base").unwrap()[0].id, a);
    assert_eq!(s.named(&a.to_string()).unwrap()[0].id, a);
    let e = s.named("nope").unwrap_err();
    assert_eq!(
        e.to_string(),
        "no runs labelled 'nope' (and it is not a run id)"
    );
    assert!(matches!(s.named("999"), Err(StoreError::NoSuchRun(999))));
    assert_eq!(default_path(Some(Path::new("/x.db"))), Path::new("/x.db"));
}

#[test]
fn an_older_schema_is_migrated_and_its_runs_kept() {
    let path = temp_db("mig");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        let json = serde_json::to_string(&doc("sonde stream old")).unwrap();
        c.execute("INSERT INTO runs (test, started_at, command, document) VALUES ('stream', 'x', 'sonde stream old', ?1)", params![json]).unwrap();
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let runs = s.list(None).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].label, None);
    assert_eq!(runs[0].command, "sonde stream old");
    s.save(&doc("new"), Some("l")).unwrap();
    assert_eq!(s.list(Some("l")).unwrap().len(), 1);
    drop(s);
    let c = Connection::open(&path).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::TooNew { found: 99, .. })
    ));
}

#[test]
fn concurrent_writers_do_not_corrupt_the_store() {
    let path = temp_db("conc");
    Store::open(&path).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let path = path.0.clone();
            std::thread::spawn(move || {
                let s = Store::open(&path).unwrap();
                (0..50)
                    .map(|i| {
                        s.save(&doc(&format!("w{w} r{i}")), Some(&format!("w{w}")))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<i64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    let s = Store::open(&path).unwrap();
    let runs = s.list(None).unwrap();
    assert_eq!(runs.len(), 200);
    for w in 0..4 {
        assert_eq!(s.list(Some(&format!("w{w}"))).unwrap().len(), 50);
    }
    let ok: String = s
        .conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[test]
fn a_latency_histogram_round_trips_through_the_store() {
    use sonde_results::document::{IntervalFigures, IntervalSection, RrEnd, RrInterval, Section};
    use sonde_results::latency::{merged, new_histogram};
    use sonde_results::LatencySummary;
    let path = temp_db("hist");
    let s = Store::open(&path).unwrap();
    let mut d = doc("sonde ping");
    let mut window = new_histogram();
    for k in 0..3u64 {
        let mut h = new_histogram();
        for i in 0..5_000u64 {
            h.record(40_000 + (i * 7919 + k * 13) % 60_000).unwrap();
        }
        window.add(&h).unwrap();
        d.intervals.push(IntervalFigures {
            section: IntervalSection::Rr(RrInterval {
                latency_ns: LatencySummary::of(&h),
                ..Default::default()
            }),
            ..IntervalFigures::span(k as f64, k as f64 + 1.0)
        });
    }
    // A ping's document: its section holds the round trips.
    d.test = sonde_results::spec::TestName::Ping;
    d.start.spec = TestSpec::Ping(Default::default());
    d.end.section = Section::Rr(RrEnd {
        latency_ns: LatencySummary::of(&window),
        ..Default::default()
    });
    let id = s.save(&d, None).unwrap();
    let back = s.get(id).unwrap().document;
    assert_eq!(back, d);
    let stored = back.end.rr().unwrap().latency_ns.as_ref().unwrap();
    assert_eq!(stored.distribution().unwrap().unwrap(), window);
    let intervals = merged(
        back.intervals
            .iter()
            .filter_map(|i| i.rr()?.latency_ns.as_ref()),
    );
    assert_eq!(
        intervals.unwrap().unwrap(),
        window,
        "the intervals add up to the window"
    );
}
