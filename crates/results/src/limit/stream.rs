//! A stream run's limit, judged on its primary direction (forward; the controller's
//! sending direction of a bidirectional run). The sender's TCP_INFO says where TCP waited
//! (the receiver's window, its own buffer, or the congestion window with data unsent), its
//! retransmissions net of D-SACKs and its RTT above the minimum say what the path did, and
//! both ends' CPUs say whether a host ran out first.
//!
//! TCP's own chronographs (rwnd- and sndbuf-limited time) undercount on a path whose RTT
//! is a few microseconds (a veth, a rack): the window reopens before the next send finds
//! it closed. So a window is also judged by size: a receiver's window smaller than the
//! congestion window, a buffer the user set below twice the run's bandwidth-delay product.

use super::cpu::{self, Saturation};
use super::finding::{loss_signal, pick, rate_finding};
use super::window::{buffers, Facts};
use crate::document::{Document, EndSide, StreamEnd};
use crate::spec::{StreamSpec, TestSpec};
use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};

/// Smoothed RTT this far above the path's minimum means a queue builds on the path (a
/// shaper's or a switch's buffer). Half a millisecond is more than a busy host adds: a
/// 22 Gbit/s veth run's senders measured 0.1 ms over their minimum.
pub const QUEUE_DELAY_NOISE_US: f64 = 500.0;
/// Queueing delay at which the signal is full: 2 ms is a full 256 KB buffer at 1 Gbit/s.
pub const QUEUE_DELAY_DECISIVE_US: f64 = 2000.0;

/// When no finding reaches this strength the run is called network-limited at it (a path
/// that carried what it could, with no host limit in sight).
pub const NOTHING_FOUND: f64 = 0.1;

pub(super) fn judge(doc: &Document, end: &StreamEnd) -> Option<LimitedBy> {
    let snd = end.sender.as_ref()?;
    let rcv = end.receiver.as_ref();
    let spec = match &doc.start.spec {
        TestSpec::Stream(s) => Some(s),
        _ => None,
    };
    let facts = Facts::of(doc, spec, snd, rcv);
    let (s_cpu, r_cpu) = cpu::both(
        doc,
        Some(side(TransferEnd::Sender, "sender", snd)),
        rcv.map(|r| side(TransferEnd::Receiver, "receiver", r)),
    );
    let l_r = level(&r_cpu);
    let idle = |s: &Option<Saturation>| s.as_ref().map_or(1.0, |s| 1.0 - s.busy_percent / 100.0);
    let idle = (idle(&s_cpu), idle(&r_cpu));
    let rate_met = found_rate(spec, snd, rcv);
    let mut found = Vec::new();
    found.extend(rate_met.clone());
    let (window, buffer) = buffers(&facts, l_r);
    let (waited_window, waited_buffer) = (facts.window_share, facts.buffer_share);
    found.extend([window, buffer]);
    let ahead = facts.unsent_share.unwrap_or(0.0);
    found.extend(cpus(s_cpu, r_cpu, waited_window.max(ahead), waited_buffer));
    let paced = rate_met.map_or(0.0, |r| r.strength);
    found.extend(network(&facts, idle, paced, waited_window + waited_buffer));
    if found.iter().all(|f| f.strength < NOTHING_FOUND) {
        found.push(nothing_found(&found));
    }
    pick(found)
}

fn side<'a>(end: TransferEnd, name: &'a str, s: &'a EndSide) -> cpu::Side<'a> {
    cpu::Side {
        end,
        name,
        by: &s.by,
        cpu: &s.cpu,
        seconds: s.seconds,
        spins: false,
    }
}

fn level(s: &Option<Saturation>) -> f64 {
    s.as_ref().map_or(0.0, |s| s.level)
}

/// The path, when nothing else was found: the CPUs' figures say why no host limit was.
fn nothing_found(found: &[Finding]) -> Finding {
    let mut evidence: Vec<Evidence> = found
        .iter()
        .filter(|f| matches!(f.verdict, Limit::SenderCpu | Limit::ReceiverCpu))
        .flat_map(|f| f.evidence.iter().cloned())
        .collect();
    let text =
        "no host limit found: neither CPU saturated, the sender waited on no window or buffer";
    evidence.insert(
        0,
        Evidence::new(TransferEnd::Test, None, "limited_by", 0.0, "", text.into()),
    );
    Finding {
        verdict: Limit::Network,
        strength: NOTHING_FOUND,
        evidence,
    }
}

/// The test's own pacing, when the receiver got what it asked for.
fn found_rate(spec: Option<&StreamSpec>, snd: &EndSide, rcv: Option<&EndSide>) -> Option<Finding> {
    let asked = spec?.rate_bits_per_s.filter(|r| *r > 0.0)?;
    let (end, side) = match rcv {
        Some(r) => (TransferEnd::Receiver, r),
        None => (TransferEnd::Sender, snd),
    };
    let by = (end, side.by.measured_by);
    Some(rate_finding(asked, side.bits_per_second, by, "bit/s"))
}

/// Each end's CPU. A sender that waited on a window or buffer was not held back by its
/// CPU for that share of the time, nor was one whose socket held data it had written and
/// the kernel had not yet sent (the congestion window's wait: the sender was ahead of the
/// path; a core kept busy by other work showed 96-100 % while our sender's threads used
/// 1 % of a core, and the verdict said sender_cpu behind a shaper's 8 ms queue). A receiver core with no idle time cannot read faster,
/// whether or not the window shows it yet: an autotuned receive buffer of megabytes takes
/// longer to fill than a test lasts, and a busy receiver delays the ACKs that open the
/// sender's congestion window.
fn cpus(
    s_cpu: Option<Saturation>,
    r_cpu: Option<Saturation>,
    window: f64,
    buffer: f64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(s) = s_cpu {
        out.push(Finding {
            verdict: Limit::SenderCpu,
            strength: s.level * (1.0 - window.max(buffer)),
            evidence: vec![s.evidence],
        });
    }
    if let Some(r) = r_cpu {
        out.push(Finding {
            verdict: Limit::ReceiverCpu,
            strength: r.level,
            evidence: vec![r.evidence],
        });
    }
    out
}

/// The path: loss (retransmissions net of D-SACKs), a standing queue (RTT above its
/// minimum), and the congestion window holding data back while both CPUs idled (unsent
/// data in the sender's socket, weighed by each end's idle share: a busy receiver slows
/// the ACKs that open the window, and the test's own pacing holds data back as well).
/// Scaled by the share of the time the sender did not wait on a window or buffer.
fn network(f: &Facts<'_>, idle: (f64, f64), paced: f64, explained: f64) -> Option<Finding> {
    let by = Some(f.snd.by.measured_by);
    let mut signals: Vec<(f64, Evidence)> = Vec::new();
    if let Some((r, loss)) = f.retransmits.zip(f.loss) {
        let why = match f.spurious {
            Some(d) if d > 0 => format!(
                "{r} segments retransmitted, {d} of them needlessly (D-SACK: reordered, not lost); {:.3} % of those sent were lost",
                loss * 100.0
            ),
            _ => format!("{r} segments retransmitted ({:.3} % of those sent)", loss * 100.0),
        };
        let figure = "tcp_retransmits.connections";
        let e = Evidence::new(TransferEnd::Sender, by, figure, r as f64, "segments", why);
        signals.push((loss_signal(loss), e));
    }
    if let (Some(srtt), Some(min)) = (f.srtt_us, f.min_rtt_us) {
        let queued = srtt - min;
        let s = ((queued - QUEUE_DELAY_NOISE_US)
            / (QUEUE_DELAY_DECISIVE_US - QUEUE_DELAY_NOISE_US))
            .clamp(0.0, 1.0);
        let text = format!(
            "smoothed RTT {:.2} ms against a minimum of {:.2} ms",
            srtt / 1e3,
            min / 1e3
        );
        signals.push((
            s,
            Evidence::new(
                TransferEnd::Sender,
                by,
                "tcp_info.srtt_us",
                srtt,
                "us",
                text,
            ),
        ));
    }
    if let Some(share) = f.unsent_share {
        let text = format!(
            "the sender's socket held unsent data at {:.0} % of the interval ends while its CPU idled {:.0} % and the receiver's {:.0} %: the congestion window held it back",
            share * 100.0,
            idle.0 * 100.0,
            idle.1 * 100.0
        );
        let figure = "intervals.sender.tcp.notsent_bytes";
        let e = Evidence::new(TransferEnd::Sender, by, figure, share * 100.0, "%", text);
        signals.push((share * idle.0 * idle.1 * (1.0 - paced), e));
    }
    network_finding(signals, explained)
}

/// The network's finding from its `signals` (each figure's strength and evidence), less
/// the share of the run `explained` by an end: the strongest figure's strength, and as
/// evidence the figures that said something, the strongest one even when none did.
pub(super) fn network_finding(
    mut signals: Vec<(f64, Evidence)>,
    explained: f64,
) -> Option<Finding> {
    signals.sort_by(|a, b| b.0.total_cmp(&a.0));
    let strongest = signals.first()?.0;
    let evidence = signals
        .into_iter()
        .enumerate()
        .filter(|(i, (s, _))| *i == 0 || *s > 0.0)
        .map(|(_, (_, e))| e)
        .collect();
    Some(Finding {
        verdict: Limit::Network,
        strength: strongest * (1.0 - explained).max(0.0),
        evidence,
    })
}
