//! A stream run's TCP over time, as its senders read it: each connection's congestion
//! window and smoothed RTT at every interval's end, one thin line per connection (a
//! direction's connections in one ink), and the lowest RTT any of them saw as the floor
//! its queueing delay rises from.

use std::collections::BTreeMap;

use sonde_results::document::IntervalSide;
use sonde_results::side::Transfer;
use sonde_results::tcp::TcpSample;
use sonde_results::Document;

use crate::chart::{self, Axis, Line};

/// A direction's sending side in an interval: the primary one, or a bidir's reverse.
fn senders(doc: &Document) -> impl Iterator<Item = (usize, f64, &IntervalSide)> {
    doc.intervals.iter().flat_map(|i| {
        let reverse = i.reverse.as_ref().and_then(|r| r.sender.as_ref());
        [(0, i.sender.as_ref()), (1, reverse)]
            .into_iter()
            .filter_map(move |(dir, s)| Some((dir, i.end_s, s?)))
    })
}

/// Per (direction, connection): the points `y` gives at each interval's end, and what
/// each direction is called.
type Series = BTreeMap<(usize, u32), Vec<(f64, f64)>>;

fn series(doc: &Document, y: impl Fn(&TcpSample) -> Option<f64>) -> (Series, [String; 2]) {
    let mut out: Series = BTreeMap::new();
    let mut names = [String::new(), String::new()];
    for (dir, at, side) in senders(doc) {
        names[dir] = format!("sent by the {}", side.measured_by.as_str());
        for s in side.tcp().iter().filter(|s| s.transfer == Transfer::Send) {
            if let Some(v) = y(s) {
                out.entry((dir, s.connection)).or_default().push((at, v));
            }
        }
    }
    (out, names)
}

/// One thin line per connection, in its direction's ink, named once per direction.
fn lines(series: Series, names: &[String; 2]) -> Vec<Line> {
    let count = |dir: usize| series.keys().filter(|k| k.0 == dir).count();
    let counts = [count(0), count(1)];
    series
        .into_iter()
        .map(|((dir, _), pts)| {
            let name = format!("{}: one line per connection ({})", names[dir], counts[dir]);
            Line::new(name, 1 + dir, pts).thin()
        })
        .collect()
}

fn time_axis(doc: &Document) -> Axis<'static> {
    Axis {
        desc: "time since the window's start, s",
        range: (0.0, doc.intervals.last().map_or(1.0, |i| i.end_s)),
        ticks: None,
        label: &chart::tick,
    }
}

/// The congestion window and smoothed RTT charts of a stream run whose senders read
/// TCP_INFO; empty for any other run.
pub fn charts(name: &str, doc: &Document) -> String {
    let x = time_axis(doc);
    let (cwnd, names) = series(doc, |s| Some(s.cwnd_segments as f64));
    if cwnd.is_empty() {
        return String::new();
    }
    let mut o = chart::lines(
        &format!("{name}: congestion window per connection, by the sender"),
        &x,
        "cwnd, segments",
        &lines(cwnd, &names),
    );
    let (srtt, _) = series(doc, |s| Some(s.srtt_us as f64 / 1e3));
    let mut rtt = lines(srtt, &names);
    rtt.extend(floors(doc, &names, x.range.1));
    o.push_str(&chart::lines(
        &format!("{name}: smoothed RTT per connection, by the sender"),
        &x,
        "srtt, ms",
        &rtt,
    ));
    o
}

/// Each direction's lowest min RTT over the run, dashed across the chart.
fn floors(doc: &Document, names: &[String; 2], end: f64) -> Vec<Line> {
    let (min, _) = series(doc, |s| s.min_rtt_us.map(f64::from));
    let mut lowest: BTreeMap<usize, f64> = BTreeMap::new();
    for ((dir, _), pts) in min {
        for (_, v) in pts {
            let e = lowest.entry(dir).or_insert(v);
            *e = e.min(v);
        }
    }
    lowest
        .into_iter()
        .map(|(dir, v)| {
            let name = format!(
                "{}: lowest min RTT of any connection, {}",
                names[dir],
                crate::units::ms(v)
            );
            let ms = v / 1e3;
            Line::new(name, 1 + dir, vec![(0.0, ms), (end, ms)]).dashed()
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::stored;
    use sonde_results::document::{SideFigures, StreamSideFigures};

    fn sample(connection: u32, at: usize) -> TcpSample {
        TcpSample {
            connection,
            transfer: Transfer::Send,
            srtt_us: 100 + 10 * at as u32 + connection,
            min_rtt_us: Some(20 + connection),
            cwnd_segments: 10 * (at as u32 + 1) + connection,
            ..Default::default()
        }
    }

    /// A bidir run of `n` intervals whose client sent on `forward` connections and whose
    /// agent sent on `reverse`, each side's samples filled by hand (a receiver's samples
    /// beside them, which the charts leave out).
    pub(crate) fn bidir(n: usize, forward: u32, reverse: u32) -> Document {
        let mut doc = stored("v1-bidir.json");
        let first = doc.intervals[0].clone();
        doc.intervals = (0..n)
            .map(|k| {
                let mut i = first.clone();
                (i.start_s, i.end_s) = (k as f64, k as f64 + 1.0);
                let tcp = |s: Vec<TcpSample>| SideFigures::Stream(StreamSideFigures { tcp: s });
                i.sender.as_mut().unwrap().section =
                    tcp((0..forward).map(|c| sample(c, k)).collect());
                i.receiver.as_mut().unwrap().section = tcp((0..forward)
                    .map(|c| TcpSample {
                        transfer: Transfer::Receive,
                        ..sample(c, k)
                    })
                    .collect());
                let back = i.reverse.as_mut().unwrap().sender.as_mut().unwrap();
                back.section = tcp((0..reverse).map(|c| sample(forward + c, k)).collect());
                i
            })
            .collect();
        doc
    }

    /// The `<figure>` whose title holds `title`.
    pub(crate) fn figure<'a>(html: &'a str, title: &str) -> &'a str {
        let at = html
            .find(title)
            .unwrap_or_else(|| panic!("{title} missing"));
        let start = html[..at].rfind("<figure>").unwrap();
        let end = html[at..].find("</figure>").unwrap() + at;
        &html[start..end]
    }

    /// The points of each thin polyline (a connection's) in `svg`.
    pub(crate) fn thin_lines(svg: &str) -> Vec<usize> {
        svg.split("<polyline")
            .skip(1)
            .filter(|p| p.contains("stroke-width=\"1\"") && !p.contains("stroke=\"#000000\""))
            .map(|p| {
                let pts = p.split("points=\"").nth(1).unwrap().split('"').next();
                pts.unwrap().split_whitespace().count()
            })
            .collect()
    }

    #[test]
    fn one_thin_line_per_sending_connection_in_both_charts() {
        let html = charts("run", &bidir(4, 3, 2));
        let cwnd = figure(&html, "congestion window per connection");
        assert_eq!(thin_lines(cwnd), vec![4; 5], "{cwnd}");
        assert!(cwnd.contains("sent by the client: one line per connection (3)"));
        assert!(cwnd.contains("sent by the server: one line per connection (2)"));
        assert_eq!(
            cwnd.matches("one line per connection").count(),
            2,
            "named once"
        );
        let rtt = figure(&html, "smoothed RTT per connection");
        assert_eq!(thin_lines(rtt).len(), 5);
        assert!(rtt.contains("srtt, ms"));
        assert!(rtt.contains("sent by the client: lowest min RTT of any connection, 0.020 ms"));
        assert!(rtt.contains("sent by the server: lowest min RTT of any connection, 0.023 ms"));
    }

    #[test]
    fn a_run_without_samples_has_no_chart() {
        assert_eq!(charts("run", &bidir(3, 0, 0)), "");
        assert_eq!(charts("run", &stored("v1-ping-udp.json")), "");
    }
}
