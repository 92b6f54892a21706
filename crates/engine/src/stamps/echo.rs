//! The echo's side of the stages, for one connection (or UDP socket): when the request
//! arrived (kernel stamp) and was read, when the answer was sent and when its driver took
//! it, told to the client in the figures of each answer.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use super::book::{reached, send_key};
use super::io::{now_real, ErrQueue, TxPoint};
use super::stages::{span32, EchoFigures, FIGURE_BYTES, UNKNOWN};

/// Answers remembered until their driver stamp comes back.
const SENDS_KEPT: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Sent {
    /// The id the kernel gives the answer's stamps.
    key: u32,
    /// The answer's tag (its request's index or sequence).
    tag: u32,
    /// The real clock just before the send call.
    at: u64,
}

/// The echo's readings on one socket.
pub struct EchoStamps {
    /// TCP: the answer size (ids count bytes); UDP: 0 (ids count datagrams).
    answer_bytes: u64,
    /// Answers sent since stamping began.
    answers: u64,
    /// The last request's kernel stamp and the real clock after it was read.
    rx: Option<u64>,
    read_at: u64,
    sends: VecDeque<Sent>,
    /// Answers whose send stack is known and not yet told (tag, stack), oldest first:
    /// each answer tells one, so a window of answers sent together are all told.
    untold: VecDeque<(u32, u32)>,
    queue: ErrQueue,
}

impl EchoStamps {
    /// `answer_bytes` for TCP, `None` for UDP.
    pub fn new(tcp_answer_bytes: Option<usize>) -> EchoStamps {
        EchoStamps {
            answer_bytes: tcp_answer_bytes.unwrap_or(0) as u64,
            answers: 0,
            rx: None,
            read_at: 0,
            sends: VecDeque::with_capacity(SENDS_KEPT),
            untold: VecDeque::with_capacity(SENDS_KEPT),
            queue: ErrQueue::default(),
        }
    }

    /// A request was read: its arrival stamp, and now.
    pub fn read(&mut self, rx: Option<u64>) {
        self.rx = rx;
        self.read_at = now_real();
    }

    /// Writes the figures of the answer about to be sent into `answer`'s first bytes and
    /// remembers the send; call just before sending. `tag`: the UDP request's sequence;
    /// `None` (TCP): the answer's index, which is its request's.
    pub fn answering(&mut self, tag: Option<u32>, answer: &mut [u8]) {
        let tag = tag.unwrap_or(self.answers as u32);
        let now = now_real();
        let key = send_key(self.answer_bytes, self.answers);
        self.answers += 1;
        let (sent_tag, send_ns) = self.untold.pop_front().unwrap_or((UNKNOWN, UNKNOWN));
        let f = EchoFigures {
            tag,
            wake_ns: self.rx.map_or(UNKNOWN, |rx| span32(rx, self.read_at)),
            turnaround_ns: span32(self.read_at, now),
            sent_tag,
            send_ns,
        };
        if let Some(to) = answer.get_mut(..FIGURE_BYTES) {
            f.write(to);
        }
        if self.sends.len() == SENDS_KEPT {
            self.sends.pop_front();
        }
        self.sends.push_back(Sent { key, tag, at: now });
    }

    /// Reads the driver stamps of the answers sent so far from `fd`'s error queue.
    pub fn collect(&mut self, fd: RawFd) {
        if self.sends.is_empty() {
            return;
        }
        let (sends, untold) = (&mut self.sends, &mut self.untold);
        let _ = self.queue.drain(fd, |s| {
            if s.point != TxPoint::Driver {
                return;
            }
            // A stamp covers every answer up to its id (coalesced sends share a packet).
            while let Some(x) = sends.front().filter(|x| reached(x.key, s.key)).copied() {
                sends.pop_front();
                if untold.len() == SENDS_KEPT {
                    untold.pop_front();
                }
                untold.push_back((x.tag, span32(x.at, s.ns)));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamps::io::enable;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// Each answer carries its own turnaround and the send stack of the one before it,
    /// read from the kernel's driver stamp of that answer.
    #[test]
    fn answers_carry_the_send_stack_of_the_answer_before() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        enable(s.as_raw_fd()).unwrap();
        let mut e = EchoStamps::new(Some(32));
        let mut answer = [0u8; 32];
        for tag in 0..3u32 {
            e.read(Some(now_real()));
            e.answering(None, &mut answer);
            crate::wait::send_blocking(s.as_raw_fd(), &answer, 32);
            e.collect(s.as_raw_fd());
            let mut got = [0u8; 32];
            c.read_exact(&mut got).unwrap();
            let f = EchoFigures::read(&got).unwrap();
            assert_eq!(f.tag, tag);
            assert_ne!(f.wake_ns, UNKNOWN);
            assert!(f.turnaround_ns < 1_000_000, "{f:?}");
            if tag == 0 {
                assert_eq!((f.sent_tag, f.send_ns), (UNKNOWN, UNKNOWN));
            } else {
                assert_eq!(f.sent_tag, tag - 1, "{f:?}");
                assert!(f.send_ns < 10_000_000, "{f:?}");
            }
        }
    }
}
