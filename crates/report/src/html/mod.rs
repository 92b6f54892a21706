//! A self-contained report of stored runs, laid out as published network reports are:
//! purpose and summary, both hosts' environment, the exact invocations of both sides, each
//! test type's table, what limited each run, then the plots (sender and receiver per
//! interval, per-connection throughput, a stream's cwnd and srtt per connection, round trips
//! by percentile from every histogram bucket) and the A/B comparison, which leads with its
//! sentence and says when the limit moved. Charts are inline SVG; the page loads nothing
//! from the network; the markup is well-formed XML (XHTML), so it can be checked. The
//! Markdown form carries the same tables.

mod comparison;
mod environment;
mod limits;
mod oneway;
pub(crate) mod page;
mod stages;

use page::section;
pub use page::ReportRun;

use sonde_results::compare::{Comparison, LimitShift};
use sonde_results::spec::TestName;
use sonde_results::Document;

use crate::chart::{self, Axis, Line};
use crate::published;
use crate::table::Table;
use page::esc;

/// What a report is made of: its title, when, the runs, and the comparison between two
/// labelled groups of them, if they form two.
#[derive(Clone, Copy)]
pub struct Report<'a> {
    pub title: &'a str,
    pub generated_at: &'a str,
    pub runs: &'a [ReportRun<'a>],
    pub comparison: Option<(&'a str, &'a str, &'a [Comparison])>,
    /// What limited each of the two groups, when both had a verdict.
    pub limits: Option<&'a LimitShift>,
}

/// The comparison's line on the limit: `limited by: receiver_window -> network`.
fn limit_line(r: &Report<'_>) -> Option<String> {
    r.comparison?;
    r.limits.map(|l| format!("limited by: {}", l.text()))
}

/// Every exact command line of a run: (who ran it, command).
fn invocations(doc: &Document) -> Vec<(String, String)> {
    let mut out = vec![("controller".to_string(), doc.start.command.clone())];
    if let Some(c) = &doc.start.client_agent {
        let command = c.command.clone().unwrap_or_else(|| "n/a".into());
        out.push((format!("client agent at {}", c.address), command));
    }
    let agent = doc
        .start
        .server_command
        .clone()
        .unwrap_or_else(|| "n/a".into());
    out.push((format!("agent at {}", doc.start.server_address), agent));
    let tools = doc
        .end
        .pps()
        .and_then(|p| p.packets.as_ref())
        .map(|p| p.tool_commands())
        .unwrap_or_default();
    for (role, command) in tools {
        out.push((format!("{}'s tool", role.as_str()), command.to_string()));
    }
    out
}

/// Each run's time series, as steps over each interval: a stream's or pps run's sender
/// and receiver on one chart (receiver dashed); request rates of all runs on one chart; a
/// load test's own charts.
fn time_series(runs: &[ReportRun<'_>]) -> String {
    let mut o = String::new();
    let mut rates: Vec<Line> = Vec::new();
    let mut rate_end = 0.0f64;
    for r in runs {
        let d = r.doc;
        if d.end.load().is_some() {
            o.push_str(&crate::load_plot::charts(&r.name, d));
            continue;
        }
        let end = d.intervals.last().map_or(1.0, |i| i.end_s);
        let (unit, series) = published::interval_series(d);
        if !matches!(d.test, TestName::Stream | TestName::Pps) {
            if let Some((_, pts)) = series.into_iter().next() {
                rate_end = rate_end.max(end);
                let n = rates.len();
                rates.push(Line::new(r.name.clone(), n, chart::steps(pts.into_iter())));
            }
            continue;
        }
        let lines: Vec<Line> = series
            .into_iter()
            .enumerate()
            .map(|(i, (name, pts))| {
                // The receiver dashed, in a lighter ink, over the sender: both show where
                // they agree.
                let l = Line::new(name, 2 * i, chart::steps(pts.into_iter()));
                if i == 1 {
                    l.dashed()
                } else {
                    l
                }
            })
            .collect();
        o.push_str(&chart::lines(&r.name, &time_axis(end), unit, &lines));
        o.push_str(&per_connection(r));
        o.push_str(&crate::tcp_plot::charts(&r.name, d));
    }
    if !rates.is_empty() {
        let title = "completed requests per interval, by the client";
        o.push_str(&chart::lines(
            title,
            &time_axis(rate_end),
            "requests/s",
            &rates,
        ));
    }
    o
}

fn time_axis(end: f64) -> Axis<'static> {
    Axis {
        desc: "time since the window's start, s",
        range: (0.0, end),
        ticks: None,
        label: &chart::tick,
    }
}

/// A stream's connections' throughput over the window, as the receiver measured it.
fn per_connection(r: &ReportRun<'_>) -> String {
    let Some(rx) = r.doc.end.stream().and_then(|s| s.receiver.as_ref()) else {
        return String::new();
    };
    let secs = rx.seconds.max(1e-9);
    let values: Vec<f64> = rx
        .connections
        .per_connection
        .iter()
        .map(|c| c.bytes as f64 * 8.0 / secs / 1e9)
        .collect();
    if values.len() < 2 {
        return String::new();
    }
    chart::bars(
        &format!(
            "{}: throughput per connection (fairness), by the receiver",
            r.name.clone()
        ),
        "connection",
        "throughput, Gbit/s",
        "Gbit/s",
        &values,
    )
}

/// Every run's round trips by percentile, from every bucket of its histogram.
fn latency_lines(runs: &[ReportRun<'_>]) -> Vec<Line> {
    runs.iter()
        .filter_map(|r| {
            let l = r.doc.end.rr()?.latency_ns.as_ref()?;
            Some((r, l))
        })
        .enumerate()
        .map(|(i, (r, l))| Line::new(r.name.clone(), i, chart::percentile_points(l)))
        .collect()
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}\
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.85em}\
td,th{border:1px solid #bbb;padding:3px 6px;text-align:left;vertical-align:top}\
th{background:#eee;vertical-align:bottom}.num{text-align:right;font-variant-numeric:tabular-nums}\
td.num,td:first-child{white-space:nowrap}\
div.table{overflow-x:auto;max-width:100%}\
code{background:#f4f4f4;padding:2px 4px;overflow-wrap:anywhere}\
figure{margin:1em 0}figure>svg{max-width:100%;height:auto;display:block}\
ul.legend{list-style:none;display:flex;flex-wrap:wrap;gap:0.4em 1.5em;padding:0;margin:0.3em 0 0 5em}\
ul.legend svg{vertical-align:middle}p.caption{font-style:italic;margin:1em 0 0.3em}\
p.lead{font-size:1.15em;font-weight:bold}section{margin-bottom:2.5em}";

/// The report in HTML.
pub fn render(r: &Report<'_>) -> String {
    let (title, runs) = (r.title, r.runs);
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/><meta name=\"viewport\" content=\"width=device-width\"/>");
    o.push_str(&format!(
        "<title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    ));
    o.push_str(&format!("<h1>{}</h1>", esc(title)));
    let mut summary = format!(
        "<p>Measurements made with sonde: {} run(s), report generated {}.</p>",
        runs.len(),
        esc(r.generated_at)
    );
    if let Some((a, b, cmp)) = r.comparison {
        if let Some(first) = comparison::sentences(cmp, a, b).first() {
            summary.push_str(&format!("<p class=\"lead\">{}</p>", esc(first)));
        }
    }
    summary.extend(published::summary(runs).iter().map(Table::html));
    o.push_str(&section("summary", "Purpose and summary", &summary));
    if let Some(first) = runs.first() {
        let env: String = environment::tables(first.doc)
            .iter()
            .map(Table::html)
            .collect();
        o.push_str(&section("environment", "Environment", &env));
    }
    let tests = description(
        runs,
        esc,
        |name, test, started| format!("<h3>{name}: {test}, started {started}</h3><ul>"),
        |who, command| format!("<li>{who}: <code>{command}</code></li>"),
        "</ul>",
    );
    o.push_str(&section("tests", "Test description", &tests));
    let results: String = published::tables(runs).iter().map(Table::html).collect();
    o.push_str(&section("results", "Results", &results));
    o.push_str(&section(
        "limits",
        "What limited each run",
        &limits::table(runs).html(),
    ));
    o.push_str(&section(
        "timeseries",
        "Time series: sender and receiver per interval",
        &time_series(runs),
    ));
    let lat = latency_lines(runs);
    let body = if lat.is_empty() {
        "<p>No latency measured in these runs.</p>".to_string()
    } else {
        chart::percentiles("round-trip time by percentile (client)", &lat)
    };
    o.push_str(&section("latency", "Latency percentiles", &body));
    o.push_str(&stages::html(runs));
    o.push_str(&oneway::html(runs));
    let docs: Vec<&Document> = runs.iter().map(|r| r.doc).collect();
    o.push_str(&crate::fleet::html(&docs));
    let body = match r.comparison {
        Some((a, b, cmp)) => {
            let mut s = comparison::sentences(cmp, a, b).into_iter();
            let mut body = s.next().map_or_else(String::new, |l| {
                format!("<p class=\"lead\">{}</p>", esc(&l))
            });
            body.push_str("<ul>");
            body.extend(s.map(|l| format!("<li>{}</li>", esc(&l))));
            body.push_str("</ul>");
            if let Some(l) = limit_line(r) {
                body.push_str(&format!("<p>{}</p>", esc(&l)));
            }
            body.push_str(&comparison::table(cmp, a, b).html());
            body.push_str(&comparison::chart(cmp));
            body
        }
        None => "<p>The runs do not form two labelled groups; nothing to compare.</p>".into(),
    };
    o.push_str(&section("comparison", "Comparison", &body));
    o.push_str("</body></html>\n");
    // Belt and braces for what no field escape saw (chart labels): no control survives.
    crate::safe::terminal(&o).into_owned()
}

/// The test description in one markup: each run's line (name, kind, start), then each
/// side's command line, every field escaped by `esc`; `after_run` closes a run's list.
fn description(
    runs: &[ReportRun<'_>],
    esc: fn(&str) -> String,
    run: fn(&str, TestName, &str) -> String,
    command: fn(&str, &str) -> String,
    after_run: &str,
) -> String {
    let mut o = String::new();
    for r in runs {
        o.push_str(&run(
            &esc(&r.name),
            r.doc.test,
            &esc(&r.doc.start.started_at),
        ));
        for (who, line) in invocations(r.doc) {
            o.push_str(&command(&esc(&who), &esc(&line)));
        }
        o.push_str(after_run);
    }
    o
}

/// Each interval's sender and receiver figures, for the Markdown form.
fn interval_table(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "Per interval: sent by the sender, received by the receiver (requests/s: by the client).",
        &["Run", "Interval s", "Unit", "Sent", "Received"],
    );
    for r in runs.iter().filter(|r| r.doc.end.load().is_none()) {
        let (unit, series) = published::interval_series(r.doc);
        let at = |k: usize, end: f64| {
            series
                .get(k)
                .and_then(|s| s.1.iter().find(|p| p.1 == end))
                .map_or_else(|| "n/a".into(), |p| crate::units::sig3(p.2))
        };
        for i in &r.doc.intervals {
            t.row(vec![
                r.name.clone(),
                format!("{:.1}–{:.1}", i.start_s, i.end_s),
                unit.into(),
                at(0, i.end_s),
                at(1, i.end_s),
            ]);
        }
    }
    t
}

/// The same sections in Markdown: the same tables, charts left out.
pub fn markdown(r: &Report<'_>) -> String {
    let runs = r.runs;
    let md = crate::safe::markdown;
    let mut o = format!(
        "# {}\n\n## Purpose and summary\n\nMeasurements made with sonde: {} run(s), report generated {}.\n\n",
        md(r.title),
        runs.len(),
        md(r.generated_at)
    );
    if let Some((a, b, cmp)) = r.comparison {
        if let Some(first) = comparison::sentences(cmp, a, b).first() {
            o.push_str(&format!("**{}**\n\n", md(first)));
        }
    }
    o.extend(published::summary(runs).iter().map(Table::markdown));
    if let Some(first) = runs.first() {
        o.push_str("## Environment\n\n");
        environment::tables(first.doc)
            .iter()
            .for_each(|t| o.push_str(&t.markdown()));
    }
    o.push_str("## Test description\n\n");
    // <code>, not a code span: a backtick in the command cannot close it.
    o.push_str(&description(
        runs,
        md,
        |name, test, started| format!("- {name}: {test}, started {started}\n"),
        |who, command| format!("  - {who}: <code>{command}</code>\n"),
        "",
    ));
    o.push_str("\n## Results\n\n");
    published::tables(runs)
        .iter()
        .for_each(|t| o.push_str(&t.markdown()));
    o.push_str("## What limited each run\n\n");
    o.push_str(&limits::table(runs).markdown());
    o.push_str("## Time series\n\n");
    o.push_str(&interval_table(runs).markdown());
    o.push_str("## Latency percentiles\n\n");
    let lat = latency_lines(runs);
    if lat.is_empty() {
        o.push_str("No latency measured in these runs.\n\n");
    } else {
        o.push_str("See the request/response table under Results (the HTML form plots every percentile).\n\n");
    }
    o.push_str(&stages::markdown(runs));
    o.push_str(&oneway::markdown(runs));
    let docs: Vec<&Document> = runs.iter().map(|r| r.doc).collect();
    o.push_str(&crate::fleet::markdown(&docs));
    o.push_str("\n## Comparison\n\n");
    match r.comparison {
        Some((a, b, cmp)) => {
            for s in comparison::sentences(cmp, a, b)
                .into_iter()
                .chain(limit_line(r))
            {
                o.push_str(&format!("- {}\n", md(&s)));
            }
            o.push('\n');
            o.push_str(&comparison::table(cmp, a, b).markdown());
        }
        None => o.push_str("The runs do not form two labelled groups.\n"),
    }
    crate::safe::terminal(&o).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored;
    use crate::tcp_plot::tests::{bidir, figure, thin_lines};
    use sonde_results::limit::{Evidence, Limit, LimitedBy, TransferEnd as Of};
    use sonde_results::Role;

    fn verdict(l: Limit) -> LimitedBy {
        LimitedBy {
            verdict: l,
            strength: 0.8,
            evidence: vec![Evidence {
                end: Of::Sender,
                measured_by: Some(Role::Server),
                figure: "rwnd_limited_percent".into(),
                value: 87.0,
                unit: "%".into(),
                text: "rwnd-limited 87 % of the time".into(),
            }],
            runner_up: None,
        }
    }

    fn section<'a>(html: &'a str, id: &str) -> &'a str {
        let start = html.find(&format!("<section id=\"{id}\">")).unwrap();
        &html[start..start + html[start..].find("</section>").unwrap()]
    }

    #[test]
    fn the_report_says_what_limited_each_run_plots_tcp_and_the_limits_move() {
        let mut stream = bidir(3, 4, 1);
        stream.end.limited_by = Some(verdict(Limit::ReceiverWindow));
        let ping = stored("v1-ping-udp.json");
        let run = |name: &str, doc| ReportRun {
            id: 1,
            label: None,
            doc,
            name: name.into(),
        };
        let runs = [run("bulk", &stream), run("pings", &ping)];
        let (a, b) = (verdict(Limit::ReceiverWindow), verdict(Limit::Network));
        let (da, db) = (
            Document {
                end: sonde_results::document::End {
                    limited_by: Some(a),
                    ..stream.end.clone()
                },
                ..stream.clone()
            },
            Document {
                end: sonde_results::document::End {
                    limited_by: Some(b),
                    ..stream.end.clone()
                },
                ..stream.clone()
            },
        );
        let shift = sonde_results::compare::limit_shift(&[&da], &[&db]).unwrap();
        let report = Report {
            title: "t",
            generated_at: "now",
            runs: &runs,
            comparison: Some(("a", "b", &[])),
            limits: Some(&shift),
        };
        let html = render(&report);
        let limits = section(&html, "limits");
        assert!(limits.contains("<h2>What limited each run</h2>"));
        for t in [
            "the receiver&#39;s window (receiver_window), strength 0.80",
            "rwnd-limited 87 % of the time (87.0 %, sender end, measured by the server)",
            "no verdict: ",
        ] {
            assert!(limits.contains(t), "{t} missing: {limits}");
        }
        let series = section(&html, "timeseries");
        let cwnd = figure(series, "bulk: congestion window per connection");
        assert_eq!(thin_lines(cwnd).len(), 5, "a line per connection");
        assert!(section(&html, "comparison").contains("limited by: receiver_window -&gt; network"));
        let md = markdown(&report);
        assert!(md.contains("## What limited each run"));
        assert!(
            md.contains("- limited by: receiver\\_window -&gt; network"),
            "{md}"
        );
    }
}
