//! A fleet's runs as the fleet's reader wants them: a source x destination matrix per
//! figure (throughput received, RTT P50, STAMP loss toward routers), values in the cells of a heatmap, and the same
//! figures grouped by the agents' labels (zone to zone, pod network against host
//! network). Several runs of one pair give their median.

use std::collections::BTreeMap;

use sonde_results::compare::median;
use sonde_results::Document;

/// One figure of the matrix: its name, its unit, the side that measured it, and how a
/// run gives it.
struct Figure {
    name: &'static str,
    unit: &'static str,
    by: &'static str,
    of: fn(&Document) -> Option<f64>,
}

const FIGURES: [Figure; 3] = [
    Figure {
        name: "throughput received",
        unit: "Gbit/s",
        by: "measured by the destination",
        of: |d| Some(d.end.stream()?.receiver.as_ref()?.bits_per_second / 1e9),
    },
    Figure {
        name: "RTT P50",
        unit: "µs",
        by: "measured by the source",
        of: |d| {
            // An agent's round trips, or a STAMP reflector's (a router's) net of its turnaround.
            let l = match d.end.rr() {
                Some(rr) => rr.latency_ns.as_ref(),
                None => d.end.stamp()?.latency_ns.as_ref(),
            };
            Some(l?.p50 as f64 / 1e3)
        },
    },
    Figure {
        name: "STAMP packets lost",
        unit: "%",
        by: "measured by the source",
        of: |d| {
            let s = d.end.stamp()?;
            (s.sent > 0).then(|| 100.0 * s.lost as f64 / s.sent as f64)
        },
    },
];

/// A figure's median per (source, destination) of one fleet, and the agents' labels.
struct Matrix {
    agents: Vec<String>,
    cells: BTreeMap<(String, String), f64>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// The fleets among `docs`, by name, in order of first appearance.
fn fleets<'a>(docs: &[&'a Document]) -> Vec<(String, Vec<&'a Document>)> {
    let mut out: Vec<(String, Vec<&Document>)> = Vec::new();
    for d in docs {
        let Some(f) = &d.start.fleet else { continue };
        match out.iter_mut().find(|(n, _)| *n == f.fleet) {
            Some((_, v)) => v.push(d),
            None => out.push((f.fleet.clone(), vec![d])),
        }
    }
    out
}

fn matrix(docs: &[&Document], figure: &Figure) -> Option<Matrix> {
    let mut values: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut labels = BTreeMap::new();
    for d in docs {
        let f = d.start.fleet.as_ref()?;
        labels.insert(f.source.clone(), f.source_labels.clone());
        labels.insert(f.destination.clone(), f.destination_labels.clone());
        if let Some(v) = (figure.of)(d).filter(|v| v.is_finite()) {
            let pair = (f.source.clone(), f.destination.clone());
            values.entry(pair).or_default().push(v);
        }
    }
    if values.is_empty() {
        return None;
    }
    Some(Matrix {
        agents: labels.keys().cloned().collect(),
        cells: values.into_iter().map(|(k, v)| (k, median(&v))).collect(),
        labels,
    })
}

/// Three significant digits.
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// The heatmap: a cell per pair, darker for larger values, the value written in it.
fn heatmap(m: &Matrix, fig: &Figure) -> String {
    let (cell, left, top) = (64.0, 80.0, 44.0);
    let n = m.agents.len() as f64;
    let (w, h) = (left + n * cell + 10.0, top + n * cell + 10.0);
    let max = m.cells.values().copied().fold(f64::MIN, f64::max);
    let min = m.cells.values().copied().fold(f64::MAX, f64::min);
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\"><title>{} by source (rows) and destination (columns), {}</title>",
        fig.name, fig.unit
    );
    o += "<text x=\"4\" y=\"14\" font-size=\"11\">source \u{2193} / destination \u{2192}</text>";
    for (i, a) in m.agents.iter().enumerate() {
        let mid = i as f64 * cell + cell / 2.0;
        o += &format!(
            "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>",
            left + mid,
            top - 8.0,
            esc(a)
        );
        o += &format!(
            "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            top + mid + 4.0,
            esc(a)
        );
    }
    for (r, src) in m.agents.iter().enumerate() {
        for (c, dst) in m.agents.iter().enumerate() {
            let (x, y) = (left + c as f64 * cell, top + r as f64 * cell);
            let Some(v) = m.cells.get(&(src.clone(), dst.clone())) else {
                o += &format!("<rect x=\"{x}\" y=\"{y}\" width=\"{cell}\" height=\"{cell}\" fill=\"#ffffff\" stroke=\"#cccccc\"/>");
                continue;
            };
            // Lightness from 92 % (smallest) to 30 % (largest): distinct in grey print too.
            let t = if max > min {
                (v - min) / (max - min)
            } else {
                1.0
            };
            let light = 92.0 - 62.0 * t;
            let ink = if light < 55.0 { "#ffffff" } else { "#000000" };
            o += &format!("<rect x=\"{x}\" y=\"{y}\" width=\"{cell}\" height=\"{cell}\" fill=\"hsl(210,60%,{light:.0}%)\" stroke=\"#ffffff\"/>");
            o += &format!("<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\" fill=\"{ink}\">{}</text>", x + cell / 2.0, y + cell / 2.0 + 5.0, sig3(*v));
        }
    }
    o + "</svg>"
}

/// Per label key: each (source value, destination value) group's median and pair count.
fn by_label(m: &Matrix) -> Vec<(String, String, String, f64, usize)> {
    let keys: std::collections::BTreeSet<&String> =
        m.labels.values().flat_map(|l| l.keys()).collect();
    let mut rows = Vec::new();
    for key in keys {
        let mut groups: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for ((s, d), v) in &m.cells {
            let value = |a: &String| m.labels.get(a).and_then(|l| l.get(key)).cloned();
            if let (Some(sv), Some(dv)) = (value(s), value(d)) {
                groups.entry((sv, dv)).or_default().push(*v);
            }
        }
        for ((sv, dv), v) in groups {
            let n = v.len();
            rows.push((key.clone(), sv, dv, median(&v), n));
        }
    }
    rows
}

use crate::html::page::esc;
use crate::safe::markdown as md;

/// The HTML section; empty when no run belongs to a fleet.
pub fn html(docs: &[&Document]) -> String {
    let mut o = String::new();
    for (name, runs) in fleets(docs) {
        o += &format!("<h3>Fleet {} ({} runs)</h3>", esc(&name), runs.len());
        for fig in &FIGURES {
            let Some(m) = matrix(&runs, fig) else {
                continue;
            };
            o += &format!(
                "<h4>{}, {} (median per pair, {})</h4>{}",
                fig.name,
                fig.unit,
                fig.by,
                heatmap(&m, fig)
            );
            let rows = by_label(&m);
            if rows.is_empty() {
                continue;
            }
            o += &format!("<table><tr><th>label</th><th>source</th><th>destination</th><th>{}, {} (median of pairs)</th><th>pairs</th></tr>", fig.name, fig.unit);
            for (k, s, d, v, n) in rows {
                o += &format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{n}</td></tr>",
                    esc(&k),
                    esc(&s),
                    esc(&d),
                    sig3(v)
                );
            }
            o += "</table>";
        }
    }
    if o.is_empty() {
        return o;
    }
    format!("<section id=\"fleet\"><h2>Fleet: source x destination</h2>{o}</section>")
}

/// The same matrices and label groups as Markdown tables.
pub fn markdown(docs: &[&Document]) -> String {
    let mut o = String::new();
    for (name, runs) in fleets(docs) {
        o += &format!("\n## Fleet {}\n", md(&name));
        for fig in &FIGURES {
            let Some(m) = matrix(&runs, fig) else {
                continue;
            };
            o += &format!(
                "\n{}, {} (median per pair, {}; rows: source, columns: destination)\n\n| source |",
                fig.name, fig.unit, fig.by
            );
            for a in &m.agents {
                o += &format!(" {} |", md(a));
            }
            o += &format!("\n| --- |{}\n", " ---: |".repeat(m.agents.len()));
            for s in &m.agents {
                o += &format!("| {} |", md(s));
                for d in &m.agents {
                    let v = m.cells.get(&(s.clone(), d.clone()));
                    o += &format!(" {} |", v.map_or("".into(), |v| sig3(*v)));
                }
                o += "\n";
            }
            let rows = by_label(&m);
            if !rows.is_empty() {
                o += &format!("\n| label | source | destination | {}, {} | pairs |\n| --- | --- | --- | ---: | ---: |\n", fig.name, fig.unit);
                for (k, s, d, v, n) in rows {
                    o += &format!(
                        "| {} | {} | {} | {} | {n} |\n",
                        md(&k),
                        md(&s),
                        md(&d),
                        sig3(v)
                    );
                }
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(16.384), "16.4");
        assert_eq!(sig3(86.78), "86.8");
        assert_eq!(sig3(1234.4), "1234");
        assert_eq!(sig3(0.01234), "0.0123");
    }
}
