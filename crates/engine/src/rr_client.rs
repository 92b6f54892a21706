//! Request/response client workers (ping, rpc). Each worker owns some connections; each
//! connection keeps up to `window` requests in flight and a ring of their start times,
//! preallocated. Closed loop: a response triggers the next request. Paced (ping with a
//! rate): one request per period, timed from its actual send. Open loop (rpc with a
//! rate): requests become due on a fixed schedule and are timed from the *intended* send
//! time, so a stalled server shows up in the tail (no coordinated omission).
//!
//! Latency goes into the worker's own HDR histogram, tagged with the interval in which the
//! response arrived; when an interval ends the worker hands its histogram to an outbox
//! (a lock taken once per interval, never per message) and starts a new one.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::counters::Counters;
use crate::poller::EventFd;
use crate::pool::{Placement, Pool, Stop};
use crate::sockopt::{self, SocketOptions};
use crate::udp_match::{Reply, SeqMatch};
use crate::wait::{self, Multi, Poll, Recv};

/// Open loop: requests waiting for a free slot beyond this are counted as not sent.
const BACKLOG_CAP: usize = 1 << 16;

pub enum RrSocket {
    Tcp(TcpStream),
    /// Connected to the agent's echo socket.
    Udp(UdpSocket),
}

impl RrSocket {
    pub fn fd(&self) -> RawFd {
        match self {
            RrSocket::Tcp(s) => s.as_raw_fd(),
            RrSocket::Udp(s) => s.as_raw_fd(),
        }
    }

    fn is_udp(&self) -> bool {
        matches!(self, RrSocket::Udp(_))
    }

    fn shutdown(&self) {
        // SAFETY: shutting down a live socket we own; wakes a blocked call on it.
        unsafe { libc::shutdown(self.fd(), libc::SHUT_RDWR) };
    }
}

/// Where the requests go.
pub enum Target {
    Sockets(Vec<RrSocket>),
    /// A new TCP connection per request (tcp_crr), one sequence per worker.
    ConnectPerRequest {
        addr: SocketAddr,
        opts: SocketOptions,
        connections: usize,
    },
}

#[derive(Debug, Clone)]
pub struct ClientPlan {
    pub placement: Placement,
    pub request_bytes: usize,
    pub response_bytes: usize,
    pub window: usize,
    pub poll: Poll,
    /// Time between requests on one connection; `None`: closed loop.
    pub pace: Option<Duration>,
    pub open_loop: bool,
    /// Only responses arriving in [window_start, window_end) are recorded.
    pub window_start: Instant,
    pub window_end: Instant,
    pub interval: Duration,
    /// No request is started after this.
    pub stop_sending_at: Instant,
    /// Requests still unanswered now are counted as such.
    pub drain_until: Instant,
    pub udp_loss_timeout: Duration,
}

/// A worker's requests sent (0) and responses received (1).
type WorkerCounters = Counters<2>;
const SENT: usize = 0;
const COMPLETED: usize = 1;

/// How a worker ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerEnd {
    pub unanswered: u64,
    pub not_sent: u64,
    pub lost: u64,
    /// UDP replies that came after their request was counted lost.
    pub late: u64,
    /// UDP replies to requests already answered.
    pub duplicated: u64,
    /// UDP datagrams that answer no request sent.
    pub foreign: u64,
    pub error: Option<String>,
}

struct Shared {
    plan: ClientPlan,
    sockets: Vec<RrSocket>,
    aborting: AtomicBool,
    wake: EventFd,
    counters: Vec<WorkerCounters>,
    /// (interval index, histogram of the responses that arrived in it).
    outbox: Mutex<Vec<(u32, Histogram<u64>)>>,
}

/// Stop contract: the flag is read at every wake-up; shutting the sockets down wakes a
/// worker blocked in a receive, and the eventfd one waiting in ppoll or epoll.
impl Stop for Shared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        for s in &self.sockets {
            s.shutdown();
        }
        self.wake.signal();
    }
}

pub struct RrClient {
    shared: Arc<Shared>,
    pool: Pool<WorkerEnd>,
}

impl RrClient {
    pub fn spawn(target: Target, plan: ClientPlan) -> io::Result<RrClient> {
        let (sockets, crr) = match target {
            Target::Sockets(s) => (s, None),
            Target::ConnectPerRequest {
                addr,
                opts,
                connections,
            } => (Vec::new(), Some((addr, opts, connections))),
        };
        let units = crr.as_ref().map_or(sockets.len(), |c| c.2);
        let placement = Placement::new(plan.placement.threads, plan.placement.cpus.clone(), units);
        let shared = Arc::new(Shared {
            counters: (0..placement.threads)
                .map(|_| WorkerCounters::default())
                .collect(),
            plan,
            sockets,
            aborting: AtomicBool::new(false),
            wake: EventFd::new()?,
            outbox: Mutex::new(Vec::new()),
        });
        let deal = placement.clone();
        let pool = Pool::spawn("sonde-rr", &placement, &shared, move |s, k| {
            run(s, k, &deal.owned(k, units), crr.clone())
        })?;
        Ok(RrClient { shared, pool })
    }

    /// Requests sent and responses received so far, over all workers (monotonic).
    pub fn counts(&self) -> (u64, u64) {
        let [sent, completed] = Counters::sum(&self.shared.counters);
        (sent, completed)
    }

    /// Histograms handed over since the last call.
    pub fn drain(&self) -> Vec<(u32, Histogram<u64>)> {
        std::mem::take(&mut *self.shared.outbox.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Stops every worker now, also one blocked in a receive.
    pub fn abort(&self) {
        self.pool.abort();
    }

    pub fn join(&mut self) -> Vec<WorkerEnd> {
        self.pool
            .join()
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|e| WorkerEnd {
                    error: Some(e),
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// Latency recording for one worker: the current interval's histogram and its bounds.
struct Recorder<'a> {
    shared: &'a Shared,
    hist: Histogram<u64>,
    tag: Option<(u32, Instant)>,
    interval_ns: u128,
}

impl Recorder<'_> {
    #[inline]
    fn record(&mut self, start: Instant, now: Instant) {
        let p = &self.shared.plan;
        if now < p.window_start || now >= p.window_end {
            return;
        }
        if self.tag.is_none_or(|(_, end)| now >= end) {
            self.flush();
            let idx = ((now - p.window_start).as_nanos() / self.interval_ns) as u32;
            let end = (p.window_start + p.interval * (idx + 1)).min(p.window_end);
            self.tag = Some((idx, end));
        }
        let ns = now
            .saturating_duration_since(start)
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        self.hist.saturating_record(ns.max(1));
    }

    /// Hands over the histogram once its interval is over (called before waits too).
    fn flush_if_due(&mut self, now: Instant) {
        if self.tag.is_some_and(|(_, end)| now >= end) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if let Some((idx, _)) = self.tag.take() {
            if !self.hist.is_empty() {
                // One allocation per interval, never per message.
                let fresh = Histogram::new_from(&self.hist);
                let full = std::mem::replace(&mut self.hist, fresh);
                self.shared
                    .outbox
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((idx, full));
            }
        }
    }

    /// The end of the current interval, for wait timeouts.
    fn due(&self) -> Option<Instant> {
        self.tag.map(|(_, end)| end)
    }
}

/// What the wait found.
enum Ready {
    /// Nothing: a deadline passed.
    Nothing,
    /// Try a non-blocking receive on the only connection.
    Poll,
    /// Block in the receive on the only connection.
    Blocking,
    /// `ready` lists the readable connections.
    Several,
}

struct Conn {
    fd: RawFd,
    udp: bool,
    /// Start time of every request created and not yet answered, oldest first.
    ring: VecDeque<Instant>,
    /// How many of `ring` have been (at least partly) sent.
    started: usize,
    tx_left: usize,
    rx_acc: usize,
    next_due: Instant,
    dead: bool,
    /// UDP: the sequence number of each request in flight.
    seq: SeqMatch,
}

fn run(
    shared: &Shared,
    k: usize,
    owned: &[usize],
    crr: Option<(SocketAddr, SocketOptions, usize)>,
) -> WorkerEnd {
    let p = &shared.plan;
    wait::tight_timer_slack();
    let mut rec = Recorder {
        shared,
        hist: Histogram::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).expect("valid bounds"),
        tag: None,
        interval_ns: p.interval.as_nanos().max(1),
    };
    let end = match crr {
        Some((addr, opts, _)) => run_crr(shared, k, addr, &opts, &mut rec),
        None => run_conns(shared, k, owned, &mut rec),
    };
    rec.flush();
    end
}

fn run_conns(shared: &Shared, k: usize, owned: &[usize], rec: &mut Recorder<'_>) -> WorkerEnd {
    let p = &shared.plan;
    let counters = &shared.counters[k];
    let mut end = WorkerEnd::default();
    let start = Instant::now();
    let n = owned.len();
    let mut conns: Vec<Conn> = owned
        .iter()
        .enumerate()
        .map(|(i, &s)| Conn {
            fd: shared.sockets[s].fd(),
            udp: shared.sockets[s].is_udp(),
            ring: VecDeque::with_capacity(if p.open_loop { p.window * 4 } else { p.window }),
            started: 0,
            tx_left: 0,
            rx_acc: 0,
            // Connections of one worker are spread over the pacing period.
            next_due: start
                + p.pace
                    .map_or(Duration::ZERO, |iv| iv * i as u32 / n.max(1) as u32),
            dead: false,
            seq: SeqMatch::default(),
        })
        .collect();
    let mut multi = if n > 1 {
        match Multi::new(
            &conns.iter().map(|c| c.fd).collect::<Vec<_>>(),
            Some(shared.wake.raw()),
        ) {
            Ok(m) => Some(m),
            Err(e) => {
                return WorkerEnd {
                    error: Some(format!("epoll: {e}")),
                    ..end
                }
            }
        }
    } else {
        None
    };
    let buf_len = p.request_bytes.max(p.response_bytes).max(64 * 1024);
    let mut buf = vec![0x5au8; buf_len];
    let mut ready = Vec::with_capacity(n);
    let mut last_message = start;
    if p.pace.is_none() {
        for c in &mut conns {
            c.ring.extend(std::iter::repeat_n(start, p.window));
        }
    }

    loop {
        if shared.aborting.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        let sending = now < p.stop_sending_at;
        let outstanding: usize = conns.iter().map(|c| c.started).sum();
        if !sending && (outstanding == 0 || now >= p.drain_until) {
            break;
        }
        if conns.iter().all(|c| c.dead) {
            break;
        }
        // Requests that became due.
        if let (Some(iv), true) = (p.pace, sending) {
            for c in conns.iter_mut().filter(|c| !c.dead) {
                if p.open_loop {
                    while c.next_due <= now {
                        if c.ring.len() < BACKLOG_CAP {
                            c.ring.push_back(c.next_due);
                        } else {
                            end.not_sent += 1;
                        }
                        c.next_due += iv;
                    }
                } else if c.ring.is_empty() && c.next_due <= now {
                    c.ring.push_back(now);
                    c.next_due = (c.next_due + iv).max(now);
                }
            }
        }
        // Send what the window allows.
        for c in conns.iter_mut().filter(|c| !c.dead) {
            while c.tx_left > 0 || (c.started < c.ring.len() && c.started < p.window) {
                if c.tx_left == 0 {
                    c.tx_left = p.request_bytes;
                    c.started += 1;
                    if c.udp {
                        c.seq.start();
                    }
                    counters.add_to(SENT, 1);
                }
                if c.udp {
                    c.seq.stamp(&mut buf);
                }
                match wait::send(c.fd, &buf[..c.tx_left]) {
                    Ok(0) => break,
                    Ok(sent) => {
                        c.tx_left -= sent;
                        // A request going out is activity too: hybrid spins for its answer.
                        last_message = now;
                    }
                    Err(e) => {
                        c.dead = true;
                        end.error = Some(format!("send: {e}"));
                        break;
                    }
                }
            }
        }
        // Wait for responses, or until the next thing is due.
        let now = Instant::now();
        rec.flush_if_due(now);
        let mut deadline = [
            rec.due(),
            sending.then_some(p.stop_sending_at),
            (!sending).then_some(p.drain_until),
        ]
        .into_iter()
        .flatten()
        .min();
        if let (Some(_), true) = (p.pace, sending) {
            let next = conns.iter().filter(|c| !c.dead).map(|c| c.next_due).min();
            deadline = [deadline, next].into_iter().flatten().min();
        }
        if let Some(front) = conns
            .iter()
            .filter(|c| c.udp && c.started > 0)
            .filter_map(|c| c.ring.front())
            .min()
        {
            deadline = [deadline, Some(*front + p.udp_loss_timeout)]
                .into_iter()
                .flatten()
                .min();
        }
        let spin = p.poll.spins(now, last_message);
        let outstanding: usize = conns.iter().map(|c| c.started).sum();
        let ready_now = match &mut multi {
            None if spin => Ready::Poll,
            // Closed loop on one TCP connection: the blocking receive is the wait.
            None if outstanding > 0 && p.pace.is_none() && !conns[0].udp => Ready::Blocking,
            None => match wait::wait_readable(conns[0].fd, now, deadline) {
                Ok(true) => Ready::Poll,
                Ok(false) => Ready::Nothing,
                Err(e) => {
                    end.error = Some(format!("poll: {e}"));
                    break;
                }
            },
            Some(m) => match m.wait(now, deadline, spin, &mut ready) {
                Ok(true) => Ready::Several,
                Ok(false) => continue,
                Err(e) => {
                    end.error = Some(format!("epoll: {e}"));
                    break;
                }
            },
        };
        let targets: &[usize] = match ready_now {
            Ready::Nothing => &[],
            Ready::Several => &ready,
            Ready::Poll | Ready::Blocking => &[0],
        };
        let blocking = matches!(ready_now, Ready::Blocking);
        for &i in targets {
            let c = &mut conns[i];
            if c.dead {
                continue;
            }
            loop {
                match wait::recv(c.fd, &mut buf, !blocking) {
                    Ok(Recv::Data(got)) => {
                        let t = Instant::now();
                        last_message = t;
                        // TCP answers arrive in order; a UDP reply names its request.
                        let (first, responses) = if c.udp {
                            match c.seq.reply(&buf[..got]) {
                                Reply::Matched(pos) => (pos, 1),
                                _ => (0, 0),
                            }
                        } else {
                            c.rx_acc += got;
                            let r = c.rx_acc / p.response_bytes;
                            c.rx_acc %= p.response_bytes;
                            (0, r)
                        };
                        for _ in 0..responses {
                            let Some(s) = c.ring.remove(first) else { break };
                            c.started = c.started.saturating_sub(1);
                            rec.record(s, t);
                            counters.add_to(COMPLETED, 1);
                            if p.pace.is_none() && t < p.stop_sending_at {
                                c.ring.push_back(t);
                            }
                        }
                        // A short TCP read drained the socket; readiness is level-triggered,
                        // so a second call only to hear EAGAIN would be wasted.
                        if blocking || c.udp || got < buf.len() {
                            break;
                        }
                    }
                    Ok(Recv::Empty) => break,
                    Ok(Recv::Closed) => {
                        c.dead = true;
                        if !shared.aborting.load(Ordering::Relaxed) {
                            end.error = Some("the agent closed a connection".into());
                        }
                        break;
                    }
                    Err(e) => {
                        c.dead = true;
                        end.error = Some(format!("recv: {e}"));
                        break;
                    }
                }
            }
        }
        // UDP requests whose answer is overdue are lost; the slot is freed.
        let now = Instant::now();
        for c in conns.iter_mut().filter(|c| c.udp) {
            while c.started > 0
                && c.ring
                    .front()
                    .is_some_and(|&s| now >= s + p.udp_loss_timeout)
            {
                c.ring.pop_front();
                c.seq.expire_oldest();
                c.started -= 1;
                end.lost += 1;
                if p.pace.is_none() && now < p.stop_sending_at {
                    c.ring.push_back(now);
                }
            }
        }
    }
    for c in &conns {
        end.late += c.seq.late;
        end.duplicated += c.seq.duplicate;
        end.foreign += c.seq.foreign;
        end.unanswered += c.started as u64;
        end.not_sent += (c.ring.len() - c.started) as u64 * p.open_loop as u64;
    }
    end
}

/// One connection per request: connect, send, receive, close; timed from before connect.
fn run_crr(
    shared: &Shared,
    k: usize,
    addr: SocketAddr,
    opts: &SocketOptions,
    rec: &mut Recorder<'_>,
) -> WorkerEnd {
    let p = &shared.plan;
    let counters = &shared.counters[k];
    let mut end = WorkerEnd::default();
    let mut buf = vec![0x5au8; p.request_bytes.max(p.response_bytes)];
    while !shared.aborting.load(Ordering::Relaxed) && Instant::now() < p.stop_sending_at {
        let t0 = Instant::now();
        let (s, _) = match sockopt::connect(addr, opts, Duration::from_secs(2)) {
            Ok(x) => x,
            Err(e) => {
                end.error = Some(format!("connect: {e}"));
                break;
            }
        };
        counters.add_to(SENT, 1);
        let fd = s.as_raw_fd();
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut left = p.request_bytes;
        while left > 0 {
            // SAFETY: buf is live for its length.
            let r = unsafe { libc::send(fd, buf.as_ptr().cast(), left, libc::MSG_NOSIGNAL) };
            if r <= 0 {
                break;
            }
            left -= r as usize;
        }
        let mut got = 0;
        while got < p.response_bytes {
            match wait::recv(fd, &mut buf[..p.response_bytes - got], false) {
                Ok(Recv::Data(n)) => got += n,
                _ => break,
            }
        }
        drop(s);
        if got < p.response_bytes {
            end.unanswered += 1;
            end.error = Some("a connect-per-request exchange ended early".into());
            break;
        }
        rec.record(t0, Instant::now());
        counters.add_to(COMPLETED, 1);
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rr_server::{RrServer, ServerPlan, ServerTarget};
    use std::net::TcpListener;

    fn plan(window: usize, pace: Option<Duration>, open_loop: bool, secs: f64) -> ClientPlan {
        let now = Instant::now();
        let end = now + Duration::from_secs_f64(secs);
        ClientPlan {
            placement: Placement::new(1, None, 1),
            request_bytes: 100,
            response_bytes: 300,
            window,
            poll: Poll::Block,
            pace,
            open_loop,
            window_start: now,
            window_end: end,
            interval: Duration::from_millis(100),
            stop_sending_at: end,
            drain_until: end + Duration::from_millis(500),
            udp_loss_timeout: Duration::from_millis(200),
        }
    }

    fn server_plan(stall: Option<(Instant, Duration)>, poll: Poll) -> ServerPlan {
        ServerPlan {
            placement: Placement::new(1, None, 1),
            request_bytes: 100,
            response_bytes: 300,
            poll,
            stall,
        }
    }

    fn tcp_pairs(n: usize) -> (Vec<RrSocket>, Vec<RrSocket>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = Vec::new();
        let mut s = Vec::new();
        for _ in 0..n {
            c.push(RrSocket::Tcp(
                TcpStream::connect(l.local_addr().unwrap()).unwrap(),
            ));
            s.push(RrSocket::Tcp(l.accept().unwrap().0));
        }
        (c, s)
    }

    fn finish(client: &mut RrClient) -> (Histogram<u64>, Vec<WorkerEnd>) {
        let t = Instant::now();
        while !client.all_done() {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        let ends = client.join();
        let mut h = Histogram::<u64>::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).unwrap();
        for (_, x) in client.drain() {
            h.add(&x).unwrap();
        }
        (h, ends)
    }

    #[test]
    fn closed_loop_window_keeps_every_message_accounted() {
        for poll in [
            Poll::Block,
            Poll::Busy,
            Poll::Hybrid(Duration::from_micros(50)),
        ] {
            let (c, s) = tcp_pairs(3);
            let server =
                RrServer::spawn(ServerTarget::Sockets(s), server_plan(None, poll)).unwrap();
            let mut p = plan(4, None, false, 0.3);
            p.poll = poll;
            p.placement.threads = 2;
            let mut client = RrClient::spawn(Target::Sockets(c), p).unwrap();
            let (h, ends) = finish(&mut client);
            let (sent, completed) = client.counts();
            assert!(completed > 100, "{poll:?}: {completed}");
            // Responses to the last windowful arrive after the window closed: not recorded.
            assert!(
                h.len() <= completed && completed - h.len() <= 4 * 3,
                "{poll:?}: {} of {completed}",
                h.len()
            );
            let unanswered: u64 = ends.iter().map(|e| e.unanswered).sum();
            assert_eq!(sent, completed + unanswered, "{poll:?}");
            assert!(ends.iter().all(|e| e.error.is_none()), "{ends:?}");
            assert!(server.answered() >= completed);
        }
    }

    #[test]
    fn open_loop_sees_a_server_stall_closed_loop_hides_it() {
        let stall = Duration::from_millis(100);
        let mut p99 = Vec::new();
        for open in [true, false] {
            let (c, s) = tcp_pairs(1);
            let at = Instant::now() + Duration::from_millis(300);
            let _server = RrServer::spawn(
                ServerTarget::Sockets(s),
                server_plan(Some((at, stall)), Poll::Block),
            )
            .unwrap();
            // 2000 requests/s on one connection, window 64.
            let pace = open.then_some(Duration::from_micros(500));
            let mut client =
                RrClient::spawn(Target::Sockets(c), plan(64, pace, open, 1.0)).unwrap();
            let (h, _) = finish(&mut client);
            assert!(
                h.max() >= 90_000_000,
                "open={open}: the stall itself, max {}",
                h.max()
            );
            p99.push(h.value_at_quantile(0.99));
        }
        assert!(
            p99[0] > 30_000_000,
            "open loop P99 {} ns should carry the stall",
            p99[0]
        );
        assert!(
            p99[1] < 10_000_000,
            "closed loop P99 {} ns records one slow message only",
            p99[1]
        );
    }

    #[test]
    fn udp_ping_and_loss() {
        let server_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let client_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        client_sock
            .connect(server_sock.local_addr().unwrap())
            .unwrap();
        let server = RrServer::spawn(
            ServerTarget::Udp {
                socket: server_sock,
                allowed: "127.0.0.1".parse().unwrap(),
            },
            server_plan(None, Poll::Block),
        )
        .unwrap();
        let mut client = RrClient::spawn(
            Target::Sockets(vec![RrSocket::Udp(client_sock)]),
            plan(1, None, false, 0.3),
        )
        .unwrap();
        let (h, ends) = finish(&mut client);
        assert!(h.len() > 100);
        assert_eq!(ends[0].lost, 0);
        drop(server);

        // Nobody answers: every request is lost after the timeout, none hangs.
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.connect(silent.local_addr().unwrap()).unwrap();
        let mut client = RrClient::spawn(
            Target::Sockets(vec![RrSocket::Udp(c)]),
            plan(1, None, false, 0.5),
        )
        .unwrap();
        let (h, ends) = finish(&mut client);
        assert_eq!(h.len(), 0);
        assert!(ends[0].lost >= 2, "{ends:?}");
    }

    #[test]
    fn connect_per_request() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = RrServer::spawn(
            ServerTarget::Accept {
                listener: l,
                allowed: "127.0.0.1".parse().unwrap(),
            },
            server_plan(None, Poll::Block),
        )
        .unwrap();
        let target = Target::ConnectPerRequest {
            addr,
            opts: SocketOptions::default(),
            connections: 1,
        };
        let mut client = RrClient::spawn(target, plan(1, None, false, 0.3)).unwrap();
        let (h, ends) = finish(&mut client);
        assert!(h.len() > 20, "{}", h.len());
        assert!(ends[0].error.is_none(), "{ends:?}");
        assert!(server.answered() >= h.len());
    }
}
