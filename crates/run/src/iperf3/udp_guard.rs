//! What an iperf3 peer may send us over UDP (a server under `sonde pps --iperf3 -R` or
//! `--bidir`, a client `serve --iperf3` receives from): the rate and the datagram size
//! agreed in the parameters. A server that sends faster, more,
//! or larger costs our receivers CPU and memory it was never granted, so the test is cut
//! once it is clearly over: twice the agreed rate over the time since the start plus a
//! second of burst (an honest iperf3 paces to its -b within a few ms), or a datagram
//! longer than its -l. Time and counts in, a reason out: no I/O.

use std::time::Instant;

/// Headroom over the agreed rate: an honest pacer's bursts stay far below it.
const RATE_TIMES: f64 = 2.0;
/// Burst allowed at any time, seconds of the agreed rate.
const BURST_S: f64 = 1.0;
/// Datagrams allowed at any time whatever the rate (a slow test's first batch).
const BURST_PACKETS: f64 = 1024.0;

/// The agreement of one reversed UDP test.
#[derive(Debug, Clone, Copy)]
pub struct Agreed {
    /// Datagrams a second over all streams.
    pub rate_pps: f64,
    /// UDP payload bytes of each datagram (iperf3's -l).
    pub payload_bytes: u64,
    /// When our receivers started (before the server may send).
    pub start: Instant,
}

impl Agreed {
    /// Why `packets` datagrams of `bytes` payload received by `now` break the agreement.
    pub fn broken(&self, now: Instant, (packets, bytes): (u64, u64)) -> Option<String> {
        if bytes > packets.saturating_mul(self.payload_bytes) {
            return Some(format!(
                "it sent datagrams longer than the {} bytes agreed ({bytes} bytes in {packets})",
                self.payload_bytes
            ));
        }
        let secs = now.saturating_duration_since(self.start).as_secs_f64();
        let most = RATE_TIMES * self.rate_pps * (secs + BURST_S) + BURST_PACKETS;
        (packets as f64 > most).then(|| {
            format!(
                "it sent {packets} datagrams in {secs:.2} s, over twice the {} a second \
                 agreed (--rate): cut",
                self.rate_pps
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_honest_pace_passes_and_a_flood_or_a_larger_datagram_does_not() {
        let start = Instant::now();
        let a = Agreed {
            rate_pps: 1000.0,
            payload_bytes: 100,
            start,
        };
        let at = |ms| start + Duration::from_millis(ms);
        // 1000 a second for 2 s, and a burst of a second's worth early on: fine.
        assert_eq!(a.broken(at(2000), (2000, 200_000)), None);
        assert_eq!(a.broken(at(10), (2000, 200_000)), None);
        // Ten times the rate for half a second: cut, naming the rate agreed.
        let why = a.broken(at(500), (5000, 500_000)).unwrap();
        assert!(
            why.contains("5000 datagrams") && why.contains("1000 a second"),
            "{why}"
        );
        // Under the rate, but each datagram a byte longer than agreed.
        let why = a.broken(at(1000), (10, 1010)).unwrap();
        assert!(why.contains("longer than the 100 bytes"), "{why}");
    }
}
