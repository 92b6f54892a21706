//! iperf3 over UDP: the connect handshake of each data stream and the header of every
//! datagram. A client's stream socket sends the 4 bytes "9876" and waits for "6789" (or
//! the legacy 987654321 of old servers) before the test; the server connects its socket
//! to whoever sent them. Every datagram starts with the send time (seconds and
//! microseconds, 32 bits each) and a sequence number counted from 1, of 32 bits or, with
//! `--udp-counters-64bit`, 64; all big-endian. A receiver counts loss, reordering and
//! jitter from them as iperf3's `iperf_udp_recv` does ([`Iperf3Rx`]). One copy for both
//! the control side and the data-plane workers (`sonde_engine::pps`).

/// What a client's stream socket sends first (iperf3's UDP_CONNECT_MSG on the wire).
pub const CONNECT: [u8; 4] = *b"9876";
/// What a server answers (UDP_CONNECT_REPLY on the wire).
pub const REPLY: [u8; 4] = *b"6789";
/// The reply of servers before 3.11: 987654321 in the host's order (either).
pub const LEGACY_REPLY: u32 = 987_654_321;

/// Bytes of a datagram's header with 32-bit or 64-bit sequence numbers.
pub fn header_bytes(wide: bool) -> usize {
    if wide {
        16
    } else {
        12
    }
}

/// Whether `d` is a server's answer to [`CONNECT`].
pub fn is_reply(d: &[u8]) -> bool {
    let Ok(four) = <[u8; 4]>::try_from(d) else {
        return false;
    };
    four == REPLY
        || u32::from_le_bytes(four) == LEGACY_REPLY
        || u32::from_be_bytes(four) == LEGACY_REPLY
}

/// A datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub sec: u32,
    pub usec: u32,
    pub seq: u64,
}

impl Header {
    /// Writes the header at the start of `buf`; false when `buf` is too short.
    #[inline]
    pub fn write(&self, buf: &mut [u8], wide: bool) -> bool {
        if buf.len() < header_bytes(wide) {
            return false;
        }
        buf[..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        match wide {
            true => buf[8..16].copy_from_slice(&self.seq.to_be_bytes()),
            false => buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes()),
        }
        true
    }

    /// The send time in seconds of the sender's clock.
    #[inline]
    pub fn seconds(&self) -> f64 {
        f64::from(self.sec) + f64::from(self.usec) / 1e6
    }

    #[inline]
    pub fn read(buf: &[u8], wide: bool) -> Option<Header> {
        let b = buf.get(..header_bytes(wide))?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let seq = match wide {
            true => (u64::from(word(8)) << 32) | u64::from(word(12)),
            false => u64::from(word(8)),
        };
        Some(Header {
            sec: word(0),
            usec: word(4),
            seq,
        })
    }
}

/// One stream's receive figures as iperf3 computes them: `packets` is the highest
/// sequence number seen, `lost` the gaps below it less the late arrivals that filled
/// them, `jitter_s` RFC 1889's running mean of transit-time differences (1/16 gain).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Iperf3Rx {
    pub packets: u64,
    pub lost: u64,
    pub out_of_order: u64,
    pub jitter_s: f64,
    /// Datagrams and payload bytes taken (a first one starts the jitter).
    pub datagrams: u64,
    pub bytes: u64,
    prev_transit_s: f64,
}

impl Iperf3Rx {
    /// Accounts one datagram of `len` bytes numbered `seq`, sent at `sent_s` and read at
    /// `arrival_s` (seconds of the two ends' clocks: only their differences count).
    #[inline]
    pub fn on_packet(&mut self, seq: u64, len: usize, sent_s: f64, arrival_s: f64) {
        let first = self.datagrams == 0;
        self.datagrams += 1;
        self.bytes += len as u64;
        if seq > self.packets {
            self.lost += seq - 1 - self.packets;
            self.packets = seq;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let transit = (arrival_s - sent_s).abs();
        if first {
            self.prev_transit_s = transit;
        }
        let d = (transit - self.prev_transit_s).abs();
        self.prev_transit_s = transit;
        self.jitter_s += (d - self.jitter_s) / 16.0;
    }

    /// Both counts of one stream read by two receivers (one only ever reads it).
    pub fn merge(&mut self, other: &Iperf3Rx) {
        if other.datagrams > self.datagrams {
            *self = *other;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_in_both_widths() {
        let mut b = [0u8; 16];
        let h = |usec, seq| Header { sec: 7, usec, seq };
        assert!(h(999_999, (1 << 40) + 3).write(&mut b, true));
        assert_eq!(Header::read(&b, true), Some(h(999_999, (1 << 40) + 3)));
        assert!(h(5, (1 << 40) + 3).write(&mut b, false));
        // 32 bits: the counter wraps as iperf3's does.
        assert_eq!(Header::read(&b, false), Some(h(5, 3)));
        assert_eq!(&b[8..12], &[0, 0, 0, 3]);
        assert_eq!(Header::read(&b[..11], false), None);
        assert!(!h(5, 3).write(&mut b[..11], false));
        assert_eq!(h(500_000, 1).seconds(), 7.5);
    }

    #[test]
    fn loss_and_reordering_counted_as_iperf3_counts_them() {
        let mut r = Iperf3Rx::default();
        // 1..=10 with 4 and 8 lost, 6 after 7: iperf3 counts 6's gap as a loss, then
        // takes it back when 6 comes.
        for seq in [1, 2, 3, 5, 7, 6, 9, 10] {
            r.on_packet(seq, 100, 0.0, 0.0);
        }
        assert_eq!((r.packets, r.lost, r.out_of_order), (10, 2, 1));
        assert_eq!((r.datagrams, r.bytes), (8, 800));
        // A duplicate reads as out of order and, as in iperf3, takes one loss back.
        r.on_packet(9, 100, 0.0, 0.0);
        assert_eq!((r.lost, r.out_of_order), (1, 2));
    }

    #[test]
    fn jitter_is_rfc1889s_running_mean_from_the_second_packet() {
        let mut r = Iperf3Rx::default();
        // Transit 10 ms, then 12 ms, then 10 ms: d = 0, 2 ms, 2 ms.
        r.on_packet(1, 1, 100.0, 100.010);
        assert_eq!(r.jitter_s, 0.0);
        r.on_packet(2, 1, 100.1, 100.112);
        let j1 = 0.002 / 16.0;
        assert!((r.jitter_s - j1).abs() < 1e-12);
        r.on_packet(3, 1, 100.2, 100.210);
        let j2 = j1 + (0.002 - j1) / 16.0;
        assert!((r.jitter_s - j2).abs() < 1e-12, "{}", r.jitter_s);
    }
}
