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
    let flows = spec.flows as usize;
    let mut per_flow = vec![0u64; flows];
    let mut window = 0u64;
    let mut jitter_ms = vec![0.0; flows];
    let mut lost = 0u64;
    for s in &r.streams {
        let Some(i) = stream_index(s.id)
            .map(|i| i as usize)
            .filter(|i| *i < flows)
        else {
            continue;
        };
        let packets = s.packets.max(0) as u64;
        let omitted = s.omitted_packets.unwrap_or(0).max(0) as u64;
        let (total, in_window) = match role {
            Role::Client => (packets, packets.saturating_sub(omitted)),
            Role::Server => {
                let errors = s.errors.max(0) as u64;
                let omitted_errors = s.omitted_errors.unwrap_or(0).max(0) as u64;
                lost += errors;
                jitter_ms[i] = s.jitter * 1000.0;
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
    if role == Role::Server {
        let jitter: Vec<String> = jitter_ms.iter().map(|j| format!("{j:.3}")).collect();
        notes.push(format!(
            "iperf3's own count: {lost} lost (gaps in its sequence numbers); jitter per \
             stream {} ms (RFC 1889, iperf3's)",
            jitter.join(", ")
        ));
    }
    // iperf3 reports no reordering, duplicates or socket drops: those stay at none.
    let section = SideSection::Pps(PpsResult {
        size_bytes: spec.size_bytes,
        packets: window,
        per_flow,
        poll: "iperf3".into(),
        jitter_ms: (role == Role::Server).then_some(jitter_ms),
        ..PpsResult::default()
    });
    super::figures::peer_side(role, r, who, notes, section)
}

/// Our side's results as an iperf3 peer reads them: a sender's packets sent per stream,
/// or (with the receivers' per-stream figures `seen`) iperf3's own receive counts.
pub fn our_results(side: &SideResult, spec: &PpsSpec, test: &Test, seen: &[FlowRx]) -> Results {
    let payload = u64::from(spec.payload_bytes());
    let per_flow = side.pps().map(|p| p.per_flow.clone()).unwrap_or_default();
    let streams = (0..spec.flows as usize)
        .map(|i| {
            let base = StreamResults {
                id: stream_id(i as u32),
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
                    let sent = per_flow.get(i).copied().unwrap_or(0);
                    StreamResults {
                        bytes: sent * payload,
                        packets: sent as i64,
                        ..base
                    }
                }
            }
        })
        .collect();
    let retransmits = if seen.is_empty() { 0 } else { -1 };
    super::figures::results_of(side, test, streams, retransmits)
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
}
