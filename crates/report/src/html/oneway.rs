//! "Each direction's delay", for the runs that asked for `--stages`: per run, each
//! direction's percentiles with the bound that holds on them and where it comes from, what
//! the clocks claimed and whether the exchange contradicted them, and both directions by
//! percentile. Omitted when no run has one-way figures.

use sonde_results::oneway::OneWay;

use super::page::{esc, section, ReportRun};
use crate::chart::{self, Line};
use crate::table::Table;

fn with_oneway<'a>(runs: &'a [ReportRun<'a>]) -> Vec<(&'a ReportRun<'a>, &'a OneWay)> {
    runs.iter()
        .filter_map(|r| Some((r, r.doc.end.rr()?.oneway.as_deref()?)))
        .collect()
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

/// A row per run and direction: P50, P99, P99.9 (µs), ± bound, its source.
fn table(all: &[(&ReportRun<'_>, &OneWay)]) -> Table {
    let mut t = Table::new(
        "Each direction's delay (µs), the clocks' offset taken off; every figure holds within ± the bound (client's and agent's kernel timestamps, paired by the client)",
        &["run", "direction", "P50", "P99", "P99.9", "± bound", "bound from"],
    );
    for (run, o) in all {
        let ways = [("forward", &o.forward_ns), ("reverse", &o.reverse_ns)];
        for (way, l) in ways {
            let Some(l) = l else { continue };
            t.row(vec![
                run.name.clone(),
                way.into(),
                us(l.p50 as f64),
                us(l.p99 as f64),
                us(l.p999 as f64),
                o.bound_ns.map_or("-".into(), us),
                o.bound_from.map_or("-", |b| b.words()).into(),
            ]);
        }
    }
    t
}

/// What each run's clocks claimed, and any contradiction or fault, as sentences.
fn notes(all: &[(&ReportRun<'_>, &OneWay)]) -> Vec<String> {
    all.iter()
        .map(|(run, o)| {
            let mut s = format!("{}: {}", run.name, o.line());
            if let Some(c) = &o.clocks {
                s.push_str(&format!(". Clocks: {c}"));
            }
            if let Some(d) = &o.clocks_disagree {
                s.push_str(&format!(". {d}"));
            }
            if let Some(e) = &o.exchange {
                s.push_str(&format!(
                    ". The exchange's own fit: offset {:.1} ± {:.1} µs, drift {:.2} ppm",
                    e.offset_ns / 1e3,
                    e.bound_ns / 1e3,
                    e.drift_ppm
                ));
            }
            s
        })
        .collect()
}

fn chart(run: &ReportRun<'_>, o: &OneWay) -> String {
    let lines: Vec<Line> = [("forward", &o.forward_ns), ("reverse", &o.reverse_ns)]
        .iter()
        .enumerate()
        .filter_map(|(k, (name, l))| {
            Some(Line::new(*name, k, chart::percentile_points(l.as_ref()?)))
        })
        .collect();
    let title = format!("{}: each direction by percentile", run.name);
    chart::percentiles_of(&title, "one-way delay", &lines)
}

/// The section in HTML; empty when no run has one-way figures.
pub(super) fn html(runs: &[ReportRun<'_>]) -> String {
    let all = with_oneway(runs);
    if all.is_empty() {
        return String::new();
    }
    let mut body = String::from("<p>Each message's forward delay (client to agent) and reverse delay, from both ends' kernel timestamps on their real-time clocks, less the clocks' offset: none when both ends read one host's clock, else the offset the exchanges themselves fit (no delay can be negative), or zero within both clocks' own bounds when those are tighter and not contradicted.</p>");
    body.push_str(&table(&all).html());
    body.push_str("<ul>");
    for n in notes(&all) {
        body.push_str(&format!("<li>{}</li>", esc(&n)));
    }
    body.push_str("</ul>");
    for (run, o) in &all {
        body.push_str(&chart(run, o));
    }
    section("oneway", "Each direction's delay", &body)
}

pub(super) fn markdown(runs: &[ReportRun<'_>]) -> String {
    let all = with_oneway(runs);
    if all.is_empty() {
        return String::new();
    }
    let mut o = String::from("## Each direction's delay\n\n");
    o.push_str(&table(&all).markdown());
    for n in notes(&all) {
        o.push_str(&format!("- {}\n", crate::safe::markdown(&n)));
    }
    o.push('\n');
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored;

    /// A real run (loopback, the echo's clock shifted 1.234 ms by the test hook): the
    /// table gives each direction with the exchange's bound, the notes say the one-clock
    /// claim was contradicted, and the chart draws both directions.
    #[test]
    fn a_run_with_directions_gets_its_table_notes_and_chart() {
        let doc = stored("v2-ping-oneway.json");
        let o = doc.end.rr().unwrap().oneway.as_deref().unwrap();
        let runs = [ReportRun {
            id: 1,
            label: None,
            doc: &doc,
            name: "shifted".into(),
        }];
        let h = html(&runs);
        let t = table(&with_oneway(&runs));
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][1], "forward");
        assert_eq!(t.rows[0][2], us(o.forward_ns.as_ref().unwrap().p50 as f64));
        assert_eq!(t.rows[1][5], us(o.bound_ns.unwrap()));
        assert_eq!(t.rows[1][6], "bound from the exchange");
        assert!(h.contains("the clocks disagree"), "{h}");
        assert!(h.contains("each direction by percentile"));
        let svg = chart(&runs[0], o);
        assert!(svg.contains("</svg> forward</li>") && svg.contains("</svg> reverse</li>"));
        assert_eq!(
            svg.matches("stroke-width=\"2\" points=").count(),
            2,
            "a line each"
        );
        let md = markdown(&runs);
        assert!(md.starts_with("## Each direction's delay"), "{md}");
        assert!(md.contains("offset 1234."), "{md}");
    }

    #[test]
    fn runs_without_directions_have_no_section() {
        let doc = stored("v2-ping-udp.json");
        let runs = [ReportRun {
            id: 1,
            label: None,
            doc: &doc,
            name: "plain".into(),
        }];
        assert_eq!(
            (html(&runs), markdown(&runs)),
            (String::new(), String::new())
        );
    }
}
