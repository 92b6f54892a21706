//! TCP's own view of a stream test: each connection's TCP_INFO per interval, read by the
//! side that holds the socket (the receiver's too, so a reverse test's series come from
//! the agent), and a summary of the window across connections. These are the figures a
//! bottleneck verdict reads: which share of the time the sender was limited by the
//! receiver's window or its own buffer, and how far RTT rose above its minimum.

use serde::{Deserialize, Serialize};

use crate::side::Transfer;
pub use crate::side::{TcpEcn, TcpSample};

/// A figure's lowest, median and highest value across a run's connections.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// A side's TCP figures over the window, min / median / max across its connections. Each
/// connection contributes the median of its gauges over the intervals, its time shares
/// over the whole window and its retransmits' sum.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSummary {
    pub connections: usize,
    pub intervals: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srtt_us: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rttvar_us: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_us: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd_segments: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssthresh_segments: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_wnd_bytes: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_wnd_bytes: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_space_bytes: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate_bits_per_second: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate_bits_per_second: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsack_dups: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_segments: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reordering: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_percent: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited_percent: Option<Spread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited_percent: Option<Spread>,
}

impl Spread {
    /// Of values in any order; `None` when there are none.
    pub fn of(mut v: Vec<f64>) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            min: v[0],
            median: median_sorted(&v),
            max: v[v.len() - 1],
        })
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| median_sorted(&v))
}

/// One connection's samples with each interval's length in seconds.
type Series<'a> = Vec<(&'a TcpSample, f64)>;

impl TcpSummary {
    /// The summary of the samples `(interval seconds, that interval's samples)` of the
    /// connections this side does `transfer` with; `None` when there are none.
    pub fn of<'a>(
        intervals: impl IntoIterator<Item = (f64, &'a [TcpSample])>,
        transfer: Transfer,
    ) -> Option<TcpSummary> {
        let mut by_conn: std::collections::BTreeMap<u32, Series<'a>> = Default::default();
        let mut count = 0;
        for (secs, samples) in intervals {
            count += 1;
            for s in samples.iter().filter(|s| s.transfer == transfer) {
                by_conn.entry(s.connection).or_default().push((s, secs));
            }
        }
        if by_conn.is_empty() {
            return None;
        }
        let conns: Vec<Series<'a>> = by_conn.into_values().collect();
        let gauge = |f: &dyn Fn(&TcpSample) -> Option<f64>| {
            Spread::of(
                conns
                    .iter()
                    .filter_map(|c| median(c.iter().filter_map(|(s, _)| f(s)).collect()))
                    .collect(),
            )
        };
        let share = |f: &dyn Fn(&TcpSample) -> Option<f64>| {
            Spread::of(conns.iter().filter_map(|c| time_weighted(c, f)).collect())
        };
        Some(TcpSummary {
            connections: conns.len(),
            intervals: count,
            srtt_us: gauge(&|s| Some(s.srtt_us as f64)),
            rttvar_us: gauge(&|s| Some(s.rttvar_us as f64)),
            min_rtt_us: Spread::of(
                conns
                    .iter()
                    .filter_map(|c| c.iter().filter_map(|(s, _)| s.min_rtt_us).min())
                    .map(f64::from)
                    .collect(),
            ),
            cwnd_segments: gauge(&|s| Some(s.cwnd_segments as f64)),
            ssthresh_segments: gauge(&|s| s.ssthresh_segments.map(f64::from)),
            snd_wnd_bytes: gauge(&|s| s.snd_wnd_bytes.map(f64::from)),
            rcv_wnd_bytes: gauge(&|s| s.rcv_wnd_bytes.map(f64::from)),
            rcv_space_bytes: gauge(&|s| Some(s.rcv_space_bytes as f64)),
            delivery_rate_bits_per_second: gauge(&|s| s.delivery_rate_bits_per_second),
            pacing_rate_bits_per_second: gauge(&|s| s.pacing_rate_bits_per_second),
            retransmits: Spread::of(
                conns
                    .iter()
                    .map(|c| c.iter().map(|(s, _)| s.retransmits as f64).sum())
                    .collect(),
            ),
            dsack_dups: Spread::of(
                conns
                    .iter()
                    .filter_map(|c| c.iter().map(|(s, _)| s.dsack_dups.map(f64::from)).sum())
                    .collect(),
            ),
            lost_segments: gauge(&|s| Some(s.lost_segments as f64)),
            reordering: gauge(&|s| Some(s.reordering as f64)),
            busy_percent: share(&|s| s.busy_percent),
            rwnd_limited_percent: share(&|s| s.rwnd_limited_percent),
            sndbuf_limited_percent: share(&|s| s.sndbuf_limited_percent),
        })
    }
}

/// A connection's percent figure over the intervals that have it, weighted by their length.
fn time_weighted(c: &Series<'_>, f: &dyn Fn(&TcpSample) -> Option<f64>) -> Option<f64> {
    let (mut sum, mut secs) = (0.0, 0.0);
    for (s, t) in c {
        if let Some(v) = f(s) {
            sum += v * t;
            secs += t;
        }
    }
    (secs > 0.0).then(|| sum / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(conn: u32, srtt: u32, rwnd: f64) -> TcpSample {
        TcpSample {
            connection: conn,
            transfer: Transfer::Send,
            srtt_us: srtt,
            min_rtt_us: Some(srtt / 2),
            rwnd_limited_percent: Some(rwnd),
            retransmits: 1,
            ..Default::default()
        }
    }

    #[test]
    fn spreads_across_connections_of_their_own_medians() {
        let i1 = [s(0, 100, 0.0), s(1, 300, 100.0)];
        let i2 = [s(0, 200, 0.0), s(1, 500, 50.0)];
        let i3 = [s(0, 900, 0.0), s(1, 400, 50.0)];
        // The last interval is half as long.
        let t = TcpSummary::of(
            [(1.0, &i1[..]), (1.0, &i2[..]), (0.5, &i3[..])],
            Transfer::Send,
        )
        .unwrap();
        assert_eq!((t.connections, t.intervals), (2, 3));
        let srtt = t.srtt_us.unwrap();
        assert_eq!((srtt.min, srtt.max), (200.0, 400.0));
        assert_eq!(t.min_rtt_us.unwrap().min, 50.0);
        // (100 + 50 + 25) / 2.5 s.
        assert_eq!(t.rwnd_limited_percent.unwrap().max, 70.0);
        assert_eq!(t.retransmits.unwrap().median, 3.0);
        assert!(t.busy_percent.is_none());
        assert!(TcpSummary::of([(1.0, &i1[..])], Transfer::Receive).is_none());
    }
}
