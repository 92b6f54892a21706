//! Between iperf3's UDP results and a packet-rate side, both ways. An iperf3 receiver
//! reports per stream `packets` (the highest sequence number it saw), `errors` (its lost
//! count) and `jitter`; a sender reports the packets it sent. The far side is built from
//! them (distinct packets received: packets less errors), absent where iperf3 reports
//! nothing (reordering, socket drops, CPU per thread); ours is sent back in iperf3's terms,
//! a receiver's figures being the ones it counted as iperf3 counts them.

use sonde_engine::pps::FlowRx;
use sonde_proto::iperf3::{stream_id, stream_index, Results, StreamResults, Test};
use sonde_results::{PpsResult, PpsSpec, Role, SideResult, SideSection};

/// The far end's side of a UDP test as an iperf3 peer in `role` reported it in `r`
/// (`Role::Client`: it sent; `Role::Server`: it received).
pub fn far_side(spec: &PpsSpec, role: Role, r: &Results, who: &str) -> SideResult {
    let (section, notes) = far_pps(spec, role == Role::Client, r, who, 0);
    super::figures::peer_side(role, r, who, notes, SideSection::Pps(section))
}

/// The far end's side of a `--bidir` UDP test: the forward streams (the first `flows`,
/// the client's sending) and the reverse ones (the next `flows`, the server's), the one it
/// did not send in its `reverse`.
pub fn far_side_bidir(spec: &PpsSpec, role: Role, r: &Results, who: &str) -> SideResult {
    let flows = spec.flows as usize;
    let (mut section, mut notes) = far_pps(spec, role == Role::Client, r, who, 0);
    let (other, more) = far_pps(spec, role == Role::Server, r, who, flows);
    section.reverse = Some(Box::new(other));
    let more = more.into_iter().skip(1);
    notes.extend(more.map(|n| format!("the other direction: {n}")));
    super::figures::peer_side(role, r, who, notes, SideSection::Pps(section))
}

/// One direction of an iperf3 peer's results: its streams `offset..offset + flows`, which
/// it `sent` or received; and the notes on what it measured.
fn far_pps(
    spec: &PpsSpec,
    sent: bool,
    r: &Results,
    who: &str,
    offset: usize,
) -> (PpsResult, Vec<String>) {
    let flows = spec.flows as usize;
    let mut per_flow = vec![0u64; flows];
    // A receiver's highest sequence number per stream: iperf3's `packets`.
    let mut through = vec![0u64; flows];
    let mut window = 0u64;
    let mut jitter_ms = vec![0.0; flows];
    let mut lost = 0u64;
    for s in &r.streams {
        let Some(i) = stream_index(s.id)
            .and_then(|i| (i as usize).checked_sub(offset))
            .filter(|i| *i < flows)
        else {
            continue;
        };
        let packets = s.packets.max(0) as u64;
        let omitted = s.omitted_packets.unwrap_or(0).max(0) as u64;
        let (total, in_window) = match sent {
            true => (packets, packets.saturating_sub(omitted)),
            false => {
                let errors = s.errors.max(0) as u64;
                let omitted_errors = s.omitted_errors.unwrap_or(0).max(0) as u64;
                lost += errors;
                jitter_ms[i] = s.jitter * 1000.0;
                through[i] = packets;
                (
                    packets.saturating_sub(errors),
                    packets
                        .saturating_sub(omitted)
                        .saturating_sub(errors.saturating_sub(omitted_errors)),
                )
            }
        };
        per_flow[i] = total;
        window += in_window;
    }
    let mut notes = vec![format!(
        "measured by {who}: its packet counts and its process CPU only; iperf3 reports no \
         reordering, socket drops, NIC or qdisc counters"
    )];
    if !sent {
        let jitter: Vec<String> = jitter_ms.iter().map(|j| format!("{j:.3}")).collect();
        notes.push(format!(
            "iperf3's own count: {lost} lost (gaps in its sequence numbers); jitter per \
             stream {} ms (RFC 1889, iperf3's)",
            jitter.join(", ")
        ));
    }
    // iperf3 reports no reordering, duplicates or socket drops: those stay at none.
    let section = PpsResult {
        size_bytes: spec.size_bytes,
        packets: window,
        per_flow,
        poll: "iperf3".into(),
        jitter_ms: (!sent).then_some(jitter_ms),
        counted_through: (!sent).then_some(through),
        ..PpsResult::default()
    };
    (section, notes)
}

/// Our side's results as an iperf3 peer reads them: a sender's packets sent per stream,
/// or (with the receivers' per-stream figures `seen`) iperf3's own receive counts.
pub fn our_results(side: &SideResult, spec: &PpsSpec, test: &Test, seen: &[FlowRx]) -> Results {
    let sent = side.pps().map(|p| p.per_flow.clone()).unwrap_or_default();
    let streams = our_streams(side, spec, &sent, seen, 0);
    let retransmits = if seen.is_empty() { 0 } else { -1 };
    super::figures::results_of(side, test, streams, retransmits)
}

/// Our side's results of a `--bidir` test: the forward streams then the reverse ones,
/// our receivers' (`seen`) in whichever direction we received.
pub fn our_results_bidir(
    side: &SideResult,
    spec: &PpsSpec,
    test: &Test,
    seen: &[FlowRx],
) -> Results {
    let flows = spec.flows as usize;
    let sent = |p: Option<&PpsResult>| p.map(|p| p.per_flow.clone()).unwrap_or_default();
    let primary = side.pps();
    let other = primary.and_then(|p| p.reverse.as_deref());
    // We are the client, sending the forward streams, or the server, receiving them.
    let (fwd_seen, rev_seen) = match side.role {
        Role::Client => (&[][..], seen),
        Role::Server => (seen, &[][..]),
    };
    let mut streams = our_streams(side, spec, &sent(primary), fwd_seen, 0);
    streams.extend(our_streams(side, spec, &sent(other), rev_seen, flows));
    super::figures::results_of(side, test, streams, 0)
}

/// Our streams `offset..offset + flows` as iperf3 reports them: each one's receive counts
/// where `seen` has them, else the packets `sent` on it.
fn our_streams(
    side: &SideResult,
    spec: &PpsSpec,
    sent: &[u64],
    seen: &[FlowRx],
    offset: usize,
) -> Vec<StreamResults> {
    let payload = u64::from(spec.payload_bytes());
    (0..spec.flows as usize)
        .map(|i| {
            let base = StreamResults {
                id: stream_id((offset + i) as u32),
                retransmits: -1,
                omitted_errors: Some(0),
                omitted_packets: Some(0),
                start_time: 0.0,
                end_time: side.window_s,
                ..StreamResults::default()
            };
            match seen.get(i) {
                Some(f) => StreamResults {
                    bytes: f.iperf3.bytes,
                    jitter: f.iperf3.jitter_s,
                    errors: f.iperf3.lost as i64,
                    packets: f.iperf3.packets as i64,
                    ..base
                },
                None => {
                    let sent = sent.get(i).copied().unwrap_or(0);
                    StreamResults {
                        bytes: sent * payload,
                        packets: sent as i64,
                        ..base
                    }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PpsSpec {
        PpsSpec {
            size_bytes: 142,
            flows: 2,
            ..PpsSpec::default()
        }
    }

    #[test]
    fn an_iperf3_receivers_counts_become_the_far_side() {
        let stream = |id, packets, errors| StreamResults {
            id,
            packets,
            errors,
            jitter: 0.0005,
            end_time: 2.0,
            ..StreamResults::default()
        };
        let r = Results {
            streams: vec![stream(1, 1000, 3), stream(3, 900, 0)],
            ..Results::default()
        };
        let far = far_side(&spec(), Role::Server, &r, "iperf3 server (iperf 3.12)");
        let p = far.pps().unwrap();
        assert_eq!(p.per_flow, [997, 900]);
        assert_eq!(p.packets, 1897);
        assert!(far.notes[1].contains("3 lost") && far.notes[1].contains("0.500"));
        assert_eq!(far.window_s, 2.0);
    }

    #[test]
    fn a_receivers_results_carry_iperf3s_own_counts() {
        let mut f = FlowRx::default();
        for seq in [1, 2, 4, 5] {
            f.iperf3.on_packet(seq, 100, 0.0, 0.0);
        }
        let side = far_side(&spec(), Role::Server, &Results::default(), "x");
        let t = sonde_proto::iperf3::Params::default().test().unwrap();
        let r = our_results(&side, &spec(), &t, &[f.clone(), FlowRx::default()]);
        let s = &r.streams[0];
        assert_eq!((s.id, s.packets, s.errors, s.bytes), (1, 5, 1, 400));
        assert_eq!(r.streams[1].id, 3);
    }

    #[test]
    fn a_bidir_peers_streams_split_into_its_two_directions() {
        let stream = |id, packets, errors| StreamResults {
            id,
            packets,
            errors,
            end_time: 2.0,
            ..StreamResults::default()
        };
        // An iperf3 server, -P 2 --bidir: it received 1 and 3, sent 4 and 5.
        let r = Results {
            streams: vec![
                stream(1, 1000, 3),
                stream(3, 900, 0),
                stream(4, 500, 0),
                stream(5, 600, 0),
            ],
            ..Results::default()
        };
        let far = far_side_bidir(&spec(), Role::Server, &r, "iperf3 server");
        let p = far.pps().unwrap();
        assert_eq!(p.per_flow, [997, 900]);
        let rev = p.reverse.as_deref().expect("its sending");
        assert_eq!(rev.per_flow, [500, 600]);
        assert!(rev.jitter_ms.is_none() && p.jitter_ms.is_some());
        // Ours back, as the client: our sending (forward) then our receiving (reverse),
        // with iperf3's ids 1, 3 then 4, 5.
        let mut ours = far.clone();
        ours.role = Role::Client;
        if let SideSection::Pps(p) = &mut ours.section {
            p.per_flow = vec![10, 20];
        }
        let mut f = FlowRx::default();
        f.iperf3.on_packet(2, 100, 0.0, 0.0);
        let t = sonde_proto::iperf3::Params::default().test().unwrap();
        let back = our_results_bidir(&ours, &spec(), &t, &[f, FlowRx::default()]);
        let ids: Vec<_> = back
            .streams
            .iter()
            .map(|s| (s.id, s.packets, s.errors))
            .collect();
        assert_eq!(ids, [(1, 10, 0), (3, 20, 0), (4, 2, 1), (5, 0, 0)]);
        assert_eq!(back.sender_has_retransmits, 0);
    }
}
