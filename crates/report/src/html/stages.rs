//! "Where the round trip's time went", for the runs that asked for `--stages`: each
//! percentile's composition by stage (the stages' own P50s stacked for the P50, their P99s
//! for the P99), each stage's distribution by percentile, the stages table and the counts
//! of messages split, left unsplit and out of order. Omitted when no run has stages, as the
//! fleet section is.

use sonde_results::stages::{Stage, Stages};
use sonde_results::LatencySummary;

use super::page::{esc, section, ReportRun};
use crate::chart::{self, Line};
use crate::stack_plot::{self, Panel};
use crate::table::Table;

/// A P99.9 bar is drawn for a run of at least this many split messages (one beyond it).
const P999_READS: u64 = 1_000;

/// A run with stages: its number in the charts (from 1), the run, its stages.
struct Split<'a> {
    n: usize,
    run: &'a ReportRun<'a>,
    stages: &'a Stages,
}

fn split<'a>(runs: &'a [ReportRun<'a>]) -> Vec<Split<'a>> {
    runs.iter()
        .filter_map(|run| Some((run, run.doc.end.rr()?.stages.as_ref()?)))
        .enumerate()
        .map(|(i, (run, stages))| Split {
            n: i + 1,
            run,
            stages,
        })
        .collect()
}

/// Microseconds, two decimals, as the text summary writes them.
fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

/// How a summary gives a percentile.
type At = fn(&LatencySummary) -> u64;

/// The percentiles a stacked bar is drawn for: name, how a summary gives it, and how many
/// messages split it takes to read.
const PERCENTILES: [(&str, At, u64); 3] = [
    ("P50", |l| l.p50, 1),
    ("P99", |l| l.p99, 100),
    ("P99.9", |l| l.p999, P999_READS),
];

/// Each stage's value at a percentile, in [`Stage::ALL`]'s order (0 for a stage without
/// figures), ns.
fn parts(s: &Stages, at: At) -> Vec<f64> {
    Stage::ALL
        .iter()
        .map(|st| s.ns.get(st).map_or(0.0, |l| at(l) as f64))
        .collect()
}

/// A run's percentiles that read: name, the stages' values summed and the round trip's
/// (over all its messages; the stages' over those split), ns.
fn apart(s: &Split<'_>) -> Vec<(&'static str, f64, Option<f64>)> {
    let rtt = s.run.doc.end.rr().and_then(|r| r.latency_ns.as_ref());
    PERCENTILES
        .iter()
        .filter(|p| s.stages.split >= p.2)
        .map(|&(name, at, _)| {
            let sum = parts(s.stages, at).iter().sum();
            (name, sum, rtt.map(|l| at(l) as f64).filter(|r| *r > 0.0))
        })
        .collect()
}

/// How far the summed stages are from the round trip, signed: `+1.2 %`.
fn percent(sum: f64, trip: Option<f64>) -> String {
    trip.map_or("n/a".into(), |r| format!("{:+.1} %", 100.0 * (sum - r) / r))
}

/// The stages' percentiles summed against the round trip's: a row per run and percentile.
fn sums(all: &[Split<'_>]) -> Table {
    let mut t = Table::new(
        "Stage percentiles do not add up to the round trip's exactly (the messages at one stage's P99 are not those at another's): how far apart, per run.",
        &["Run", "Percentile", "Stages summed µs", "Round trip µs", "Apart"],
    );
    for s in all {
        for (name, sum, trip) in apart(s) {
            t.row(vec![
                s.run.name.clone(),
                name.into(),
                us(sum),
                trip.map_or("n/a".into(), us),
                percent(sum, trip),
            ]);
        }
    }
    t
}

/// The same in a sentence per run, for the chart's caption.
fn sums_sentence(s: &Split<'_>) -> String {
    let each: Vec<String> = apart(s)
        .into_iter()
        .map(|(name, sum, trip)| match trip {
            Some(r) => format!(
                "{name} {} µs summed against {} ({})",
                us(sum),
                us(r),
                percent(sum, trip)
            ),
            None => format!("{name} {} µs summed", us(sum)),
        })
        .collect();
    format!("{}: {}", s.run.name, each.join(", "))
}

/// Messages split, without a stamp and out of order, a row per run.
fn counts(all: &[Split<'_>]) -> Table {
    let mut t = Table::new(
        "Messages split from both ends' kernel timestamps; those without a stamp or with readings out of order are counted, never guessed.",
        &["Run", "Split", "Without a stamp", "Out of order"],
    );
    for s in all {
        let st = s.stages;
        t.row(vec![
            s.run.name.clone(),
            st.split.to_string(),
            st.missing.to_string(),
            st.disordered.to_string(),
        ]);
    }
    t
}

/// A run's stages table: each stage's clock, mean, share of the summed means (the mean
/// round trip of the messages split), P50, P99 and P99.9.
fn table(s: &Split<'_>) -> Table {
    let mut t = Table::new(
        format!(
            "{}: each stage, µs ({} messages split, {}); the stage outside the hosts is the round trip less the others.",
            s.run.name, s.stages.split, s.stages.sampling()
        ),
        &[
            "Stage",
            "Measured on",
            "Mean µs",
            "Share of summed means",
            "P50 µs",
            "P99 µs",
            "P99.9 µs",
        ],
    );
    let total: f64 = s.stages.ns.values().map(|l| l.mean).sum();
    for stage in Stage::ALL {
        let Some(l) = s.stages.ns.get(&stage) else {
            continue;
        };
        t.row(vec![
            stage.label().into(),
            stage
                .measured_on()
                .map_or("both (remainder)", |r| r.as_str())
                .into(),
            us(l.mean),
            format!("{:.0} %", 100.0 * l.mean / total.max(1.0)),
            us(l.p50 as f64),
            us(l.p99 as f64),
            us(l.p999 as f64),
        ]);
    }
    t
}

/// The stacked bars: a panel per percentile, a bar per run, µs.
fn composition(all: &[Split<'_>]) -> String {
    let panels: Vec<Panel> = PERCENTILES
        .iter()
        .filter(|p| all.iter().any(|s| s.stages.split >= p.2))
        .map(|&(name, at, reads)| Panel {
            title: name.into(),
            bars: all
                .iter()
                .map(|s| match s.stages.split >= reads {
                    true => parts(s.stages, at).iter().map(|v| v / 1e3).collect(),
                    false => Vec::new(),
                })
                .collect(),
        })
        .collect();
    let title = "each percentile's composition by stage (client and server clocks)";
    let svg = stack_plot::stacked(title, "stages summed, µs", &panels);
    let names: Vec<&str> = Stage::ALL.iter().map(|s| s.label()).collect();
    let caption = format!(
        "Each bar stacks the stages' own percentiles, first stage at the bottom; each panel has its own scale; P99.9 for runs of at least {} messages split. Runs: {}. Stage percentiles do not add up to the round trip's percentile exactly; for each run: {}.",
        crate::units::thousands(P999_READS as i64),
        all.iter()
            .map(|s| format!("{} {}", s.n, s.run.name))
            .collect::<Vec<_>>()
            .join(", "),
        all.iter().map(sums_sentence).collect::<Vec<_>>().join("; ")
    );
    let legend = stack_plot::legend(&names);
    let svg = svg.replacen("</figure>", &format!("{legend}</figure>"), 1);
    format!("<p class=\"caption\">{}</p>{svg}", esc(&caption))
}

/// A run's stages by percentile, a line each, from every bucket of their histograms.
fn distributions(s: &Split<'_>) -> String {
    let lines: Vec<Line> = Stage::ALL
        .iter()
        .enumerate()
        .filter_map(|(k, st)| {
            let l = s.stages.ns.get(st)?;
            Some(Line::new(st.label(), k, chart::percentile_points(l)))
        })
        .collect();
    let title = format!("{}: each stage by percentile", s.run.name);
    chart::percentiles_of(&title, "stage time", &lines)
}

/// The pings and rpcs that did not ask for `--stages`, in one sentence; `None` when all did.
fn without(runs: &[ReportRun<'_>], all: &[Split<'_>]) -> Option<String> {
    let names: Vec<&str> = runs
        .iter()
        .filter(|r| r.doc.end.rr().is_some() && !all.iter().any(|s| std::ptr::eq(s.run, *r)))
        .map(|r| r.name.as_str())
        .collect();
    (!names.is_empty())
        .then(|| format!("Not split into stages (no --stages): {}.", names.join("; ")))
}

/// The section in HTML; empty when no run has stages.
pub(super) fn html(runs: &[ReportRun<'_>]) -> String {
    let all = split(runs);
    if all.is_empty() {
        return String::new();
    }
    let mut body = String::from("<p>Each round trip split by both ends' kernel timestamps into seven stages, each a difference on one host's clock; the stage outside the hosts is the round trip less the others.</p>");
    if let Some(w) = without(runs, &all) {
        body.push_str(&format!("<p>{}</p>", esc(&w)));
    }
    body.push_str(&composition(&all));
    body.push_str(&sums(&all).html());
    body.push_str(&counts(&all).html());
    for s in &all {
        body.push_str(&table(s).html());
        body.push_str(&distributions(s));
    }
    section("stages", "Where the round trip's time went", &body)
}

/// The section in Markdown: the same tables; empty when no run has stages.
pub(super) fn markdown(runs: &[ReportRun<'_>]) -> String {
    let all = split(runs);
    if all.is_empty() {
        return String::new();
    }
    let mut o = String::from("## Where the round trip's time went\n\n");
    if let Some(w) = without(runs, &all) {
        o.push_str(&format!("{}\n\n", crate::safe::markdown(&w)));
    }
    o.push_str(&sums(&all).markdown());
    o.push_str(&counts(&all).markdown());
    for s in &all {
        o.push_str(&table(s).markdown());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored;
    use sonde_results::document::Section;
    use sonde_results::latency::new_histogram;
    use sonde_results::Document;

    /// Stage k (0-based): 980 messages at (k + 1) x 200 ns and 20 at (k + 1) x 280 ns (all
    /// exact in the histogram): P50s 0.2 to 1.4 µs, summing to 5.6; P99s and P99.9s 0.28 to
    /// 1.96, summing to 7.84. The round trip: P50 5 µs, P99 8 µs, P99.9 9.8 µs.
    fn with_stages() -> Document {
        let mut doc = stored("v1-ping-udp.json");
        let Section::Rr(rr) = &mut doc.end.section else {
            panic!("a ping")
        };
        let mut s = Stages {
            split: 1_000,
            missing: 2,
            disordered: 1,
            ..Default::default()
        };
        for (k, stage) in Stage::ALL.into_iter().enumerate() {
            let mut h = new_histogram();
            h.record_n(200 * (k as u64 + 1), 980).unwrap();
            h.record_n(280 * (k as u64 + 1), 20).unwrap();
            s.ns.insert(stage, LatencySummary::of(&h).unwrap());
        }
        rr.stages = Some(s);
        let l = rr.latency_ns.as_mut().unwrap();
        (l.p50, l.p99, l.p999) = (5_000, 8_000, 9_800);
        doc
    }

    fn run<'a>(name: &str, doc: &'a Document) -> ReportRun<'a> {
        ReportRun {
            id: 1,
            label: None,
            doc,
            name: name.into(),
        }
    }

    /// The (height, fill) of every filled rectangle of `svg` in one of the stage fills.
    fn bars(svg: &str) -> Vec<(f64, String)> {
        let fills: Vec<String> = stack_plot::FILL
            .iter()
            .map(|c| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
            .collect();
        svg.split("<rect ")
            .skip(1)
            .map(|r| &r[..r.find("/>").unwrap()])
            .filter_map(|r| {
                let fill = fills
                    .iter()
                    .find(|f| r.to_uppercase().contains(&f.to_uppercase()))?;
                let h = r
                    .split("height=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .parse()
                    .ok()?;
                Some((h, fill.clone()))
            })
            .collect()
    }

    #[test]
    fn the_table_has_each_stage_its_clock_share_and_percentiles() {
        let doc = with_stages();
        let runs = [run("ping --stages", &doc)];
        let all = split(&runs);
        let t = table(&all[0]);
        let names: Vec<&str> = t.rows.iter().map(|r| r[0].as_str()).collect();
        let labels: Vec<&str> = Stage::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(names, labels);
        // Server wake-up: 800 ns x 0.98 + 1,120 x 0.02 = 806.4 ns; 4 of 28 of the means.
        assert_eq!(
            t.rows[3],
            [
                "server receive wake-up",
                "server",
                "0.81",
                "14 %",
                "0.80",
                "1.12",
                "1.12"
            ]
        );
        assert_eq!(t.rows[2][1], "both (remainder)");
        assert_eq!(
            t.rows[6][..5],
            ["client receive wake-up", "client", "1.41", "25 %", "1.40"]
        );
        assert_eq!(counts(&all).rows, [["ping --stages", "1000", "2", "1"]]);
        assert_eq!(
            sums(&all).rows,
            [
                ["ping --stages", "P50", "5.60", "5.00", "+12.0 %"],
                ["ping --stages", "P99", "7.84", "8.00", "-2.0 %"],
                ["ping --stages", "P99.9", "7.84", "9.80", "-20.0 %"],
            ]
        );
        let md = markdown(&runs);
        for row in [
            "| server receive wake-up | server | 0.81 | 14 % | 0.80 | 1.12 | 1.12 |",
            "| ping --stages | 1000 | 2 | 1 |",
            "| ping --stages | P99 | 7.84 | 8.00 | -2.0 % |",
        ] {
            assert!(md.contains(row), "{row} missing: {md}");
        }
    }

    #[test]
    fn the_bars_stack_each_stage_in_proportion_and_the_legend_names_all_seven() {
        let doc = with_stages();
        let runs = [run("ping --stages", &doc)];
        let html = html(&runs);
        let chart = &html[..html.find("</figure>").unwrap()];
        let b = bars(&chart[..chart.find("</svg>").unwrap()]);
        // A bar per panel (P50, P99, P99.9), seven stages each, in their order.
        assert_eq!(b.len(), 21, "{chart}");
        for panel in b.chunks(7) {
            let total: f64 = panel.iter().map(|p| p.0).sum();
            assert!(total > 150.0, "the tallest bar fills its panel: {total}");
            for (k, (h, fill)) in panel.iter().enumerate() {
                let want = total * (k + 1) as f64 / 28.0;
                assert!((h - want).abs() <= 1.5, "stage {k}: {h} px, want {want}");
                let c = stack_plot::FILL[k];
                let want = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
                assert_eq!(*fill, want, "stage {k}'s fill");
            }
        }
        // Hatched stages (the 2nd, 4th, 6th): white lines on the dark fills, black on light.
        for ink in ["#FFFFFF", "#000000"] {
            let hatch = format!("stroke=\"{ink}\" stroke-width=\"1\" points=");
            assert!(chart.matches(&hatch).count() > 10, "{ink} hatching");
        }
        let legend = &chart[chart.find("<ul class=\"legend\">").expect("a legend")..];
        assert_eq!(legend.matches("<li>").count(), 7);
        for s in Stage::ALL {
            assert!(legend.contains(&esc(s.label())), "{} missing", s.label());
        }
        assert!(
            html.contains("Runs: 1 ping --stages. Stage percentiles do not add up to the round trip&#39;s percentile exactly; for each run: ping --stages: P50 5.60 µs summed against 5.00 (+12.0 %), P99 7.84 µs summed against 8.00 (-2.0 %)"),
            "{html}"
        );
        // The stages' distributions: a chart with a line per stage.
        let cdf = &html[html
            .find("ping --stages: each stage by percentile")
            .expect("the CDF")..];
        let legend = &cdf[cdf.find("<ul class=\"legend\">").unwrap()..cdf.find("</ul>").unwrap()];
        assert_eq!(legend.matches("<li>").count(), 7, "{legend}");
        assert!(cdf.contains("stage time, µs (log scale)"));
    }

    #[test]
    fn runs_without_stages_are_named_and_none_with_stages_leaves_no_section() {
        let (with, plain) = (with_stages(), stored("v1-ping-udp.json"));
        let stream = stored("v1-stream.json");
        let runs = [run("ping", &plain), run("stream", &stream)];
        assert_eq!(html(&runs), "");
        assert_eq!(markdown(&runs), "");
        let runs = [
            run("ping", &plain),
            run("ping --stages", &with),
            run("stream", &stream),
        ];
        let page = html(&runs);
        assert!(page.starts_with("<section id=\"stages\">"));
        assert!(
            page.contains("<p>Not split into stages (no --stages): ping.</p>"),
            "{page}"
        );
        assert!(
            page.contains("Runs: 1 ping --stages."),
            "numbered among the runs with stages"
        );
        assert!(markdown(&runs).contains("Not split into stages (no --stages): ping."));
    }
}
