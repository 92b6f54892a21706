//! Transmit stamps as completions on a ring (`SOCKET_URING_OP_TX_TIMESTAMP`, Linux 6.17)
//! instead of one `recvmsg(MSG_ERRQUEUE)` each: one multishot command watches the
//! socket's error queue, and each time the thread enters the ring the kernel takes every
//! stamp queued in one pass and posts it as a 32-byte completion (its key, its kind, its
//! time), with no control message built and no copy per stamp. The ring's work is
//! deferred until the thread asks (`DEFER_TASKRUN`): a stamp never wakes the thread. The
//! command takes only stamps without data (`OPT_TSONLY`); other errors (an ICMP error's)
//! stay in the error queue for [`crate::kstamps::ErrQueue`].
//!
//! A kernel without the command answers it with an error: [`RingStamps::drain`] says so,
//! and the caller reads the error queue as before.

use std::io;
use std::os::fd::RawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::kstamps::io::{SCM_TSTAMP_SCHED, SCM_TSTAMP_SND};
use crate::kstamps::{TxPoint, TxStamp};

/// `SOCKET_URING_OP_TX_TIMESTAMP` (`enum io_uring_socket_op`).
const TX_TIMESTAMP: u32 = 4;
/// A completion's flags: a hardware stamp, and the bit its kind (`SCM_TSTAMP_*`) starts at.
const TSTAMP_HW: u32 = 1 << 16;
const TYPE_SHIFT: u32 = 17;
/// The command's user data.
const WATCH: u64 = 0x7473;
/// Completions the ring holds between two reads: beyond, the kernel ends the command
/// (it is armed again at the next read, the stamps left queued taken then).
const CQ_ENTRIES: u32 = 4096;

/// Why the ring cannot give a socket's stamps.
#[derive(Debug, thiserror::Error)]
pub enum RingStampsError {
    #[error("io_uring ring for transmit stamps: {0}")]
    Ring(io::Error),
    #[error("this kernel has no io_uring transmit stamps (SOCKET_URING_OP_TX_TIMESTAMP, Linux 6.17): {0}")]
    Unsupported(io::Error),
}

/// One socket's transmit stamps, read from a ring.
pub struct RingStamps {
    ring: IoUring<squeue::Entry, cqueue::Entry32>,
    fd: RawFd,
    /// The command is in the kernel, watching.
    armed: bool,
    /// Times the kernel ended the command (it is armed again at the next read).
    pub rearmed: u64,
}

impl RingStamps {
    /// A ring watching `fd`'s error queue (a socket with `SO_TIMESTAMPING`'s `OPT_TSONLY`).
    /// The kernel's answer to the command comes with the first [`RingStamps::drain`].
    pub fn new(fd: RawFd) -> Result<RingStamps, RingStampsError> {
        let ring = IoUring::<squeue::Entry, cqueue::Entry32>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(CQ_ENTRIES)
            .build(4)
            .map_err(RingStampsError::Ring)?;
        Ok(RingStamps {
            ring,
            fd,
            armed: false,
            rearmed: 0,
        })
    }

    /// Gives `each` every stamp the kernel has queued on the socket now, without waiting;
    /// returns how many. An error: the kernel refused the command (the caller reads the
    /// error queue from now on).
    pub fn drain(&mut self, mut each: impl FnMut(TxStamp)) -> Result<usize, RingStampsError> {
        if !self.armed {
            let watch = opcode::UringCmd16::new(types::Fd(self.fd), TX_TIMESTAMP)
                .build()
                .user_data(WATCH);
            // SAFETY: the command names no buffer. The kernel takes its own reference to the
            // socket's file at submission, so a socket closed before the ring is dropped
            // frees nothing under the command; `fd` is named again only here, by an owner
            // that still holds the socket while it reads.
            unsafe { self.ring.submission().push(&watch) }
                .map_err(|_| RingStampsError::Ring(io::Error::other("submission ring full")))?;
            self.armed = true;
        }
        // Submits the command when new, and runs the work the kernel deferred (a stamp
        // queued wakes the command): each stamp queued since the last read is posted. A
        // command armed with stamps waiting defers their work at once: a second pass.
        for _ in 0..2 {
            let mut sq = self.ring.submission();
            let pending = !sq.is_empty() || sq.taskrun();
            sq.sync();
            drop(sq);
            if !pending {
                break;
            }
            let args = types::SubmitArgs::new();
            match self.ring.submitter().submit_with_args(0, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(RingStampsError::Ring(e)),
            }
        }
        let mut got = 0;
        let mut refused = None;
        for cqe in self.ring.completion() {
            if cqe.user_data() != WATCH {
                continue;
            }
            if !cqueue::more(cqe.flags()) {
                self.armed = false;
                let res = cqe.result();
                if res == -libc::EINVAL || res == -libc::EOPNOTSUPP {
                    refused = Some(io::Error::from_raw_os_error(-res));
                }
                self.rearmed += 1;
                continue;
            }
            if let Some(s) = stamp_of(cqe.result(), cqe.flags(), cqe.big_cqe()) {
                each(s);
                got += 1;
            }
        }
        match refused {
            Some(e) => Err(RingStampsError::Unsupported(e)),
            None => Ok(got),
        }
    }
}

/// A completion's stamp: its key (`res`), its kind (the flags' high bits) and its time
/// (the completion's second half: seconds, nanoseconds). A hardware stamp or one of a
/// kind not asked here (an ACK's) is none.
fn stamp_of(res: i32, flags: u32, time: &[u64; 2]) -> Option<TxStamp> {
    if flags & TSTAMP_HW != 0 {
        return None;
    }
    let point = match flags >> TYPE_SHIFT {
        SCM_TSTAMP_SND => TxPoint::Driver,
        SCM_TSTAMP_SCHED => TxPoint::Sched,
        _ => return None,
    };
    Some(TxStamp {
        key: res as u32,
        point,
        ns: time[0]
            .saturating_mul(1_000_000_000)
            .saturating_add(time[1]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kstamps::{datagram, sample, ErrQueue, Queued};
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// A completion's fields as the kernel writes them: key, kind, time; a hardware stamp
    /// and an ACK's are not taken.
    #[test]
    fn a_completion_is_read_as_the_kernel_writes_it() {
        let flags = |t: u32| cqueue_more() | (t << TYPE_SHIFT);
        let s = stamp_of(7, flags(SCM_TSTAMP_SND), &[2, 5]).unwrap();
        assert_eq!((s.key, s.point, s.ns), (7, TxPoint::Driver, 2_000_000_005));
        let s = stamp_of(-1, flags(SCM_TSTAMP_SCHED), &[0, 1]).unwrap();
        assert_eq!((s.key, s.point), (u32::MAX, TxPoint::Sched));
        assert_eq!(stamp_of(7, flags(2 /* SCM_TSTAMP_ACK */), &[2, 5]), None);
        assert_eq!(
            stamp_of(7, flags(SCM_TSTAMP_SND) | TSTAMP_HW, &[2, 5]),
            None
        );
    }

    /// `IORING_CQE_F_MORE`: the command goes on.
    fn cqueue_more() -> u32 {
        1 << 1
    }

    /// Datagrams sent asking their stamps under keys of their own: each stamp comes on the
    /// ring once, with its key, within the send's time; a second round comes on the same
    /// command; an ICMP error stays in the error queue for the reader there.
    #[test]
    fn each_sends_stamp_comes_on_the_ring_once_and_an_icmp_error_stays_queued() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = tx.as_raw_fd();
        datagram::enable_departure(fd).unwrap();
        let keyed = sample::opt_id_per_send();
        let mut ring = match RingStamps::new(fd) {
            Ok(r) => r,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
            Err(e) => return println!("SKIPPED: needs io_uring ({e})"),
        };
        let to = rx.local_addr().unwrap();
        let mut taken = 0;
        for round in 0..2u32 {
            let first = 100 * round;
            let before = now_ns();
            let msgs = [(&b"a"[..], to), (&b"b"[..], to), (&b"c"[..], to)];
            assert_eq!(
                sample::send_batch(fd, &msgs, Some((keyed, first))).unwrap(),
                3
            );
            let after = now_ns();
            let mut got = Vec::new();
            match ring.drain(|s| got.push(s)) {
                Ok(_) => {}
                Err(RingStampsError::Unsupported(e)) if std::env::var("CI").is_err() => {
                    return println!("SKIPPED: needs Linux 6.17's io_uring stamps ({e})");
                }
                Err(e) => panic!("{e}"),
            }
            assert_eq!(got.len(), 3, "round {round}: {got:?}");
            for s in &got {
                assert_eq!(s.point, TxPoint::Driver);
                assert!(
                    (before..=after).contains(&s.ns),
                    "{s:?} in {before}..{after}"
                );
            }
            if keyed {
                let keys: Vec<u32> = got.iter().map(|s| s.key).collect();
                assert_eq!(keys, [first, first + 1, first + 2]);
            }
            taken += got.len();
            // Nothing twice.
            assert_eq!(ring.drain(|s| panic!("again: {s:?}")).unwrap(), 0);
        }
        assert_eq!((taken, ring.rearmed), (6, 0));
        // A closed port's ICMP error: not the ring's, still the error queue's.
        crate::int_option::set_level_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1).unwrap();
        let closed = {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        sample::send_batch(fd, &[(&b"d"[..], closed)], Some((keyed, 500))).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(ring.drain(|_| {}).unwrap(), 1, "the send's own stamp");
        let mut errors = 0;
        ErrQueue::default()
            .drain_all(fd, 16, |m| {
                if let Queued::Error { errno, .. } = m {
                    assert_eq!(errno, libc::ECONNREFUSED as u32);
                    errors += 1;
                }
            })
            .unwrap();
        assert_eq!(errors, 1);
    }

    fn now_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }
}
