//! A packet-rate test's document: each side's rate, the loss between them, and a zero-loss
//! search's trials.

use serde::{Deserialize, Serialize};

use super::interval::{
    paired, IntervalFigures, IntervalPair, IntervalSide, PpsSideFigures, SideFigures,
};
use super::parts::{per_second, CpuFigures, HostCounted, Inputs, MeasuredBy};
use crate::side::{IntervalSample, Role, SideResult};
use crate::spec::PpsSpec;

/// One side of a packet-rate test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PpsEndSide {
    #[serde(flatten)]
    pub by: MeasuredBy,
    pub poll: String,
    pub seconds: f64,
    /// Inside the window.
    pub packets: u64,
    pub packets_per_second: f64,
    /// Wire bits (packet size × 8) per second, as testpmd reports them.
    pub bits_per_second: f64,
    /// Over the whole test: sent, or distinct packets received.
    pub total_packets: u64,
    pub cpu: CpuFigures,
    /// The DPDK engine: the port's own counters over the whole test, per queue too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<crate::side::PortCounters>,
    /// The sender's sends held back by the queue ahead (kernel sockets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_sends: Option<crate::side::BlockedSends>,
    #[serde(flatten)]
    pub counted: HostCounted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketsEnd {
    pub size_bytes: u32,
    pub udp_payload_bytes: u32,
    pub flows: usize,
    pub sender: Option<PpsEndSide>,
    pub receiver: Option<PpsEndSide>,
    pub lost_packets: Option<u64>,
    pub loss_percent: Option<f64>,
    pub reordered_packets: Option<u64>,
    pub duplicated_packets: Option<u64>,
    /// The receive sockets' own drop counter: the part of the loss inside the agent's host.
    pub socket_drops: Option<u64>,
    /// Receiver packets/s over sender packets/s: the honest figure over the optimistic one.
    pub receiver_to_sender_ratio: Option<f64>,
    pub flows_with_loss: Option<usize>,
    /// Sent past the last sequence number a receiver that counts by them saw (iperf3's,
    /// which stops reading at the test's end): not known received or lost, so in neither
    /// figure nor in the loss's share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncounted_packets: Option<u64>,
    /// With `--dscp`/`--ecn`: what the path did to the marks, as the agent received them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Box<crate::marks::Fate>>,
    /// The receiver's interarrival jitter, where the datagrams carry their send time
    /// (iperf3's): measured by whichever side received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<JitterEnd>,
}

/// Interarrival jitter over a whole test: RFC 3550's running estimate (gain 1/16) of
/// the change in transit time between consecutive datagrams, as iperf3 computes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JitterEnd {
    /// The side that received and measured it, and its host (an iperf3 peer's name and
    /// version when it was the iperf3 peer's own figure).
    pub measured_by: Role,
    pub host: String,
    /// The flows' mean at the end (iperf3's sum), milliseconds.
    pub jitter_ms: f64,
    /// Each flow's at the end, milliseconds.
    pub per_flow_ms: Vec<f64>,
}

impl JitterEnd {
    fn of(side: &SideResult) -> Option<JitterEnd> {
        let per = side.pps()?.jitter_ms.clone()?;
        (!per.is_empty()).then(|| JitterEnd {
            measured_by: side.role,
            host: side.host.hostname.clone(),
            jitter_ms: per.iter().sum::<f64>() / per.len() as f64,
            per_flow_ms: per,
        })
    }
}

impl PacketsEnd {
    /// The tools an engine ran on each side (testpmd), by side: their exact command lines.
    pub fn tool_commands(&self) -> Vec<(Role, &str)> {
        [&self.sender, &self.receiver]
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s.by.measured_by, s.by.bypass.as_ref()?.command.as_deref()?)))
            .collect()
    }
}

/// A packet-rate test's section of `end`: each side's packet totals (also under
/// `packets`, so that `end.sender.packets_per_second` means to a script what it means in a
/// stream test), the loss, and a zero-loss search's trials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PpsEnd {
    pub sender: Option<PpsEndSide>,
    pub receiver: Option<PpsEndSide>,
    /// Sent by the sender and never received, over the whole test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<PacketsEnd>,
    /// A bidirectional test's other direction (the server sending, the client
    /// receiving), as `packets` is the forward one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Box<PacketsEnd>>,
    /// Zero-loss rate search: every trial and the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchEnd>,
}

impl PpsEnd {
    /// Clears every side's host CPU (the one host's, counted once elsewhere).
    pub(crate) fn clear_host_cpu(&mut self) {
        let packets = self
            .packets
            .iter_mut()
            .chain(self.reverse.as_deref_mut())
            .flat_map(|p| [&mut p.sender, &mut p.receiver]);
        for s in [&mut self.sender, &mut self.receiver]
            .into_iter()
            .chain(packets)
            .flatten()
        {
            s.cpu.usage = None;
        }
    }
}

/// One trial of a zero-loss search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// `None`: as fast as the sender could.
    pub offered_pps: Option<f64>,
    pub sent_pps: f64,
    pub received_pps: f64,
    pub lost_packets: u64,
    pub loss_percent: f64,
    pub passed: bool,
    /// The sender fell short of the offered rate (more than 2 % below it): this trial
    /// tested what it sent, not what was offered.
    #[serde(default)]
    pub sender_short: bool,
    /// The final trial at the result rate that confirms it (RFC 2544).
    #[serde(default)]
    pub verification: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchEnd {
    pub max_loss_percent: f64,
    pub trial_ms: u64,
    pub trials: Vec<Trial>,
    /// Highest sent rate whose loss stayed within the limit; 0 when none did.
    pub result_pps: f64,
    /// Trials run at each rate; a rate passes only if every one of them does.
    #[serde(default = "one")]
    pub trials_per_step: u32,
    /// What bounds the result: `sender` (the sender reached no higher rate, and lost
    /// nothing at it: the path may carry more), `loss` (the bisection converged between a
    /// rate without loss and one with), `none_passed`.
    #[serde(default)]
    pub limited_by: String,
    /// Whether a last trial at the result passed while sending at least the result's rate
    /// (less 2 %): `false` when none did (its sender fell short, or trials ran out), so the
    /// result stands on its one pass. Absent in documents from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
}

fn one() -> u32 {
    1
}

fn end_side(side: &SideResult) -> Option<PpsEndSide> {
    let p = side.pps()?;
    let secs = side.window_s;
    let per_s = |v: f64| per_second(v, secs);
    Some(PpsEndSide {
        by: MeasuredBy::of(side),
        poll: p.poll.clone(),
        seconds: secs,
        packets: p.packets,
        packets_per_second: per_s(p.packets as f64),
        bits_per_second: per_s(p.packets as f64 * p.size_bytes as f64 * 8.0),
        total_packets: p.per_flow.iter().sum(),
        cpu: CpuFigures::of(side),
        port: p.port.clone(),
        blocked_sends: p.blocked_sends.clone(),
        counted: HostCounted::of(side),
    })
}

/// Datagrams received per packet the receiver's link carried, above which the packets
/// were not packets on the link: GSO batches that a virtual link (veth) passes uncut and the
/// receiving stack cuts, so no packet of the test's size ever crossed it.
const UNCUT_RATIO: u64 = 4;

/// The receiver's note when its link carried far fewer packets than it received: the
/// figure is then the sockets' datagram rate, not a link's packet rate.
fn uncut_batches_note(receiver: &PpsEndSide, gso: bool) -> Option<String> {
    let nic = receiver.counted.nic.as_ref()?;
    let (wire, got) = (nic.rx_packets, receiver.packets);
    if got < 1000 || wire.saturating_mul(UNCUT_RATIO) >= got {
        return None;
    }
    let why = match gso {
        true => "the sender's GSO batches crossed the link uncut (a virtual link cuts none)",
        false => "the sender's packets crossed the link batched",
    };
    Some(format!(
        "{} carried {wire} packets for {got} datagrams received ({:.1} a packet): {why}, so \
         this is the sockets' datagram rate, not the link's packet rate",
        nic.iface,
        got as f64 / wire.max(1) as f64
    ))
}

/// One direction's figures: its sender's and receiver's sides (each perhaps absent) and
/// the loss between them.
fn packets_end(
    spec: &PpsSpec,
    tx_side: Option<&SideResult>,
    rx_side: Option<&SideResult>,
) -> PacketsEnd {
    let tx = tx_side.and_then(|s| s.pps());
    let rx = rx_side.and_then(|s| s.pps());
    let sender = tx_side.and_then(end_side);
    let mut receiver = rx_side.and_then(end_side);
    if let Some(r) = receiver.as_mut() {
        r.counted.notes.extend(uncut_batches_note(r, spec.gso));
    }
    // Each flow's sent count as far as its receiver counted.
    let counted: Option<Vec<u64>> = tx.map(|t| match rx.and_then(|r| r.counted_through.as_ref()) {
        Some(through) => t
            .per_flow
            .iter()
            .enumerate()
            .map(|(i, s)| through.get(i).map_or(*s, |c| (*s).min(*c)))
            .collect(),
        None => t.per_flow.clone(),
    });
    let (lost, flows_with_loss) = match (&counted, rx) {
        (Some(sent), Some(r)) => {
            let per: Vec<u64> = sent
                .iter()
                .zip(&r.per_flow)
                .map(|(s, g)| s.saturating_sub(*g))
                .collect();
            (
                Some(per.iter().sum::<u64>()),
                Some(per.iter().filter(|&&l| l > 0).count()),
            )
        }
        _ => (None, None),
    };
    let sent_total = counted.as_ref().map(|c| c.iter().sum::<u64>());
    let uncounted = match (tx, rx.and_then(|r| r.counted_through.as_ref())) {
        (Some(t), Some(_)) => Some(t.per_flow.iter().sum::<u64>() - sent_total.unwrap_or(0)),
        _ => None,
    };
    PacketsEnd {
        size_bytes: spec.size_bytes,
        udp_payload_bytes: spec.payload_bytes(),
        flows: spec.flows as usize,
        lost_packets: lost,
        loss_percent: lost.zip(sent_total).map(|(l, s)| {
            if s > 0 {
                l as f64 * 100.0 / s as f64
            } else {
                0.0
            }
        }),
        reordered_packets: rx.map(|r| r.reordered),
        duplicated_packets: rx.map(|r| r.duplicated),
        socket_drops: rx.and_then(|r| r.socket_drops),
        receiver_to_sender_ratio: match (&sender, &receiver) {
            (Some(s), Some(r)) if s.packets_per_second > 0.0 => {
                Some(r.packets_per_second / s.packets_per_second)
            }
            _ => None,
        },
        flows_with_loss,
        uncounted_packets: uncounted,
        jitter: rx_side.and_then(JitterEnd::of),
        marks: rx.and_then(|r| r.marks.clone()).map(|forward| {
            Box::new(crate::marks::Fate {
                forward: Some(forward),
                reverse: None,
            })
        }),
        sender,
        receiver,
    }
}

/// `side` as its part of a bidirectional test's other direction: its own host, role and
/// window, the figures of that direction.
fn reversed(side: &SideResult) -> Option<SideResult> {
    let r = side.pps()?.reverse.as_deref()?;
    let mut s = side.clone();
    s.section = crate::side::SideSection::Pps(r.clone());
    Some(s)
}

/// `x`'s interval of a bidirectional test's other direction.
fn reversed_sample(x: &IntervalSample) -> Option<IntervalSample> {
    let r = x.pps()?.reverse.as_deref()?;
    let mut y = x.clone();
    y.section = crate::side::SampleSection::Pps(r.clone());
    Some(y)
}

/// Both sides' rates and the loss between them: the intervals and end section. In a
/// bidirectional test the client's sending is the forward direction, the server's the
/// reverse one (each side carries its part of it).
pub(crate) fn build(spec: &PpsSpec, inp: &Inputs<'_>) -> (Vec<IntervalFigures>, PpsEnd) {
    let packets = packets_end(spec, Some(inp.client), inp.server);
    let (rc, rs) = (reversed(inp.client), inp.server.and_then(reversed));
    let reverse = (rc.is_some() || rs.is_some())
        .then(|| Box::new(packets_end(spec, rs.as_ref(), rc.as_ref())));
    let size = spec.size_bytes as f64;
    let side = |x: Option<&IntervalSample>, role: Role| {
        x.map(|x| {
            let secs = (x.end_s - x.start_s).max(1e-9);
            let pk = x.pps().map_or(0, |p| p.packets) as f64;
            IntervalSide {
                measured_by: role,
                bytes: (pk * size) as u64,
                bits_per_second: pk * size * 8.0 / secs,
                cpu_busy_percent: x.cpu_busy_percent,
                section: SideFigures::Pps(PpsSideFigures {
                    packets_per_second: Some(pk / secs),
                    marks: x.pps().and_then(|p| p.marks.clone()).map(Box::new),
                    jitter_ms: x.pps().and_then(|p| p.jitter_ms),
                }),
                partial: x.partial,
            }
        })
    };
    let intervals = paired(inp.client_intervals, inp.server_intervals)
        .map(|(span, c, s)| {
            let (rc, rs) = (c.and_then(reversed_sample), s.and_then(reversed_sample));
            let pair = (rc.is_some() || rs.is_some()).then(|| IntervalPair {
                sender: side(rs.as_ref(), Role::Server),
                receiver: side(rc.as_ref(), Role::Client),
            });
            IntervalFigures {
                sender: side(c, Role::Client),
                receiver: side(s, Role::Server),
                reverse: pair,
                ..span
            }
        })
        .collect();
    let end = PpsEnd {
        lost_packets: packets.lost_packets,
        sender: packets.sender.clone(),
        receiver: packets.receiver.clone(),
        packets: Some(packets),
        reverse,
        search: None,
    };
    (intervals, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver's end side as a veth lab's `pps --gso` run wrote it (trimmed), with the
    /// link's packet count set.
    fn receiver(rx_packets: u64) -> PpsEndSide {
        let mut side: PpsEndSide = serde_json::from_str(
            r#"{"measured_by": "server", "host": "vm", "engine": "kernel", "threads": 1,
            "pinned_cpus": [1], "poll": "block", "seconds": 1.99448882, "packets": 450400,
            "packets_per_second": 225822.27, "bits_per_second": 115621004.08,
            "total_packets": 674240, "cpu": {"process_cpu_s": null},
            "nic": {"iface": "vs1", "rx_packets": 14112, "tx_packets": 1, "rx_bytes": 10526872,
            "tx_bytes": 260, "rx_dropped": 0, "tx_dropped": 0},
            "interrupts": null, "notes": []}"#,
        )
        .unwrap();
        side.counted.nic.as_mut().unwrap().rx_packets = rx_packets;
        side
    }

    #[test]
    fn a_link_that_carried_uncut_gso_batches_is_named_with_its_counts() {
        let note = uncut_batches_note(&receiver(14112), true).expect("a note");
        assert_eq!(
            note,
            "vs1 carried 14112 packets for 450400 datagrams received (31.9 a packet): the \
             sender's GSO batches crossed the link uncut (a virtual link cuts none), so this \
             is the sockets' datagram rate, not the link's packet rate"
        );
    }

    /// A receiver's side with `jitter_ms` per flow, or none.
    fn rx_side(jitter_ms: Option<Vec<f64>>) -> SideResult {
        let host = crate::HostInfo {
            hostname: "iperf3 server (iperf 3.12)".into(),
            ..Default::default()
        };
        let mut s = SideResult::new(Role::Server, host, 2.0, (1, None), vec![]);
        s.section = crate::SideSection::Pps(crate::PpsResult {
            size_bytes: 142,
            packets: 10,
            per_flow: vec![5, 5],
            poll: "iperf3".into(),
            jitter_ms,
            ..Default::default()
        });
        s
    }

    #[test]
    fn jitter_is_the_receivers_with_who_measured_it_and_absent_without_one() {
        let j = JitterEnd::of(&rx_side(Some(vec![0.5, 1.5]))).expect("a jitter");
        assert_eq!((j.measured_by, j.jitter_ms), (Role::Server, 1.0));
        assert_eq!(j.host, "iperf3 server (iperf 3.12)");
        assert_eq!(j.per_flow_ms, [0.5, 1.5]);
        let text = serde_json::to_string(&j).unwrap();
        assert!(text.contains(r#""jitter_ms":1.0"#), "{text}");
        // Datagrams without a send time (sonde's own): no jitter, and no key for it.
        assert_eq!(JitterEnd::of(&rx_side(None)), None);
        let spec = PpsSpec::default();
        let side = rx_side(None);
        let test = crate::TestSpec::Pps(spec.clone());
        let inputs = Inputs {
            server: Some(&side),
            ..Inputs::new(&test, "", &side)
        };
        let (_, end) = build(&spec, &inputs);
        let text = serde_json::to_string(&end).unwrap();
        assert!(!text.contains("jitter"), "{text}");
    }

    #[test]
    fn a_link_that_carried_each_packet_has_no_note() {
        assert_eq!(uncut_batches_note(&receiver(450_400), false), None);
        // A GSO sender whose batches a NIC (or the stack before it) cut: no note either.
        assert_eq!(uncut_batches_note(&receiver(450_000), true), None);
        // At the threshold: 4 datagrams a link packet is still a link's rate.
        assert_eq!(uncut_batches_note(&receiver(450_400 / 4), true), None);
        assert!(uncut_batches_note(&receiver(450_400 / 4 - 1), true).is_some());
    }

    #[test]
    fn what_was_sent_past_a_sequence_counting_receivers_last_is_neither_lost_nor_received() {
        let mut sender = rx_side(None);
        sender.role = Role::Client;
        let sent = |p: &mut crate::PpsResult| p.per_flow = vec![10, 10];
        if let crate::SideSection::Pps(p) = &mut sender.section {
            sent(p)
        }
        let mut receiver = rx_side(None);
        let spec = PpsSpec {
            flows: 2,
            ..PpsSpec::default()
        };
        // Received 7 and 8; an iperf3 receiver saw sequence numbers up to 9 and 10.
        let counting = |through: Option<Vec<u64>>, receiver: &mut SideResult| {
            if let crate::SideSection::Pps(p) = &mut receiver.section {
                p.per_flow = vec![7, 8];
                p.counted_through = through;
            }
        };
        counting(Some(vec![9, 10]), &mut receiver);
        let end = packets_end(&spec, Some(&sender), Some(&receiver));
        assert_eq!(end.lost_packets, Some(4), "the gaps below each flow's last");
        assert_eq!(end.uncounted_packets, Some(1), "flow 0's tenth");
        assert_eq!(end.flows_with_loss, Some(2));
        assert_eq!(end.loss_percent, Some(4.0 * 100.0 / 19.0));
        // A receiver that counts every packet (sonde's): all not received is lost.
        counting(None, &mut receiver);
        let end = packets_end(&spec, Some(&sender), Some(&receiver));
        assert_eq!((end.lost_packets, end.uncounted_packets), (Some(5), None));
        let text = serde_json::to_string(&end).unwrap();
        assert!(!text.contains("uncounted"), "{text}");
    }

    #[test]
    fn a_bidirectional_tests_other_direction_is_its_reverse_with_its_own_loss() {
        // Ours (the client) sent 10 a flow and received the server's 4 and 5 of 5 each;
        // the server received 9 and 10 of ours.
        let mut client = rx_side(None);
        client.role = Role::Client;
        let base = client.pps().unwrap().clone();
        let pps = |per_flow: Vec<u64>, jitter| crate::PpsResult {
            per_flow,
            jitter_ms: jitter,
            ..base.clone()
        };
        let mut ours = pps(vec![10, 10], None);
        ours.reverse = Some(Box::new(pps(vec![4, 5], Some(vec![0.25, 0.25]))));
        client.section = crate::SideSection::Pps(ours);
        let mut server = rx_side(Some(vec![0.5, 0.5]));
        let mut theirs = pps(vec![9, 10], Some(vec![0.5, 0.5]));
        theirs.reverse = Some(Box::new(pps(vec![5, 5], None)));
        server.section = crate::SideSection::Pps(theirs);
        let sample = |packets, reverse: Option<u64>| IntervalSample {
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            cpu_busy_percent: None,
            partial: false,
            section: crate::side::SampleSection::Pps(crate::side::PpsSample {
                packets,
                reverse: reverse.map(|r| {
                    Box::new(crate::side::PpsSample {
                        packets: r,
                        ..Default::default()
                    })
                }),
                ..Default::default()
            }),
        };
        let spec = PpsSpec {
            flows: 2,
            bidir: true,
            ..PpsSpec::default()
        };
        let test = crate::TestSpec::Pps(spec.clone());
        let inputs = Inputs {
            server: Some(&server),
            client_intervals: &[sample(20, Some(9))],
            ..Inputs::new(&test, "", &client)
        };
        let (intervals, end) = build(&spec, &inputs);
        let fwd = end.packets.as_ref().unwrap();
        assert_eq!((fwd.lost_packets, fwd.flows_with_loss), (Some(1), Some(1)));
        let rev = end.reverse.as_deref().expect("the reverse direction");
        assert_eq!((rev.lost_packets, rev.flows_with_loss), (Some(1), Some(1)));
        let (tx, rx) = (rev.sender.as_ref().unwrap(), rev.receiver.as_ref().unwrap());
        assert_eq!((tx.total_packets, rx.total_packets), (10, 9));
        assert_eq!(
            (tx.by.measured_by, rx.by.measured_by),
            (Role::Server, Role::Client)
        );
        // Each direction's jitter is its receiver's.
        assert_eq!(fwd.jitter.as_ref().unwrap().jitter_ms, 0.5);
        assert_eq!(rev.jitter.as_ref().unwrap().measured_by, Role::Client);
        let i = &intervals[0];
        assert_eq!(i.sender.as_ref().unwrap().packets_per_second(), Some(20.0));
        let r = i.reverse.as_ref().expect("the reverse pair");
        assert!(r.sender.is_none());
        assert_eq!(r.receiver.as_ref().unwrap().packets_per_second(), Some(9.0));
        assert_eq!(r.receiver.as_ref().unwrap().measured_by, Role::Client);
    }
}
