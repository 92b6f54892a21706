//! Reading testpmd's answers: `show port xstats` (the port's counters, per queue too),
//! `show fwd stats all` (what the forwarding lcores generated and the port refused), and
//! the EAL's version line. Pure text in, figures out.

use std::collections::BTreeMap;

/// A port's extended statistics, by name (`rx_good_packets`, `rx_q0_errors`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Xstats(pub BTreeMap<String, u64>);

impl Xstats {
    /// Every `name: value` line of a `show port xstats` answer.
    pub fn parse(text: &str) -> Xstats {
        let map = text
            .lines()
            .filter_map(|l| {
                let (k, v) = l.trim().split_once(": ")?;
                let k = k.trim();
                let ok = !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                Some((k.to_string(), v.trim().parse().ok()?)).filter(|_| ok)
            })
            .collect();
        Xstats(map)
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Whether the answer held the port's counters at all.
    pub fn is_empty(&self) -> bool {
        !self.0.contains_key("rx_good_packets") && !self.0.contains_key("tx_good_packets")
    }

    /// `rx` or `tx` queue `q`'s counter `what` (`packets`, `bytes`, `errors`).
    pub fn queue(&self, dir: &str, q: u32, what: &str) -> Option<u64> {
        self.0.get(&format!("{dir}_q{q}_{what}")).copied()
    }

    /// How many `dir` queues the answer has counters for.
    pub fn queues(&self, dir: &str) -> u32 {
        (0..)
            .take_while(|&q| self.queue(dir, q, "packets").is_some())
            .count() as u32
    }
}

/// Packets the forwarding lcores generated but the port did not take (`TX-dropped`), for
/// the port and per forwarding stream (by transmit queue).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FwdStats {
    pub tx_dropped: u64,
    /// (transmit queue, packets dropped), when testpmd prints streams (more than one).
    pub tx_dropped_by_queue: Vec<(u32, u64)>,
}

impl FwdStats {
    /// A `show fwd stats all` (or `stop`) answer.
    pub fn parse(text: &str) -> FwdStats {
        let mut out = FwdStats::default();
        let mut stream_queue: Option<u32> = None;
        let mut in_port = false;
        for line in text.lines() {
            if line.contains("Forward Stats for RX Port=") {
                stream_queue = line
                    .rsplit("Queue=")
                    .next()
                    .and_then(|q| q.trim().trim_end_matches('-').trim().parse().ok());
                in_port = false;
                continue;
            }
            if line.contains("Forward statistics for port") {
                in_port = true;
                stream_queue = None;
                continue;
            }
            if line.contains("Accumulated forward statistics") {
                break;
            }
            let Some(dropped) = pairs(line).get("TX-dropped").copied() else {
                continue;
            };
            match stream_queue.take() {
                Some(q) => out.tx_dropped_by_queue.push((q, dropped)),
                None if in_port => out.tx_dropped += dropped,
                None => {}
            }
        }
        out
    }
}

/// `KEY: number` pairs on one line of testpmd's tables.
fn pairs(line: &str) -> BTreeMap<&str, u64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .filter_map(|w| Some((w[0].strip_suffix(':')?, w[1].parse().ok()?)))
        .collect()
}

/// `DPDK 22.11.11` from EAL's `RTE Version: 'DPDK 22.11.11'` line (printed with `-v`).
pub fn version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("RTE Version:"))?;
    let v = line.split('\'').nth(1)?;
    Some(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from dpdk-testpmd 22.11 (net_af_packet, two queue pairs, txonly).
    const XSTATS: &str = "testpmd> show port xstats all\r
###### NIC extended statistics for port 0 
rx_good_packets: 4
tx_good_packets: 637376
rx_good_bytes: 352
tx_good_bytes: 40792064
rx_missed_errors: 7
rx_errors: 0
tx_errors: 0
rx_mbuf_allocation_errors: 0
rx_q0_packets: 4
rx_q0_bytes: 352
rx_q0_errors: 0
rx_q1_packets: 0
rx_q1_bytes: 0
rx_q1_errors: 0
tx_q0_packets: 318688
tx_q0_bytes: 20396032
tx_q1_packets: 318688
tx_q1_bytes: 20396032
";

    const FWD: &str = "Telling cores to stop...
  ------- Forward Stats for RX Port= 0/Queue= 0 -> TX Port= 0/Queue= 0 -------
  RX-packets: 0              TX-packets: 363296         TX-dropped: 5             
  ------- Forward Stats for RX Port= 0/Queue= 1 -> TX Port= 0/Queue= 1 -------
  RX-packets: 0              TX-packets: 363296         TX-dropped: 6             
  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 0              RX-dropped: 0             RX-total: 0
  TX-packets: 726592         TX-dropped: 11            TX-total: 726603
  ----------------------------------------------------------------------------
  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 0              RX-dropped: 0             RX-total: 0
  TX-packets: 726592         TX-dropped: 11            TX-total: 726603
";

    #[test]
    fn xstats_are_read_by_name_and_queue() {
        let x = Xstats::parse(XSTATS);
        assert_eq!(x.get("tx_good_packets"), 637_376);
        assert_eq!(x.get("rx_missed_errors"), 7);
        assert_eq!(x.queue("tx", 1, "packets"), Some(318_688));
        assert_eq!((x.queues("rx"), x.queues("tx")), (2, 2));
        assert!(!x.is_empty());
        assert!(Xstats::parse("testpmd> bad command\r\n").is_empty());
    }

    #[test]
    fn forward_drops_are_read_per_port_and_stream() {
        let f = FwdStats::parse(FWD);
        assert_eq!(f.tx_dropped, 11);
        assert_eq!(f.tx_dropped_by_queue, vec![(0, 5), (1, 6)]);
    }

    #[test]
    fn the_version_comes_from_the_eal_line() {
        let banner = "EAL: Detected NUMA nodes: 1\nEAL: RTE Version: 'DPDK 22.11.11'\n";
        assert_eq!(version(banner).as_deref(), Some("DPDK 22.11.11"));
        assert_eq!(version("EAL: nothing\n"), None);
    }
}
