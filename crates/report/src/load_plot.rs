//! A load test's plots: both pings' round trip over time and the load's throughput each
//! way, on one clock with the phases shaded, then each phase's round-trip distribution.

use plotters::prelude::*;
use sonde_results::document::load::{LoadEnd, LoadInterval};
use sonde_results::{Document, LatencySummary, Phase};

/// One named line, in segments that are not joined (a phase's intervals each).
type Line = (String, Vec<Vec<(f64, f64)>>);

/// Light fills that stay apart in grey print: white, then three steps of grey-blue.
fn shade(p: Phase) -> RGBColor {
    match p {
        Phase::Idle => RGBColor(255, 255, 255),
        Phase::Upload => RGBColor(222, 232, 245),
        Phase::Download => RGBColor(196, 212, 235),
        Phase::Both => RGBColor(165, 188, 222),
    }
}

use crate::chart::INK;

/// Every phase's span on the load test's clock.
fn spans(doc: &Document) -> Vec<(Phase, f64, f64)> {
    let mut out: Vec<(Phase, f64, f64)> = Vec::new();
    for i in &doc.intervals {
        let Some(l) = i.load() else { continue };
        match out.last_mut() {
            Some(last) if last.0 == l.phase => last.2 = i.end_s,
            _ => out.push((l.phase, i.start_s, i.end_s)),
        }
    }
    out
}

/// `y` of every interval that has it, at the interval's end, one segment per phase: the
/// gap between two phases is not measured, so no line crosses it.
fn points(doc: &Document, y: impl Fn(&LoadInterval) -> Option<f64>) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<(Phase, Vec<(f64, f64)>)> = Vec::new();
    for i in &doc.intervals {
        let Some(l) = i.load() else { continue };
        let Some(v) = y(l) else { continue };
        match out.last_mut() {
            Some((p, seg)) if *p == l.phase => seg.push((i.end_s, v)),
            _ => out.push((l.phase, vec![(i.end_s, v)])),
        }
    }
    out.into_iter().map(|(_, seg)| seg).collect()
}

/// Draws `lines` in distinct inks, each named once in the legend.
fn draw_lines<DB: DrawingBackend, X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    lines: &[Line],
) {
    for (i, (label, segments)) in lines.iter().enumerate() {
        let color = INK[i % INK.len()];
        for (n, seg) in segments.iter().enumerate() {
            let drawn =
                chart.draw_series(LineSeries::new(seg.iter().copied(), color.stroke_width(2)));
            if let (0, Ok(a)) = (n, drawn) {
                a.label(label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            }
        }
    }
}

/// A chart over time with the phases shaded and named.
fn over_time(title: &str, y_desc: &str, doc: &Document, lines: &[Line]) -> String {
    let spans = spans(doc);
    let x1 = spans.last().map_or(1.0, |s| s.2);
    let y1 = lines
        .iter()
        .flat_map(|l| l.1.iter().flatten().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x1, 0.0..y1)
        else {
            return String::new();
        };
        let _ = chart.draw_series(
            spans
                .iter()
                .map(|&(p, a, b)| Rectangle::new([(a, 0.0), (b, y1)], shade(p).filled())),
        );
        let _ = chart.draw_series(
            spans
                .iter()
                .map(|&(p, a, _)| Text::new(p.as_str(), (a, y1 * 0.97), ("sans-serif", 13))),
        );
        let _ = chart
            .configure_mesh()
            .x_desc("time since start, s")
            .y_desc(y_desc)
            .x_label_formatter(&|x| crate::chart::tick(*x))
            .y_label_formatter(&|y| crate::chart::tick(*y))
            .draw();
        draw_lines(&mut chart, lines);
        let _ = chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw();
    }
    crate::chart::strip_xml_decl(svg)
}

/// A phase's distribution, (RTT µs, fraction at or below): every bucket of its histogram,
/// or its summary's percentiles in a document that kept none.
fn cdf(l: &LatencySummary) -> Vec<(f64, f64)> {
    l.curve()
        .iter()
        .map(|&(q, v)| (v as f64 / 1e3, q))
        .collect()
}

/// Each phase's UDP round-trip distribution, on a log time axis (idle and loaded differ by
/// orders of magnitude).
fn cdfs(l: &LoadEnd) -> String {
    let lines: Vec<Line> = l
        .phases
        .iter()
        .filter_map(|p| {
            Some((
                p.phase.as_str().to_string(),
                vec![cdf(p.udp_rtt_ns.as_ref()?)],
            ))
        })
        .collect();
    let (lo, hi) = lines
        .iter()
        .flat_map(|l| l.1.iter().flatten().map(|p| p.0))
        .fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if lines.is_empty() || lo <= 0.0 {
        return String::new();
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                "UDP ping round trip by phase (every histogram bucket)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0.0..1.0)
        else {
            return String::new();
        };
        let _ = chart
            .configure_mesh()
            .x_desc("round trip, µs (log)")
            .x_label_formatter(&|x| crate::chart::tick(*x))
            .y_desc("fraction of pings")
            .y_label_formatter(&|y| format!("{:.0} %", y * 100.0))
            .draw();
        draw_lines(&mut chart, &lines);
        let _ = chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw();
    }
    crate::chart::strip_xml_decl(svg)
}

/// The load test's three charts, or nothing for another test.
pub fn charts(title: &str, doc: &Document) -> String {
    let Some(l) = doc.end.load() else {
        return String::new();
    };
    let us = |v: Option<&LatencySummary>| v.map(|v| v.p50 as f64 / 1e3);
    let mbit = |v: Option<f64>| v.map(|v| v / 1e6);
    let rtt = [
        (
            "UDP ping P50".to_string(),
            points(doc, |l| us(l.udp_rtt_ns.as_ref())),
        ),
        (
            "TCP ping P50".to_string(),
            points(doc, |l| us(l.tcp_rtt_ns.as_ref())),
        ),
    ];
    let rate = [
        (
            "upload (agent received)".to_string(),
            points(doc, |l| mbit(l.load.upload_bits_per_second)),
        ),
        (
            "download (controller received)".to_string(),
            points(doc, |l| mbit(l.load.download_bits_per_second)),
        ),
    ];
    let mut o = over_time(
        &format!("{title}: round trip under load"),
        "round trip, µs",
        doc,
        &rtt,
    );
    o.push_str(&over_time(
        &format!("{title}: load throughput"),
        "Mbit/s",
        doc,
        &rate,
    ));
    o.push_str(&cdfs(l));
    o
}
