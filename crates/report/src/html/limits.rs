//! "What limited each run": a row per run with its verdict, the figures that decided it
//! (each with the end it describes, the side that measured it and its unit) and the
//! runner-up; a run without a verdict says why it has none.

use sonde_results::limit::{Evidence, Finding, LimitedBy, TransferEnd};
use sonde_results::Document;

use super::ReportRun;
use crate::table::Table;
use crate::units::{bits_per_second, sig3};

/// A figure with its unit: bit/s scaled, others to three digits.
fn value(e: &Evidence) -> String {
    match e.unit.as_str() {
        "bit/s" => bits_per_second(e.value),
        "" => sig3(e.value),
        u => format!("{} {u}", sig3(e.value)),
    }
}

/// "rwnd-limited 87 % of the time (87 %, sender end, measured by the client)".
fn evidence(e: &Evidence) -> String {
    let end = match e.end {
        TransferEnd::Sender => "sender end",
        TransferEnd::Receiver => "receiver end",
        TransferEnd::Test => "the test",
    };
    let by = match e.measured_by {
        Some(r) => format!(", measured by the {}", r.as_str()),
        None => ", its spec".into(),
    };
    format!("{} ({}, {end}{by})", e.text, value(e))
}

fn evidences(list: &[Evidence]) -> String {
    let all: Vec<String> = list.iter().map(evidence).collect();
    all.join("; ")
}

fn verdict(l: &LimitedBy) -> String {
    format!(
        "{} ({}), strength {:.2}",
        l.verdict.words(),
        l.verdict,
        l.strength
    )
}

fn runner_up(f: Option<&Finding>) -> String {
    let Some(f) = f else {
        return "none close".into();
    };
    let mut s = format!(
        "{} ({}), strength {:.2}",
        f.verdict.words(),
        f.verdict,
        f.strength
    );
    if !f.evidence.is_empty() {
        s += &format!(": {}", evidences(&f.evidence));
    }
    s
}

/// Why a run has no verdict.
fn none(doc: &Document) -> String {
    let why = match doc.test {
        t if !crate::summary::row(t).judged => format!("a {t} run names no single limit"),
        _ if doc.end.partial => "the run was cut short".into(),
        _ => "too little evidence decided one (or the run predates verdicts)".into(),
    };
    format!("no verdict: {why}")
}

/// An rpm run's verdicts, one per direction's loaded phase (`end.rpm.download`, `upload`).
fn rpm_ways(doc: &Document) -> Vec<(&'static str, &LimitedBy)> {
    let Some(e) = doc.end.rpm() else {
        return Vec::new();
    };
    [("download", &e.download), ("upload", &e.upload)]
        .into_iter()
        .filter_map(|(w, d)| Some((w, d.as_ref()?.limited_by.as_ref()?)))
        .collect()
}

/// The section's table.
pub(super) fn table(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "Each run's verdict is judged from its own figures; strength is how much of the run it explains (0 to 1); a runner-up is named when a second limit came close.",
        &["Run", "Test", "Limited by", "Because", "Runner-up"],
    );
    for r in runs {
        let (test, doc) = (r.doc.test.to_string(), r.doc);
        let ways = rpm_ways(doc);
        if !ways.is_empty() {
            for (way, l) in ways {
                t.row(vec![
                    r.name.clone(),
                    format!("{test} {way}"),
                    verdict(l),
                    evidences(&l.evidence),
                    runner_up(l.runner_up.as_ref()),
                ]);
            }
            continue;
        }
        t.row(match &doc.end.limited_by {
            Some(l) => vec![
                r.name.clone(),
                test,
                verdict(l),
                evidences(&l.evidence),
                runner_up(l.runner_up.as_ref()),
            ],
            None => vec![r.name.clone(), test, none(doc), "-".into(), "-".into()],
        });
    }
    t
}
