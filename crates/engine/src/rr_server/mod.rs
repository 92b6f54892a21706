//! Request/response echo workers on the agent: read requests of `request_bytes`, answer
//! each with `response_bytes`, in the receive mode asked for. Pipelined requests are
//! answered in order. A UDP datagram is answered only when it is a whole request that
//! carries the test's cookie: anything else is counted and dropped, so that the echo
//! cannot be used as a reflector. A test-only stall can be injected once, to prove that open-loop
//! clients see it.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) mod workers;

pub use workers::{RrServer, ServerPlan};

use crate::kstamps::{self, EchoStamps, Sampling, TxControl, FIGURE_BYTES};
use crate::pool::{Placement, Stop};
use crate::rr_client::RrSocket;
use crate::udp_match::{check_request, REQUEST_HEADER_BYTES};
use crate::wait::{self, Multi, Poll, Recv};
use workers::{Core, Shared as Carrier};

/// What the echo workers answer on, on kernel sockets.
pub enum ServerTarget {
    Sockets(Vec<RrSocket>),
    /// One UDP socket; datagrams from other addresses than `allowed`, or that are not the
    /// test's requests, are dropped.
    Udp {
        socket: UdpSocket,
        allowed: IpAddr,
    },
    /// Connect-per-request: accept, answer one request, wait for the client's close.
    Accept {
        listener: TcpListener,
        allowed: IpAddr,
    },
}

/// The kernel server's shared state: the core and its sockets.
struct Shared {
    core: Core,
    target: ServerTarget,
}

impl Carrier for Shared {
    fn core(&self) -> &Core {
        &self.core
    }
}

/// Stop contract: the flag is read at every wake-up, and shutting the sockets down wakes
/// a worker blocked in a receive, a poll or an accept.
impl Stop for Shared {
    fn abort(&self) {
        self.core.abort();
        let fds: Vec<RawFd> = match &self.target {
            ServerTarget::Sockets(s) => s.iter().map(RrSocket::fd).collect(),
            ServerTarget::Udp { socket, .. } => vec![socket.as_raw_fd()],
            ServerTarget::Accept { listener, .. } => vec![listener.as_raw_fd()],
        };
        for fd in fds {
            // SAFETY: shutting down sockets we own.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
}

impl RrServer {
    /// Echo workers on kernel sockets.
    pub fn spawn(target: ServerTarget, plan: ServerPlan) -> io::Result<RrServer> {
        let units = match &target {
            ServerTarget::Sockets(s) => s.len(),
            ServerTarget::Udp { .. } => 1,
            ServerTarget::Accept { .. } => plan.placement.threads.max(1),
        };
        let placement = Placement::new(plan.placement.threads, plan.placement.cpus.clone(), units);
        let shared = Arc::new(Shared {
            core: Core::new(plan, placement.threads),
            target,
        });
        let deal = placement.clone();
        RrServer::start(&placement, shared, move |s: &Shared, k| {
            run(s, k, &deal.owned(k, units))
        })
    }
}

fn run(shared: &Shared, k: usize, owned: &[usize]) -> Option<String> {
    let core = &shared.core;
    match &shared.target {
        ServerTarget::Sockets(socks) => {
            let fds: Vec<RawFd> = owned.iter().map(|&i| socks[i].fd()).collect();
            echo_tcp(core, k, &fds)
        }
        ServerTarget::Udp { socket, allowed } => echo_udp(core, k, socket, *allowed),
        ServerTarget::Accept { listener, allowed } => accept_loop(core, k, listener, *allowed),
    }
}

struct Echo {
    fd: RawFd,
    rx_acc: usize,
    pending: u64,
    tx_left: usize,
    dead: bool,
    /// With stages: the echo's readings, and the figures of the answer being sent.
    stamps: Option<(EchoStamps, [u8; FIGURE_BYTES])>,
    /// The answer being sent is sampled: its sends ask for their stamps with this.
    asking: Option<TxControl>,
}

fn echo_tcp(shared: &Core, k: usize, fds: &[RawFd]) -> Option<String> {
    let p = &shared.plan;
    let mut conns = Vec::with_capacity(fds.len());
    let sampling = Sampling::new(p.stage_every).with_hardware_rx(p.hardware_rx);
    for &fd in fds {
        let stamps = match p.stages.then(|| sampling.enable(fd)) {
            Some(Err(e)) => return Some(format!("SO_TIMESTAMPING: {e}")),
            Some(Ok(())) => Some((
                EchoStamps::new(Some(p.response_bytes), p.clock_shift_ns, sampling),
                [0; FIGURE_BYTES],
            )),
            None => None,
        };
        conns.push(Echo {
            fd,
            rx_acc: 0,
            pending: 0,
            tx_left: 0,
            dead: false,
            stamps,
            asking: None,
        });
    }
    let mut buf = vec![0xa5u8; p.request_bytes.max(p.response_bytes).max(64 * 1024)];
    // Several connections wait in one epoll set, so a wake-up costs one call and only the
    // connections with data are read. Waits have no deadline: an abort shuts the sockets
    // down, which makes them ready.
    let mut multi = if conns.len() > 1 {
        match Multi::new(fds, None) {
            Ok(m) => Some(m),
            Err(e) => return Some(format!("epoll: {e}")),
        }
    } else {
        None
    };
    let every: Vec<usize> = (0..conns.len()).collect();
    let mut ready = Vec::with_capacity(conns.len());
    let mut last_message = Instant::now();
    let mut error = None;
    while !shared.aborting() && conns.iter().any(|c| !c.dead) {
        let blocked_tx = match answer_all(&mut conns, shared, k, &mut buf, &mut multi, &mut error) {
            Ok(b) => b,
            Err(e) => return Some(format!("epoll: {e}")),
        };
        let now = p.poll.stamp(last_message);
        let spin = p.poll.spins(now, last_message);
        // One connection, nothing to send, not spinning: block in the receive itself.
        let blocking = multi.is_none() && !spin && !blocked_tx;
        let targets: &[usize] = match &mut multi {
            _ if spin => &every,
            None if blocking => &every,
            // Only here with an answer blocked: wake for room to write too.
            None => match wait::wait_for(conns[0].fd, libc::POLLIN | libc::POLLOUT, now, None) {
                Ok(true) => &every,
                Ok(false) => continue,
                Err(e) => return Some(format!("poll: {e}")),
            },
            Some(m) => match m.wait(now, None, false, &mut ready) {
                Ok(_) => &ready,
                Err(e) => return Some(format!("epoll: {e}")),
            },
        };
        for &i in targets {
            let c = &mut conns[i];
            if c.dead {
                continue;
            }
            match c.take_requests(&mut buf, p.request_bytes, !blocking) {
                Ok(true) => {
                    last_message = p.poll.stamp(last_message);
                    shared.maybe_stall();
                    // Answer at once, while the socket is hot.
                    if let Err(e) = c.answer(shared, k, &mut buf) {
                        c.fail(shared, "send", e, &mut error);
                    }
                }
                Ok(false) => {}
                Err(e) => c.fail(shared, "recv", e, &mut error),
            }
        }
    }
    error
}

/// Sends every connection's owed answers; true when one met a full socket buffer (and,
/// with epoll, watches that connection for room to write).
fn answer_all(
    conns: &mut [Echo],
    shared: &Core,
    k: usize,
    buf: &mut [u8],
    multi: &mut Option<Multi>,
    error: &mut Option<String>,
) -> io::Result<bool> {
    let mut blocked_tx = false;
    for (i, c) in conns.iter_mut().enumerate().filter(|(_, c)| !c.dead) {
        if let Err(e) = c.answer(shared, k, buf) {
            c.fail(shared, "send", e, error);
        }
        let blocked = !c.dead && c.tx_left > 0;
        blocked_tx |= blocked;
        if let Some(m) = multi {
            m.watch_writable(i, blocked)?;
        }
    }
    Ok(blocked_tx)
}

impl Echo {
    /// The connection is done; the error counts unless the test is being aborted.
    fn fail(&mut self, shared: &Core, what: &str, e: io::Error, error: &mut Option<String>) {
        self.dead = true;
        if !shared.aborting() {
            *error = Some(format!("{what}: {e}"));
        }
    }

    /// Sends the answers owed, until done or the socket buffer is full. An answer's
    /// bytes are `buf`'s from its start; with stages its first bytes are its figures.
    fn answer(&mut self, shared: &Core, k: usize, buf: &mut [u8]) -> io::Result<()> {
        let bytes = shared.plan.response_bytes;
        while self.tx_left > 0 || self.pending > 0 {
            if self.tx_left == 0 {
                self.tx_left = bytes;
                self.pending -= 1;
                shared.count(k);
                if let Some((st, head)) = &mut self.stamps {
                    self.asking = st.answering(None, head).copied();
                }
            }
            let at = bytes - self.tx_left;
            if let Some((_, head)) = self.stamps.as_ref().filter(|_| at < FIGURE_BYTES) {
                // Another connection's answer may have used the buffer since.
                buf[..FIGURE_BYTES].copy_from_slice(head);
            }
            let sent = match &self.asking {
                Some(ctl) => kstamps::send_stamped(self.fd, &buf[at..bytes], None, ctl)?,
                None => wait::send(self.fd, &buf[at..bytes])?,
            };
            match sent {
                0 => break,
                n => self.tx_left -= n,
            }
        }
        if let Some((st, _)) = &mut self.stamps {
            st.collect(self.fd);
        }
        Ok(())
    }

    /// Reads what has arrived and counts the whole requests in it; `Ok(true)` when data
    /// came. A read shorter than the buffer drained the socket or stopped before a
    /// sampled request, so no second call is needed (readiness is level-triggered); a
    /// closed peer marks it dead.
    fn take_requests(
        &mut self,
        buf: &mut [u8],
        request: usize,
        dontwait: bool,
    ) -> io::Result<bool> {
        let mut got_any = false;
        loop {
            // With stages, only a read that may complete a sampled request takes its
            // stamp; a plain one stops before it.
            let read = match &self.stamps {
                Some((st, _)) => st.stream_read(self.pending, self.rx_acc, request, buf.len()),
                None => kstamps::RxRead {
                    stamped: false,
                    len: buf.len(),
                },
            };
            let (got, rx) = match read.stamped {
                true => kstamps::recv_stamped(self.fd, &mut buf[..read.len], dontwait, None)?,
                false => (wait::recv(self.fd, &mut buf[..read.len], dontwait)?, None),
            };
            match got {
                Recv::Data(n) => {
                    got_any = true;
                    self.rx_acc += n;
                    let whole = (self.rx_acc / request) as u64;
                    self.pending += whole;
                    self.rx_acc %= request;
                    if let Some((st, _)) = self.stamps.as_mut().filter(|_| whole > 0) {
                        st.read(rx, self.pending - whole, whole);
                    }
                    // A read that stopped where it was asked (before a sampled request)
                    // leaves the rest to the next wake-up: readiness is level-triggered,
                    // and with one request in flight there is no rest to read.
                    if !dontwait || n < buf.len() {
                        return Ok(true);
                    }
                }
                Recv::Empty => return Ok(got_any),
                Recv::Closed => {
                    self.dead = true;
                    return Ok(got_any);
                }
            }
        }
    }
}

fn echo_udp(shared: &Core, k: usize, socket: &UdpSocket, allowed: IpAddr) -> Option<String> {
    let p = &shared.plan;
    let fd = socket.as_raw_fd();
    // Block mode sleeps in the receive itself (an abort's shutdown wakes it): one call a
    // request. Busy and hybrid spin on a non-blocking socket; hybrid sleeps in poll()
    // once its spin is over.
    let block = p.poll == Poll::Block;
    if let Err(e) = socket.set_nonblocking(!block) {
        return Some(format!("UDP socket mode: {e}"));
    }
    if p.read_tos {
        if let Err(e) = crate::marks::enable_recv_tos(fd) {
            return Some(format!("IP_RECVTOS: {e}"));
        }
        shared
            .tos_read
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let sampling = Sampling::new(p.stage_every).with_hardware_rx(p.hardware_rx);
    let mut stamps = match p.stages.then(|| sampling.enable(fd)) {
        Some(Err(e)) => return Some(format!("SO_TIMESTAMPING: {e}")),
        Some(Ok(())) => Some(EchoStamps::new(None, p.clock_shift_ns, sampling)),
        None => None,
    };
    // The reply starts with the request's first bytes: its sequence number, echoed.
    let mut buf = vec![0xa5u8; 65_536];
    let mut last_message = Instant::now();
    while !shared.aborting() {
        let now = p.poll.stamp(last_message);
        if !block && !p.poll.spins(now, last_message) {
            match wait::wait_readable(fd, now, None) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return Some(format!("poll: {e}")),
            }
        }
        let got = receive_udp(fd, &mut buf, stamps.is_some() || p.read_tos);
        let (n, rx, tos, from) = match got {
            Ok((n, rx, tos, Some(from))) => (n, rx, tos, from),
            // No sender: the abort's shutdown ended the receive.
            Ok((_, _, _, None)) if shared.aborting() => return None,
            Ok((_, _, _, None)) => continue,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                continue
            }
            Err(e) => {
                return (!shared.aborting()).then(|| format!("recv: {e}"));
            }
        };
        let request = &buf[..n];
        if from.ip() != allowed || check_request(request, p.request_bytes, p.cookie).is_err() {
            shared.reject(k, 1);
            continue;
        }
        if p.read_tos {
            shared.tos[k].add(tos);
        }
        last_message = p.poll.stamp(last_message);
        shared.maybe_stall();
        let ask = stamps.as_mut().and_then(|st| {
            let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            st.read_udp(rx, seq as u32);
            let figures = REQUEST_HEADER_BYTES..REQUEST_HEADER_BYTES + FIGURE_BYTES;
            st.answering(
                Some((seq as u32, kstamps::peer_key(&from))),
                &mut buf[figures],
            )
            .copied()
        });
        // Admission held the answer to the agent's --max-udp-reply-ratio of the request.
        let answer = &buf[..p.response_bytes];
        let sent = match &ask {
            Some(ctl) => {
                let to = socket2::SockAddr::from(from);
                kstamps::send_stamped(fd, answer, Some(&to), ctl).is_ok()
            }
            None => {
                crate::syscalls::one();
                socket.send_to(answer, from).is_ok()
            }
        };
        if sent {
            shared.count(k);
        }
        if let Some(st) = &mut stamps {
            st.collect(fd);
        }
    }
    None
}

/// A datagram's length, kernel stamp, TOS and sender.
type Arrived = (usize, Option<u64>, Option<u8>, Option<SocketAddr>);

/// One datagram: its length, its kernel stamp and TOS when `stamped` (read from its
/// control messages, when the socket asked for them), and its sender.
fn receive_udp(fd: RawFd, buf: &mut [u8], stamped: bool) -> io::Result<Arrived> {
    if !stamped {
        return wait::recv_from(fd, buf).map(|(n, from)| (n, None, None, from));
    }
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    match kstamps::io::recv_marked(fd, buf, false, Some(&mut storage))? {
        (Recv::Data(n), rx, tos) => Ok((n, rx, tos, wait::sockaddr(storage, len))),
        (Recv::Empty, ..) => Err(io::ErrorKind::WouldBlock.into()),
        (Recv::Closed, ..) => Ok((0, None, None, None)),
    }
}

fn accept_loop(shared: &Core, k: usize, listener: &TcpListener, allowed: IpAddr) -> Option<String> {
    let p = &shared.plan;
    let mut buf = vec![0xa5u8; p.request_bytes.max(p.response_bytes)];
    while !shared.aborting() {
        let now = Instant::now();
        if !wait::wait_readable(listener.as_raw_fd(), now, None).unwrap_or(false) {
            continue;
        }
        let (s, from): (std::net::TcpStream, SocketAddr) = match listener.accept() {
            Ok(x) => x,
            Err(_) => continue,
        };
        if from.ip() != allowed {
            continue;
        }
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let fd = s.as_raw_fd();
        let mut got = 0;
        while got < p.request_bytes {
            match wait::recv(fd, &mut buf[..p.request_bytes - got], false) {
                Ok(Recv::Data(n)) => got += n,
                _ => break,
            }
        }
        if got < p.request_bytes {
            continue;
        }
        shared.maybe_stall();
        wait::send_blocking(fd, &buf, p.response_bytes);
        shared.count(k);
        // The client closes first, so its side, not ours, holds TIME_WAIT.
        let _ = wait::recv(fd, &mut buf, false);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait::Poll;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    /// Answers far larger than the agent's socket buffer: each fills it dozens of times,
    /// and the echo worker must go on as soon as there is room (not when the next request
    /// arrives, nor after a fixed retry), with one connection and with several.
    #[test]
    fn answers_larger_than_the_socket_buffer_go_on_when_there_is_room() {
        const ANSWER: usize = 4 << 20;
        for n in [1, 3] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut clients = Vec::new();
            let mut sockets = Vec::new();
            for _ in 0..n {
                let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                clients.push(c);
                let s = l.accept().unwrap().0;
                // Locked at 256 KiB (the kernel doubles it): each answer fills it 8 times.
                socket2::SockRef::from(&s)
                    .set_send_buffer_size(256 << 10)
                    .unwrap();
                sockets.push(RrSocket::Tcp(s));
            }
            let plan = ServerPlan::echo(Placement::new(1, None, 1), 64, ANSWER, 0, Poll::Block);
            let server = RrServer::spawn(ServerTarget::Sockets(sockets), plan).unwrap();
            let mut answer = vec![0u8; ANSWER];
            let (t, mut rounds) = (Instant::now(), 0);
            while t.elapsed() < Duration::from_millis(500) {
                for c in &mut clients {
                    c.write_all(&[1u8; 64]).unwrap();
                }
                for c in &mut clients {
                    c.read_exact(&mut answer).unwrap();
                }
                rounds += 1;
            }
            // Waiting for readability instead of room stalls each fill by the wait's
            // 100 ms slice (1 round here); going on at once gives 160-410 rounds.
            assert!(rounds >= 20, "{n} connections: {rounds} rounds in 0.5 s");
            assert_eq!(server.answered(), rounds * n as u64);
        }
    }
}
