//! Every run lands in the store; `sonde results` lists, shows, exports and imports them;
//! `sonde compare` tells a real difference from none, and can fail a CI job on a regression.

use crate::common;

use common::*;
use serde_json::Value;

fn sonde<S: AsRef<std::ffi::OsStr>>(db: &std::path::Path, args: &[S]) -> std::process::Output {
    sonde_into(db, args)
}

#[test]
fn runs_are_stored_and_labels_compared() {
    let db = temp_file("store.db");
    let agent = Agent::on_loopback();
    let mut verdicts: Vec<(&str, String)> = Vec::new();
    // Rates 8x apart (not 2x): a run beside other work can fall behind its rate, and one
    // "fast" run at half its 400/s beside "slow" ones at 200/s made the bootstrap's interval
    // span zero (no_significant_change). A fast run must now lose 7/8 of its rate to
    // overlap a slow one, and 800/s keeps most of both CPUs idle in a debug build.
    for (label, rate) in [
        ("slow", "100"),
        ("fast", "800"),
        ("slow", "100"),
        ("fast", "800"),
        ("slow", "100"),
        ("fast", "800"),
    ] {
        let o = sonde(
            &db,
            &agent.short_test("ping", "0.6", &["--rate", rate, "--label", label, "--json"]),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("saved as run"), "{}", stderr(&o));
        let verdict = doc_of(&o)["end"]["limited_by"]["verdict"].clone();
        verdicts.push((label, verdict.as_str().unwrap_or_default().to_string()));
    }
    let o = sonde(
        &db,
        &agent.short_test("ping", "0.3", &["--no-save", "--json"]),
    );
    assert!(!stderr(&o).contains("saved as run"));

    let list = sonde(&db, &["results", "list"]);
    let text = stdout(&list);
    assert_eq!(text.matches("┆ ping ┆").count(), 6, "{text}");
    // A terminal's 100 columns: the command shortened, whole in `results show`.
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        text.contains("┆ sonde ping 127."),
        "the program without its directory: {text}"
    );
    let show = sonde(&db, &["results", "show", "1"]);
    let doc: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(doc["test"], "ping");
    let csv = stdout(&sonde(
        &db,
        &["results", "export", "--format", "csv", "1", "2"],
    ));
    assert!(csv.starts_with("run,test,start_s"), "{csv}");
    assert!(csv.lines().count() >= 3, "{csv}");

    let cmp = sonde(&db, &["compare", "slow", "fast", "--json"]);
    assert!(cmp.status.success(), "{}", stderr(&cmp));
    let rows: serde_json::Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let rate = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "requests_per_second")
        .unwrap();
    assert_eq!(rate["verdict"], "better");
    assert_eq!(rate["aggregate"], "median_of_runs");
    let p99 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == "rtt_p99_us")
        .unwrap();
    assert_eq!(
        p99["aggregate"], "merged_histogram",
        "a P99 of runs is their union's"
    );
    // 700 % when both get their rate. One-sided: a run beside other work may only fall short
    // of its rate, so the change is above 300 % unless the fast runs lost half theirs.
    let change = rate["change_percent"].as_f64().unwrap();
    assert!(change > 300.0, "{change}");
    // Each group is named by the verdict most of its runs carry, said once when both
    // share it. On a quiet machine every run got the rate it asked for (test_rate); beside
    // other work a run can fall short of it and be judged by its CPU (800/s at load 10 did),
    // which is a correct verdict too: so the rows are checked against the runs' own.
    let majority = |label: &str| {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for (_, v) in verdicts.iter().filter(|(l, _)| *l == label) {
            match counts.iter_mut().find(|(c, _)| c == v) {
                Some((_, n)) => *n += 1,
                None => counts.push((v, 1)),
            }
        }
        let (v, n) = counts.into_iter().rev().max_by_key(|(_, n)| *n).unwrap();
        (v.to_string(), n)
    };
    let (slow, fast) = (majority("slow"), majority("fast"));
    let limit = rows.as_array().unwrap().last().unwrap();
    assert_eq!(limit["metric"], "limited_by", "{rows}");
    for (side, (v, n)) in [("a", &slow), ("b", &fast)] {
        assert_eq!(
            (
                &limit[side]["verdict"],
                &limit[side]["runs"],
                &limit[side]["of"]
            ),
            (&Value::from(v.as_str()), &Value::from(*n), &Value::from(3)),
            "{limit} against the runs' {verdicts:?}"
        );
    }
    assert_eq!(limit["moved"], slow.0 != fast.0, "{limit}");
    // The other way round it is a regression; --fail-if-worse turns that into exit 4.
    let o = sonde(&db, &["compare", "fast", "slow", "--fail-if-worse", "5%"]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    assert!(stdout(&o).contains("WORSE"));
    let said = match (slow.0 == fast.0, slow.1 == 3 && fast.1 == 3) {
        (true, true) => format!("limited by: {} in both\n", slow.0),
        (false, true) => format!("limited by: {} -> {}\n", fast.0, slow.0),
        _ => "limited by: ".to_string(),
    };
    assert!(stdout(&o).contains(&said), "{said}: {}", stdout(&o));
    let o = sonde(&db, &["compare", "slow", "slow", "--fail-if-worse", "5%"]);
    assert_eq!(o.status.code(), Some(0));
    let o = sonde(&db, &["compare", "slow", "nosuchlabel"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no runs labelled 'nosuchlabel'"),
        "{}",
        stderr(&o)
    );

    // A document written with --output can be imported.
    let file = temp_file("doc.json");
    std::fs::write(&file, &show.stdout).unwrap();
    let o = sonde(
        &db,
        &[
            "results",
            "import",
            "--label",
            "imported",
            file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&sonde(&db, &["results", "list", "--label", "imported"])).contains("imported"));
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(&db);
}

#[test]
fn json_stream_completions_and_man_page() {
    let agent = Agent::on_loopback();
    let o = run({
        let mut c = sonde_cmd();
        c.args(agent.short_test("ping", "1", &["-i", "0.5", "--json-stream", "--no-save"]));
        c
    });
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "two intervals, then the end");
    assert_eq!(lines[0]["event"], "interval");
    assert!(lines[0]["client"]["latency_ns"]["p50"].as_u64().unwrap() > 0);
    assert_eq!(lines[2]["event"], "end");
    assert_eq!(lines[2]["document"]["test"], "ping");
    let bash = run({
        let mut c = sonde_cmd();
        c.args(["completions", "bash"]);
        c
    });
    assert!(stdout(&bash).contains("_sonde()"), "{}", stdout(&bash));
    let man = run({
        let mut c = sonde_cmd();
        c.arg("man");
        c
    });
    assert!(
        stdout(&man).starts_with(".ie") || stdout(&man).contains(".TH sonde"),
        "{}",
        &stdout(&man)[..200.min(stdout(&man).len())]
    );
}

#[test]
fn a_suite_stores_every_run_and_resumes_after_an_interruption() {
    let db = temp_file("suite.db");
    let agent = Agent::on_loopback();
    let file = temp_file("suite.toml");
    std::fs::write(
        &file,
        format!(
            "label = \"suite-test\"\nagents = [\"127.0.0.1\"]\nport = {}\nrepetitions = 2\n[[test]]\ntype = \"ping\"\nrate = [200, 400]\nduration = \"0.5\"\nwarmup = \"0.1\"\n",
            agent.port
        ),
    )
    .unwrap();
    let mut child = sonde_cmd()
        .args([
            "suite",
            file.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ])
        .spawn_keeping(Keep::Stdout);
    std::thread::sleep(std::time::Duration::from_millis(1300));
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = wait_with_timeout(&mut child, std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(status.code(), Some(3));
    let count = |db: &std::path::Path| {
        stdout(&sonde(db, &["results", "list", "--label", "suite-test"]))
            .matches("┆ ping ┆")
            .count()
    };
    let first = count(&db);
    assert!(
        (1..4).contains(&first),
        "{first} runs stored before the interruption"
    );
    let o = sonde(
        &db,
        &[
            "suite",
            file.to_str().unwrap(),
            "--resume",
            "--db",
            db.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(&format!("{first} already stored")),
        "{}",
        stdout(&o)
    );
    assert_eq!(count(&db), 4);
    // Bad files name the line and key.
    std::fs::write(
        &file,
        "label = \"x\"\nagents = [\"127.0.0.1\"]\n[[test]]\ntype = \"ping\"\nwindow = 0\n",
    )
    .unwrap();
    let o = sonde(&db, &["suite", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(":5: key 'window'"), "{}", stderr(&o));
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(db);
}
