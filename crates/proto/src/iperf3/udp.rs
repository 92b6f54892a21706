//! iperf3 over UDP: the connect handshake of each data stream and the header of every
//! datagram. A client's stream socket sends the 4 bytes "9876" and waits for "6789" (or
//! the legacy 987654321 of old servers) before the test; the server connects its socket
//! to whoever sent them. Every datagram starts with the send time (seconds and
//! microseconds, 32 bits each) and a sequence number counted from 1, of 32 bits or, with
//! `--udp-counters-64bit`, 64; all big-endian.

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
