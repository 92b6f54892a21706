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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

mod conns;
mod crr;
pub(crate) mod flight;
pub(crate) mod handoff;
mod plan;
pub(crate) mod recorder;
pub(crate) mod stamped;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_stages;
pub(crate) mod workers;

pub use plan::{ClientPlan, WorkerEnd};
pub use workers::RrClient;

use crate::pool::{Placement, Stop};
use crate::sockopt::SocketOptions;
use workers::{Core, Shared};

pub enum RrSocket {
    Tcp(TcpStream),
    /// Connected to the agent's echo socket.
    Udp(UdpSocket),
    /// One end of a local socket pair ([`crate::self_noise`]): a datagram pair keeps each
    /// request one message and is matched by sequence number, as UDP is.
    Local {
        fd: OwnedFd,
        datagram: bool,
    },
}

impl RrSocket {
    pub fn fd(&self) -> RawFd {
        match self {
            RrSocket::Tcp(s) => s.as_raw_fd(),
            RrSocket::Udp(s) => s.as_raw_fd(),
            RrSocket::Local { fd, .. } => fd.as_raw_fd(),
        }
    }

    fn is_udp(&self) -> bool {
        matches!(
            self,
            RrSocket::Udp(_) | RrSocket::Local { datagram: true, .. }
        )
    }

    fn shutdown(&self) {
        // SAFETY: shutting down a live socket we own; wakes a blocked call on it.
        unsafe { libc::shutdown(self.fd(), libc::SHUT_RDWR) };
    }
}

/// Where the requests go, on kernel sockets.
pub enum Target {
    Sockets(Vec<RrSocket>),
    /// A new TCP connection per request (tcp_crr), one sequence per worker.
    ConnectPerRequest {
        addr: SocketAddr,
        opts: SocketOptions,
        connections: usize,
    },
}

/// A socket client's shared state (kernel engine and io_uring): the core and its sockets.
pub(crate) struct Sockets {
    pub core: Core,
    pub sockets: Vec<RrSocket>,
}

impl Sockets {
    /// `plan`'s workers placed over `units` (connections, or connect-per-request flows)
    /// and the state they share over `sockets`.
    pub(crate) fn placed(
        plan: ClientPlan,
        sockets: Vec<RrSocket>,
        units: usize,
    ) -> io::Result<(Placement, Arc<Sockets>)> {
        let placement = Placement::new(plan.placement.threads, plan.placement.cpus.clone(), units);
        let shared = Arc::new(Sockets {
            core: Core::new(plan, placement.threads)?,
            sockets,
        });
        Ok((placement, shared))
    }
}

impl Shared for Sockets {
    fn core(&self) -> &Core {
        &self.core
    }
}

/// Stop contract: the flag is read at every wake-up; shutting the sockets down wakes a
/// worker blocked in a receive or in `io_uring_enter` (it ends their receives), and the
/// eventfd one waiting in ppoll or epoll.
impl Stop for Sockets {
    fn abort(&self) {
        self.core.abort();
        for s in &self.sockets {
            s.shutdown();
        }
    }
}

impl RrClient {
    /// Request workers on kernel sockets.
    pub fn spawn(target: Target, plan: ClientPlan) -> io::Result<RrClient> {
        let (sockets, crr, units) = match target {
            Target::Sockets(s) => {
                let n = s.len();
                (s, None, n)
            }
            Target::ConnectPerRequest {
                addr,
                opts,
                connections,
            } => (Vec::new(), Some((addr, opts)), connections),
        };
        let (placement, shared) = Sockets::placed(plan, sockets, units)?;
        let deal = placement.clone();
        RrClient::start(&placement, shared, move |s: &Sockets, k| {
            recorder::recording(&s.core, k, |rec| match &crr {
                Some((addr, opts)) => crr::run(&s.core, k, *addr, opts, rec),
                None => {
                    let conns: Vec<(RawFd, bool)> = deal
                        .owned(k, units)
                        .into_iter()
                        .map(|i| (s.sockets[i].fd(), s.sockets[i].is_udp()))
                        .collect();
                    conns::run(&s.core, k, &conns, rec)
                }
            })
        })
    }
}
