//! The OpenMetrics text written by hand, for what prometheus-client 0.25 cannot express:
//! a summary family (its `MetricType` has no summary, and a `quantile` label on a gauge is
//! what promtool rejects) and samples with their own timestamps (the backfill of stored
//! runs). Escaping and number syntax follow the OpenMetrics 1.0 ABNF.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sonde_results::Document;

use super::figures::{self, Kind, Labels, Metric, Status};
use super::gauges;

/// `# TYPE`, `# UNIT` and `# HELP` of a family.
pub(crate) fn header(out: &mut String, metric: Metric) {
    let m = metric.meta();
    let name = m.name();
    let _ = writeln!(out, "# TYPE {name} {}", m.kind.as_str());
    if let Some(u) = m.unit {
        let _ = writeln!(out, "# UNIT {name} {u}");
    }
    // A full stop after the help, as prometheus-client writes it.
    let _ = writeln!(out, "# HELP {name} {}.", m.help);
}

/// A run's `test` label: its fleet pair's test case, else its test's name.
fn test_of(doc: &Document) -> &str {
    match &doc.start.fleet {
        Some(p) if !p.test.is_empty() => &p.test,
        _ => doc.test.as_str(),
    }
}

/// One sample line: `name{labels,extra} value [timestamp]`, a counter's name with
/// `_total`, a timestamp in seconds with milliseconds.
pub(crate) fn sample(
    out: &mut String,
    metric: Metric,
    labels: &Labels,
    extra: Option<(&str, &str)>,
    value: f64,
    at_ms: Option<i64>,
) {
    let m = metric.meta();
    out.push_str(&m.name());
    if m.kind == Kind::Counter {
        out.push_str("_total");
    }
    out.push('{');
    let all = labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    for (i, (k, v)) in all.chain(extra).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    let _ = write!(out, "}} {}", number(value));
    if let Some(ms) = at_ms {
        let _ = write!(out, " {}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000));
    }
    out.push('\n');
}

/// A label value as OpenMetrics quotes it: backslash, double quote and newline escaped.
pub(crate) fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn number(v: f64) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        v if v == f64::INFINITY => "+Inf".into(),
        v if v == f64::NEG_INFINITY => "-Inf".into(),
        v => format!("{v}"),
    }
}

/// A series of the backfill: family and labels (a summary's quantile is not part of it:
/// one timestamp's quantiles are one point of the series).
type SeriesKey = (Metric, Labels);
/// A series' points: at each millisecond, its samples (several quantiles, or one value).
type Points = BTreeMap<i64, Vec<(Option<(&'static str, String)>, f64)>>;

/// Stored runs as OpenMetrics with each sample's timestamp: the run's end. Counters count
/// the runs before and at each point. A run whose start and end cannot be read as RFC
/// 3339 is left out (it has no time to be at), and so is a kind whose row says it has no
/// pair's figure (a load, a watch).
pub(crate) fn backfill<'a>(docs: impl Iterator<Item = &'a Document>) -> String {
    let mut timed: Vec<(i64, &str, &Document)> = docs
        .filter(|d| crate::summary::row(d.test).paired)
        .filter_map(|d| Some(((figures::ended_at(d)? * 1e3).round() as i64, test_of(d), d)))
        .collect();
    timed.sort_by_key(|t| t.0);
    let mut series: BTreeMap<SeriesKey, Points> = BTreeMap::new();
    let mut runs_of: BTreeMap<Labels, [u64; 3]> = BTreeMap::new();
    let mut retrans_of: BTreeMap<(Labels, &str), u64> = BTreeMap::new();
    for (ms, test, doc) in timed {
        let labels = figures::label_set(&figures::pair_of(doc), test);
        let mut put = |metric: Metric, extra: Vec<(&'static str, String)>, value: f64| {
            let mut key_labels = labels.clone();
            let mut point_extra = None;
            match metric.meta().kind {
                // A summary's one extra label is its quantile, a point's, not the series'.
                Kind::Summary => point_extra = extra.into_iter().next(),
                _ => key_labels.extend(extra.into_iter().map(|(k, v)| (k.to_string(), v))),
            }
            let points = series.entry((metric, key_labels)).or_default();
            let at = points.entry(ms).or_default();
            // Two runs of one pair ending in one millisecond: the later one's value.
            at.retain(|(e, _)| *e != point_extra);
            at.push((point_extra, value));
        };
        for s in gauges::samples(doc) {
            put(s.metric, s.extra, s.value);
        }
        put(Metric::RunTimestamp, Vec::new(), ms as f64 / 1e3);
        let counts = runs_of.entry(labels.clone()).or_default();
        counts[figures::status(doc) as usize] += 1;
        for (status, n) in Status::ALL.iter().zip(*counts) {
            put(
                Metric::Runs,
                vec![("status", status.as_str().into())],
                n as f64,
            );
        }
        for (direction, n) in figures::retransmits(doc) {
            let total = retrans_of.entry((labels.clone(), direction)).or_default();
            *total += n;
            put(
                Metric::Retransmits,
                vec![("direction", direction.into())],
                *total as f64,
            );
        }
    }
    let mut out = String::new();
    for metric in Metric::ALL {
        header(&mut out, metric);
        for ((_, labels), points) in series.iter().filter(|((m, _), _)| *m == metric) {
            write_points(&mut out, metric, labels, points);
        }
    }
    out.push_str("# EOF\n");
    out
}

fn write_points(out: &mut String, metric: Metric, labels: &Labels, points: &Points) {
    for (&ms, samples) in points {
        for (extra, value) in samples {
            let extra = extra.as_ref().map(|(k, v)| (*k, v.as_str()));
            sample(out, metric, labels, extra, *value, Some(ms));
        }
    }
}
