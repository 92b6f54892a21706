//! A self-contained HTML report of stored runs, with the sections of the published reports:
//! purpose and summary, both hosts' environment, the test and both exact invocations,
//! result tables, sender-vs-receiver time series, latency percentiles, and comparison
//! bars with confidence intervals. Charts are inline SVG drawn by plotters; the page loads
//! nothing from the network. The markup is well-formed XML (XHTML), so it can be checked.

use plotters::prelude::*;
use sonde_results::compare::Comparison;
use sonde_results::inventory::cpu_list;
use sonde_results::Document;

/// What a report is made of: its title, when, the runs, and the comparison between two
/// labelled groups of them, if they form two.
#[derive(Clone, Copy)]
pub struct Report<'a> {
    pub title: &'a str,
    pub generated_at: &'a str,
    pub runs: &'a [ReportRun<'a>],
    pub comparison: Option<(&'a str, &'a str, &'a [Comparison])>,
}

/// A run as the report sees it.
pub struct ReportRun<'a> {
    pub id: i64,
    pub label: Option<String>,
    pub doc: &'a Document,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The tools an engine ran (DPDK's testpmd), by side, with their exact command lines.
fn tool_commands(doc: &Document) -> Vec<(sonde_results::Role, &str)> {
    doc.end
        .packets
        .as_ref()
        .map(|p| p.tool_commands())
        .unwrap_or_default()
}

fn name(r: &ReportRun<'_>) -> String {
    format!(
        "run {}{}",
        r.id,
        r.label
            .as_ref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    )
}

/// One (name, points) series per line.
type Series = (String, Vec<(f64, f64)>);

fn line_chart(title: &str, x_desc: &str, y_desc: &str, series: &[Series], log_x: bool) -> String {
    let mut svg = String::new();
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.1.iter().map(|p| p.1));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y1 = ys.fold(0.0f64, f64::max);
    if x0 > x1 {
        return String::new();
    }
    {
        let root = SVGBackend::with_string(&mut svg, (760, 320)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let built = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..(x1 + 1e-9).max(x0 + 1e-9), 0.0..(y1 * 1.1).max(1e-9));
        if let Ok(mut chart) = built {
            let _ = chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&|x| {
                    if log_x {
                        format!("{}", 1.0 - 10f64.powf(-x))
                    } else {
                        format!("{x:.1}")
                    }
                })
                .draw();
            for (i, (label, pts)) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                if let Ok(a) =
                    chart.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                {
                    a.label(label.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
                }
            }
            let _ = chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw();
        }
    }
    strip_xml_decl(svg)
}

fn bar_chart(cmp: &[Comparison]) -> String {
    let mut svg = String::new();
    if cmp.is_empty() {
        return svg;
    }
    let lo = cmp
        .iter()
        .map(|c| c.ci95_low_percent)
        .fold(0.0f64, f64::min)
        - 5.0;
    let hi = cmp
        .iter()
        .map(|c| c.ci95_high_percent)
        .fold(0.0f64, f64::max)
        + 5.0;
    {
        let root = SVGBackend::with_string(&mut svg, (760, 60 + 40 * cmp.len() as u32))
            .into_drawing_area();
        let _ = root.fill(&WHITE);
        if let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                "change of B against A, with 95 % intervals",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(200)
            .build_cartesian_2d(lo..hi, 0.0..cmp.len() as f64)
        {
            let labels: Vec<String> = cmp.iter().map(|c| c.metric.clone()).collect();
            let _ = chart
                .configure_mesh()
                .x_desc("change, %")
                .y_labels(cmp.len())
                .y_label_formatter(&|y| labels.get(*y as usize).cloned().unwrap_or_default())
                .draw();
            for (i, c) in cmp.iter().enumerate() {
                let y = i as f64;
                let good = (c.change_percent >= 0.0) == c.higher_is_better;
                let color = if good { GREEN } else { RED };
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.25), (c.change_percent, y + 0.75)],
                    color.mix(0.6).filled(),
                )));
                let _ = chart.draw_series(std::iter::once(PathElement::new(
                    vec![
                        (c.ci95_low_percent, y + 0.5),
                        (c.ci95_high_percent, y + 0.5),
                    ],
                    BLACK.stroke_width(2),
                )));
            }
        }
    }
    strip_xml_decl(svg)
}

/// Inline SVG must not carry its own XML declaration.
pub(crate) fn strip_xml_decl(svg: String) -> String {
    match svg.find("<svg") {
        Some(i) => svg[i..].to_string(),
        None => svg,
    }
}

/// One row of the environment table: how to read it off a host.
type HostField = Box<dyn Fn(&sonde_results::HostInfo) -> String>;

fn environment(doc: &Document) -> String {
    let mut o = String::from("<table><tr><th></th><th>client</th><th>server</th></tr>");
    let host = |h: Option<&sonde_results::HostInfo>,
                f: &dyn Fn(&sonde_results::HostInfo) -> String| {
        h.map(f).unwrap_or_else(|| "n/a".into())
    };
    let c = Some(&doc.start.client);
    let s = doc.start.server.as_ref();
    let rows: Vec<(&str, HostField)> = vec![
        ("host", Box::new(|h| h.hostname.clone())),
        ("kernel", Box::new(|h| h.kernel.clone().unwrap_or_default())),
        ("CPU", Box::new(|h| h.cpu_model.clone().unwrap_or_default())),
        (
            "layout",
            Box::new(|h| {
                h.inventory
                    .as_ref()
                    .map(|i| {
                        format!(
                            "{} CPUs, {} socket(s), {} cores, {} thread(s)/core",
                            i.cpu.online.len(),
                            i.cpu.sockets,
                            i.cpu.cores,
                            i.cpu.threads_per_core
                        )
                    })
                    .unwrap_or_default()
            }),
        ),
        (
            "NUMA",
            Box::new(|h| {
                h.inventory
                    .as_ref()
                    .map(|i| {
                        i.cpu
                            .numa_nodes
                            .iter()
                            .map(|n| format!("node{}: {}", n.node, cpu_list(&n.cpus)))
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default()
            }),
        ),
        (
            "NICs",
            Box::new(|h| {
                h.inventory
                    .as_ref()
                    .map(|i| {
                        i.nics
                            .iter()
                            .map(|n| {
                                format!(
                                    "{} ({}, {} rx queues{})",
                                    n.name,
                                    n.driver.clone().unwrap_or_else(|| "?".into()),
                                    n.rx_queues,
                                    n.accelerated_networking_vf
                                        .as_ref()
                                        .map(|v| format!(", AN VF {v}"))
                                        .unwrap_or_default()
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                    .unwrap_or_default()
            }),
        ),
    ];
    for (label, f) in &rows {
        o.push_str(&format!(
            "<tr><th>{label}</th><td>{}</td><td>{}</td></tr>",
            esc(&host(c, f)),
            esc(&host(s, f))
        ));
    }
    o.push_str("</table>");
    o
}

fn headline_rows(runs: &[ReportRun<'_>]) -> String {
    let mut o = String::from("<table><tr><th>run</th><th>test</th><th>metric</th><th>value</th><th>measured by</th></tr>");
    for r in runs {
        for (m, v, _) in sonde_results::compare::metrics(r.doc) {
            let by = if m.starts_with("receiver") || m.starts_with("received") {
                "server"
            } else {
                "client"
            };
            o.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{m}</td><td>{v:.3}</td><td>{by}</td></tr>",
                esc(&name(r)),
                esc(&r.doc.test)
            ));
        }
        if r.doc.end.partial {
            o.push_str(&format!(
                "<tr><td>{}</td><td colspan=\"4\">PARTIAL: {}</td></tr>",
                esc(&name(r)),
                esc(r.doc.end.error.as_deref().unwrap_or("cut short"))
            ));
        }
    }
    o.push_str("</table>");
    o
}

/// The report in HTML.
pub fn render(r: &Report<'_>) -> String {
    let (title, generated_at, runs, comparison) = (r.title, r.generated_at, r.runs, r.comparison);
    let mut o = String::new();
    o.push_str("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>");
    o.push_str(&format!("<title>{}</title>", esc(title)));
    o.push_str("<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}code{background:#f6f6f6;padding:2px 4px}section{margin-bottom:2em}</style></head><body>");
    o.push_str(&format!("<h1>{}</h1>", esc(title)));
    o.push_str(&format!("<section id=\"summary\"><h2>Purpose and summary</h2><p>Measurements made with sonde, {} run(s), report generated {}. Every figure names the side that measured it.</p>{}</section>", runs.len(), esc(generated_at), headline_rows(runs)));
    if let Some(first) = runs.first() {
        o.push_str(&format!(
            "<section id=\"environment\"><h2>Environment</h2>{}</section>",
            environment(first.doc)
        ));
    }
    o.push_str("<section id=\"tests\"><h2>Test description</h2>");
    for r in runs {
        o.push_str(&format!(
            "<h3>{}: {}</h3><p>controller: <code>{}</code></p><p>agent: <code>{}</code></p>",
            esc(&name(r)),
            esc(&r.doc.test),
            esc(&r.doc.start.command),
            esc(r.doc.start.server_command.as_deref().unwrap_or("n/a")),
        ));
        if let Some(c) = &r.doc.start.client_agent {
            o.push_str(&format!(
                "<p>client side run by the agent at {}: <code>{}</code></p>",
                esc(&c.address),
                esc(c.command.as_deref().unwrap_or("n/a"))
            ));
        }
        for (role, command) in tool_commands(r.doc) {
            o.push_str(&format!(
                "<p>{}'s tool: <code>{}</code></p>",
                role.as_str(),
                esc(command)
            ));
        }
        o.push_str(&format!(
            "<p>started {}, agent at {}</p>",
            esc(&r.doc.start.started_at),
            esc(&r.doc.start.server_address)
        ));
    }
    o.push_str("</section><section id=\"timeseries\"><h2>Time series: sender and receiver per interval</h2>");
    for r in runs {
        let d = r.doc;
        if d.end.load.is_some() {
            o.push_str(&crate::load_plot::charts(&name(r), d));
            continue;
        }
        let pick = |f: &dyn Fn(&sonde_results::document::IntervalFigures) -> Option<f64>| -> Vec<(f64, f64)> { d.intervals.iter().filter_map(|i| Some((i.end_s, f(i)?))).collect() };
        let series: Vec<Series> = if d.test == "pps" {
            vec![
                (
                    "sent packets/s (client)".into(),
                    pick(&|i| i.sender.as_ref()?.packets_per_second),
                ),
                (
                    "received packets/s (server)".into(),
                    pick(&|i| i.receiver.as_ref()?.packets_per_second),
                ),
            ]
        } else if d.test == "stream" {
            vec![
                (
                    "sent Gbit/s (client)".into(),
                    pick(&|i| Some(i.sender.as_ref()?.bits_per_second / 1e9)),
                ),
                (
                    "received Gbit/s (server)".into(),
                    pick(&|i| Some(i.receiver.as_ref()?.bits_per_second / 1e9)),
                ),
            ]
        } else {
            vec![(
                "requests/s (client)".into(),
                pick(&|i| i.requests_per_second),
            )]
        };
        o.push_str(&line_chart(
            &name(r),
            "time, s",
            if d.test == "stream" {
                "Gbit/s"
            } else {
                "per second"
            },
            &series,
            false,
        ));
    }
    o.push_str("</section><section id=\"latency\"><h2>Latency percentiles</h2>");
    let lat: Vec<Series> = runs
        .iter()
        .filter_map(|r| {
            let l = r.doc.end.latency_ns.as_ref()?;
            // x = log10(1 / (1 - q)): each decade of the tail gets the same width.
            let pts = [
                (0.5, l.p50),
                (0.9, l.p90),
                (0.99, l.p99),
                (0.999, l.p999),
                (0.9999, l.p9999),
            ]
            .iter()
            .map(|&(q, v)| ((1.0f64 / (1.0 - q)).log10(), v as f64 / 1e3))
            .collect();
            Some((name(r), pts))
        })
        .collect();
    if lat.is_empty() {
        o.push_str("<p>No latency measured in these runs.</p>");
    } else {
        o.push_str(&line_chart(
            "round-trip time by percentile",
            "percentile (log scale of 1/(1-q))",
            "RTT, µs",
            &lat,
            true,
        ));
    }
    o.push_str("</section>");
    let docs: Vec<&Document> = runs.iter().map(|r| r.doc).collect();
    o.push_str(&crate::fleet::html(&docs));
    o.push_str("<section id=\"comparison\"><h2>Comparison</h2>");
    match comparison {
        Some((a, b, cmp)) => {
            o.push_str(&format!("<p>A = {}, B = {}.</p>", esc(a), esc(b)));
            o.push_str("<table><tr><th>metric</th><th>A median</th><th>B median</th><th>change</th><th>95 % interval</th><th>verdict</th></tr>");
            for c in cmp {
                o.push_str(&format!(
                    "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:+.1} %</td><td>[{:+.1} %, {:+.1} %]</td><td>{:?}</td></tr>",
                    c.metric, c.median_a, c.median_b, c.change_percent, c.ci95_low_percent, c.ci95_high_percent, c.verdict
                ));
            }
            o.push_str("</table>");
            o.push_str(&bar_chart(cmp));
        }
        None => o.push_str("<p>The runs do not form two labelled groups; nothing to compare.</p>"),
    }
    o.push_str("</section></body></html>\n");
    o
}

/// The same sections in Markdown, tables instead of charts.
pub fn markdown(r: &Report<'_>) -> String {
    let (title, generated_at, runs, comparison) = (r.title, r.generated_at, r.runs, r.comparison);
    let mut o = format!("# {title}\n\n## Purpose and summary\n\nMeasurements made with sonde, {} run(s), report generated {generated_at}.\n\n| run | test | metric | value |\n| --- | --- | --- | ---: |\n", runs.len());
    for r in runs {
        for (m, v, _) in sonde_results::compare::metrics(r.doc) {
            o.push_str(&format!(
                "| {} | {} | {m} | {v:.3} |\n",
                name(r),
                r.doc.test
            ));
        }
    }
    if let Some(r) = runs.first() {
        o.push_str(&format!(
            "\n## Environment\n\nclient: {} ({}), server: {}\n",
            r.doc.start.client.hostname,
            r.doc.start.client.kernel.clone().unwrap_or_default(),
            r.doc
                .start
                .server
                .as_ref()
                .map(|s| s.hostname.clone())
                .unwrap_or_default()
        ));
    }
    o.push_str("\n## Test description\n\n");
    for r in runs {
        o.push_str(&format!(
            "- {}: `{}` against `{}`\n",
            name(r),
            r.doc.start.command,
            r.doc.start.server_command.as_deref().unwrap_or("n/a")
        ));
        if let Some(c) = &r.doc.start.client_agent {
            let command = c.command.as_deref().unwrap_or("n/a");
            o.push_str(&format!(
                "  - client side run by the agent at {}: `{command}`\n",
                c.address
            ));
        }
        for (role, command) in tool_commands(r.doc) {
            o.push_str(&format!("  - {}'s tool: `{command}`\n", role.as_str()));
        }
    }
    o.push_str(
        "\n## Time series\n\n| run | end s | sender | receiver |\n| --- | ---: | ---: | ---: |\n",
    );
    for r in runs {
        for i in &r.doc.intervals {
            let f = |s: &Option<sonde_results::document::IntervalSide>| {
                s.as_ref().map_or("-".into(), |s| {
                    format!("{:.3e}", s.packets_per_second.unwrap_or(s.bits_per_second))
                })
            };
            o.push_str(&format!(
                "| {} | {:.1} | {} | {} |\n",
                name(r),
                i.end_s,
                f(&i.sender),
                f(&i.receiver)
            ));
        }
    }
    o.push_str("\n## Latency percentiles\n\n| run | p50 µs | p99 µs | p99.9 µs | p99.99 µs |\n| --- | ---: | ---: | ---: | ---: |\n");
    for r in runs {
        if let Some(l) = &r.doc.end.latency_ns {
            o.push_str(&format!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                name(r),
                l.p50 as f64 / 1e3,
                l.p99 as f64 / 1e3,
                l.p999 as f64 / 1e3,
                l.p9999 as f64 / 1e3
            ));
        }
    }
    let docs: Vec<&Document> = runs.iter().map(|r| r.doc).collect();
    o.push_str(&crate::fleet::markdown(&docs));
    o.push_str("\n## Comparison\n\n");
    if let Some((a, b, cmp)) = comparison {
        o.push_str(&format!("A = {a}, B = {b}\n\n| metric | A | B | change | 95 % interval | verdict |\n| --- | ---: | ---: | ---: | --- | --- |\n"));
        for c in cmp {
            o.push_str(&format!(
                "| {} | {:.3} | {:.3} | {:+.1} % | [{:+.1} %, {:+.1} %] | {:?} |\n",
                c.metric,
                c.median_a,
                c.median_b,
                c.change_percent,
                c.ci95_low_percent,
                c.ci95_high_percent,
                c.verdict
            ));
        }
    } else {
        o.push_str("The runs do not form two labelled groups.\n");
    }
    o
}
