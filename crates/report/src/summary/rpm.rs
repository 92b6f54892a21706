//! A responsiveness run's heading and summary: the RPM with its foreign and self parts,
//! each component with its count, each direction's goodput and the draft's confidence.

use sonde_results::document::End;
use sonde_results::rpm::{Component, Responsiveness, RpmDirection, RpmEnd};
use sonde_results::spec::RpmSpec;
use sonde_results::Document;

/// `sonde rpm: https://host/.well-known/nq, download and upload, interval 5 s, MAD 4`.
pub fn rpm_heading(s: &RpmSpec) -> String {
    let ways = match (s.download, s.upload) {
        (true, true) => "download then upload",
        (true, false) => "download",
        _ => "upload",
    };
    format!(
        "sonde rpm: {}, {ways}, interval {:.2} s, MAD {}, at most {} connections{}",
        s.url,
        s.params.interval_ms as f64 / 1e3,
        s.params.mad,
        s.params.mnp,
        if s.insecure {
            ", certificate not verified"
        } else {
            ""
        }
    )
}

/// The run's figure in `sonde results list`.
pub fn listed(end: &End) -> String {
    match end.rpm().and_then(|r| r.responsiveness.as_ref()) {
        Some(r) => format!("{:.0} RPM", r.rpm),
        None => "-".into(),
    }
}

fn component(name: &str, c: &Component) -> String {
    format!(
        "  {name:<8} {:>9.2} ms  ({} samples, {} kept)\n",
        c.trimmed_mean_ms, c.count, c.kept
    )
}

fn parts(r: &Responsiveness) -> String {
    let mut s = format!(
        "  RPM {:.0} (foreign {:.0}, self {:.0})\n",
        r.rpm, r.foreign_rpm, r.self_rpm
    );
    s += &component("tcp", &r.tcp);
    if let Some(t) = &r.tls {
        s += &component("tls", t);
    }
    s += &component("http", &r.http);
    s += &component("loaded", &r.loaded);
    s
}

fn direction(name: &str, d: &RpmDirection) -> String {
    let mut s = format!(
        "{name}: {:.1} Mbit/s over {} connections (goodput confidence {:?}, RPM confidence {:?}, {:.1} s)\n",
        d.goodput_bits_per_second / 1e6,
        d.connections,
        d.goodput_confidence,
        d.rpm_confidence,
        d.duration_ms as f64 / 1e3
    );
    if let Some(r) = &d.responsiveness {
        s += &parts(r);
    }
    s
}

/// The text of a run's end.
pub fn render(end: &RpmEnd) -> String {
    let mut s = format!("responsiveness of {}\n", end.config_url);
    if let Some(r) = &end.responsiveness {
        s += &format!(
            "RPM {:.0} (foreign {:.0}, self {:.0})\n",
            r.rpm, r.foreign_rpm, r.self_rpm
        );
    }
    if let Some(i) = &end.idle {
        s += &format!(
            "idle round trip {:.2} ms ({} samples)\n",
            i.trimmed_mean_ms, i.count
        );
    }
    if let Some(d) = &end.download {
        s += &direction("download", d);
    }
    if let Some(u) = &end.upload {
        s += &direction("upload", u);
    }
    if end.insecure {
        s += "the server's certificate was not verified (--insecure)\n";
    }
    s
}

/// The summary of a finished run.
pub fn rpm(doc: &Document) -> String {
    match doc.end.rpm() {
        Some(e) => render(e),
        None => String::new(),
    }
}
