//! A connection's TCP_INFO over one interval: the gauges read at its end, the counts and
//! time shares as differences from its start. The stream kind's workers and the rpm
//! client's load-generating connections record their sockets through it alike.

use crate::sockopt::TcpInfo;
use sonde_results::tcp::{TcpEcn, TcpSample};
use sonde_results::Transfer;

/// The sample of connection `connection` from `before` (the interval's start; `None`
/// when unread) to `now`, over `secs` seconds.
pub fn sample(
    connection: u32,
    transfer: Transfer,
    before: Option<&TcpInfo>,
    now: &TcpInfo,
    secs: f64,
) -> TcpSample {
    let share = |f: fn(&TcpInfo) -> Option<u64>| {
        let (a, b) = (f(before?)?, f(now)?);
        (secs > 0.0).then(|| (b.saturating_sub(a) as f64 / 1e6 / secs * 100.0).min(100.0))
    };
    TcpSample {
        connection,
        transfer,
        srtt_us: now.rtt_us,
        rttvar_us: now.rttvar_us,
        min_rtt_us: now.min_rtt_us,
        cwnd_segments: now.snd_cwnd,
        ssthresh_segments: now.snd_ssthresh,
        mss_bytes: now.snd_mss,
        snd_wnd_bytes: now.snd_wnd,
        rcv_wnd_bytes: now.rcv_wnd,
        rcv_space_bytes: now.rcv_space,
        delivery_rate_bits_per_second: now.delivery_rate.map(|r| r as f64 * 8.0),
        // u64::MAX: no pacing limit.
        pacing_rate_bits_per_second: (now.pacing_rate != u64::MAX)
            .then_some(now.pacing_rate as f64 * 8.0),
        retransmits: before.map_or(0, |b| now.total_retrans.saturating_sub(b.total_retrans)),
        dsack_dups: before
            .and_then(|b| b.dsack_dups)
            .zip(now.dsack_dups)
            .map(|(a, b)| b.saturating_sub(a)),
        lost_segments: now.lost,
        reordering: now.reordering,
        notsent_bytes: now.notsent_bytes,
        busy_percent: share(|t| t.busy_us),
        rwnd_limited_percent: share(|t| t.rwnd_limited_us),
        sndbuf_limited_percent: share(|t| t.sndbuf_limited_us),
        ecn: ecn(before, now),
    }
}

/// The connection's ECN since its handshake, when it was negotiated.
pub fn connection_ecn(now: &TcpInfo) -> Option<TcpEcn> {
    ecn(None, now)
}

/// The connection's ECN over the interval, when it was negotiated.
fn ecn(before: Option<&TcpInfo>, now: &TcpInfo) -> Option<TcpEcn> {
    let delta = |f: fn(&TcpInfo) -> Option<u32>| {
        let start = before.map_or(Some(0), f)?;
        Some(f(now)?.wrapping_sub(start))
    };
    now.ecn_negotiated.then(|| TcpEcn {
        ect_seen: now.ecn_seen,
        delivered_ce: delta(|t| t.delivered_ce),
        received_ce: delta(|t| t.received_ce),
        delivered_ce_bytes: delta(|t| t.delivered_ce_bytes),
        received_ce_bytes: delta(|t| t.received_ce_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_of_the_interval() {
        let a = TcpInfo {
            busy_us: Some(1_000_000),
            rwnd_limited_us: Some(0),
            total_retrans: 3,
            pacing_rate: u64::MAX,
            ..Default::default()
        };
        let b = TcpInfo {
            busy_us: Some(1_500_000),
            rwnd_limited_us: Some(400_000),
            total_retrans: 10,
            pacing_rate: 1_000_000,
            delivery_rate: Some(125_000),
            ..Default::default()
        };
        let s = sample(4, Transfer::Send, Some(&a), &b, 0.5);
        assert_eq!(s.busy_percent, Some(100.0));
        assert_eq!(s.rwnd_limited_percent, Some(80.0));
        assert_eq!(s.sndbuf_limited_percent, None);
        assert_eq!(s.retransmits, 7);
        assert_eq!(s.pacing_rate_bits_per_second, Some(8e6));
        assert_eq!(s.delivery_rate_bits_per_second, Some(1e6));
        let first = sample(4, Transfer::Send, None, &a, 1.0);
        assert_eq!((first.busy_percent, first.retransmits), (None, 0));
        assert_eq!(first.pacing_rate_bits_per_second, None);
    }
}
