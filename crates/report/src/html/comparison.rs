//! The A/B section: first the sentences a reader wants ("Throughput received +28 % (95 %
//! CI +25 to +31 %) with B against A"), then the table and the chart of every change.

use plotters::prelude::*;
use sonde_results::compare::{Aggregate, Comparison, Verdict};

use crate::chart::{strip_xml_decl, INK};
use crate::table::Table;
use crate::units::sig3;

/// A change in percent with its sign: whole percents from 10 up, tenths below.
fn signed(v: f64) -> String {
    let s = if v.abs() >= 9.95 {
        format!("{:.0}", v.abs())
    } else {
        format!("{:.1}", v.abs())
    };
    if v < 0.0 && !s.trim_start_matches(['0', '.']).is_empty() {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Better => "better",
        Verdict::Worse => "worse",
        Verdict::NoSignificantChange => "no significant change",
    }
}

/// The figure's name, with how groups were reduced when it is not the usual median.
fn figure(c: &Comparison) -> String {
    match c.aggregate {
        Aggregate::MedianOfRuns => c.title.clone(),
        Aggregate::MergedHistogram => format!("{} (of the runs' merged histogram)", c.title),
    }
}

/// One change as a sentence.
pub fn sentence(c: &Comparison, a: &str, b: &str) -> String {
    let interval = format!(
        "{} % (95 % CI {} to {} %)",
        signed(c.change_percent),
        signed(c.ci95_low_percent),
        signed(c.ci95_high_percent)
    );
    match c.verdict {
        Verdict::NoSignificantChange => format!(
            "{}: no significant change with {b} against {a}, {interval}.",
            figure(c)
        ),
        v => format!(
            "{} {interval} with {b} against {a}: {}.",
            figure(c),
            verdict(v)
        ),
    }
}

/// The sentences, significant changes first.
pub fn sentences(cmp: &[Comparison], a: &str, b: &str) -> Vec<String> {
    let significant = cmp
        .iter()
        .filter(|c| c.verdict != Verdict::NoSignificantChange);
    let rest = cmp
        .iter()
        .filter(|c| c.verdict == Verdict::NoSignificantChange);
    significant.chain(rest).map(|c| sentence(c, a, b)).collect()
}

pub fn table(cmp: &[Comparison], a: &str, b: &str) -> Table {
    let (ha, hb) = (format!("A: {a}"), format!("B: {b}"));
    let mut t = Table::new(
        "Each group's figure is the median of its runs, except percentiles, which are those of the group's merged histogram; intervals are 95 % bootstrap intervals over runs.",
        &["Figure", "Unit", &ha, &hb, "Runs A/B", "Change", "95 % CI", "Verdict"],
    );
    for c in cmp {
        t.row(vec![
            figure(c),
            c.unit.clone(),
            sig3(c.value_a),
            sig3(c.value_b),
            format!("{}/{}", c.runs_a, c.runs_b),
            format!("{} %", signed(c.change_percent)),
            format!(
                "{} to {} %",
                signed(c.ci95_low_percent),
                signed(c.ci95_high_percent)
            ),
            verdict(c.verdict).into(),
        ]);
    }
    t
}

/// Bars of the changes with their intervals: dark for better, light for worse, white with
/// an outline for no significant change; readable without colour.
pub fn chart(cmp: &[Comparison]) -> String {
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
        let root = SVGBackend::with_string(&mut svg, (900, 70 + 44 * cmp.len() as u32))
            .into_drawing_area();
        let _ = root.fill(&WHITE);
        let n = cmp.len();
        let built = ChartBuilder::on(&root)
            .caption(
                "change of B against A, with 95 % intervals",
                ("sans-serif", 20),
            )
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(300)
            .build_cartesian_2d(lo..hi, (0..n - 1).into_segmented());
        if let Ok(mut chart) = built {
            let labels: Vec<String> = cmp
                .iter()
                .map(|c| format!("{}, {}", c.title, c.unit))
                .collect();
            let _ = chart
                .configure_mesh()
                .x_desc("change, %")
                .y_labels(n)
                .label_style(("sans-serif", 16))
                .axis_desc_style(("sans-serif", 17))
                .y_label_formatter(&|y| match y {
                    SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                        labels.get(*i).cloned().unwrap_or_default()
                    }
                    SegmentValue::Last => String::new(),
                })
                .x_label_formatter(&|x| crate::chart::tick(*x))
                .bold_line_style(RGBColor(225, 225, 225))
                .light_line_style(TRANSPARENT)
                .draw();
            for (i, c) in cmp.iter().rev().enumerate() {
                let bar = [
                    (0.0, SegmentValue::Exact(i)),
                    (c.change_percent, SegmentValue::Exact(i + 1)),
                ];
                let fill = match c.verdict {
                    Verdict::Better => INK[1].filled(),
                    Verdict::Worse => INK[3].filled(),
                    Verdict::NoSignificantChange => WHITE.filled(),
                };
                let mut body = Rectangle::new(bar.clone(), fill);
                let mut outline = Rectangle::new(bar, INK[0]);
                body.set_margin(8, 8, 0, 0);
                outline.set_margin(8, 8, 0, 0);
                let _ = chart.draw_series([body, outline]);
                let _ = chart.draw_series(std::iter::once(PathElement::new(
                    vec![
                        (c.ci95_low_percent, SegmentValue::CenterOf(i)),
                        (c.ci95_high_percent, SegmentValue::CenterOf(i)),
                    ],
                    INK[0].stroke_width(2),
                )));
            }
        }
    }
    format!("<figure>{}</figure>", strip_xml_decl(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_leads_with_the_change_and_its_interval() {
        let c = Comparison {
            metric: "receiver_gbit_per_s".into(),
            title: "Throughput received".into(),
            unit: "Gbit/s".into(),
            higher_is_better: true,
            runs_a: 5,
            runs_b: 5,
            aggregate: Aggregate::MedianOfRuns,
            value_a: 10.0,
            value_b: 12.8,
            change_percent: 28.04,
            ci95_low_percent: 25.1,
            ci95_high_percent: 31.0,
            verdict: Verdict::Better,
        };
        assert_eq!(
            sentence(&c, "an-off", "an-on"),
            "Throughput received +28 % (95 % CI +25 to +31 %) with an-on against an-off: better."
        );
        let flat = Comparison {
            change_percent: -0.4,
            ci95_low_percent: -1.2,
            ci95_high_percent: 0.5,
            verdict: Verdict::NoSignificantChange,
            aggregate: Aggregate::MergedHistogram,
            title: "RTT P99".into(),
            ..c
        };
        assert_eq!(
            sentence(&flat, "a", "b"),
            "RTT P99 (of the runs' merged histogram): no significant change with b against a, −0.4 % (95 % CI −1.2 to +0.5 %)."
        );
    }
}
