//! The reflector's answers, each sent as soon as it is written, marked as its probe's
//! Class of Service TLV asks, and asking for its kernel transmit stamp when its probe
//! asked for a follow-up (`follow_ups`: T3 is then the stamp, told in the session's next
//! answer). Sent a wake-up's at a time instead (8 to a `sendmmsg`), the answers saved no
//! CPU that the benchmark could see and lengthened the peers' mean round trip by 25-40 us
//! with their receive path in NAPI threads on the same CPUs (BENCHMARKS.md, issue 54).

use std::net::SocketAddr;
use std::os::fd::RawFd;

use sonde_engine::kstamps::sample;

use super::follow_ups::{FollowUps, Stamps, Written};
use crate::stamp::marks::AnswerMarks;

/// The reflector socket's sends and stamps.
pub(super) struct Answers {
    stamps: Stamps,
    marks: AnswerMarks,
}

impl Answers {
    /// The answers of the reflector socket `fd`.
    pub(super) fn new(fd: RawFd) -> Answers {
        Answers {
            stamps: Stamps::new(fd),
            marks: AnswerMarks::default(),
        }
    }

    /// Sends the answer `bytes` to `to` with `tos`, asking for its stamp when `written`
    /// (its probe asked for a follow-up): from then it is its session's last in `ups`. The
    /// kernel refusing the ask, asks less (a key per send, then nothing); refusing the
    /// answer, or a full socket, drops it (as a lost answer).
    pub(super) fn send(
        &mut self,
        fd: RawFd,
        ups: &mut FollowUps,
        (bytes, to): (&[u8], SocketAddr),
        tos: u8,
        written: Option<Written>,
    ) {
        let _ = self.marks.mark(fd, tos);
        loop {
            let ask = written.and_then(|_| self.stamps.ask(fd, ups));
            match sample::send_batch(fd, &[(bytes, to)], ask) {
                Ok(1) => {
                    if let Some(w) = written {
                        ups.left(w, ask.is_some());
                    }
                    return;
                }
                Err(e) if ask.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
                    self.stamps.refused(&e)
                }
                _ => return,
            }
        }
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

    /// Six answers: four asking for their stamps, two of them marked EF, two asking
    /// nothing; the ring is made at the first that asks, none before. They arrive in
    /// order with their marks, and each asking one's session tells its kernel stamp next
    /// (within the send's time, read from the ring on this kernel, 6.18 as CI's); the
    /// others tell nothing.
    #[test]
    fn answers_leave_marked_and_stamped_when_asked() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        datagram::enable_arrival(rx.as_raw_fd(), false).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_nonblocking(true).unwrap();
        let fd = tx.as_raw_fd();
        let to = rx.local_addr().unwrap();
        let (mut answers, mut ups) = (Answers::new(fd), FollowUps::new(4));
        // Answers that ask nothing make no ring.
        answers.send(fd, &mut ups, (&[9; 10], to), 0, None);
        assert!(answers.stamps.reader.is_none());
        let _ = rx.recv(&mut [0; 16]).unwrap();
        let plan = [
            (0, true),
            (EF, true),
            (EF, true),
            (0, false),
            (0, false),
            (0, true),
        ];
        let id = |k: usize| SessionId {
            addr: to.ip(),
            port: 0,
            ssid: k as u16,
        };
        let before = super::super::reflector::realtime_ns();
        for (k, &(tos, asks)) in plan.iter().enumerate() {
            let t3 = Clocks {
                mono_ns: 0,
                real_ns: super::super::reflector::realtime_ns(),
            };
            let written = asks.then_some(Written {
                id: id(k),
                seq: 7,
                t3,
            });
            answers.send(fd, &mut ups, (&[k as u8; 10], to), tos, written);
        }
        let mut got = Vec::new();
        let mut batch = Batch::new(32, 64);
        while got.len() < plan.len() {
            let n = batch.read(rx.as_raw_fd()).unwrap();
            assert!(n > 0);
            got.extend(batch.iter().map(|(d, b)| (b[0], d.tos.unwrap())));
        }
        let want: Vec<(u8, u8)> = plan
            .iter()
            .enumerate()
            .map(|(k, p)| (k as u8, p.0))
            .collect();
        let reader = answers
            .stamps
            .reader
            .as_ref()
            .expect("made at the first ask");
        assert!(reader.on_ring(), "this kernel has io_uring's stamps");
        assert_eq!(got, want, "in order, each with its mark");
        std::thread::sleep(std::time::Duration::from_millis(20));
        answers.read_stamps(fd, &mut ups, 1);
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
