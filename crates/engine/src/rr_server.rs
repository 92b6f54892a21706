//! Request/response echo workers on the agent: read requests of `request_bytes`, answer
//! each with `response_bytes`, in the receive mode asked for. Pipelined requests are
//! answered in order. A test-only stall can be injected once, to prove that open-loop
//! clients see it.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::affinity::pin_current_thread;
use crate::rr_client::RrSocket;
use crate::wait::{self, Poll, Recv};

pub enum ServerTarget {
    Sockets(Vec<RrSocket>),
    /// One UDP socket; datagrams from other addresses than `allowed` are ignored.
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

#[derive(Debug, Clone)]
pub struct ServerPlan {
    pub threads: usize,
    pub cpus: Option<Vec<usize>>,
    pub request_bytes: usize,
    pub response_bytes: usize,
    pub poll: Poll,
    /// Sleep once for the duration, at the first request after the instant.
    pub stall: Option<(Instant, Duration)>,
}

#[derive(Default)]
#[repr(align(64))]
struct Answered(AtomicU64);

struct Shared {
    plan: ServerPlan,
    target: ServerTarget,
    aborting: AtomicBool,
    stalled: AtomicBool,
    answered: Vec<Answered>,
    running: AtomicUsize,
}

pub struct RrServer {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<Option<String>>>,
}

impl RrServer {
    pub fn spawn(target: ServerTarget, plan: ServerPlan) -> io::Result<RrServer> {
        let units = match &target {
            ServerTarget::Sockets(s) => s.len(),
            ServerTarget::Udp { .. } => 1,
            ServerTarget::Accept { .. } => plan.threads.max(1),
        };
        let threads = plan.threads.clamp(1, units.max(1));
        let shared = Arc::new(Shared {
            answered: (0..threads).map(|_| Answered::default()).collect(),
            plan,
            target,
            aborting: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            running: AtomicUsize::new(threads),
        });
        let mut handles = Vec::new();
        for k in 0..threads {
            let shared = Arc::clone(&shared);
            let owned: Vec<usize> = (k..units).step_by(threads).collect();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("sonde-echo-{k}"))
                    .spawn(move || {
                        let r = run(&shared, k, &owned);
                        shared.running.fetch_sub(1, Ordering::Release);
                        r
                    })?,
            );
        }
        Ok(RrServer { shared, handles })
    }

    /// Responses sent so far (monotonic).
    pub fn answered(&self) -> u64 {
        self.shared
            .answered
            .iter()
            .map(|a| a.0.load(Ordering::Relaxed))
            .sum()
    }

    pub fn all_done(&self) -> bool {
        self.shared.running.load(Ordering::Acquire) == 0
    }

    /// Stops every worker now; shutting the sockets down wakes blocked calls.
    pub fn abort(&self) {
        self.shared.aborting.store(true, Ordering::SeqCst);
        let fds: Vec<RawFd> = match &self.shared.target {
            ServerTarget::Sockets(s) => s
                .iter()
                .map(|s| match s {
                    RrSocket::Tcp(t) => t.as_raw_fd(),
                    RrSocket::Udp(u) => u.as_raw_fd(),
                })
                .collect(),
            ServerTarget::Udp { socket, .. } => vec![socket.as_raw_fd()],
            ServerTarget::Accept { listener, .. } => vec![listener.as_raw_fd()],
        };
        for fd in fds {
            // SAFETY: shutting down sockets we own.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }

    /// Errors the workers met, if any.
    pub fn join(&mut self) -> Vec<String> {
        self.handles
            .drain(..)
            .filter_map(|h| h.join().ok().flatten())
            .collect()
    }
}

impl Drop for RrServer {
    fn drop(&mut self) {
        if !self.handles.is_empty() {
            self.abort();
            self.join();
        }
    }
}

fn run(shared: &Shared, k: usize, owned: &[usize]) -> Option<String> {
    if let Some(cpus) = &shared.plan.cpus {
        let cpu = cpus[k % cpus.len()];
        if let Err(e) = pin_current_thread(cpu) {
            return Some(format!("pinning to CPU {cpu}: {e}"));
        }
    }
    match &shared.target {
        ServerTarget::Sockets(socks) => {
            let fds: Vec<RawFd> = owned
                .iter()
                .map(|&i| match &socks[i] {
                    RrSocket::Tcp(t) => t.as_raw_fd(),
                    RrSocket::Udp(u) => u.as_raw_fd(),
                })
                .collect();
            echo_tcp(shared, k, &fds)
        }
        ServerTarget::Udp { socket, allowed } => echo_udp(shared, k, socket, *allowed),
        ServerTarget::Accept { listener, allowed } => accept_loop(shared, k, listener, *allowed),
    }
}

impl Shared {
    #[inline]
    fn count(&self, k: usize) {
        let a = &self.answered[k].0;
        a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The injected stall, once, at the first request after its time.
    #[inline]
    fn maybe_stall(&self) {
        if let Some((at, d)) = self.plan.stall {
            if !self.stalled.load(Ordering::Relaxed)
                && Instant::now() >= at
                && !self.stalled.swap(true, Ordering::Relaxed)
            {
                std::thread::sleep(d);
            }
        }
    }
}

struct Echo {
    fd: RawFd,
    rx_acc: usize,
    pending: u64,
    tx_left: usize,
    dead: bool,
}

fn echo_tcp(shared: &Shared, k: usize, fds: &[RawFd]) -> Option<String> {
    let p = &shared.plan;
    let mut conns: Vec<Echo> = fds
        .iter()
        .map(|&fd| Echo {
            fd,
            rx_acc: 0,
            pending: 0,
            tx_left: 0,
            dead: false,
        })
        .collect();
    let mut buf = vec![0xa5u8; p.request_bytes.max(p.response_bytes).max(64 * 1024)];
    let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(fds.len());
    let mut last_message = Instant::now();
    let mut error = None;
    loop {
        if shared.aborting.load(Ordering::Relaxed) || conns.iter().all(|c| c.dead) {
            break;
        }
        // Answer what has arrived.
        for c in conns.iter_mut().filter(|c| !c.dead) {
            while c.tx_left > 0 || c.pending > 0 {
                if c.tx_left == 0 {
                    c.tx_left = p.response_bytes;
                    c.pending -= 1;
                    shared.count(k);
                }
                match wait::send(c.fd, &buf[..c.tx_left]) {
                    Ok(0) => break,
                    Ok(n) => c.tx_left -= n,
                    Err(e) => {
                        c.dead = true;
                        if !shared.aborting.load(Ordering::Relaxed) {
                            error = Some(format!("send: {e}"));
                        }
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        let spin = p.poll.spins(now, last_message);
        let blocked_tx = conns
            .iter()
            .any(|c| !c.dead && (c.tx_left > 0 || c.pending > 0));
        // One connection, nothing to send, not spinning: block in the receive itself.
        let blocking = conns.len() == 1 && !spin && !blocked_tx;
        if !blocking && !spin {
            pfds.clear();
            pfds.extend(conns.iter().filter(|c| !c.dead).map(|c| libc::pollfd {
                fd: c.fd,
                events: libc::POLLIN
                    | if c.tx_left > 0 || c.pending > 0 {
                        libc::POLLOUT
                    } else {
                        0
                    },
                revents: 0,
            }));
            // SAFETY: pfds is a live array of its length. 100 ms bounds the time to see an abort.
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 100) };
            if r <= 0 {
                continue;
            }
        }
        for c in conns.iter_mut().filter(|c| !c.dead) {
            loop {
                match wait::recv(c.fd, &mut buf, !blocking) {
                    Ok(Recv::Data(n)) => {
                        last_message = Instant::now();
                        c.rx_acc += n;
                        c.pending += (c.rx_acc / p.request_bytes) as u64;
                        c.rx_acc %= p.request_bytes;
                        shared.maybe_stall();
                        if blocking {
                            break;
                        }
                    }
                    Ok(Recv::Empty) => break,
                    Ok(Recv::Closed) => {
                        c.dead = true;
                        break;
                    }
                    Err(e) => {
                        c.dead = true;
                        if !shared.aborting.load(Ordering::Relaxed) {
                            error = Some(format!("recv: {e}"));
                        }
                        break;
                    }
                }
            }
        }
    }
    error
}

fn echo_udp(shared: &Shared, k: usize, socket: &UdpSocket, allowed: IpAddr) -> Option<String> {
    let p = &shared.plan;
    let fd = socket.as_raw_fd();
    // Non-blocking, so that busy and hybrid modes spin on the socket instead of sleeping
    // in recv; the block mode sleeps in poll() first.
    if let Err(e) = socket.set_nonblocking(true) {
        return Some(format!("non-blocking UDP socket: {e}"));
    }
    // The reply starts with the request's first bytes: its sequence number, echoed.
    let mut buf = vec![0xa5u8; 65_536];
    let mut last_message = Instant::now();
    while !shared.aborting.load(Ordering::Relaxed) {
        let spin = p.poll.spins(Instant::now(), last_message);
        if !spin {
            let now = Instant::now();
            match wait::wait_readable(fd, now, Some(now + Duration::from_millis(100))) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return Some(format!("poll: {e}")),
            }
        }
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                continue
            }
            Err(e) => {
                return (!shared.aborting.load(Ordering::Relaxed)).then(|| format!("recv: {e}"));
            }
        };
        if from.ip() != allowed || n == 0 {
            continue;
        }
        last_message = Instant::now();
        shared.maybe_stall();
        if socket.send_to(&buf[..p.response_bytes], from).is_ok() {
            shared.count(k);
        }
    }
    None
}

fn accept_loop(
    shared: &Shared,
    k: usize,
    listener: &TcpListener,
    allowed: IpAddr,
) -> Option<String> {
    let p = &shared.plan;
    let mut buf = vec![0xa5u8; p.request_bytes.max(p.response_bytes)];
    while !shared.aborting.load(Ordering::Relaxed) {
        let now = Instant::now();
        if !wait::wait_readable(
            listener.as_raw_fd(),
            now,
            Some(now + Duration::from_millis(100)),
        )
        .unwrap_or(false)
        {
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
        let mut left = p.response_bytes;
        while left > 0 {
            // SAFETY: buf is live for its length.
            let r = unsafe { libc::send(fd, buf.as_ptr().cast(), left, libc::MSG_NOSIGNAL) };
            if r <= 0 {
                break;
            }
            left -= r as usize;
        }
        shared.count(k);
        // The client closes first, so its side, not ours, holds TIME_WAIT.
        let _ = wait::recv(fd, &mut buf, false);
    }
    None
}
