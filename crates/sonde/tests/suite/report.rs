//! `sonde report`: a well-formed, self-contained HTML page in the published layouts, with
//! every section, that a real browser (headless Chromium) renders at a 1000 px and a
//! 1600 px page width; a `--stages` run's section laid out at 1280 px; its Markdown twin with the same tables; and the runs' histograms,
//! exported as an HdrHistogram interval log, read back by HdrHistogram's own Python
//! implementation to the same distribution.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn sonde<S: AsRef<std::ffi::OsStr>>(db: &Path, args: &[S]) -> std::process::Output {
    sonde_into(db, args)
}

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Four pings, two labels, at 1,000 and 800 requests/s for 2 s: about 2,000 and 1,600
/// round trips each (a rate a debug build meets with most of both CPUs idle, so that the
/// verdict is the rate asked for, not a CPU that other work shares). Returns the store, made once: the tests given it only read it (it
/// goes with the scratch directory at exit).
fn four_pings() -> PathBuf {
    static DB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let db = DB.get_or_init(|| {
        let db = temp_file("report.db");
        let agent = Agent::on_loopback();
        for (label, rate) in [("a", "1000"), ("b", "800"), ("a", "1000"), ("b", "800")] {
            // Without stages: a paced ping is then judged by its rate (with stages, the
            // default, by the stage that holds its round trip).
            let args = [
                "--rate", rate, "-i", "0.5", "--label", label, "--stages", "off", "--json",
            ];
            let o = sonde(&db, &agent.short_test("ping", "2", &args));
            assert!(o.status.success(), "{}", stderr(&o));
        }
        db
    });
    db.clone()
}

/// The text of `<section id="ID">` … `</section>`.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<section id=\"{id}\">"))
        .unwrap_or_else(|| panic!("section {id} missing"));
    let end = html[start..].find("</section>").unwrap() + start;
    &html[start..end]
}

fn assert_well_formed(text: &str) {
    let mut reader = quick_xml::Reader::from_str(text.trim_start_matches("<!DOCTYPE html>\n"));
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
        }
    }
}

/// Headless Chromium with a throwaway profile, loading nothing but the page.
fn headless(browser: &str, profile: &Path, width: u32) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--window-size={width},3000"))
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// How wide the laid-out page is in a `width` px window.
/// What the JavaScript expression `expr` (a whole number) is in the page laid out in a
/// `width` px window: a copy of it, with a script the report itself does not have, writes
/// it into the DOM Chromium dumps.
fn laid_out(browser: &str, html: &Path, width: u32, expr: &str) -> u64 {
    render(browser, html, width, expr, None)
}

/// `laid_out`, and with `shot` a screenshot of the same page in the same launch (a launch
/// takes 3-5 s of both CPUs here; the script only sets an attribute, which draws nothing).
fn render(browser: &str, html: &Path, width: u32, expr: &str, shot: Option<&Path>) -> u64 {
    let probe = temp_file("probe.html");
    let profile = temp_file("chromium-profile");
    let script =
        format!("<script>document.body.setAttribute('data-width', {expr})</script></body>");
    let text = std::fs::read_to_string(html)
        .unwrap()
        .replace("</body>", &script);
    std::fs::write(&probe, text).unwrap();
    // A browser takes both CPUs for a second: never beside another test's timed pings.
    let _quiet = Serial::take();
    let o = run({
        let mut c = headless(browser, &profile, width);
        c.arg("--dump-dom");
        if let Some(shot) = shot {
            c.arg(format!("--screenshot={}", shot.display()));
        }
        c.arg(format!("file://{}", probe.display()));
        c
    });
    let dom = stdout(&o);
    let _ = std::fs::remove_file(probe);
    let _ = std::fs::remove_dir_all(profile);
    let at = dom
        .find("data-width=\"")
        .unwrap_or_else(|| panic!("no width: {}", stderr(&o)));
    dom[at + 12..].split('"').next().unwrap().parse().unwrap()
}

/// A screenshot of `html` at `width` px, which must not be blank, of a page no wider than
/// the window (wide tables scroll in their own box).
fn screenshot(browser: &str, html: &Path, width: u32) {
    let shot = temp_file(&format!("report-{width}.png"));
    let scroll = "document.documentElement.scrollWidth";
    let laid_out = render(browser, html, width, scroll, Some(&shot));
    assert!(
        laid_out <= width as u64,
        "the page is {laid_out} px wide in a {width} px window"
    );
    assert!(shot.exists(), "no screenshot at {width} px");
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.color_type.samples();
    let colors: std::collections::HashSet<&[u8]> =
        buf[..info.buffer_size()].chunks(bpp).step_by(97).collect();
    assert!(
        colors.len() > 20,
        "blank at {width} px ({} colours)",
        colors.len()
    );
    let _ = std::fs::remove_file(shot);
}

/// Whether `text` holds a snake_case name (`rtt_p50_us`).
fn has_snake_case(text: &str) -> Option<&str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|w| {
            let parts: Vec<&str> = w.split('_').collect();
            parts.len() > 1 && parts.iter().all(|p| !p.is_empty())
        })
}

#[test]
fn html_report_is_published_layout_well_formed_and_renders_at_two_widths() {
    let db = four_pings();
    let html = temp_file("report.html");
    let o = sonde(
        &db,
        &[
            "report",
            "a",
            "b",
            "-o",
            html.to_str().unwrap(),
            "--title",
            "A against B",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&text);
    assert!(
        !text.contains("src=\"http") && !text.contains("href=\"http") && !text.contains("<link"),
        "the page loads nothing"
    );
    // The summary reads as a person writes: figures by name, with units, 3 digits.
    let summary = section(&text, "summary");
    assert_eq!(has_snake_case(summary), None, "snake_case in the summary");
    for t in ["RTT P50", "Request rate", "requests/s", "µs", "(client)"] {
        assert!(summary.contains(t), "{t} missing from the summary");
    }
    // Each run named by its configuration (what differs from the defaults) and label, a
    // row each, its figures as columns; the store's ids only tell repeats apart.
    for (label, rate) in [("a", "1000"), ("b", "800")] {
        let name = format!("ping --rate {rate} ({label}) #");
        assert_eq!(
            summary.matches(&name).count(),
            2,
            "{name} missing: {summary}"
        );
    }
    assert!(!summary.contains(">run "), "a run named by its store id");
    assert!(
        summary.contains("with b against a"),
        "the A/B sentence leads"
    );
    // The environment like lscpu and cpu-layout; both invocations; msg_gen's table.
    let env = section(&text, "environment");
    for t in [
        "Model name",
        "Thread(s) per core",
        "NUMA node0 CPU(s)",
        "CPU layout",
        "Driver",
    ] {
        assert!(env.contains(t), "{t} missing from the environment");
    }
    let tests = section(&text, "tests");
    assert!(tests.contains("controller: <code>") && tests.contains("agent at 127.0.0.1:"));
    let results = section(&text, "results");
    for t in [
        "Requests/s",
        "P50 µs",
        "P99 µs",
        "P99.9 µs",
        "P99.99 µs",
        "Samples",
    ] {
        assert!(
            results.contains(&format!(">{t}<")),
            "{t} missing from the results"
        );
    }
    // What limited each run: a row per run, with its verdict or why it has none.
    let limits = section(&text, "limits");
    assert_eq!(
        limits.matches("<tr><td>ping --rate ").count(),
        4,
        "a row per run: {limits}"
    );
    // A ping at its --rate ran at the rate it asked for; its round trip allowed more.
    assert_eq!(
        limits
            .matches("<td>the test&#39;s own rate (test_rate), strength")
            .count(),
        4,
        "{limits}"
    );
    // The percentile plot draws every bucket of a 2,000-sample run, ticked as percentiles.
    let latency = section(&text, "latency");
    for t in ["50 %", "90 %", "99 %", "99.9 %"] {
        assert!(latency.contains(&format!(">\n{t}\n<")), "tick {t} missing");
    }
    // The first run's line: the first polyline in the first ink (the axes are 1 px wide).
    let points = latency
        .split("stroke=\"#000000\" stroke-width=\"2\" points=\"")
        .nth(1)
        .expect("the first run's line in the percentile plot")
        .split('"')
        .next()
        .unwrap()
        .split_whitespace()
        .count();
    assert!(
        points >= 50,
        "{points} points in the first run's percentile line"
    );
    let comparison = section(&text, "comparison");
    assert!(
        comparison.contains("merged histogram"),
        "compare says how it merged"
    );
    assert!(comparison.contains("95 % CI"));
    assert!(
        comparison.contains("<p>limited by: "),
        "what limited each group"
    );

    let md = temp_file("report.md");
    let o = sonde(&db, &["report", "a", "b", "-o", md.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mdt = std::fs::read_to_string(&md).unwrap();
    for h in [
        "## Purpose and summary",
        "## Environment",
        "## Test description",
        "## Results",
        "## Time series",
        "## Latency percentiles",
        "## What limited each run",
        "## Comparison",
        "| Run | RTT P50 µs (client) | RTT P99 µs (client) | RTT P99.9 µs (client) | Request rate requests/s (client) |",
        "| Run | Test | Requests/s | P50 µs | P90 µs | P99 µs |",
        "| Model name |",
    ] {
        assert!(mdt.contains(h), "{h} missing from the Markdown");
    }
    let o = sonde(&db, &["report", "a", "-o", "/tmp/report.pdf"]);
    assert_eq!(o.status.code(), Some(1));

    if let Some(browser) = chromium() {
        screenshot(browser, &html, 1000);
        screenshot(browser, &html, 1600);
    } else {
        need_tools(&["chromium"]);
    }
    for f in [&html, &md] {
        let _ = std::fs::remove_file(f);
    }
}

/// The result documents of every kind of test, as the previous build wrote them.
const EVERY_KIND: [(&str, &str); 6] = [
    ("v1-stream.json", "TCP stream"),
    ("v1-ping-udp.json", "Ping"),
    ("v1-rpc.json", "Request/response (rpc)"),
    ("v1-pps.json", "UDP packet rate (pps)"),
    ("v1-load.json", "Latency under load"),
    ("v1-watch.json", "Watched commands"),
];

#[test]
fn the_summary_has_a_table_per_kind_and_fits_a_1280_px_page() {
    let db = temp_file("kinds.db");
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../results/tests/fixtures");
    let files: Vec<String> = EVERY_KIND
        .iter()
        .map(|(f, _)| format!("{fixtures}/{f}"))
        .collect();
    let mut args = vec!["results", "import", "--label", "kinds"];
    args.extend(files.iter().map(String::as_str));
    let o = sonde(&db, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = temp_file("kinds.html");
    let o = sonde(&db, &["report", "kinds", "-o", html.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&text);
    let summary = section(&text, "summary");
    // One table per kind, in order, each with the kind's own columns and its one run.
    let tables: Vec<&str> = summary.split("<p class=\"caption\">").skip(1).collect();
    let captions: Vec<&str> = tables
        .iter()
        .map(|t| t.split(':').next().unwrap())
        .collect();
    let kinds: Vec<&str> = EVERY_KIND.iter().map(|k| k.1).collect();
    assert_eq!(captions, kinds, "{summary}");
    let columns = |t: &str| t.matches("</th>").count();
    for (t, kind) in tables.iter().zip(&kinds) {
        assert_eq!(t.matches("<tr><td>").count(), 1, "{kind}: one run: {t}");
        assert!(!t.contains(">-</td>"), "{kind}: an empty column: {t}");
    }
    let heads = |t: &str| -> Vec<String> {
        let cells = t.split("</th>").collect::<Vec<_>>();
        let cells = &cells[..cells.len() - 1];
        cells
            .iter()
            .map(|c| c.rsplit('>').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        heads(tables[1]),
        [
            "Run",
            "RTT P50 µs (client)",
            "RTT P99 µs (client)",
            "RTT P99.9 µs (client)",
            "Request rate requests/s (client)",
            "Client CPU per message µs (client)",
            "Status"
        ]
    );
    assert!(
        heads(tables[4])
            .iter()
            .all(|h| h == "Run" || h == "Status" || h.contains("added by")),
        "{:?}",
        heads(tables[4])
    );
    assert_eq!(columns(tables[5]), 2, "a watch has no headline figure");
    let Some(browser) = chromium() else {
        need_tools(&["chromium"]);
        return;
    };
    // At 1280 px no summary table scrolls in its box, and the page is no wider.
    let overflow = "Math.max(0, ...Array.from(document.querySelectorAll('#summary div.table'), d => d.scrollWidth - d.clientWidth))";
    assert_eq!(
        laid_out(browser, &html, 1280, overflow),
        0,
        "a summary table scrolls"
    );
    screenshot(browser, &html, 1280);
    for f in [&html, &db] {
        let _ = std::fs::remove_file(f);
    }
}

/// A ping with `--stages` and one without against a loopback agent: the report's stages
/// section names the plain one, has both charts and every stage, and at 1280 px its charts
/// are laid out (not empty) and nothing in it runs over the page or scrolls.
#[test]
fn a_stages_run_shows_where_the_time_went_and_fits_1280_px() {
    let db = temp_file("stages.db");
    {
        let agent = Agent::on_loopback();
        for extra in [
            &["--stages", "all", "--json"][..],
            &["--stages", "off", "--json"],
        ] {
            let o = sonde(&db, &agent.short_test("ping", "1", extra));
            assert!(o.status.success(), "{}", stderr(&o));
        }
    }
    let (html, md) = (temp_file("stages.html"), temp_file("stages.md"));
    for out in [&html, &md] {
        let o = sonde(&db, &["report", "1", "2", "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let text = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&text);
    let stages = section(&text, "stages");
    assert!(stages.contains("<h2>Where the round trip's time went</h2>"));
    assert!(
        stages.contains("<p>Not split into stages (no --stages): ping.</p>"),
        "{stages}"
    );
    assert!(stages.contains("percentile&apos;s composition by stage"));
    assert!(stages.contains("ping --stages all: each stage by percentile"));
    assert_eq!(stages.matches("<figure>").count(), 2, "{stages}");
    for label in [
        "client send stack",
        "client qdisc+driver",
        "outside the hosts",
        "server receive wake-up",
        "server turnaround",
        "server send stack",
        "client receive wake-up",
    ] {
        // A row of the table; in the stacked chart's legend and the CDF's.
        assert_eq!(stages.matches(&format!("<td>{label}</td>")).count(), 1);
        let legends = stages.matches(&format!("</svg> {label}</li>")).count();
        assert_eq!(legends, 2, "{label}: {stages}");
    }
    let mdt = std::fs::read_to_string(&md).unwrap();
    for t in [
        "## Where the round trip's time went",
        "| Stage | Measured on | Mean µs | Share of summed means | P50 µs | P99 µs | P99.9 µs |",
        "| ping --stages all | P50 |",
        "| client send stack | client |",
    ] {
        assert!(mdt.contains(t), "{t} missing from the Markdown: {mdt}");
    }
    let Some(browser) = chromium() else {
        need_tools(&["chromium"]);
        return;
    };
    // One browser run: the charts laid out at a readable size, times a million, plus by
    // how many px the widest box in the section scrolls or runs past it or the page's.
    let drawn = "Array.from(document.querySelectorAll('#stages figure > svg')).filter(s => s.getBoundingClientRect().width > 300 && s.getBoundingClientRect().height > 100).length";
    let over = "Math.max(0, document.documentElement.scrollWidth - document.documentElement.clientWidth, ...Array.from(document.querySelectorAll('#stages div.table'), d => d.scrollWidth - d.clientWidth), ...Array.from(document.querySelectorAll('#stages *'), e => Math.ceil(e.getBoundingClientRect().right - document.getElementById('stages').getBoundingClientRect().right)))";
    let both = format!("({drawn}) * 1000000 + Math.min(999999, {over})");
    let v = laid_out(browser, &html, 1280, &both);
    assert_eq!(
        (v / 1_000_000, v % 1_000_000),
        (2, 0),
        "(charts drawn, px over)"
    );
    for f in [&html, &md, &db] {
        let _ = std::fs::remove_file(f);
    }
}

/// Python's HdrHistogram (`hdrh`), if installed.
fn python_hdrh() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import hdrh.log"])
        .output()
        .is_ok_and(|o| o.status.success());
    common::skip_unless(
        "python3 with hdrhistogram (pip)",
        (!ok).then(|| "import hdrh failed".into()),
    )
}

#[test]
fn the_histogram_log_reads_back_in_hdrhistogram_to_the_merged_runs() {
    if !python_hdrh() {
        return;
    }
    let db = four_pings();
    let o = sonde(&db, &["results", "export", "--format", "hdr-log"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = temp_file("runs.hlog");
    std::fs::write(&log, &o.stdout).unwrap();
    let text = stdout(&o);
    assert!(
        text.contains("#[StartTime: ") && text.contains("Tag=run-1,"),
        "{text}"
    );
    // HdrHistogram_py adds every interval of the log; sonde merges the runs' window
    // histograms: the same distribution, to the bucket.
    let py = "import sys\nfrom hdrh.log import HistogramLogReader\nfrom hdrh.histogram import HdrHistogram\n\
total = HdrHistogram(1, 60000000000, 3)\nr = HistogramLogReader(sys.argv[1], total)\n\
while True:\n    h = r.get_next_interval_histogram()\n    if h is None: break\n    total.add(h)\n\
for v in total.get_recorded_iterator():\n    print(v.value_iterated_to, v.count_at_value_iterated_to)\n";
    let out = run({
        let mut c = Command::new("python3");
        c.args(["-c", py]).arg(&log);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    let theirs: Vec<(u64, u64)> = stdout(&out)
        .lines()
        .map(|l| {
            let (v, c) = l.split_once(' ').unwrap();
            (v.parse().unwrap(), c.parse().unwrap())
        })
        .collect();
    let show: Vec<serde_json::Value> = (1..=4)
        .map(|id| doc_of(&sonde(&db, &["results", "show", &id.to_string()])))
        .collect();
    let windows: Vec<sonde_results::LatencySummary> = show
        .iter()
        .map(|d| serde_json::from_value(d["end"]["latency_ns"].clone()).unwrap())
        .collect();
    let merged = sonde_results::latency::merged(&windows).unwrap().unwrap();
    // Bucket by bucket (each tool ranks percentiles its own way: Python rounds the rank,
    // Rust takes its ceiling, so their P99s may differ by a bucket on the same data).
    let ours: Vec<(u64, u64)> = merged
        .iter_recorded()
        .map(|v| {
            (
                merged.highest_equivalent(v.value_iterated_to()),
                v.count_at_value(),
            )
        })
        .collect();
    assert!(ours.len() > 50, "{} buckets", ours.len());
    assert_eq!(theirs, ours, "every bucket of the four windows");
    let o = sonde(&db, &["results", "export", "--format", "hdr-log", "999"]);
    assert_eq!(o.status.code(), Some(1), "an unknown run is an error");
    let _ = std::fs::remove_file(log);
}
