//! Whether an iperf3 peer's results may stand beside our figures. Its figures reach the
//! document as the far end's, so a peer that lies (a rogue server, a forged client) must
//! not put a figure there that our own measurement contradicts: what it received cannot
//! exceed what we sent on that stream, what it sent cannot dwarf what reached us, a loss
//! cannot exceed the packets it saw, and CPU, jitter and times stay in the ranges iperf3
//! can produce. A refusal names the stream and both figures; the document then carries
//! our side only, with the refusal as its error.

use sonde_proto::iperf3::{stream_index, Results, MAX_OMIT_S, MAX_TIME_S};
use sonde_results::{SideResult, Transfer};

/// What an honest sender may have sent beyond what arrived: what was still in flight or
/// unread (buffers, a path's queue), at most as much again as arrived plus 64 MiB.
const IN_FLIGHT_BYTES: u64 = 64 << 20;
/// Datagrams a sender may have sent beyond those that arrived, likewise.
const IN_FLIGHT_PACKETS: u64 = 1 << 16;
/// Most CPU an iperf3 process can report, percent (one CPU is 100).
const MAX_CPU_PERCENT: f64 = 100.0 * 4096.0;
/// Longest jitter taken as measured, seconds.
const MAX_JITTER_S: f64 = 3600.0;

/// Our count on one stream, to hold the peer's against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ours {
    /// We sent this much on it: the peer received at most that.
    Sent(u64),
    /// This much reached us: the peer sent at least... about that.
    Received(u64),
}

/// Our per-stream counts from our side: bytes of a stream test (each connection by
/// index), packets of a packet-rate test (each flow).
pub fn ours_of(side: &SideResult) -> Vec<(u32, Ours)> {
    if let Some(s) = side.stream() {
        return s
            .directions
            .iter()
            .flat_map(|d| {
                d.connections.iter().map(move |c| {
                    let o = match d.transfer {
                        Transfer::Send => Ours::Sent(c.total_bytes),
                        Transfer::Receive => Ours::Received(c.total_bytes),
                    };
                    (c.index, o)
                })
            })
            .collect();
    }
    let Some(p) = side.pps() else {
        return Vec::new();
    };
    // A packet-rate side is its test's sender or its receiver (Role::Client sends); in a
    // bidirectional test the other direction's flows follow, the other way round.
    let sent = side.role == sonde_results::Role::Client;
    let flows = |per_flow: &[u64], offset: usize, sent: bool| {
        let at = |(i, n): (usize, &u64)| {
            let o = if sent {
                Ours::Sent(*n)
            } else {
                Ours::Received(*n)
            };
            ((offset + i) as u32, o)
        };
        per_flow.iter().enumerate().map(at).collect::<Vec<_>>()
    };
    let mut ours = flows(&p.per_flow, 0, sent);
    if let Some(r) = p.reverse.as_deref() {
        ours.extend(flows(&r.per_flow, p.per_flow.len(), !sent));
    }
    ours
}

/// Why a peer's results are refused: the figure named, and ours where it contradicts ours.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unvouched {
    #[error("a CPU use of {0:e} %")]
    Cpu(f64),
    #[error("stream {id}: a jitter of {jitter} s")]
    Jitter { id: u32, jitter: f64 },
    #[error("stream {id}: a time span of {start}..{end} s")]
    Span { id: u32, start: f64, end: f64 },
    #[error("stream {0}: a negative count")]
    Negative(u32),
    #[error("stream {id}: {lost} lost of {packets} packets")]
    Lost { id: u32, lost: i64, packets: i64 },
    #[error("stream {id}: {retransmits} retransmits for {bytes} bytes")]
    Retransmits {
        id: u32,
        retransmits: i64,
        bytes: u64,
    },
    #[error("stream {id}: {theirs} {unit} received, we sent {ours}")]
    ReceivedMore {
        id: u32,
        theirs: u64,
        unit: &'static str,
        ours: u64,
    },
    #[error(
        "stream {id}: {theirs} datagrams sent, none reached our socket (sent from or to a \
         port other than the stream's, or all lost on the way)"
    )]
    NoneArrived { id: u32, theirs: u64 },
    #[error("stream {id}: {theirs} {unit} sent, {ours} reached us")]
    SentMore {
        id: u32,
        theirs: u64,
        unit: &'static str,
        ours: u64,
    },
}

/// Refuses `r` when a figure is out of iperf3's ranges or contradicts `ours` (bytes of a
/// stream test, packets of a UDP one: `packets`).
pub fn vouch(r: &Results, ours: &[(u32, Ours)], packets: bool) -> Result<(), Unvouched> {
    let cpu = [r.cpu_util_total, r.cpu_util_user, r.cpu_util_system];
    if let Some(c) = cpu.iter().find(|c| !(0.0..=MAX_CPU_PERCENT).contains(*c)) {
        return Err(Unvouched::Cpu(*c));
    }
    let longest = f64::from(MAX_TIME_S + MAX_OMIT_S);
    for s in &r.streams {
        let id = s.id;
        if !(0.0..=MAX_JITTER_S).contains(&s.jitter) {
            return Err(Unvouched::Jitter {
                id,
                jitter: s.jitter,
            });
        }
        let times = 0.0 <= s.start_time && s.start_time <= s.end_time && s.end_time <= longest;
        if !times {
            return Err(Unvouched::Span {
                id,
                start: s.start_time,
                end: s.end_time,
            });
        }
        if s.retransmits < -1 || s.errors < -1 || s.packets < -1 {
            return Err(Unvouched::Negative(id));
        }
        if s.errors > 0 && s.errors > s.packets {
            return Err(Unvouched::Lost {
                id,
                lost: s.errors,
                packets: s.packets,
            });
        }
        if s.retransmits > 0 && s.retransmits as u64 > s.bytes {
            return Err(Unvouched::Retransmits {
                id,
                retransmits: s.retransmits,
                bytes: s.bytes,
            });
        }
        let Some(ours) = stream_index(id).and_then(|i| ours.iter().find(|o| o.0 == i)) else {
            continue;
        };
        let (theirs, unit, slack) = match packets {
            true => (s.packets.max(0) as u64, "packets", IN_FLIGHT_PACKETS),
            false => (s.bytes, "bytes", IN_FLIGHT_BYTES),
        };
        match ours.1 {
            Ours::Received(0) if packets && theirs > 0 => {
                return Err(Unvouched::NoneArrived { id, theirs });
            }
            Ours::Sent(n) if theirs > n => {
                return Err(Unvouched::ReceivedMore {
                    id,
                    theirs,
                    unit,
                    ours: n,
                });
            }
            Ours::Received(n) if theirs > n.saturating_mul(2).saturating_add(slack) => {
                return Err(Unvouched::SentMore {
                    id,
                    theirs,
                    unit,
                    ours: n,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_proto::iperf3::StreamResults;

    fn results(bytes: u64, packets: i64) -> Results {
        Results {
            cpu_util_total: 10.0,
            streams: vec![StreamResults {
                id: 1,
                bytes,
                packets,
                end_time: 2.0,
                ..StreamResults::default()
            }],
            ..Results::default()
        }
    }

    #[test]
    fn a_receiver_claiming_more_than_we_sent_is_refused() {
        let ours = [(0, Ours::Sent(1000))];
        assert!(vouch(&results(1000, 0), &ours, false).is_ok());
        let e = vouch(&results(1_000_000_000_000_000_000, 0), &ours, false).unwrap_err();
        assert!(e.to_string().contains("received, we sent 1000"), "{e}");
        assert!(vouch(&results(0, 11), &[(0, Ours::Sent(10))], true).is_err());
    }

    #[test]
    fn a_sender_may_have_some_in_flight_but_not_a_forged_count() {
        let ours = [(0, Ours::Received(1 << 20))];
        assert!(vouch(&results(3 << 20, 0), &ours, false).is_ok());
        assert!(vouch(&results(1 << 40, 0), &ours, false).is_err());
        // A UDP stream that got nothing of what its sender counted: refused, named.
        let none = vouch(&results(0, 500), &[(0, Ours::Received(0))], true).unwrap_err();
        assert_eq!(none, Unvouched::NoneArrived { id: 1, theirs: 500 });
        assert!(vouch(&results(0, 500), &[(0, Ours::Received(3))], true).is_ok());
    }

    #[test]
    fn out_of_range_figures_are_refused() {
        let ours = [];
        let mut r = results(0, 0);
        r.cpu_util_total = 1e300;
        assert_eq!(vouch(&r, &ours, false), Err(Unvouched::Cpu(1e300)));
        let mut r = results(0, 10);
        r.streams[0].errors = 11;
        assert!(vouch(&r, &ours, true).is_err());
        let mut r = results(0, 0);
        r.streams[0].jitter = -1.0;
        assert!(vouch(&r, &ours, true).is_err());
        let mut r = results(0, 0);
        r.streams[0].end_time = 1e12;
        assert!(vouch(&r, &ours, true).is_err());
        let mut r = results(0, 0);
        r.streams[0].packets = -7;
        assert!(vouch(&r, &ours, true).is_err());
    }
}
