//! Echo workers on io_uring: the kernel echo's rules (whole requests answered in order;
//! a UDP datagram answered only when it is the test's request from the allowed address),
//! with each connection's receive submitted once (multishot) and every answer of a pass
//! submitted by the one `io_uring_enter` that waits for the next requests.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use io_uring::{cqueue, opcode, types};

use super::bufs::count_within;
use super::ring::{Uring, GROUP};
use super::rr_client::RECEIVE_BYTES;
use super::stamped::{self, EchoSends, MsgLayout, TxAsk};
use super::{op_of, user_data, Op};
use crate::kstamps::{EchoStamps, Sampling, TxControl};
use crate::poller::EventFd;
use crate::pool::{Placement, Stop};
use crate::rr_client::RrSocket;
use crate::rr_server::workers::{Core, Shared as Carrier, ANSWERED};
use crate::rr_server::{RrServer, ServerPlan};
use crate::udp_match::check_request;

/// What the io_uring echo answers on.
pub enum UringTarget {
    /// TCP connections.
    Sockets(Vec<RrSocket>),
    /// One UDP socket; datagrams from other addresses than `allowed`, or that are not the
    /// test's requests, are dropped.
    Udp { socket: UdpSocket, allowed: IpAddr },
}

impl UringTarget {
    fn fds(&self) -> Vec<RawFd> {
        match self {
            UringTarget::Sockets(s) => s.iter().map(RrSocket::fd).collect(),
            UringTarget::Udp { socket, .. } => vec![socket.as_raw_fd()],
        }
    }
}

struct Shared {
    core: Core,
    target: UringTarget,
    /// Signalled at an abort: every worker's ring polls it (a shutdown does not end a
    /// receive on an unconnected UDP socket).
    wake: EventFd,
}

impl Carrier for Shared {
    fn core(&self) -> &Core {
        &self.core
    }
}

/// Stop contract: the flag is read at every pass, and shutting the sockets down ends
/// their receives, which wakes a worker waiting in `io_uring_enter`.
impl Stop for Shared {
    fn abort(&self) {
        self.core.abort();
        self.wake.signal();
        for fd in self.target.fds() {
            // SAFETY: shutting down sockets we own.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

impl RrServer {
    /// Echo workers on io_uring.
    pub fn spawn_uring(target: UringTarget, plan: ServerPlan) -> io::Result<RrServer> {
        super::available().map_err(io::Error::other)?;
        let units = target.fds().len();
        let placement = Placement::new(plan.placement.threads, plan.placement.cpus.clone(), units);
        let shared = Arc::new(Shared {
            core: Core::new(plan, placement.threads),
            target,
            wake: EventFd::new()?,
        });
        let deal = placement.clone();
        RrServer::start(&placement, shared, move |s: &Shared, k| {
            let all = s.target.fds();
            let fds: Vec<RawFd> = deal.owned(k, units).iter().map(|&i| all[i]).collect();
            let allowed = match &s.target {
                UringTarget::Udp { allowed, .. } => Some(*allowed),
                UringTarget::Sockets(_) => None,
            };
            Echo::new(&s.core, k, &fds, allowed)
                .and_then(|mut e| e.wake_at(s.wake.raw()).map(|_| e))
                .and_then(|mut e| e.run())
                .err()
                .map(|e| format!("io_uring echo: {e}"))
        })
    }
}

/// One TCP connection's requests read and answers owed.
#[derive(Default)]
struct Conn {
    rx_acc: usize,
    owed: usize,
    /// Answers in the send in flight (0: none).
    sending: usize,
    armed: bool,
    dead: bool,
    /// With stages: its readings and its answers' figures.
    stamps: Option<Box<EchoSends>>,
}

/// A UDP answer in flight: where it goes and its bytes (the request's header echoed),
/// kept until its send completes. Indexed by the receive buffer it answers, which is
/// handed back then.
struct Reply {
    addr: libc::sockaddr_storage,
    iov: libc::iovec,
    msg: libc::msghdr,
    /// A sampled answer's ask for its stamps.
    control: TxControl,
}

struct Echo<'a> {
    core: &'a Core,
    k: usize,
    ring: Uring,
    conns: Vec<Conn>,
    /// UDP: the one address answered.
    allowed: Option<IpAddr>,
    /// TCP: answers' constant bytes; UDP: one answer per receive buffer.
    tx: Vec<u8>,
    replies: Vec<Reply>,
    /// RecvMsgMulti's layout (UDP, and TCP with stages): the address it keeps before each
    /// datagram, and the receive stamp with stages; `None`: a plain multishot receive.
    layout: Option<MsgLayout>,
    /// The sockets, by fixed file: with stages, their error queues are read.
    fds: Vec<RawFd>,
    /// UDP with stages: the echo's readings.
    udp_stamps: Option<EchoStamps>,
    /// UDP answers queued since the last wait.
    replies_queued: usize,
    last_message: Instant,
}

/// Answers a TCP send carries at most.
const BATCH: usize = 64;
/// Bytes of a TCP echo's answers buffer: [`BATCH`] small answers, else as many as fit
/// (one at least). It is what the kernel engine's echo keeps per worker (a message, 64 KiB
/// at least), which the agent's memory budget counts: 64 answers of 1 MiB would be 64 MiB
/// a worker, five times what the agent admitted for it.
const TX_BYTES: usize = 64 << 10;

/// Answers one TCP send of responses of `response_bytes` carries.
fn batch(response_bytes: usize) -> usize {
    (TX_BYTES / response_bytes.max(1)).clamp(1, BATCH)
}

impl<'a> Echo<'a> {
    fn new(core: &'a Core, k: usize, fds: &[RawFd], allowed: Option<IpAddr>) -> io::Result<Self> {
        let p = &core.plan;
        let sampling = Sampling::new(p.stage_every).with_hardware_rx(p.hardware_rx);
        if p.stages {
            for &fd in fds {
                sampling
                    .enable(fd)
                    .map_err(|e| io::Error::other(format!("SO_TIMESTAMPING: {e}")))?;
            }
        }
        let storage = std::mem::size_of::<libc::sockaddr_storage>();
        let layout = match allowed {
            Some(_) => Some(MsgLayout::new(storage, p.stages)),
            None => p.stages.then(MsgLayout::stamped),
        };
        let overhead = layout.as_ref().map_or(0, MsgLayout::overhead);
        // Each UDP buffer holds one datagram behind RecvMsgMulti's header and address.
        let (want, size) = match allowed {
            Some(_) => (256, p.request_bytes + 112 + overhead),
            None => (
                fds.len() * 2,
                (BATCH * p.request_bytes).clamp(4096, 64 << 10) + overhead,
            ),
        };
        // UDP: an answer is kept per buffer too, so the larger of the two sizes the count
        // (answers larger than requests, --max-udp-reply-ratio, kept 256 of them: 16 MiB
        // at 65,000 bytes, beyond what the agent's budget counts).
        let per_buffer = match allowed {
            Some(_) => size.max(p.response_bytes),
            None => size,
        };
        let count = count_within(want, per_buffer, RECEIVE_BYTES);
        let ring = Uring::polled(fds, count, size, p.sqpoll)?;
        let tx_len = match allowed {
            Some(_) => usize::from(count) * p.response_bytes,
            None => batch(p.response_bytes) * p.response_bytes,
        };
        // SAFETY: all-zero is a valid msghdr, iovec and sockaddr_storage.
        let zeroed = || unsafe { std::mem::zeroed::<Reply>() };
        let replies = match allowed {
            Some(_) => (0..count).map(|_| zeroed()).collect(),
            None => Vec::new(),
        };
        let tcp_stamps = || {
            let sends = EchoSends::new(
                batch(p.response_bytes),
                p.response_bytes,
                p.clock_shift_ns,
                sampling,
            );
            (p.stages && allowed.is_none()).then_some(sends)
        };
        Ok(Echo {
            core,
            k,
            ring,
            conns: (0..fds.len())
                .map(|_| Conn {
                    stamps: tcp_stamps(),
                    ..Conn::default()
                })
                .collect(),
            allowed,
            tx: vec![0xa5u8; tx_len],
            replies,
            layout,
            fds: fds.to_vec(),
            udp_stamps: (p.stages && allowed.is_some())
                .then(|| EchoStamps::new(None, p.clock_shift_ns, sampling)),
            replies_queued: 0,
            last_message: Instant::now(),
        })
    }

    /// Polls the abort's eventfd, so that an abort ends a wait in the ring.
    fn wake_at(&mut self, fd: RawFd) -> io::Result<()> {
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build();
        self.ring.push(&poll.user_data(user_data(Op::Wake, 0)))
    }

    fn run(&mut self) -> io::Result<()> {
        while !self.core.aborting() && self.conns.iter().any(|c| !c.dead) {
            let sends = self.queue()? + std::mem::take(&mut self.replies_queued);
            let now = Instant::now();
            if self.core.plan.poll.spins(now, self.last_message) {
                self.ring.poll()?;
            } else {
                self.ring.wait(now, None, sends + 1)?;
            }
            let mut cqes = std::mem::take(&mut self.ring.cqes);
            if !cqes.is_empty() {
                self.last_message = self.core.plan.poll.stamp(now);
            }
            for cqe in &cqes {
                match op_of(cqe.user_data()) {
                    (Some(Op::Recv), i) => self.received(i, cqe),
                    (Some(Op::Send), i) => self.sent(i, cqe.result()),
                    (Some(Op::Wake) | None, _) => {}
                }
            }
            self.ring.bufs.publish();
            cqes.clear();
            self.ring.cqes = cqes;
            if self.core.plan.stages {
                self.collect_stamps();
            }
        }
        Ok(())
    }

    /// With stages: reads the driver stamps of the answers the last enter sent.
    fn collect_stamps(&mut self) {
        for (c, &fd) in self.conns.iter_mut().zip(&self.fds) {
            if let Some(s) = &mut c.stamps {
                s.collect(fd);
            }
        }
        if let Some(s) = &mut self.udp_stamps {
            s.collect(self.fds[0]);
        }
    }

    /// Arms ended receives and queues each TCP connection's owed answers as one send;
    /// returns how many sends it queued.
    fn queue(&mut self) -> io::Result<usize> {
        let p = &self.core.plan;
        let mut sends = 0;
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.dead {
                continue;
            }
            if !c.armed {
                let recv = match &self.layout {
                    Some(l) => l.recv(i),
                    None => opcode::RecvMulti::new(types::Fixed(i as u32), GROUP).build(),
                };
                self.ring.push(&recv.user_data(user_data(Op::Recv, i)))?;
                c.armed = true;
            }
            if c.owed > 0 && c.sending == 0 {
                c.sending = c.owed.min(batch(p.response_bytes));
                let len = (c.sending * p.response_bytes) as u32;
                let send = match &mut c.stamps {
                    Some(s) => s.send(i, c.sending, &self.tx, p.response_bytes),
                    None => opcode::Send::new(types::Fixed(i as u32), self.tx.as_ptr(), len)
                        .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                        .build(),
                };
                self.ring.push(&send.user_data(user_data(Op::Send, i)))?;
                self.core.answered[self.k].add_to(ANSWERED, c.sending as u64);
                sends += 1;
            }
        }
        Ok(sends)
    }

    fn received(&mut self, i: usize, cqe: &cqueue::Entry) {
        let res = cqe.result();
        let c = &mut self.conns[i];
        if !cqueue::more(cqe.flags()) {
            c.armed = false;
        }
        if res <= 0 {
            // No buffer free: re-armed next pass. Else the peer closed, or an abort.
            c.dead |= res != -libc::ENOBUFS;
            return;
        }
        let Some(bid) = cqueue::buffer_select(cqe.flags()) else {
            return;
        };
        self.core.maybe_stall();
        if self.allowed.is_some() {
            self.answer_datagram(i, bid, res as usize);
            return;
        }
        let p = &self.core.plan;
        let (got, rx) = match &self.layout {
            Some(l) => {
                let (data, rx) = l.data(self.ring.bufs.get(bid, res as usize));
                (data.len(), rx)
            }
            None => (res as usize, None),
        };
        c.rx_acc += got;
        let whole = c.rx_acc / p.request_bytes;
        c.owed += whole;
        c.rx_acc %= p.request_bytes;
        if let Some(s) = c.stamps.as_mut().filter(|_| whole > 0) {
            // Those in the send in flight were begun when it was queued.
            let waiting = c.owed - whole - c.sending;
            s.read(rx, waiting as u64, whole as u64);
        }
        self.ring.bufs.recycle(bid);
    }

    /// Answers the datagram in buffer `bid` when it is the test's request from the
    /// allowed address; its buffer is handed back when the answer is sent.
    fn answer_datagram(&mut self, i: usize, bid: u16, len: usize) {
        let p = &self.core.plan;
        let buf = self.ring.bufs.get(bid, len);
        let layout = self.layout.as_ref().expect("a UDP echo's layout");
        let Ok(out) = types::RecvMsgOut::parse(buf, layout.msghdr()) else {
            self.core.reject(self.k, 1);
            self.ring.bufs.recycle(bid);
            return;
        };
        let from = sockaddr_of(out.name_data());
        let ok = from.is_some_and(|a| Some(a.ip()) == self.allowed)
            && !out.is_payload_truncated()
            && check_request(out.payload_data(), p.request_bytes, p.cookie).is_ok();
        let (true, Some(from)) = (ok, from) else {
            self.core.reject(self.k, 1);
            self.ring.bufs.recycle(bid);
            return;
        };
        let b = usize::from(bid);
        let at = b * p.response_bytes;
        let head = out.payload_data().len().min(p.response_bytes);
        self.tx[at..at + head].copy_from_slice(&out.payload_data()[..head]);
        let ask = self.udp_stamps.as_mut().and_then(|st| {
            let answer = &mut self.tx[at..at + p.response_bytes];
            stamped::answering(st, (out.control_data(), &from), answer)
        });
        let name = out.name_data();
        let r = &mut self.replies[b];
        // SAFETY: copying at most sizeof(sockaddr_storage) bytes into it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                name.as_ptr(),
                (&mut r.addr as *mut libc::sockaddr_storage).cast::<u8>(),
                name.len()
                    .min(std::mem::size_of::<libc::sockaddr_storage>()),
            )
        };
        r.iov = libc::iovec {
            iov_base: self.tx[at..].as_mut_ptr().cast(),
            iov_len: p.response_bytes,
        };
        r.msg.msg_name = (&mut r.addr as *mut libc::sockaddr_storage).cast();
        r.msg.msg_namelen = name.len() as u32;
        r.msg.msg_iov = &mut r.iov;
        r.msg.msg_iovlen = 1;
        TxAsk::ask_on(&mut r.msg, ask.as_ref(), &mut r.control);
        let send = opcode::SendMsg::new(types::Fixed(i as u32), &r.msg)
            .build()
            .user_data(user_data(Op::Send, b));
        if self.ring.push(&send).is_ok() {
            self.core.count(self.k);
            self.replies_queued += 1;
        } else {
            self.ring.bufs.recycle(bid);
        }
    }

    /// A send completed: answers are counted when queued (the enter that follows submits
    /// them; their completions may be reaped only at the next wake-up), so here only a
    /// failed or short send matters, and a UDP answer's buffer goes back.
    fn sent(&mut self, i: usize, res: i32) {
        let p = &self.core.plan;
        if self.allowed.is_some() {
            // `i` is the receive buffer the answer came from.
            self.ring.bufs.recycle(i as u16);
            return;
        }
        let c = &mut self.conns[i];
        c.dead |= res < 0 || (res as usize) < c.sending * p.response_bytes;
        c.owed -= c.sending;
        c.sending = 0;
    }
}

/// The socket address in a received `sockaddr` (IPv4 or IPv6).
fn sockaddr_of(name: &[u8]) -> Option<SocketAddr> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = name
        .len()
        .min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: copying n bytes into storage of at least n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            name.as_ptr(),
            (&mut storage as *mut libc::sockaddr_storage).cast::<u8>(),
            n,
        )
    };
    crate::wait::sockaddr(storage, n as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::{batch, BATCH, TX_BYTES};

    #[test]
    fn an_echos_answers_buffer_is_one_message_or_64_kib() {
        assert_eq!(batch(64), BATCH);
        assert_eq!(batch(1), BATCH);
        assert_eq!(batch(2000), 32);
        assert_eq!(batch(1 << 20), 1);
        for r in [1, 64, 1000, 4096, 65_536, 100_000, 1 << 20] {
            assert!(batch(r) * r <= TX_BYTES.max(r), "{r}: {}", batch(r));
        }
    }
}
