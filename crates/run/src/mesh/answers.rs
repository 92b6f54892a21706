//! The reflector's answers of a wake-up, sent [`CHUNK`] to a `sendmmsg` rather than one
//! each: an answer's departure (T3) is its kernel transmit stamp, told in its session's
//! next answer (`follow_ups`), so the moments an answer waits for the rest of its batch
//! are not the network's. A batch holds answers of one TOS (the socket's marks are set per
//! batch, as the probes' Class of Service TLVs ask) and of one ask: all of them asking for
//! their stamps (keyed in order) or none.

use std::net::SocketAddr;
use std::os::fd::RawFd;

use sonde_engine::kstamps::sample;

use super::follow_ups::{FollowUps, Stamps, Written};
use crate::stamp::marks::AnswerMarks;

/// Answers one `sendmmsg` sends at most (as the probes: `prober::SEND_CHUNK`).
pub(super) const CHUNK: usize = 8;

/// One answer waiting in the batch.
#[derive(Debug, Clone, Copy)]
struct Queued {
    len: usize,
    to: SocketAddr,
    tos: u8,
    /// Its probe asked for a follow-up: sent asking for its stamp.
    written: Option<Written>,
}

/// The batch: each answer written into its own slot of `room` bytes.
pub(super) struct Outbox {
    room: usize,
    buf: Vec<u8>,
    queued: Vec<Queued>,
    stamps: Stamps,
    marks: AnswerMarks,
    /// `sendmmsg` calls made.
    calls: u64,
}

impl Outbox {
    /// The batch of the reflector socket `fd`, answers of at most `room` bytes.
    pub(super) fn new(fd: RawFd, room: usize) -> Outbox {
        Outbox {
            room,
            buf: vec![0; CHUNK * room],
            queued: Vec::with_capacity(CHUNK),
            stamps: Stamps::new(fd),
            marks: AnswerMarks::default(),
            calls: 0,
        }
    }

    /// Where the next answer is written.
    pub(super) fn slot(&mut self) -> &mut [u8] {
        let at = self.queued.len() * self.room;
        &mut self.buf[at..at + self.room]
    }

    /// The answer of `len` bytes written in [`Outbox::slot`] goes to `to` with `tos`; the
    /// batch before it is sent first when it is full or the answer leaves otherwise
    /// marked or asked.
    pub(super) fn push(
        &mut self,
        fd: RawFd,
        ups: &mut FollowUps,
        len: usize,
        to: SocketAddr,
        tos: u8,
        written: Option<Written>,
    ) {
        let q = Queued {
            len,
            to,
            tos,
            written,
        };
        let fits = |b: &Queued| b.tos == tos && b.written.is_some() == written.is_some();
        if self.queued.first().is_some_and(|b| !fits(b)) {
            let k = self.queued.len();
            self.flush(fd, ups);
            self.buf.copy_within(k * self.room..k * self.room + len, 0);
        }
        self.queued.push(q);
        if self.queued.len() == CHUNK {
            self.flush(fd, ups);
        }
    }

    /// Sends the batch; each answer that left is its session's last in `ups`. One the
    /// kernel refuses is dropped, and a full socket drops the rest (as a lost answer).
    pub(super) fn flush(&mut self, fd: RawFd, ups: &mut FollowUps) {
        let Some(first) = self.queued.first().copied() else {
            return;
        };
        let _ = self.marks.mark(fd, first.tos);
        let none: (&[u8], SocketAddr) = (&[], SocketAddr::from(([0, 0, 0, 0], 0)));
        let mut msgs = [none; CHUNK];
        for (k, (m, q)) in msgs.iter_mut().zip(&self.queued).enumerate() {
            *m = (&self.buf[k * self.room..k * self.room + q.len], q.to);
        }
        let (mut i, n) = (0, self.queued.len());
        while i < n {
            let ask = first.written.and(self.stamps.ask(ups));
            self.calls += 1;
            match sample::send_batch(fd, &msgs[i..n], ask) {
                Ok(0) => break,
                Ok(n) => {
                    for w in self.queued[i..i + n].iter().filter_map(|q| q.written) {
                        ups.left(w, ask.is_some());
                    }
                    i += n;
                }
                Err(e) if ask.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                    self.stamps.refused(&e)
                }
                Err(_) => i += 1,
            }
        }
        self.queued.clear();
    }

    /// The answers' stamps come now, each given to `ups` (before the requests: each
    /// session's next answer tells its last one's).
    pub(super) fn read_stamps(&mut self, fd: RawFd, ups: &mut FollowUps, now_ns: u64) {
        self.stamps.read(fd, ups, now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_engine::kstamps::batch::Batch;
    use sonde_engine::kstamps::datagram;
    use sonde_proto::mesh::Clocks;
    use sonde_proto::stamp::{SessionId, TimeFormat};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    const EF: u8 = 46 << 2;

    /// Fourteen answers: six asking for their stamps, two of them marked EF, two asking
    /// nothing, four asking. They leave in four `sendmmsg`s (a batch is one mark and one
    /// ask), arrive in order with their marks, and each asking one's session tells its
    /// kernel stamp next (within the send's time, read from the ring on this kernel, 6.18
    /// as CI's); the others tell nothing.
    #[test]
    fn answers_leave_in_batches_of_one_mark_and_one_ask_each_stamped_when_asked() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        datagram::enable_arrival(rx.as_raw_fd(), false).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_nonblocking(true).unwrap();
        let fd = tx.as_raw_fd();
        let to = rx.local_addr().unwrap();
        let (mut out, mut ups) = (Outbox::new(fd, 64), FollowUps::default());
        assert!(out.stamps.reader.on_ring(), "this kernel has io_uring's stamps");
        let plan: Vec<(u8, bool)> = (0..14)
            .map(|k| match k {
                6 | 7 => (EF, true),
                8 | 9 => (0, false),
                _ => (0, true),
            })
            .collect();
        let id = |k: usize| SessionId {
            addr: to.ip(),
            port: 0,
            ssid: k as u16,
        };
        let before = super::super::reflector::realtime_ns();
        for (k, &(tos, asks)) in plan.iter().enumerate() {
            out.slot()[..10].fill(k as u8);
            let t3 = Clocks {
                mono_ns: 0,
                real_ns: super::super::reflector::realtime_ns(),
            };
            let written = asks.then_some(Written {
                id: id(k),
                seq: 7,
                t3,
            });
            out.push(fd, &mut ups, 10, to, tos, written);
        }
        out.flush(fd, &mut ups);
        assert_eq!(out.calls, 4, "6 asking, 2 marked, 2 not asking, 4 asking");
        let mut got = Vec::new();
        let mut batch = Batch::new(32, 64);
        while got.len() < plan.len() {
            let n = batch.read(rx.as_raw_fd()).unwrap();
            assert!(n > 0);
            got.extend(batch.iter().map(|(d, b)| (b[0], d.tos.unwrap())));
        }
        let want: Vec<(u8, u8)> = plan.iter().enumerate().map(|(k, p)| (k as u8, p.0)).collect();
        assert_eq!(got, want, "in order, each with its mark");
        std::thread::sleep(std::time::Duration::from_millis(20));
        out.read_stamps(fd, &mut ups, 1);
        let after = super::super::reflector::realtime_ns();
        for (k, &(_, asks)) in plan.iter().enumerate() {
            let told = ups.told(id(k), TimeFormat::Ntp);
            match asks {
                true => {
                    let f = told.unwrap_or_else(|| panic!("answer {k} untold"));
                    let at = f.timestamp.to_unix_ns(TimeFormat::Ntp);
                    assert_eq!(f.seq, 7);
                    // The NTP format's resolution is a quarter of a nanosecond.
                    assert!(before <= at + 1 && at <= after, "{before} {at} {after}");
                }
                false => assert_eq!(told, None, "answer {k} asked nothing"),
            }
        }
    }
}
