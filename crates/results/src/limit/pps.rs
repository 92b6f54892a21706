//! A packet-rate run's limit: the test's own rate, drops at the receiver (its sockets' or
//! its NIC's queues overflowed), loss between the hosts, a queue ahead of the sender that
//! held it back, or either end's CPU. Loss is judged first: a sender that never waits is
//! always busy, so its CPU limits the run only when the receiver took everything it sent
//! and its sends never waited for room.

use super::cpu;
use super::finding::{loss_signal, pick, rate_finding};
use super::held::held_back;
use crate::document::{Document, PpsEnd, PpsEndSide};
use crate::spec::{PollMode, TestSpec};
use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};

pub(super) fn judge(doc: &Document, end: &PpsEnd) -> Option<LimitedBy> {
    let TestSpec::Pps(spec) = &doc.start.spec else {
        return None;
    };
    let snd = end.sender.as_ref()?;
    let rcv = end.receiver.as_ref();
    let sent = snd.total_packets as f64;
    let lost = end.lost_packets.unwrap_or(0) as f64;
    let at_receiver = receiver_drops(end, rcv).min(lost);
    let mut found = Vec::new();
    let mut evidence = Vec::new();
    if sent > 0.0 && at_receiver > 0.0 {
        evidence = drops_evidence(end, rcv, at_receiver, sent);
        found.push(Finding {
            verdict: Limit::ReceiverDrops,
            strength: loss_signal(at_receiver / sent),
            evidence: evidence.clone(),
        });
    }
    if sent > 0.0 && lost > at_receiver {
        let between = lost - at_receiver;
        found.push(Finding {
            verdict: Limit::Network,
            strength: loss_signal(between / sent),
            evidence: vec![Evidence::new(
                TransferEnd::Test,
                None,
                "lost_packets",
                between,
                "packets",
                format!(
                    "{between:.0} packets ({:.3} % of those sent) lost between the hosts, not dropped by the receiver's sockets or NIC",
                    between / sent * 100.0
                ),
            )],
        });
    }
    let lossy = loss_signal(if sent > 0.0 { lost / sent } else { 0.0 });
    if let Some(asked) = spec.rate_pps.filter(|r| *r > 0.0) {
        let mut f = rate_finding(
            asked,
            snd.packets_per_second,
            (TransferEnd::Sender, snd.by.measured_by),
            "packets/s",
        );
        f.strength *= 1.0 - lossy;
        found.push(f);
    }
    let held = held_back(snd);
    let waited = held.as_ref().map_or(0.0, |h| h.strength);
    found.extend(held);
    let paced = spec.rate_pps.is_some();
    let spins = matches!(spec.poll, PollMode::Busy);
    let (s_cpu, r_cpu) = cpu::both(
        doc,
        Some(side(TransferEnd::Sender, snd, false)),
        rcv.map(|r| side(TransferEnd::Receiver, r, spins)),
    );
    let dropped = loss_signal(if sent > 0.0 { at_receiver / sent } else { 0.0 });
    if let Some(s) = s_cpu.filter(|_| !paced) {
        // A sender that waited for room was not short of CPU while it waited.
        let mut strength = s.level * (1.0 - lossy) * (1.0 - waited);
        if dropped > 0.0 {
            // A sender that never waits is always busy: drops at the receiver lead.
            strength = strength.min(dropped * DROPS_BEFORE_CPU);
        }
        found.push(Finding {
            verdict: Limit::SenderCpu,
            strength,
            evidence: vec![s.evidence],
        });
    }
    if let Some(r) = r_cpu {
        let mut strength = r.level * (RECEIVER_KEPT_UP + (1.0 - RECEIVER_KEPT_UP) * dropped);
        if dropped > 0.0 {
            // Below the drops it explains, however few: they are what the reader acts on.
            strength = strength.min(dropped * DROPS_BEFORE_CPU);
        }
        let mut ev = vec![r.evidence];
        ev.extend(evidence);
        found.push(Finding {
            verdict: Limit::ReceiverCpu,
            strength,
            evidence: ev,
        });
    }
    pick(found)
}

/// A receiver whose CPU was saturated but that dropped nothing kept up with the sender:
/// its CPU is then only this strong a finding (below a saturated sender's).
pub const RECEIVER_KEPT_UP: f64 = 0.4;

/// A receiver that dropped packets with its CPU saturated is called `receiver_drops`, its
/// CPU the runner-up: the drops are what a reader acts on (threads, buffers, queues).
pub const DROPS_BEFORE_CPU: f64 = 0.95;

fn side(end: TransferEnd, s: &PpsEndSide, spins: bool) -> cpu::Side<'_> {
    cpu::Side {
        end,
        name: if end == TransferEnd::Sender {
            "sender"
        } else {
            "receiver"
        },
        by: &s.by,
        cpu: &s.cpu,
        seconds: s.seconds,
        spins,
    }
}

/// Packets the receiver's host itself dropped: its sockets' drop counter, its NIC's (or a
/// DPDK port's missed and no-mbuf counts).
fn receiver_drops(end: &PpsEnd, rcv: Option<&PpsEndSide>) -> f64 {
    let socket = end
        .packets
        .as_ref()
        .and_then(|p| p.socket_drops)
        .unwrap_or(0);
    let nic = rcv
        .and_then(|r| r.counted.nic.as_ref())
        .map_or(0, |n| n.rx_dropped);
    let port = rcv
        .and_then(|r| r.port.as_ref())
        .map_or(0, |p| p.missed + p.no_mbuf);
    (socket + nic + port) as f64
}

fn drops_evidence(
    end: &PpsEnd,
    rcv: Option<&PpsEndSide>,
    dropped: f64,
    sent: f64,
) -> Vec<Evidence> {
    let by = rcv.map(|r| r.by.measured_by);
    let mut ev = vec![Evidence::new(
        TransferEnd::Receiver,
        by,
        "lost_packets",
        dropped,
        "packets",
        format!(
            "receiver dropped {dropped:.0} packets ({:.2} % of those sent)",
            dropped / sent * 100.0
        ),
    )];
    if let Some(s) = end
        .packets
        .as_ref()
        .and_then(|p| p.socket_drops)
        .filter(|s| *s > 0)
    {
        ev.push(Evidence::new(
            TransferEnd::Receiver,
            by,
            "packets.socket_drops",
            s as f64,
            "packets",
            format!("its sockets' receive queues overflowed {s} times (/proc/net/udp drops)"),
        ));
    }
    if let Some(n) = rcv
        .and_then(|r| r.counted.nic.as_ref())
        .filter(|n| n.rx_dropped > 0)
    {
        ev.push(Evidence::new(
            TransferEnd::Receiver,
            by,
            "nic.rx_dropped",
            n.rx_dropped as f64,
            "packets",
            format!("its NIC {} dropped {} packets", n.iface, n.rx_dropped),
        ));
    }
    ev
}
