//! A responsiveness run's heading and summary: the RPM with its foreign and self parts,
//! each component with its count, each direction's goodput and the draft's confidence,
//! and where the client's TCP_INFO was read, each direction's verdict with its evidence and
//! the loaded connections' figures per interval.

use sonde_results::document::End;
use sonde_results::limit::rpm::{as_run, Way};
use sonde_results::rpm::{Component, Responsiveness, RpmDirection, RpmEnd, RpmInterval};
use sonde_results::spec::RpmSpec;
use sonde_results::tcp::{TcpSample, TcpSummary};
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
    if let Some(v) = &d.limited_by {
        s += &format!(
            "  limited by {} (strength {:.2})\n",
            v.verdict.words(),
            v.strength
        );
        s += &format!("    verdict: {}\n", v.verdict);
        for e in &v.evidence {
            let by = e.measured_by.map_or("spec", |r| r.as_str());
            s += &format!("    - {} [{}, measured by {by}]\n", e.text, e.figure);
        }
        if let Some(r) = &v.runner_up {
            s += &format!("    runner-up: {} ({:.2})\n", r.verdict, r.strength);
        }
    }
    s += &tcp_rows(d, "client", |i| &i.tcp);
    s += &tcp_rows(d, "server", |i| &i.server_tcp);
    s
}

/// The loaded connections' TCP_INFO per interval, as the client's kernel saw it: the
/// smoothed RTT and its variance (median connection), retransmitted segments and delivery
/// rate (summed over the connections), and the median connection's busy, rwnd- and
/// sndbuf-limited shares of the interval; `-` where the kernel did not say.
fn tcp_rows(d: &RpmDirection, who: &str, of: fn(&RpmInterval) -> &Vec<TcpSample>) -> String {
    let side = match d.intervals.iter().flat_map(of).next() {
        None => return String::new(),
        Some(t) if t.transfer == sonde_results::Transfer::Send => "sender",
        _ => "receiver",
    };
    let mut s = format!(
        "  {who} TCP_INFO ({side}), per interval: end s, conns, srtt ms, rttvar ms, retrans, delivery Mbit/s, busy %, rwnd-limited %, sndbuf-limited %\n"
    );
    for i in &d.intervals {
        s += &tcp_row(i.end_s, of(i));
    }
    s
}

fn tcp_row(end_s: f64, t: &[TcpSample]) -> String {
    let opt = |v: Option<f64>, scale: f64| v.map_or("-".into(), |v| format!("{:.1}", v / scale));
    let sum = |f: fn(&TcpSample) -> Option<f64>| {
        let v: Vec<f64> = t.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>())
    };
    let m = TcpSummary::of(
        [(1.0, t)],
        t.first().map_or_else(Default::default, |s| s.transfer),
    );
    let med = |f: fn(&TcpSummary) -> Option<sonde_results::tcp::Spread>| {
        m.as_ref().and_then(f).map(|s| s.median)
    };
    format!(
        "    {:>6.2} {:>3} {:>7} {:>7} {:>5} {:>7} {:>5} {:>5} {:>5}\n",
        end_s,
        t.len(),
        opt(med(|s| s.srtt_us), 1e3),
        opt(med(|s| s.rttvar_us), 1e3),
        t.iter().map(|s| s.retransmits as u64).sum::<u64>(),
        opt(sum(|s| s.delivery_rate_bits_per_second), 1e6),
        opt(med(|s| s.busy_percent), 1.0),
        opt(med(|s| s.rwnd_limited_percent), 1.0),
        opt(med(|s| s.sndbuf_limited_percent), 1.0),
    )
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

/// The direction whose verdict is the run's (`end.limited_by`, one direction's named as
/// the run's by `limit::rpm::as_run`): read from the document, not chosen again, so a
/// table shows what the document claims.
pub(crate) fn run_way(doc: &Document) -> Option<Way> {
    let (r, run) = (doc.end.rpm()?, doc.end.limited_by.as_ref()?);
    Way::BOTH.into_iter().find(|&w| {
        w.of(r)
            .and_then(|d| d.limited_by.as_ref())
            .is_some_and(|v| as_run(w, v) == *run)
    })
}

/// The summary of a finished run, ending with the run's verdict: the direction it is of
/// and why that one (the least responsive direction's), its evidence as the direction's
/// lines above.
pub fn rpm(doc: &Document) -> String {
    let Some(e) = doc.end.rpm() else {
        return String::new();
    };
    let mut s = render(e);
    if let (Some(w), Some(v)) = (run_way(doc), &doc.end.limited_by) {
        s += &format!(
            "limited by: {} ({}), the {}'s verdict (its probes waited longest under load)\n",
            v.verdict.words(),
            v.verdict,
            w.as_str()
        );
    }
    s
}
