//! Charts as inline SVG (plotters), drawn to be read on screen and in grey print: inks of
//! distinct lightness (then dashes), units on both axes, ticks without needless decimals,
//! and the legend beside the chart in HTML, where it cannot cover a line.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use sonde_results::LatencySummary;

use crate::units::sig3;

/// Line inks whose greys differ by at least 45 of 255 (ITU-R BT.601 luma) and stay dark
/// enough to read on white: black, blue, vermilion, amber.
pub const INK: [RGBColor; 4] = [
    RGBColor(0, 0, 0),
    RGBColor(11, 79, 156),
    RGBColor(226, 97, 30),
    RGBColor(232, 177, 15),
];

/// Chart size in SVG units; the page scales it down to its width.
pub(crate) const SIZE: (u32, u32) = (900, 340);

/// One line of a chart: its name in the legend, its ink (an index into [`INK`]; past the
/// last ink the line is dashed), and its points. Thin lines (one per connection) are many
/// of one name: the legend names them once.
#[derive(Clone)]
pub struct Line {
    pub name: String,
    pub ink: usize,
    pub dashed: bool,
    pub thin: bool,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    pub fn new(name: impl Into<String>, ink: usize, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.into(),
            ink: ink % INK.len(),
            dashed: ink >= INK.len(),
            thin: false,
            points,
        }
    }

    pub fn thin(self) -> Line {
        Line { thin: true, ..self }
    }

    pub fn dashed(self) -> Line {
        Line {
            dashed: true,
            ..self
        }
    }
}

/// A tick label: integers without `.0` and with thousands separators, others to three
/// significant digits.
pub fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 * v.abs().max(1.0) {
        crate::units::thousands(v.round() as i64)
    } else {
        let s = sig3(v);
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Inline SVG must not carry its own XML declaration.
pub fn strip_xml_decl(svg: String) -> String {
    match svg.find("<svg") {
        Some(i) => svg[i..].to_string(),
        None => svg,
    }
}

/// The legend of `lines`, as HTML under the chart: a swatch of each line's ink and dash,
/// once per name.
pub fn legend(lines: &[Line]) -> String {
    let mut o = String::from("<ul class=\"legend\">");
    let mut named: Vec<&str> = Vec::new();
    for l in lines {
        if named.contains(&l.name.as_str()) {
            continue;
        }
        named.push(&l.name);
        let RGBColor(r, g, b) = INK[l.ink];
        let dash = if l.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        o.push_str(&format!(
            "<li><svg width=\"28\" height=\"10\"><line x1=\"0\" y1=\"5\" x2=\"28\" y2=\"5\" stroke=\"#{r:02x}{g:02x}{b:02x}\" stroke-width=\"3\"{dash}/></svg> {}</li>",
            crate::html::page::esc(&l.name)
        ));
    }
    o.push_str("</ul>");
    o
}

/// An axis of a chart: its description with unit, its range, its ticks (`None`: round
/// ones) and how a tick is labelled.
pub struct Axis<'a> {
    pub desc: &'a str,
    pub range: (f64, f64),
    pub ticks: Option<Vec<f64>>,
    pub label: &'a dyn Fn(f64) -> String,
}

impl Axis<'_> {
    pub(crate) fn ticked(&self) -> TickedAxis {
        let (lo, hi) = self.range;
        let hi = hi.max(lo + 1e-9);
        TickedAxis {
            inner: (lo..hi).into(),
            ticks: self.ticks.clone().unwrap_or_else(|| nice_ticks(lo, hi)),
        }
    }
}

/// Round ticks over `lo..hi`, about six: steps of 1, 2 or 5 times a power of ten.
pub fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let raw = ((hi - lo) / 6.0).max(1e-12);
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// An f64 axis with its ticks where we put them (plotters' own key-point axis has no
/// formatter for f64, so its labels could not be ours).
pub(crate) struct TickedAxis {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// What every chart starts from: its title, margins and room for the axes' labels.
pub(crate) fn framed<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(78);
    b
}

/// A line chart of `lines` on axes `x` and `y`, with its legend under it.
pub fn plot(title: &str, x: &Axis<'_>, y: &Axis<'_>, lines: &[Line]) -> String {
    if lines.iter().all(|l| l.points.is_empty()) {
        return String::new();
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let _ = root.fill(&WHITE);
        let built = framed(&root, title).build_cartesian_2d(x.ticked(), y.ticked());
        let Ok(mut chart) = built else {
            return String::new();
        };
        let _ = chart
            .configure_mesh()
            .x_desc(x.desc)
            .y_desc(y.desc)
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 17))
            .x_label_formatter(&|v| (x.label)(*v))
            .y_label_formatter(&|v| (y.label)(*v))
            .bold_line_style(RGBColor(225, 225, 225))
            .light_line_style(TRANSPARENT)
            .draw();
        for l in lines {
            let width = match (l.thin, l.ink) {
                (true, _) => 1,
                (false, 3) => 3,
                (false, _) => 2,
            };
            let style = INK[l.ink].stroke_width(width);
            let pts = l.points.iter().copied();
            let _ = if l.dashed {
                chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))
            } else {
                chart.draw_series(LineSeries::new(pts, style))
            };
        }
    }
    format!("<figure>{}{}</figure>", strip_xml_decl(svg), legend(lines))
}

/// A line chart from y = 0, with round ticks on y.
pub fn lines(title: &str, x: &Axis<'_>, y_desc: &str, lines: &[Line]) -> String {
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y = Axis {
        desc: y_desc,
        range: (0.0, (top * 1.1).max(1e-9)),
        ticks: None,
        label: &tick,
    };
    plot(title, x, &y, lines)
}

/// A value's interval as a step: flat from its start to its end, as it was measured.
pub fn steps(intervals: impl Iterator<Item = (f64, f64, f64)>) -> Vec<(f64, f64)> {
    intervals.flat_map(|(a, b, v)| [(a, v), (b, v)]).collect()
}

/// A run's round trips by percentile from every bucket of its histogram (or its summary's
/// five percentiles, for a document that kept no histogram): x is −log10(1 − q), so each
/// "nine" of the tail gets the same width; the last point is the maximum.
pub fn percentile_points(l: &LatencySummary) -> Vec<(f64, f64)> {
    let us = |v: u64| v as f64 / 1e3;
    let x = |q: f64| -(1.0 - q).log10();
    let curve = l.curve();
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(curve.len());
    for (q, v) in curve {
        let last = out.last().map_or(0.0, |p| p.0);
        let at = if q >= 1.0 {
            last.max((l.count.max(2) as f64).log10())
        } else {
            x(q)
        };
        out.push((at, us(v)));
    }
    out
}

/// Percentile chart of `lines` made by [`percentile_points`]: ticks at 50 %, 90 %, 99 %…
/// and a logarithmic time axis, so that the body and the tail both read.
pub fn percentiles(title: &str, lines: &[Line]) -> String {
    percentiles_of(title, "round-trip time", lines)
}

/// [`percentiles`] of another time than the round trip (`what`, on the y axis).
pub fn percentiles_of(title: &str, what: &str, lines: &[Line]) -> String {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let x1 = xs.fold(1.0f64, f64::max);
    let nines = (1..=x1.floor() as i32).map(f64::from);
    let x_ticks: Vec<f64> = std::iter::once(2f64.log10()).chain(nines).collect();
    let x_label = |x: f64| {
        let pct = 100.0 * (1.0 - 10f64.powf(-x));
        let digits = (x.round() as usize).saturating_sub(2);
        format!("{pct:.digits$} %")
    };
    let ys = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let (lo, hi) = ys
        .filter(|v| *v > 0.0)
        .fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if hi <= 0.0 {
        return String::new();
    }
    let (lo, hi) = ((lo / 1.3).log10(), (hi * 1.3).log10());
    let decades = lo.floor() as i32..=hi.ceil() as i32;
    let y_ticks: Vec<f64> = decades
        .flat_map(|d| [1.0, 2.0, 5.0].map(|m| (m * 10f64.powi(d)).log10()))
        .filter(|t| (lo..=hi).contains(t))
        .collect();
    let y_label = |y: f64| tick((10f64.powf(y) * 1e6).round() / 1e6);
    let logged: Vec<Line> = lines
        .iter()
        .map(|l| Line {
            name: l.name.clone(),
            points: l
                .points
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|&(x, y)| (x, y.log10()))
                .collect(),
            ..*l
        })
        .collect();
    let x = Axis {
        desc: "percentile (tail stretched: each nine the same width)",
        range: (0.0, x1),
        ticks: Some(x_ticks),
        label: &x_label,
    };
    let y = Axis {
        desc: &format!("{what}, µs (log scale)"),
        range: (lo, hi),
        ticks: Some(y_ticks),
        label: &y_label,
    };
    plot(title, &x, &y, &logged)
}

/// A bar per value (connections' throughput): fairness at a glance, with the mean as a
/// line. `unit` names the values' unit in the legend.
pub fn bars(title: &str, x_desc: &str, y_desc: &str, unit: &str, values: &[f64]) -> String {
    if values.len() < 2 {
        return String::new();
    }
    let y1 = values.iter().fold(0.0f64, |a, &b| a.max(b)).max(1e-9) * 1.15;
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let n = values.len();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let _ = root.fill(&WHITE);
        let built = framed(&root, title).build_cartesian_2d((0..n - 1).into_segmented(), 0.0..y1);
        let Ok(mut chart) = built else {
            return String::new();
        };
        let _ = chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_labels(n.min(16))
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 17))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => i.to_string(),
                SegmentValue::Last => String::new(),
            })
            .y_label_formatter(&|v| tick(*v))
            .bold_line_style(RGBColor(225, 225, 225))
            .light_line_style(TRANSPARENT)
            .draw();
        let fill = INK[1].mix(0.75).filled();
        let _ = chart.draw_series(values.iter().enumerate().map(|(i, &v)| {
            Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), v),
                ],
                fill,
            )
        }));
        let _ = chart.draw_series(std::iter::once(PathElement::new(
            vec![(SegmentValue::Exact(0), mean), (SegmentValue::Last, mean)],
            INK[0].stroke_width(2),
        )));
    }
    let key = [Line::new(
        format!("mean {} {unit}", sig3(mean)),
        0,
        Vec::new(),
    )];
    format!("<figure>{}{}</figure>", strip_xml_decl(svg), legend(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn luma(c: RGBColor) -> f64 {
        0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64
    }

    #[test]
    fn inks_stay_apart_in_grey_and_readable_on_white() {
        for (i, a) in INK.iter().enumerate() {
            assert!(luma(*a) < 200.0, "ink {i} too light on white");
            for b in &INK[i + 1..] {
                assert!((luma(*a) - luma(*b)).abs() >= 45.0, "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn ticks_read_as_people_write_them() {
        assert_eq!(tick(12000.0), "12,000");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
    }

    #[test]
    fn percentile_ticks_are_named_as_percentiles() {
        let line = Line::new(
            "run",
            0,
            (0..50)
                .map(|i| (i as f64 / 10.0, i as f64))
                .collect::<Vec<_>>(),
        );
        let svg = percentiles("t", &[line]);
        for t in ["50 %", "90 %", "99 %", "99.9 %", "99.99 %"] {
            assert!(svg.contains(&format!(">\n{t}\n<")), "{t} missing: {svg}");
        }
        assert!(!svg.contains("0.968"), "no raw quantile on the axis");
    }
}
