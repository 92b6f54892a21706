//! `sonde report`: a well-formed, self-contained HTML page with every section, that a real
//! browser (headless Chromium) renders to a non-blank screenshot; and its Markdown twin.

mod common;

use std::process::Command;

use common::*;

fn sonde<S: AsRef<std::ffi::OsStr>>(db: &std::path::Path, args: &[S]) -> std::process::Output {
    sonde_into(db, args)
}

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

#[test]
fn html_report_is_well_formed_complete_and_renders() {
    let db = temp_file("report.db");
    let agent = Agent::on_loopback();
    for (label, rate) in [("a", "300"), ("b", "600"), ("a", "300"), ("b", "600")] {
        let o = sonde(
            &db,
            &agent.short_test(
                "ping",
                "1",
                &["--rate", rate, "-i", "0.5", "--label", label, "--json"],
            ),
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
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
    // Well-formed: every tag closed, as XML.
    let mut reader = quick_xml::Reader::from_str(text.trim_start_matches("<!DOCTYPE html>\n"));
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
        }
    }
    for id in [
        "summary",
        "environment",
        "tests",
        "timeseries",
        "latency",
        "comparison",
    ] {
        assert!(
            text.contains(&format!("<section id=\"{id}\">")),
            "section {id} missing"
        );
    }
    assert!(text.matches("<svg").count() >= 6, "charts missing");
    assert!(text.contains("requests_per_second"));
    assert!(
        !text.contains("src=\"http") && !text.contains("href=\"http"),
        "the page loads nothing"
    );
    let md = temp_file("report.md");
    let o = sonde(&db, &["report", "a", "b", "-o", md.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mdt = std::fs::read_to_string(&md).unwrap();
    for h in [
        "## Purpose and summary",
        "## Environment",
        "## Test description",
        "## Time series",
        "## Latency percentiles",
        "## Comparison",
    ] {
        assert!(mdt.contains(h), "{h} missing");
    }
    let o = sonde(&db, &["report", "a", "-o", "/tmp/report.pdf"]);
    assert_eq!(o.status.code(), Some(1));

    let Some(browser) = chromium() else {
        need_tools(&["chromium"]);
        return;
    };
    let shot = temp_file("report.png");
    let profile = temp_file("chromium-profile");
    let o = run({
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
            "--window-size=1100,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()));
        c
    });
    assert!(shot.exists(), "no screenshot: {}", stderr(&o));
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = &buf[..info.buffer_size()];
    let bpp = info.color_type.samples();
    let mut colors = std::collections::HashSet::new();
    for p in px.chunks(bpp).step_by(97) {
        colors.insert(p.to_vec());
    }
    assert!(
        colors.len() > 20,
        "the screenshot is blank ({} colours)",
        colors.len()
    );
    for f in [&html, &md, &shot, &db] {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_dir_all(profile);
}
