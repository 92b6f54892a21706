//! The echo's side of the stages, for one connection (or UDP socket): when the request
//! arrived (kernel stamp) and was read, when the answer was sent and when its driver took
//! it, told to the client in the figures of each answer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::book::{reached, send_key};
use super::io::{now_real, ErrQueue, TxPoint, TxStamp};
use super::rx_read::{stream_read, RxRead};
use super::sample::{Sampling, TxControl};
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
    /// Whom it answered ([`peer_key`]; 0 on a TCP connection).
    peer: u64,
}

/// An answer whose send stack is known and not yet told.
#[derive(Debug, Clone, Copy)]
struct Untold {
    peer: u64,
    tag: u32,
    send_ns: u32,
}

/// A UDP client's key: its address and port folded into 64 bits. One echo socket answers
/// every connection of a UDP rpc, whose sequence numbers each count from 0: an answer
/// tells only its own client's send stacks.
pub fn peer_key(a: &SocketAddr) -> u64 {
    let ip = match a {
        SocketAddr::V4(v) => u128::from(u32::from(*v.ip())),
        SocketAddr::V6(v) => u128::from(*v.ip()),
    };
    ((ip as u64) ^ ((ip >> 64) as u64)).rotate_left(16) ^ u64::from(a.port())
}

/// The echo's readings on one socket.
pub struct EchoStamps {
    /// TCP: the answer size (ids count bytes); UDP: 0 (ids count datagrams).
    answer_bytes: u64,
    /// Answers sent since stamping began.
    answers: u64,
    /// Of them, stamped (a UDP answer's stamps count these).
    stamped: u64,
    /// Which answers are stamped: those to the requests the client sampled.
    sampling: Sampling,
    /// What a stamped answer's send asks for, when sends ask one by one.
    control: TxControl,
    /// The last request's kernel stamp and the real clock after it was read.
    rx: Option<u64>,
    read_at: u64,
    sends: VecDeque<Sent>,
    /// Answers whose send stack is known and not yet told, oldest first: each answer
    /// tells its client's oldest, so a window of answers sent together are all told.
    untold: VecDeque<Untold>,
    queue: ErrQueue,
    /// Added to the arrival stamps the client is told (a test hook: a clock off by this).
    shift_ns: i64,
}

impl EchoStamps {
    /// `answer_bytes` for TCP, `None` for UDP; `shift_ns`: 0, except under the test hook
    /// that shifts this echo's clock as its client sees it.
    pub fn new(tcp_answer_bytes: Option<usize>, shift_ns: i64, sampling: Sampling) -> EchoStamps {
        EchoStamps {
            answer_bytes: tcp_answer_bytes.unwrap_or(0) as u64,
            answers: 0,
            stamped: 0,
            sampling,
            control: TxControl::driver_only(None),
            rx: None,
            read_at: 0,
            sends: VecDeque::with_capacity(SENDS_KEPT),
            untold: VecDeque::with_capacity(SENDS_KEPT),
            queue: ErrQueue::default(),
            shift_ns,
        }
    }

    /// Requests were read: `rx`, the last one's arrival stamp; `waiting` (TCP) requests
    /// read before them not yet begun answering, `n` of them in this read. The clock is
    /// read (the echo's wake-up ends) only when one of them is sampled.
    #[inline]
    pub fn read(&mut self, rx: Option<u64>, waiting: u64, n: u64) {
        let first = self.answers + waiting;
        if self.sampling.next_sampled(first) < first + n {
            self.rx = rx;
            self.read_at = now_real();
        }
    }

    /// How the next read of a TCP connection goes ([`RxRead`]): stamped only when it may
    /// complete a sampled request. `waiting` requests read not yet begun answering,
    /// `partial` bytes of the next one in, requests of `request_bytes`.
    #[inline]
    pub fn stream_read(
        &self,
        waiting: u64,
        partial: usize,
        request_bytes: usize,
        room: usize,
    ) -> RxRead {
        let next = (self.answers + waiting, partial);
        stream_read(&self.sampling, next, request_bytes, u64::MAX, room)
    }

    /// A UDP request of sequence `seq` was read, with its arrival stamp `rx`.
    pub fn read_udp(&mut self, rx: Option<u64>, seq: u32) {
        if self.sampling.sampled(u64::from(seq)) {
            self.rx = rx;
            self.read_at = now_real();
        }
    }

    /// Writes the figures of the answer about to be sent into `answer`'s first bytes and
    /// remembers the send when it is stamped; call just before sending. `udp`: the
    /// request's sequence and its sender's [`peer_key`]; `None` (TCP): the answer's index,
    /// which is its request's. Returns what the send must carry to be stamped, when sends
    /// ask one by one (sampled) and this one is; an unsampled answer tells only the send
    /// stack of an earlier stamped one, and reads no clock.
    pub fn answering(&mut self, udp: Option<(u32, u64)>, answer: &mut [u8]) -> Option<&TxControl> {
        let (tag, peer) = udp.unwrap_or((self.answers as u32, 0));
        let index = udp.map_or(self.answers, |(seq, _)| u64::from(seq));
        let key = match self.answer_bytes {
            0 => self.stamped as u32,
            b => send_key(b, self.answers),
        };
        self.answers += 1;
        let stamped = self.sampling.sampled(index);
        let told = match self.untold.front() {
            Some(u) if u.peer == peer => self.untold.pop_front(),
            _ => {
                let mine = self.untold.iter().position(|u| u.peer == peer);
                mine.and_then(|i| self.untold.remove(i))
            }
        };
        let (sent_tag, send_ns) = told.map_or((UNKNOWN, UNKNOWN), |u| (u.tag, u.send_ns));
        let mut f = EchoFigures {
            tag,
            wake_ns: UNKNOWN,
            turnaround_ns: UNKNOWN,
            sent_tag,
            send_ns,
            rx_at: 0,
        };
        if !stamped {
            if let Some(to) = answer.get_mut(..FIGURE_BYTES) {
                f.write(to);
            }
            return None;
        }
        let now = now_real();
        f.wake_ns = self.rx.map_or(UNKNOWN, |rx| span32(rx, self.read_at));
        f.turnaround_ns = span32(self.read_at, now);
        f.rx_at = self
            .rx
            .map_or(0, |rx| rx.saturating_add_signed(self.shift_ns));
        if let Some(to) = answer.get_mut(..FIGURE_BYTES) {
            f.write(to);
        }
        self.stamped += 1;
        if self.sends.len() == SENDS_KEPT {
            self.sends.pop_front();
        }
        self.sends.push_back(Sent {
            key,
            tag,
            at: now,
            peer,
        });
        self.sampling.per_send().then_some(&self.control)
    }

    /// Reads the driver stamps of the answers sent so far from `fd`'s error queue.
    pub fn collect(&mut self, fd: RawFd) {
        if self.sends.is_empty() {
            return;
        }
        // One driver stamp an answer when its send asked (two, with the qdisc's, when
        // the socket asks for every send's): read in one call that asks for no more;
        // only a filled one may have left more queued.
        let per_answer = if self.sampling.per_send() { 1 } else { 2 };
        let expect = (self.sends.len() * per_answer).min(ErrQueue::BATCH);
        let (sends, untold) = (&mut self.sends, &mut self.untold);
        let got = self
            .queue
            .read_expected(fd, expect, |s| told(sends, untold, s));
        if got.is_ok_and(|n| n == expect) && !sends.is_empty() {
            let _ = self.queue.drain(fd, |s| told(sends, untold, s));
        }
    }
}

/// A driver stamp came back: the answers it covers (coalesced sends share a packet, whose
/// stamp carries the last one's id) have their send stack known, to be told.
fn told(sends: &mut VecDeque<Sent>, untold: &mut VecDeque<Untold>, s: TxStamp) {
    if s.point != TxPoint::Driver {
        return;
    }
    while let Some(x) = sends.front().filter(|x| reached(x.key, s.key)).copied() {
        sends.pop_front();
        if untold.len() == SENDS_KEPT {
            untold.pop_front();
        }
        untold.push_back(Untold {
            peer: x.peer,
            tag: x.tag,
            send_ns: span32(x.at, s.ns),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kstamps::io::enable;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    /// Each answer carries its own turnaround and the send stack of the one before it,
    /// read from the kernel's driver stamp of that answer.
    #[test]
    fn answers_carry_the_send_stack_of_the_answer_before() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        enable(s.as_raw_fd()).unwrap();
        let mut e = EchoStamps::new(Some(32), 0, Sampling::all());
        let mut answer = [0u8; 32];
        for tag in 0..3u32 {
            e.read(Some(now_real()), 0, 1);
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

    /// One UDP echo socket answers two clients in turn, each numbering its requests from
    /// 0: each answer tells the send stack of its own client's answer before, never the
    /// other's (whose sequence numbers are the same).
    #[test]
    fn a_udp_answer_tells_its_own_clients_send_stacks_only() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable(s.as_raw_fd()).unwrap();
        let clients = [0, 1].map(|_| UdpSocket::bind("127.0.0.1:0").unwrap());
        for c in &clients {
            c.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
        }
        let mut e = EchoStamps::new(None, 0, Sampling::all());
        let mut answer = [0u8; 40];
        for seq in 0..3u32 {
            for c in &clients {
                let to = c.local_addr().unwrap();
                e.read_udp(Some(now_real()), seq);
                e.answering(Some((seq, peer_key(&to))), &mut answer);
                s.send_to(&answer, to).unwrap();
                e.collect(s.as_raw_fd());
                let mut got = [0u8; 64];
                let n = c.recv(&mut got).unwrap();
                let f = EchoFigures::read(&got[..n]).unwrap();
                assert_eq!(f.tag, seq);
                let told = if seq > 0 { seq - 1 } else { UNKNOWN };
                assert_eq!(f.sent_tag, told, "{to}: {f:?}");
                assert_eq!(f.send_ns == UNKNOWN, seq == 0, "{to}: {f:?}");
            }
        }
        assert_ne!(
            peer_key(&clients[0].local_addr().unwrap()),
            peer_key(&clients[1].local_addr().unwrap())
        );
    }

    /// Sampled one in 4 over TCP: only answers 0, 4 and 8 are stamped (their sends ask,
    /// the socket does not), an unsampled answer reads no clock (no wake-up or
    /// turnaround) and the answer after a stamped one tells its send stack.
    #[test]
    fn a_sampled_echo_stamps_only_the_sampled_answers() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let sampling = Sampling::new(4);
        sampling.enable(s.as_raw_fd()).unwrap();
        let mut e = EchoStamps::new(Some(32), 0, sampling);
        let mut answer = [0u8; 32];
        let mut told = Vec::new();
        for tag in 0..10u32 {
            e.read(Some(now_real()), 0, 1);
            let ask = e.answering(None, &mut answer).copied();
            assert_eq!(ask.is_some(), tag % 4 == 0, "answer {tag}");
            match ask {
                Some(ctl) => {
                    super::super::sample::send_stamped(s.as_raw_fd(), &answer, None, &ctl).unwrap();
                }
                None => crate::wait::send_blocking(s.as_raw_fd(), &answer, 32),
            }
            e.collect(s.as_raw_fd());
            let mut got = [0u8; 32];
            c.read_exact(&mut got).unwrap();
            let f = EchoFigures::read(&got).unwrap();
            assert_eq!(f.tag, tag);
            assert_eq!(f.wake_ns != UNKNOWN, tag % 4 == 0, "{f:?}");
            assert_eq!(f.turnaround_ns != UNKNOWN, tag % 4 == 0, "{f:?}");
            if f.sent_tag != UNKNOWN {
                assert!(f.send_ns < 10_000_000, "{f:?}");
                told.push((tag, f.sent_tag));
            }
        }
        assert_eq!(told, [(1, 0), (5, 4), (9, 8)]);
    }
}
