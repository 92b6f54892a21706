//! Matching UDP replies to their requests. Every UDP request carries a sequence number in
//! its first 8 bytes and the agent echoes them; a reply is credited to the request it
//! names, never to whichever request happens to be oldest. Without this a reply that
//! arrives after its request was given up on would be taken as the answer to the next
//! request, and shift every later round-trip time.
//!
//! After the sequence number a request carries the test's cookie (from `Ready`), so that
//! the agent's echo answers only the test's own requests: without it any datagram from
//! the allowed address, even one byte, drew a full-size answer (a reflector).

use std::collections::VecDeque;

/// Bytes of a request (and of its echo) that carry the sequence number.
pub const SEQ_BYTES: usize = 8;

/// Where a request carries the test's cookie (big-endian, as the TCP data header).
pub const COOKIE_AT: usize = SEQ_BYTES;
/// The smallest UDP request: sequence number and cookie.
pub const REQUEST_HEADER_BYTES: usize = COOKIE_AT + 8;

/// Writes the test's cookie into a request (`datagram` holds at least the header).
pub fn stamp_cookie(datagram: &mut [u8], cookie: u64) {
    datagram[COOKIE_AT..REQUEST_HEADER_BYTES].copy_from_slice(&cookie.to_be_bytes());
}

/// Why the echo dropped a datagram instead of answering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// Not the test's request size: shorter (a 1-byte probe) or longer.
    Length,
    /// Full length, but not the test's cookie.
    Cookie,
}

/// Whether `datagram` is one of the test's requests: exactly `request_bytes` long (the
/// answer is never asked by a shorter one) and carrying `cookie`.
#[inline]
pub fn check_request(datagram: &[u8], request_bytes: usize, cookie: u64) -> Result<(), Rejected> {
    if datagram.len() != request_bytes || request_bytes < REQUEST_HEADER_BYTES {
        return Err(Rejected::Length);
    }
    let theirs = &datagram[COOKIE_AT..REQUEST_HEADER_BYTES];
    if theirs != cookie.to_be_bytes() {
        return Err(Rejected::Cookie);
    }
    Ok(())
}

/// Timed-out sequence numbers remembered, so that a reply to one counts as late.
const EXPIRED_KEPT: usize = 4096;

/// What became of a datagram that came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The answer to the in-flight request at this position (oldest first).
    Matched(usize),
    /// The answer to a request already counted as lost.
    Late,
    /// A second answer to a request already answered.
    Duplicate,
    /// Too short, or naming a request never sent.
    Foreign,
}

/// The sequence numbers of one UDP flow's requests in flight, in send order.
#[derive(Debug, Default)]
pub struct SeqMatch {
    next: u64,
    in_flight: VecDeque<u64>,
    expired: VecDeque<u64>,
    pub late: u64,
    pub duplicate: u64,
    pub foreign: u64,
}

impl SeqMatch {
    /// A new request is sent: gives it the next sequence number.
    pub fn start(&mut self) {
        self.in_flight.push_back(self.next);
        self.next += 1;
    }

    /// The newest request's sequence number, as its datagram carries it.
    pub fn newest(&self) -> [u8; SEQ_BYTES] {
        self.next.wrapping_sub(1).to_le_bytes()
    }

    /// Writes the newest request's sequence number into its datagram.
    pub fn stamp(&self, datagram: &mut [u8]) {
        datagram[..SEQ_BYTES].copy_from_slice(&self.newest());
    }

    /// Classifies a reply; a matched request leaves the in-flight list.
    pub fn reply(&mut self, datagram: &[u8]) -> Reply {
        let Some(head) = datagram.get(..SEQ_BYTES) else {
            self.foreign += 1;
            return Reply::Foreign;
        };
        let seq = u64::from_le_bytes(head.try_into().expect("8 bytes"));
        if let Some(pos) = self.in_flight.iter().position(|&s| s == seq) {
            self.in_flight.remove(pos);
            return Reply::Matched(pos);
        }
        if let Some(pos) = self.expired.iter().position(|&s| s == seq) {
            self.expired.remove(pos);
            self.late += 1;
            Reply::Late
        } else if seq < self.next {
            self.duplicate += 1;
            Reply::Duplicate
        } else {
            self.foreign += 1;
            Reply::Foreign
        }
    }

    /// The oldest request in flight was given up on (its answer is overdue).
    pub fn expire_oldest(&mut self) {
        if let Some(seq) = self.in_flight.pop_front() {
            if self.expired.len() == EXPIRED_KEPT {
                self.expired.pop_front();
            }
            self.expired.push_back(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(seq: u64) -> Vec<u8> {
        let mut d = vec![0u8; 64];
        d[..8].copy_from_slice(&seq.to_le_bytes());
        d
    }

    #[test]
    fn replies_are_matched_by_sequence_not_by_age() {
        let mut m = SeqMatch::default();
        let mut sent = Vec::new();
        for _ in 0..3 {
            m.start();
            let mut d = vec![0u8; 64];
            m.stamp(&mut d);
            sent.push(d);
        }
        // The second request's reply overtakes the first's.
        assert_eq!(m.reply(&sent[1]), Reply::Matched(1));
        assert_eq!(m.reply(&sent[0]), Reply::Matched(0));
        assert_eq!(m.reply(&sent[2]), Reply::Matched(0));
        assert_eq!(m.reply(&sent[2]), Reply::Duplicate);
        assert_eq!(m.duplicate, 1);
    }

    #[test]
    fn a_reply_after_its_timeout_is_late_and_not_credited_to_the_next() {
        let mut m = SeqMatch::default();
        m.start(); // seq 0
        m.expire_oldest();
        m.start(); // seq 1
        assert_eq!(m.reply(&datagram(0)), Reply::Late);
        assert_eq!(m.late, 1);
        // Request 1 is still waiting for its own answer.
        assert_eq!(m.reply(&datagram(1)), Reply::Matched(0));
        // A second copy of the late reply is a duplicate.
        assert_eq!(m.reply(&datagram(0)), Reply::Duplicate);
    }

    #[test]
    fn only_full_length_requests_with_the_cookie_pass() {
        let mut d = datagram(3);
        stamp_cookie(&mut d, 0xfeed);
        assert_eq!(check_request(&d, 64, 0xfeed), Ok(()));
        assert_eq!(check_request(&d, 64, 0xbeef), Err(Rejected::Cookie));
        assert_eq!(check_request(&d[..1], 64, 0xfeed), Err(Rejected::Length));
        assert_eq!(check_request(&d[..63], 64, 0xfeed), Err(Rejected::Length));
        assert_eq!(check_request(&d, 32, 0xfeed), Err(Rejected::Length));
        // A spec too small to carry the cookie matches nothing.
        assert_eq!(check_request(&d[..8], 8, 0xfeed), Err(Rejected::Length));
    }

    #[test]
    fn foreign_datagrams_are_counted() {
        let mut m = SeqMatch::default();
        m.start();
        assert_eq!(m.reply(&[1, 2, 3]), Reply::Foreign);
        assert_eq!(m.reply(&datagram(99)), Reply::Foreign);
        assert_eq!(m.foreign, 2);
        assert_eq!(m.reply(&datagram(0)), Reply::Matched(0));
    }
}
