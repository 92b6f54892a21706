//! TCP bulk workers. Each worker thread owns a fixed set of connections and one buffer
//! allocated and filled once. Two stop requests exist: `finish` (senders half-close and
//! stop; receivers go on until the peer's FIN) and `abort` (everything stops now).
//!
//! A worker with several connections multiplexes them with epoll, and the requests arrive
//! as eventfd events. A worker with one connection (the common case of one thread per
//! connection) loops on a blocking send()/recv() with no epoll at all: one syscall per
//! buffer, like iperf2. Its requests arrive as a `shutdown()` of its socket by the
//! requesting thread, which wakes the blocked call; a flag read only then tells why.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::counters::ConnCounters;
use crate::poller::{Epoll, EventFd};
use crate::pool::{Outcome, Placement, Pool, Stop};

/// Sends per readiness event before the worker turns to its other connections.
const SENDS_PER_TURN: usize = 16;
const TOKEN_FINISH: u64 = u64::MAX;
const TOKEN_ABORT: u64 = u64::MAX - 1;

/// One data connection and which way its bytes go from this side.
pub struct StreamConn {
    pub stream: TcpStream,
    pub send: bool,
}

pub(crate) struct Slot {
    pub(crate) stream: TcpStream,
    pub(crate) send: bool,
    pub(crate) counters: ConnCounters,
}

/// A pool's connections, each with its counters: what the kernel's and io_uring's stream
/// workers both read from, and their samplers through [`StreamWorkers::conns`].
pub struct Conns(Vec<Slot>);

impl Conns {
    pub(crate) fn new(conns: Vec<StreamConn>) -> Conns {
        let slot = |c: StreamConn| Slot {
            stream: c.stream,
            send: c.send,
            counters: ConnCounters::default(),
        };
        Conns(conns.into_iter().map(slot).collect())
    }

    pub(crate) fn slot(&self, i: usize) -> &Slot {
        &self.0[i]
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Slot> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Monotonic (bytes, calls) of connection `i` (io_uring's calls are completions).
    pub fn counters(&self, i: usize) -> (u64, u64) {
        let [bytes, calls] = self.0[i].counters.read();
        (bytes, calls)
    }

    pub fn is_sender(&self, i: usize) -> bool {
        self.0[i].send
    }

    /// Raw fd of connection `i`, for TCP_INFO. Valid while the pool lives.
    pub fn fd(&self, i: usize) -> RawFd {
        self.0[i].stream.as_raw_fd()
    }
}

struct Shared {
    slots: Conns,
    finish: EventFd,
    abort: EventFd,
    /// Set before the sockets of blocking workers are shut down, read after a call fails.
    finishing: AtomicBool,
    aborting: AtomicBool,
    /// Connections served by a blocking (single-connection) worker.
    blocking: Vec<bool>,
    buffer_bytes: usize,
}

/// How a connection ended, from this side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEnd {
    /// Sender: half-closed after `finish`. Receiver: the peer's FIN arrived.
    Clean,
    /// Stopped by `abort` (or the worker could not start).
    Aborted,
    Failed(String),
}

pub struct StreamWorkers {
    shared: Arc<Shared>,
    placement: Placement,
    pool: Pool<Vec<(usize, ConnEnd)>>,
}

impl StreamWorkers {
    /// Starts the workers at once; connections are dealt round robin.
    pub fn spawn(
        conns: Vec<StreamConn>,
        placement: Placement,
        buffer_bytes: usize,
    ) -> io::Result<StreamWorkers> {
        let n = conns.len();
        let placement = Placement::new(placement.threads, placement.cpus, n);
        let mut blocking = vec![false; n];
        for k in 0..placement.threads {
            if let [only] = placement.owned(k, n)[..] {
                blocking[only] = true;
            }
        }
        for (c, &b) in conns.iter().zip(&blocking) {
            c.stream.set_nonblocking(!b)?;
        }
        let shared = Arc::new(Shared {
            slots: Conns::new(conns),
            finish: EventFd::new()?,
            abort: EventFd::new()?,
            finishing: AtomicBool::new(false),
            aborting: AtomicBool::new(false),
            blocking,
            buffer_bytes: buffer_bytes.max(1),
        });
        let deal = placement.clone();
        let pool = Pool::spawn("sonde-stream", &placement, &shared, move |s, k| {
            run_worker(s, &deal.owned(k, n))
        })?;
        Ok(StreamWorkers {
            shared,
            placement,
            pool,
        })
    }

    /// The connections and their counters.
    pub fn conns(&self) -> &Conns {
        &self.shared.slots
    }

    /// Senders half-close and stop; receivers read on until the peer's FIN.
    pub fn finish(&self) {
        self.shared.finishing.store(true, Ordering::SeqCst);
        for (slot, _) in self
            .shared
            .slots
            .iter()
            .zip(&self.shared.blocking)
            .filter(|(s, &b)| b && s.send)
        {
            let _ = slot.stream.shutdown(Shutdown::Write);
        }
        self.shared.finish.signal();
    }

    /// Every worker stops now.
    pub fn abort(&self) {
        self.pool.abort();
    }

    /// True once every worker has ended.
    pub fn all_done(&self) -> bool {
        self.pool.all_done()
    }

    /// Waits for the workers; returns how each connection ended, by index. Counters and
    /// sockets stay readable afterwards.
    pub fn join(&mut self) -> Vec<ConnEnd> {
        conn_ends(self.pool.join(), &self.placement, self.shared.slots.len())
    }
}

/// How each of `n` connections ended, from its worker's outcome: a worker that failed
/// (or was left behind) fails all the connections `placement` gave it.
pub(crate) fn conn_ends(
    outcomes: Vec<Outcome<Vec<(usize, ConnEnd)>>>,
    placement: &Placement,
    n: usize,
) -> Vec<ConnEnd> {
    let mut ends = vec![ConnEnd::Aborted; n];
    for (k, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(list) => list.into_iter().for_each(|(i, e)| ends[i] = e),
            Err(e) => {
                for i in placement.owned(k, n) {
                    ends[i] = ConnEnd::Failed(e.to_string());
                }
            }
        }
    }
    ends
}

/// Stop contract: a blocking worker's socket is shut down under its call and the flag,
/// read once the call returns, says why; an epoll worker wakes on the abort eventfd.
impl Stop for Shared {
    fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        for (slot, _) in self.slots.iter().zip(&self.blocking).filter(|(_, &b)| b) {
            let _ = slot.stream.shutdown(Shutdown::Both);
        }
        self.abort.signal();
    }
}

fn run_worker(shared: &Shared, owned: &[usize]) -> Vec<(usize, ConnEnd)> {
    // Allocated and filled once; the pattern makes no claim beyond not being all zeros.
    let mut buf: Vec<u8> = (0..shared.buffer_bytes).map(|i| (i % 251) as u8).collect();
    if let [only] = owned[..] {
        if shared.blocking[only] {
            return vec![(
                only,
                run_blocking(shared, shared.slots.slot(only), &mut buf),
            )];
        }
    }
    run_epoll(shared, owned, &mut buf)
}

/// Several connections (or one that asked for it) in one epoll set, until each ended.
fn run_epoll(shared: &Shared, owned: &[usize], buf: &mut [u8]) -> Vec<(usize, ConnEnd)> {
    let ep = match setup_epoll(shared, owned) {
        Ok(ep) => ep,
        Err(e) => {
            return owned
                .iter()
                .map(|&i| (i, ConnEnd::Failed(e.to_string())))
                .collect()
        }
    };
    let mut ends: Vec<(usize, Option<ConnEnd>)> = owned.iter().map(|&i| (i, None)).collect();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; owned.len() + 2];
    let mut active = owned.len();

    let done =
        |ends: &mut Vec<(usize, Option<ConnEnd>)>, pos: usize, end: ConnEnd, active: &mut usize| {
            if ends[pos].1.is_none() {
                let _ = ep.delete(shared.slots.slot(ends[pos].0).stream.as_raw_fd());
                ends[pos].1 = Some(end);
                *active -= 1;
            }
        };

    'outer: while active > 0 {
        let n = match ep.wait(&mut events, -1) {
            Ok(n) => n,
            Err(e) => {
                for pos in 0..ends.len() {
                    done(
                        &mut ends,
                        pos,
                        ConnEnd::Failed(format!("epoll: {e}")),
                        &mut active,
                    );
                }
                break;
            }
        };
        for ev in &events[..n] {
            let token = ev.u64;
            match token {
                TOKEN_ABORT => break 'outer,
                TOKEN_FINISH => {
                    let _ = ep.delete(shared.finish.raw());
                    for pos in 0..ends.len() {
                        let slot = shared.slots.slot(ends[pos].0);
                        if slot.send && ends[pos].1.is_none() {
                            let _ = slot.stream.shutdown(Shutdown::Write);
                            done(&mut ends, pos, ConnEnd::Clean, &mut active);
                        }
                    }
                }
                pos => {
                    let pos = pos as usize;
                    if ends[pos].1.is_some() {
                        continue;
                    }
                    let slot = shared.slots.slot(ends[pos].0);
                    let fd = slot.stream.as_raw_fd();
                    let outcome = if slot.send {
                        send_burst(fd, buf, &slot.counters)
                    } else {
                        recv_burst(fd, buf, &slot.counters)
                    };
                    if let Some(end) = outcome {
                        done(&mut ends, pos, end, &mut active);
                    }
                }
            }
        }
    }
    ends.into_iter()
        .map(|(i, e)| (i, e.unwrap_or(ConnEnd::Aborted)))
        .collect()
}

/// One connection, blocking calls; a stop request shuts the socket down under us.
fn run_blocking(shared: &Shared, slot: &Slot, buf: &mut [u8]) -> ConnEnd {
    let fd = slot.stream.as_raw_fd();
    loop {
        // SAFETY: buf is live and valid for its length in both calls.
        let r = unsafe {
            if slot.send {
                libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL)
            } else {
                libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0)
            }
        };
        if r > 0 {
            slot.counters.add([r as u64, 1]);
            continue;
        }
        let e = io::Error::last_os_error();
        if r < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if shared.aborting.load(Ordering::SeqCst) {
            return ConnEnd::Aborted;
        }
        return match (slot.send, r) {
            (true, _) if shared.finishing.load(Ordering::SeqCst) => ConnEnd::Clean,
            (false, 0) => ConnEnd::Clean,
            _ => ConnEnd::Failed(if r == 0 {
                "send returned 0".into()
            } else {
                e.to_string()
            }),
        };
    }
}

fn setup_epoll(shared: &Shared, owned: &[usize]) -> io::Result<Epoll> {
    let ep = Epoll::new()?;
    ep.add(shared.abort.raw(), libc::EPOLLIN as u32, TOKEN_ABORT)?;
    ep.add(shared.finish.raw(), libc::EPOLLIN as u32, TOKEN_FINISH)?;
    for (pos, &i) in owned.iter().enumerate() {
        let slot = shared.slots.slot(i);
        let ev = if slot.send {
            libc::EPOLLOUT
        } else {
            libc::EPOLLIN | libc::EPOLLRDHUP
        };
        ep.add(slot.stream.as_raw_fd(), ev as u32, pos as u64)?;
    }
    Ok(ep)
}

/// Writes until the socket is full or the turn is over; `Some` when the connection ended.
#[inline]
fn send_burst(fd: RawFd, buf: &[u8], counters: &ConnCounters) -> Option<ConnEnd> {
    for _ in 0..SENDS_PER_TURN {
        // SAFETY: buf is live for the call; MSG_NOSIGNAL turns a dead peer into EPIPE.
        let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if r > 0 {
            counters.add([r as u64, 1]);
            continue;
        }
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => None,
            io::ErrorKind::Interrupted => continue,
            _ => Some(ConnEnd::Failed(e.to_string())),
        };
    }
    None
}

/// Reads until the socket is empty; `Some` at the peer's FIN or an error.
#[inline]
fn recv_burst(fd: RawFd, buf: &mut [u8], counters: &ConnCounters) -> Option<ConnEnd> {
    loop {
        // SAFETY: buf is live and writable for its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if r > 0 {
            counters.add([r as u64, 1]);
            continue;
        }
        if r == 0 {
            return Some(ConnEnd::Clean);
        }
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => None,
            io::ErrorKind::Interrupted => continue,
            _ => Some(ConnEnd::Failed(e.to_string())),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn pairs(n: usize) -> (Vec<StreamConn>, Vec<StreamConn>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut tx = Vec::new();
        let mut rx = Vec::new();
        for _ in 0..n {
            tx.push(StreamConn {
                stream: TcpStream::connect(addr).unwrap(),
                send: true,
            });
            rx.push(StreamConn {
                stream: l.accept().unwrap().0,
                send: false,
            });
        }
        (tx, rx)
    }

    fn wait_done(w: &StreamWorkers) {
        let t = Instant::now();
        while !w.all_done() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "workers did not finish"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn bytes_sent_equal_bytes_received_after_finish() {
        let (tx, rx) = pairs(3);
        let (plan, bytes) = (Placement::new(2, None, usize::MAX), 64 * 1024);
        let senders = StreamWorkers::spawn(tx, plan.clone(), bytes).unwrap();
        let receivers = StreamWorkers::spawn(rx, plan.clone(), bytes).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        senders.finish();
        wait_done(&senders);
        wait_done(&receivers);
        let sent: Vec<u64> = (0..3).map(|i| senders.conns().counters(i).0).collect();
        let recv: Vec<u64> = (0..3).map(|i| receivers.conns().counters(i).0).collect();
        assert!(sent.iter().all(|&b| b > 0), "{sent:?}");
        assert_eq!(sent, recv);
        let mut senders = senders;
        let mut receivers = receivers;
        assert!(senders.join().iter().all(|e| *e == ConnEnd::Clean));
        assert!(receivers.join().iter().all(|e| *e == ConnEnd::Clean));
    }

    #[test]
    fn abort_stops_receivers_without_fin() {
        let (tx, rx) = pairs(2);
        let (plan, bytes) = (Placement::new(1, Some(vec![0]), usize::MAX), 1024);
        let mut receivers = StreamWorkers::spawn(rx, plan.clone(), bytes).unwrap();
        receivers.abort();
        wait_done(&receivers);
        assert!(receivers.join().iter().all(|e| *e == ConnEnd::Aborted));
        drop(tx);
    }

    #[test]
    fn blocking_workers_finish_and_abort() {
        // One connection per thread: the blocking path, stopped by shutdown().
        let (tx, rx) = pairs(2);
        let (plan, bytes) = (Placement::new(2, None, usize::MAX), 128 * 1024);
        let mut senders = StreamWorkers::spawn(tx, plan.clone(), bytes).unwrap();
        let mut receivers = StreamWorkers::spawn(rx, plan.clone(), bytes).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        senders.finish();
        wait_done(&senders);
        wait_done(&receivers);
        assert_eq!(
            senders.conns().counters(0).0,
            receivers.conns().counters(0).0
        );
        assert_eq!(
            senders.conns().counters(1).0,
            receivers.conns().counters(1).0
        );
        assert!(senders.join().iter().all(|e| *e == ConnEnd::Clean));
        assert!(receivers.join().iter().all(|e| *e == ConnEnd::Clean));

        let (_tx, rx) = pairs(1);
        let mut idle = StreamWorkers::spawn(rx, plan.clone(), bytes).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        idle.abort();
        wait_done(&idle);
        assert_eq!(idle.join(), vec![ConnEnd::Aborted]);
    }

    #[test]
    fn peer_reset_is_a_failure_not_a_hang() {
        let (tx, rx) = pairs(1);
        let (plan, bytes) = (Placement::new(1, None, usize::MAX), 64 * 1024);
        let mut senders = StreamWorkers::spawn(tx, plan.clone(), bytes).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(rx); // unread data queued: the kernel answers with RST
        wait_done(&senders);
        assert!(matches!(senders.join()[0], ConnEnd::Failed(_)));
    }
}
