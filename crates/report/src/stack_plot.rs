//! Stacked bars in panels, one panel per figure (a percentile) on its own scale, so that a
//! P50 of microseconds and a P99 of milliseconds both read; each bar a run, stacked by its
//! parts (stages). Up to seven parts tell apart in grey print: fills a lightness step
//! apart, every other one hatched, each outlined.

use plotters::prelude::*;

use crate::chart::{self, Axis};

/// Fills along viridis, each about 31 of 255 lighter (BT.601 luma) than the one before.
pub const FILL: [RGBColor; 7] = [
    RGBColor(68, 1, 84),
    RGBColor(68, 46, 122),
    RGBColor(49, 104, 142),
    RGBColor(42, 163, 131),
    RGBColor(92, 197, 98),
    RGBColor(167, 218, 61),
    RGBColor(253, 231, 37),
];

/// Every other part is hatched, so neighbours differ in pattern as well as lightness.
pub fn hatched(part: usize) -> bool {
    part % 2 == 1
}

/// The hatch's ink: white on the dark fills, black on the light ones.
fn hatch_ink(part: usize) -> RGBColor {
    if part < 4 {
        WHITE
    } else {
        BLACK
    }
}

/// The outline between parts.
const EDGE: RGBColor = RGBColor(51, 51, 51);

/// Space between hatch lines, px.
const HATCH: i32 = 6;

/// One panel: its title (`P50`) and a bar per run, each its parts bottom to top (µs).
pub struct Panel {
    pub title: String,
    pub bars: Vec<Vec<f64>>,
}

/// Diagonal hatch lines (down to the right) clipped to the pixel box `(x0, y0)..(x1, y1)`.
pub fn hatch_lines((x0, y0): (i32, i32), (x1, y1): (i32, i32)) -> Vec<[(i32, i32); 2]> {
    let mut out = Vec::new();
    // Each line is y = x + c.
    let mut c = y0 - x1 + HATCH / 2;
    while c < y1 - x0 {
        let (from, to) = ((y0 - c).max(x0), (y1 - c).min(x1));
        if from < to {
            out.push([(from, from + c), (to, to + c)]);
        }
        c += HATCH;
    }
    out
}

/// The panels side by side; bar `i` of each panel is run `i + 1` (the caption names them).
pub fn stacked(title: &str, y_desc: &str, panels: &[Panel]) -> String {
    let bars = panels.iter().map(|p| p.bars.len()).max().unwrap_or(0);
    if bars == 0 {
        return String::new();
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (chart::SIZE.0, 380)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(body) = root.titled(title, ("sans-serif", 20)) else {
            return String::new();
        };
        for (area, p) in body.split_evenly((1, panels.len())).iter().zip(panels) {
            panel(&root, area, p, bars, y_desc);
        }
    }
    format!("<figure>{}</figure>", chart::strip_xml_decl(svg))
}

/// One panel of [`stacked`]; hatching is drawn on `root` in its pixels.
fn panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel,
    bars: usize,
    y_desc: &str,
) {
    let top = p
        .bars
        .iter()
        .map(|b| b.iter().sum::<f64>())
        .fold(0.0, f64::max);
    let run = |v: f64| format!("{}", v.round() as i64 + 1);
    let x = Axis {
        desc: "run",
        range: (-0.5, bars as f64 - 0.5),
        ticks: Some((0..bars).map(|i| i as f64).collect()),
        label: &run,
    };
    let y = Axis {
        desc: y_desc,
        range: (0.0, (top * 1.12).max(1e-9)),
        ticks: None,
        label: &chart::tick,
    };
    let mut b = ChartBuilder::on(area);
    b.caption(&p.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let Ok(mut c) = b.build_cartesian_2d(x.ticked(), y.ticked()) else {
        return;
    };
    let _ = c
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x.desc)
        .y_desc(y.desc)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .x_label_formatter(&|v| (x.label)(*v))
        .y_label_formatter(&|v| (y.label)(*v))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .draw();
    for (i, parts) in p.bars.iter().enumerate() {
        let (left, right) = (i as f64 - 0.3, i as f64 + 0.3);
        let mut at = 0.0;
        for (k, &v) in parts.iter().enumerate() {
            let span = [(left, at), (right, at + v)];
            at += v;
            let _ = c.draw_series([Rectangle::new(span, FILL[k % FILL.len()].filled())]);
            if hatched(k) {
                let (a, b) = (
                    c.backend_coord(&(left, at)),
                    c.backend_coord(&(right, at - v)),
                );
                let style = hatch_ink(k).stroke_width(1);
                for l in hatch_lines(a, b) {
                    let _ = root.draw(&PathElement::new(l.to_vec(), style));
                }
            }
            let _ = c.draw_series([Rectangle::new(span, EDGE.stroke_width(1))]);
        }
    }
}

/// The legend of the parts, as HTML under the chart: each part's fill and hatch.
pub fn legend(names: &[&str]) -> String {
    let mut o = String::from("<ul class=\"legend\">");
    for (k, name) in names.iter().enumerate() {
        let RGBColor(r, g, b) = FILL[k % FILL.len()];
        let mut swatch = format!(
            "<rect x=\"0.5\" y=\"0.5\" width=\"21\" height=\"13\" fill=\"#{r:02x}{g:02x}{b:02x}\" stroke=\"#333333\"/>"
        );
        if hatched(k) {
            let RGBColor(r, g, b) = hatch_ink(k);
            for [(x0, y0), (x1, y1)] in hatch_lines((1, 1), (21, 13)) {
                swatch.push_str(&format!(
                    "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y1}\" stroke=\"#{r:02x}{g:02x}{b:02x}\"/>"
                ));
            }
        }
        o.push_str(&format!(
            "<li><svg width=\"22\" height=\"14\">{swatch}</svg> {}</li>",
            crate::html::page::esc(name)
        ));
    }
    o.push_str("</ul>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn luma(c: RGBColor) -> f64 {
        0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64
    }

    #[test]
    fn fills_stay_apart_in_grey_and_neighbours_differ_in_pattern() {
        for (i, a) in FILL.iter().enumerate() {
            for b in &FILL[i + 1..] {
                assert!((luma(*a) - luma(*b)).abs() >= 30.0, "{a:?} and {b:?}");
            }
        }
        for k in 0..FILL.len() - 1 {
            assert_ne!(hatched(k), hatched(k + 1), "parts {k} and {}", k + 1);
        }
    }

    #[test]
    fn hatch_lines_stay_in_their_box() {
        let lines = hatch_lines((10, 20), (40, 100));
        assert!(lines.len() > 10, "{lines:?}");
        for [(x0, y0), (x1, y1)] in lines {
            for (x, y) in [(x0, y0), (x1, y1)] {
                assert!((10..=40).contains(&x) && (20..=100).contains(&y), "{x},{y}");
            }
            assert_eq!(x1 - x0, y1 - y0, "45 degrees");
        }
        assert!(hatch_lines((0, 0), (0, 0)).is_empty());
    }
}
