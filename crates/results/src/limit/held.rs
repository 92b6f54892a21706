//! A packet-rate sender held back by the queue ahead of it: a shaper's, a qdisc's, a NIC
//! ring at line rate. It sends at exactly the bottleneck's rate and loses nothing, while
//! the CPU that runs the forwarding may look busy. Two figures tell it from a sender short
//! of CPU: the share of its threads' time its sends waited for room (its socket's buffer
//! full of packets the queue had not taken), and its own interface's qdisc holding packets
//! back over its rate (overlimits per packet passed). The second shows where the first
//! cannot: a shaper that releases a packet per timer tick (tbf at 50 Mbit/s: every 10 us)
//! costs the sender's enqueues so much CPU in the qdisc's dequeue that its queue never
//! fills and its sends never wait (measured on a 2-vCPU VM, kernel 6.18: 60 % of the
//! sending thread's samples in tbf_dequeue, overlimits 30 % of the packets passed).

use crate::document::PpsEndSide;
use crate::verdict::{Evidence, Finding, Limit, TransferEnd};

/// Waiting this share of its threads' time or less, a sender was not held back: the odd
/// full buffer of a burst. The complement of the CPU rules' saturation (95 % busy).
pub const WAITED_NOISE: f64 = 0.05;

/// Waiting this share or more, the queue ahead set the sender's rate: it had time to send
/// more and no room to. The complement of the CPU rules' busy floor (80 %).
pub const WAITED_DECISIVE: f64 = 0.20;

/// How strongly a share of time spent waiting for room says the queue ahead limited the
/// run: 0 at [`WAITED_NOISE`], 1 at [`WAITED_DECISIVE`], linear between.
pub(super) fn waited_signal(share: f64) -> f64 {
    ((share - WAITED_NOISE) / (WAITED_DECISIVE - WAITED_NOISE)).clamp(0.0, 1.0)
}

/// Overlimits per packet its qdisc passed at or below which a shaper did not hold the
/// sender back (a token bucket that emptied in the odd burst), and at or above which it
/// set the sender's rate: the same shares as the waits'. A sender slower than the shaper
/// keeps its bucket full and sees none.
pub const THROTTLED_NOISE: f64 = WAITED_NOISE;
pub const THROTTLED_DECISIVE: f64 = WAITED_DECISIVE;

/// The finding that the queue ahead held the sender back (`network`), with its blocked
/// sends and its own interface's qdisc as evidence, the stronger first; `None` when
/// neither says so (a sender that never waited and has no shaper, or did not count: a
/// bypass engine).
pub(super) fn held_back(snd: &PpsEndSide) -> Option<Finding> {
    let mut signs: Vec<(f64, Evidence)> = [waited(snd), throttled(snd)]
        .into_iter()
        .flatten()
        .collect();
    signs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let strength = signs.first()?.0;
    if strength <= 0.0 {
        return None;
    }
    Some(Finding {
        verdict: Limit::Network,
        strength,
        evidence: signs.into_iter().map(|(_, e)| e).collect(),
    })
}

/// The sender's waits for room: their signal and evidence.
fn waited(snd: &PpsEndSide) -> Option<(f64, Evidence)> {
    let b = snd.blocked_sends.as_ref()?;
    let threads = snd.by.threads.max(1);
    let capacity = f64::from(threads) * snd.seconds;
    if capacity <= 0.0 || b.seconds <= 0.0 {
        return None;
    }
    let share = (b.seconds / capacity).min(1.0);
    let text = format!(
        "sender's sends found the queue ahead full {} times and waited {:.2} s for room: \
         {:.0} % of its {threads} {} {:.2} s",
        b.would_block + b.no_buffers,
        b.seconds,
        share * 100.0,
        if threads == 1 { "thread's" } else { "threads'" },
        snd.seconds
    );
    let by = Some(snd.by.measured_by);
    let ev = Evidence::new(
        TransferEnd::Sender,
        by,
        "blocked_sends.seconds",
        b.seconds,
        "s",
        text,
    );
    Some((waited_signal(share), ev))
}

/// The sender's own interface's qdisc, where it held packets back or kept a queue: the
/// signal of its overlimits per packet passed, and the evidence.
fn throttled(snd: &PpsEndSide) -> Option<(f64, Evidence)> {
    let q = snd.counted.qdisc.as_ref()?;
    let share = q.overlimits as f64 / q.packets.max(1) as f64;
    let text = format!(
        "its interface {}'s qdisc ({}) held packets back over its rate {} times for {} it \
         passed ({:.0} %), dropped {}, and held {} bytes ({} packets) at the window's end",
        q.iface,
        q.kind,
        q.overlimits,
        q.packets,
        share * 100.0,
        q.drops,
        q.backlog_bytes,
        q.backlog_packets
    );
    let by = Some(snd.by.measured_by);
    let (figure, value, unit) = match (q.overlimits, q.backlog_bytes) {
        (0, 0) => return None,
        (0, bytes) => ("qdisc.backlog_bytes", bytes, "bytes"),
        (over, _) => ("qdisc.overlimits", over, "events"),
    };
    let signal =
        ((share - THROTTLED_NOISE) / (THROTTLED_DECISIVE - THROTTLED_NOISE)).clamp(0.0, 1.0);
    let ev = Evidence::new(TransferEnd::Sender, by, figure, value as f64, unit, text);
    Some((signal, ev))
}
