//! "What limited each run": a row per run with its verdict, the figures that decided it
//! (each with the end it describes, the side that measured it and its unit) and the
//! runner-up; a run without a verdict says why it has none.

use sonde_results::limit::rpm::Way;
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

/// An rpm run's verdicts, one per direction's loaded phase (`end.rpm.download`, `upload`),
/// each named by its direction, the run's own (`end.limited_by`) marked as such.
fn rpm_ways(doc: &Document) -> Vec<(String, &LimitedBy)> {
    let Some(e) = doc.end.rpm() else {
        return Vec::new();
    };
    let run = crate::summary::rpm::run_way(doc);
    Way::BOTH
        .into_iter()
        .filter_map(|w| {
            let v = w.of(e)?.limited_by.as_ref()?;
            let name = match run == Some(w) {
                true => format!("{} (the run's verdict)", w.as_str()),
                false => w.as_str().to_string(),
            };
            Some((name, v))
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored;

    /// A real rpm run through a 40 Mbit/s tbf (both directions the network's, the upload
    /// the less responsive), judged.
    fn rpm_run() -> Document {
        let mut d = stored("limit/rpm-lo-tbf-40mbit.json");
        d.end.limited_by = sonde_results::limit::judge(&d);
        d
    }

    fn rows(doc: &Document) -> Vec<String> {
        let run = ReportRun {
            id: 1,
            label: None,
            doc,
            name: "rpm".into(),
        };
        let md = table(&[run]).markdown();
        md.lines()
            .filter(|l| l.contains("| rpm "))
            .map(String::from)
            .collect()
    }

    #[test]
    fn an_rpm_run_has_a_row_per_direction_the_runs_marked() {
        let doc = rpm_run();
        let r = rows(&doc);
        assert_eq!(r.len(), 2, "{r:#?}");
        assert!(r[0].contains("rpm download |"), "{}", r[0]);
        assert!(
            r[1].contains("rpm upload (the run's verdict) |"),
            "{}",
            r[1]
        );
        assert!(r[1].contains("the network (network)"), "{}", r[1]);
        // Without the run's verdict (a run stored before it), no row is marked.
        let mut old = doc.clone();
        old.end.limited_by = None;
        assert!(rows(&old).iter().all(|r| !r.contains("run's verdict")));
    }

    #[test]
    fn the_rpm_summary_ends_with_the_runs_verdict_and_its_direction() {
        let doc = rpm_run();
        let text = crate::summary::rpm(&doc);
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            "limited by: the network (network), the upload's verdict (its probes waited longest under load)"
        );
        let mut old = doc.clone();
        old.end.limited_by = None;
        assert!(!crate::summary::rpm(&old).contains("limited by: "));
    }
}
