//! Between iperf3's results and a side's result, both ways: the far end's side built from
//! what an iperf3 peer reported (its bytes, retransmits and process CPU; absent, never
//! zero, for what iperf3 does not measure), and the results an iperf3 peer expects built
//! from our side. Stream ids are iperf3's (1, 3, 4, ...), mapped to test-wide indices.

use sonde_proto::iperf3::{stream_id, stream_index, Results, StreamResults, Test};
use sonde_results::{
    ConnectionResult, Direction, DirectionResult, HostInfo, Role, SideResult, SideSection,
    StreamResult, StreamSpec, Transfer,
};

/// How the iperf3 end is named in a document.
pub fn measured_by(version: Option<&str>) -> String {
    match version {
        Some(v) => format!("iperf3 server ({v})"),
        None => "iperf3 server (version not reported)".into(),
    }
}

/// What this side did with direction `d` as `role`.
fn transfer(role: Role, d: Direction) -> Transfer {
    match (d == Direction::Forward) == (role == Role::Client) {
        true => Transfer::Send,
        false => Transfer::Receive,
    }
}

/// The far end's side of `spec` as an iperf3 peer in `role` reported it in `r`.
pub fn far_side(spec: &StreamSpec, role: Role, r: &Results, who: &str) -> SideResult {
    let mut directions: Vec<DirectionResult> = Vec::new();
    for s in &r.streams {
        let Some(index) = stream_index(s.id).filter(|i| *i < spec.total_connections()) else {
            continue;
        };
        let d = spec.direction_of(index);
        let t = transfer(role, d);
        let at = match directions.iter().position(|x| x.direction == d) {
            Some(at) => at,
            None => {
                directions.push(DirectionResult {
                    direction: d,
                    transfer: t,
                    buffer_bytes: spec.buffer_bytes,
                    bytes: 0,
                    total_bytes: 0,
                    calls: 0,
                    connections: Vec::new(),
                });
                directions.len() - 1
            }
        };
        let dir = &mut directions[at];
        dir.bytes += s.bytes;
        dir.total_bytes += s.bytes;
        let counted = t == Transfer::Send && r.sender_has_retransmits == 1 && s.retransmits >= 0;
        dir.connections.push(ConnectionResult {
            index,
            bytes: s.bytes,
            total_bytes: s.bytes,
            retransmits: counted.then_some(s.retransmits as u64),
            rtt_us: None,
            rttvar_us: None,
            snd_cwnd_segments: None,
            snd_mss_bytes: None,
            ecn: None,
        });
    }
    directions.sort_by_key(|d| d.direction != Direction::Forward);
    let note = format!(
        "measured by {who}: its bytes, its retransmits as a sender and its process CPU only; \
         iperf3 reports no TCP_INFO, host CPU, NIC or qdisc counters, and no send/recv calls \
         (calls reads 0)"
    );
    let section = SideSection::Stream(StreamResult { directions });
    peer_side(role, r, who, vec![note], section)
}

/// The side an iperf3 peer measured: its host named `who`, its longest stream as the
/// window, its process CPU over it, `notes` and `section`; iperf3 reports no host figures.
pub(super) fn peer_side(
    role: Role,
    r: &Results,
    who: &str,
    notes: Vec<String>,
    section: SideSection,
) -> SideResult {
    let window_s = r
        .streams
        .iter()
        .map(|s| s.end_time - s.start_time)
        .fold(0.0, f64::max);
    let host = HostInfo {
        hostname: who.to_string(),
        ..HostInfo::default()
    };
    SideResult {
        process_cpu_s: (window_s > 0.0).then_some(r.cpu_util_total / 100.0 * window_s),
        section,
        ..SideResult::new(role, host, window_s, (0, None), notes)
    }
}

/// Our side's results as an iperf3 peer reads them.
pub fn our_results(side: &SideResult, test: &Test) -> Results {
    let mut streams = Vec::new();
    let mut sends = false;
    if let Some(s) = side.stream() {
        for d in &s.directions {
            sends |= d.transfer == Transfer::Send;
            for c in &d.connections {
                streams.push(StreamResults {
                    id: stream_id(c.index),
                    bytes: c.bytes,
                    retransmits: match d.transfer {
                        Transfer::Send => c.retransmits.map_or(-1, |r| r as i64),
                        Transfer::Receive => -1,
                    },
                    jitter: 0.0,
                    errors: 0,
                    omitted_errors: Some(0),
                    packets: 0,
                    omitted_packets: Some(0),
                    start_time: 0.0,
                    end_time: side.window_s,
                });
            }
        }
    }
    streams.sort_by_key(|s| s.id);
    results_of(side, test, streams, if sends { 1 } else { -1 })
}

/// The results an iperf3 peer reads of our `side`: its `streams`, its process CPU over
/// its window, and whether a sender's retransmits are counted (1), not (-1) or moot (0).
pub(super) fn results_of(
    side: &SideResult,
    test: &Test,
    streams: Vec<StreamResults>,
    sender_has_retransmits: i64,
) -> Results {
    let cpu = match (side.process_cpu_s, side.window_s > 0.0) {
        (Some(c), true) => c / side.window_s * 100.0,
        _ => 0.0,
    };
    Results {
        cpu_util_total: cpu,
        cpu_util_user: 0.0,
        cpu_util_system: 0.0,
        sender_has_retransmits,
        congestion_used: test.congestion.clone(),
        streams,
        server_output_json: None,
        server_output_text: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn theirs() -> Results {
        let stream = |id, bytes, retransmits| StreamResults {
            id,
            bytes,
            retransmits,
            end_time: 2.0,
            ..StreamResults::default()
        };
        Results {
            cpu_util_total: 25.0,
            sender_has_retransmits: 1,
            // iperf3's ids: 1, 3 (it receives, -P 2 forward); 4, 5 (it sends).
            streams: vec![
                stream(1, 100, -1),
                stream(3, 200, -1),
                stream(4, 300, 7),
                stream(5, 400, 0),
            ],
            ..Results::default()
        }
    }

    fn bidir() -> StreamSpec {
        StreamSpec {
            connections: 2,
            direction: Direction::Bidir,
            ..StreamSpec::default()
        }
    }

    #[test]
    fn an_iperf3_servers_results_become_the_far_side_with_absent_figures_absent() {
        let far = far_side(
            &bidir(),
            Role::Server,
            &theirs(),
            "iperf3 server (iperf 3.12)",
        );
        let s = far.stream().unwrap();
        let dirs: Vec<_> = s
            .directions
            .iter()
            .map(|d| (d.direction, d.transfer, d.bytes))
            .collect();
        assert_eq!(
            dirs,
            [
                (Direction::Forward, Transfer::Receive, 300),
                (Direction::Reverse, Transfer::Send, 700)
            ]
        );
        let retrans: Vec<_> = s.directions[1]
            .connections
            .iter()
            .map(|c| (c.index, c.retransmits))
            .collect();
        assert_eq!(retrans, [(2, Some(7)), (3, Some(0))]);
        assert_eq!(s.directions[0].connections[0].retransmits, None);
        assert!(s.directions[0].connections[0].rtt_us.is_none());
        assert!(far.cpu.is_none() && far.nic.is_none());
        assert_eq!(far.window_s, 2.0);
        assert_eq!(far.process_cpu_s, Some(0.5));
        assert_eq!(far.host.hostname, "iperf3 server (iperf 3.12)");
    }

    #[test]
    fn our_results_carry_iperf3s_stream_ids() {
        let far = far_side(&bidir(), Role::Client, &theirs(), "iperf3 client");
        let t = sonde_proto::iperf3::Params::default().test().unwrap();
        let r = our_results(&far, &t);
        let ids: Vec<_> = r.streams.iter().map(|s| (s.id, s.bytes)).collect();
        assert_eq!(ids, [(1, 100), (3, 200), (4, 300), (5, 400)]);
        assert_eq!(r.sender_has_retransmits, 1);
        assert_eq!(r.cpu_util_total, 25.0);
    }
}
