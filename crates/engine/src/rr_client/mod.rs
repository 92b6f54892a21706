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

use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

mod conns;
mod crr;
mod flight;
mod frames;
mod recorder;
#[cfg(test)]
mod tests;

use recorder::Recorder;

use crate::counters::Counters;
use crate::poller::EventFd;
use crate::pool::{Placement, Pool, Stop};
use crate::sockopt::SocketOptions;
use crate::wait::{self, Poll};
use crate::xdp::frame::Endpoints;
use crate::xdp::Xsk;

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
    /// Whole UDP frames on AF_XDP sockets, one per receive queue (worker k takes the
    /// sockets k, k + workers, ... and sends on the first), a flow per `Endpoints`; the
    /// answers are steered to the sockets. `busy_polling`: the sockets have SO_BUSY_POLL,
    /// so a spinning worker enters the kernel to drive it.
    Xdp {
        xsks: Vec<Xsk>,
        flows: Vec<Endpoints>,
        busy_polling: bool,
    },
}

#[derive(Debug, Clone)]
pub struct ClientPlan {
    pub placement: Placement,
    pub request_bytes: usize,
    pub response_bytes: usize,
    /// The test's cookie, which every UDP request carries after its sequence number.
    pub cookie: u64,
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
    /// AF_XDP: the sockets, each taken by its worker, and the flows.
    xsks: Vec<Mutex<Xsk>>,
    flows: Vec<Endpoints>,
    busy_polling: bool,
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
        let (mut sockets, mut crr, mut xdp) = (Vec::new(), None, None);
        let mut threads = plan.placement.threads;
        let units = match target {
            Target::Sockets(s) => {
                sockets = s;
                sockets.len()
            }
            Target::ConnectPerRequest {
                addr,
                opts,
                connections,
            } => {
                crr = Some((addr, opts, connections));
                connections
            }
            Target::Xdp {
                xsks,
                flows,
                busy_polling,
            } => {
                threads = threads.min(xsks.len()).max(1);
                let n = flows.len();
                xdp = Some((xsks, flows, busy_polling));
                n
            }
        };
        let placement = Placement::new(threads, plan.placement.cpus.clone(), units);
        let (xsks, flows, busy_polling) = xdp.unwrap_or_default();
        let shared = Arc::new(Shared {
            xsks: xsks.into_iter().map(Mutex::new).collect(),
            flows,
            busy_polling,
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

/// Worker `k`: its connections, connect per request, or its AF_XDP flows; hands over
/// its last histogram.
fn run(
    shared: &Shared,
    k: usize,
    owned: &[usize],
    crr: Option<(SocketAddr, SocketOptions, usize)>,
) -> WorkerEnd {
    wait::tight_timer_slack();
    let mut rec = Recorder::new(shared);
    let end = match crr {
        Some((addr, opts, _)) => crr::run(shared, k, addr, &opts, &mut rec),
        None if !shared.xsks.is_empty() => match xdp_sockets(shared, k) {
            Ok(xsks) => {
                let flows: Vec<Endpoints> = owned.iter().map(|&i| shared.flows[i]).collect();
                frames::run(shared, k, &flows, xsks, &mut rec)
            }
            Err(error) => WorkerEnd {
                error: Some(error),
                ..Default::default()
            },
        },
        None => conns::run(shared, k, owned, &mut rec),
    };
    rec.flush();
    end
}

/// Worker `k`'s AF_XDP sockets: k, k + workers, ...
fn xdp_sockets(shared: &Shared, k: usize) -> Result<Vec<MutexGuard<'_, Xsk>>, String> {
    let workers = shared.counters.len();
    (k..shared.xsks.len())
        .step_by(workers)
        .map(|i| crate::xdp::socket_of(&shared.xsks, i))
        .collect()
}
