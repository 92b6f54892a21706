//! A stream run's limit, judged on its primary direction (forward; the controller's
//! sending direction of a bidirectional run) from the sender's TCP_INFO time shares, its
//! loss and queueing, both ends' CPUs and the test's own rate.

use super::cpu::{self, Saturation};
use super::{loss_signal, pick, rate_finding, End, Evidence, Finding, Limit, LimitedBy};
use crate::document::{Document, EndSide, StreamEnd};
use crate::spec::TestSpec;
use crate::tcp::TcpSummary;

/// Smoothed RTT this far above the path's minimum means a queue builds on the path (a
/// shaper's or a switch's buffer). Half a millisecond is more than a busy host adds: a
/// 22 Gbit/s veth run's senders measured 0.1 ms over their minimum.
pub const QUEUE_DELAY_NOISE_US: f64 = 500.0;
/// Queueing delay at which the signal is full: 2 ms is a full 256 KB buffer at 1 Gbit/s.
pub const QUEUE_DELAY_DECISIVE_US: f64 = 2000.0;

/// When no limit has at least this strength, the run is called network-limited (a path
/// that carried what it could with no host limit in sight), at this strength.
pub const NOTHING_ELSE: f64 = 0.3;

pub(super) fn judge(doc: &Document, end: &StreamEnd) -> Option<LimitedBy> {
    let snd = end.sender.as_ref()?;
    let rcv = end.receiver.as_ref();
    let mut found = Vec::new();
    if let TestSpec::Stream(spec) = &doc.start.spec {
        found.extend(rate(spec.rate_bits_per_s, snd, rcv));
    }
    let tcp = snd.tcp_info.as_deref();
    let share = |f: fn(&TcpSummary) -> Option<crate::tcp::Spread>| {
        tcp.and_then(f).map_or(0.0, |s| s.median / 100.0)
    };
    let (rwnd, sndbuf) = (
        share(|t| t.rwnd_limited_percent),
        share(|t| t.sndbuf_limited_percent),
    );
    let s_cpu = cpu::saturation(
        (End::Sender, "sender"),
        &snd.by,
        &snd.cpu,
        snd.seconds,
        false,
    );
    let r_cpu = rcv.and_then(|r| {
        cpu::saturation((End::Receiver, "receiver"), &r.by, &r.cpu, r.seconds, false)
    });
    found.extend(windows(snd, rwnd, sndbuf, r_cpu.as_ref()));
    found.extend(cpus(s_cpu, r_cpu, rwnd.max(sndbuf)));
    found.extend(network(snd, spurious(doc), rwnd + sndbuf));
    if found.iter().all(|f| f.strength < NOTHING_ELSE) {
        found.push(Finding {
            verdict: Limit::Network,
            strength: NOTHING_ELSE,
            evidence: vec![Evidence::new(
                End::Test,
                None,
                "limited_by",
                0.0,
                "",
                "no host limit found: neither CPU saturated, the sender not window- or buffer-limited".into(),
            )],
        });
    }
    pick(found)
}

/// The test's own pacing, when the receiver got what it asked for.
fn rate(rate: Option<f64>, snd: &EndSide, rcv: Option<&EndSide>) -> Option<Finding> {
    let asked = rate.filter(|r| *r > 0.0)?;
    let (end, side) = match rcv {
        Some(r) => (End::Receiver, r),
        None => (End::Sender, snd),
    };
    Some(rate_finding(
        asked,
        side.bits_per_second,
        (end, side.by.measured_by),
        "bit/s",
    ))
}

/// The receiver's window and the sender's buffer, from the sender's TCP_INFO. A window
/// that fills because the receiving application cannot keep up is its CPU's limit, not
/// the window's: the receiver's saturation moves the share to `receiver_cpu`.
fn windows(snd: &EndSide, rwnd: f64, sndbuf: f64, r_cpu: Option<&Saturation>) -> Vec<Finding> {
    let by = Some(snd.by.measured_by);
    let r_level = r_cpu.map_or(0.0, |c| c.level);
    let mut out = vec![Finding {
        verdict: Limit::ReceiverWindow,
        strength: rwnd * (1.0 - r_level),
        evidence: vec![Evidence::new(
            End::Sender,
            by,
            "tcp_info.rwnd_limited_percent",
            rwnd * 100.0,
            "%",
            format!(
                "sender rwnd-limited {:.0} % of the time (median connection)",
                rwnd * 100.0
            ),
        )],
    }];
    if let Some(w) = snd.tcp_info.as_deref().and_then(|t| t.snd_wnd_bytes) {
        out[0].evidence.push(Evidence::new(
            End::Sender,
            by,
            "tcp_info.snd_wnd_bytes",
            w.median,
            "bytes",
            format!("receiver's advertised window {:.0} KiB", w.median / 1024.0),
        ));
    }
    out.push(Finding {
        verdict: Limit::SenderBuffer,
        strength: sndbuf,
        evidence: vec![Evidence::new(
            End::Sender,
            by,
            "tcp_info.sndbuf_limited_percent",
            sndbuf * 100.0,
            "%",
            format!(
                "sender sndbuf-limited {:.0} % of the time (median connection)",
                sndbuf * 100.0
            ),
        )],
    });
    out
}

/// Each end's CPU. The receiver's counts more the more the sender waited on its window
/// (`waited`: the larger of the rwnd- and sndbuf-limited shares); the sender's counts less.
fn cpus(s_cpu: Option<Saturation>, r_cpu: Option<Saturation>, waited: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(s) = s_cpu {
        out.push(Finding {
            verdict: Limit::SenderCpu,
            strength: s.level * (1.0 - waited),
            evidence: vec![s.evidence],
        });
    }
    if let Some(r) = r_cpu {
        out.push(Finding {
            verdict: Limit::ReceiverCpu,
            strength: r.level * (0.5 + 0.5 * waited),
            evidence: vec![r.evidence],
        });
    }
    out
}

/// The primary sender's retransmissions the receiver reported as duplicates (D-SACK),
/// over the window's intervals; `None` when the kernel does not count them.
fn spurious(doc: &Document) -> Option<u64> {
    doc.intervals
        .iter()
        .filter_map(|i| i.sender.as_ref())
        .flat_map(|s| &s.tcp)
        .map(|t| t.dsack_dups.map(u64::from))
        .sum()
}

/// Loss and queueing on the path, in the share of the time the sender was limited by
/// neither window nor buffer (`explained`).
fn network(snd: &EndSide, spurious: Option<u64>, explained: f64) -> Option<Finding> {
    let by = Some(snd.by.measured_by);
    let mut signals: Vec<(f64, Evidence)> = Vec::new();
    let mss = snd
        .connections
        .per_connection
        .iter()
        .find_map(|c| c.snd_mss_bytes)
        .filter(|m| *m > 0)?;
    if let Some(r) = snd.tcp_retransmits.connections {
        let segments = (snd.bytes as f64 / mss as f64).max(1.0);
        let needed = r.saturating_sub(spurious.unwrap_or(0));
        let loss = needed as f64 / segments;
        let why = match spurious {
            Some(d) if d > 0 => format!(
                "{r} segments retransmitted, {d} of them needlessly (D-SACK: reordered, not lost); {:.3} % of those sent were lost",
                loss * 100.0
            ),
            _ => format!(
                "{r} segments retransmitted ({:.3} % of those sent)",
                loss * 100.0
            ),
        };
        signals.push((
            loss_signal(loss),
            Evidence::new(
                End::Sender,
                by,
                "tcp_retransmits.connections",
                r as f64,
                "segments",
                why,
            ),
        ));
    }
    let tcp = snd.tcp_info.as_deref();
    if let Some((srtt, min)) = tcp.and_then(|t| t.srtt_us.zip(t.min_rtt_us)) {
        let queued = srtt.median - min.median;
        let s = ((queued - QUEUE_DELAY_NOISE_US)
            / (QUEUE_DELAY_DECISIVE_US - QUEUE_DELAY_NOISE_US))
            .clamp(0.0, 1.0);
        signals.push((
            s,
            Evidence::new(
                End::Sender,
                by,
                "tcp_info.srtt_us",
                srtt.median,
                "us",
                format!(
                    "smoothed RTT {:.2} ms against a minimum of {:.2} ms",
                    srtt.median / 1e3,
                    min.median / 1e3
                ),
            ),
        ));
    }
    // The stronger signal's figure first.
    signals.sort_by(|a, b| b.0.total_cmp(&a.0));
    Some(Finding {
        verdict: Limit::Network,
        strength: signals.first()?.0 * (1.0 - explained).max(0.0),
        evidence: signals.into_iter().map(|(_, e)| e).collect(),
    })
}
