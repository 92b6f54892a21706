//! Echo workers on AF_XDP sockets: each request frame the XDP program steered here is
//! answered on the socket it came in on, in a frame written straight from it (addresses
//! and ports swapped, the sequence number echoed), without the kernel's UDP path. As on
//! the socket path, only whole requests with the test's cookie are answered.

use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::frame::{answer, udp_payload};
use super::{socket_of, Xsk};
use crate::pool::{Placement, Stop};
use crate::rr_server::workers::{Core, Shared, ANSWERED, REJECTED};
use crate::rr_server::{RrServer, ServerPlan};
use crate::udp_match::{check_request, SEQ_BYTES};
use crate::wait::Multi;

/// Where AF_XDP requests arrive.
pub struct XdpServerTarget {
    /// One socket per receive queue, to which the XDP program steers the requests; each
    /// is answered on the socket it came in on.
    pub xsks: Vec<Xsk>,
    /// Requests from other addresses are dropped.
    pub allowed: IpAddr,
    /// The sockets have SO_BUSY_POLL, so a spinning worker enters the kernel to drive them.
    pub busy_polling: bool,
}

/// Echo workers on AF_XDP sockets: no more workers than sockets.
pub fn spawn(target: XdpServerTarget, plan: ServerPlan) -> io::Result<RrServer> {
    let XdpServerTarget {
        xsks,
        allowed,
        busy_polling,
    } = target;
    let units = xsks.len();
    let threads = plan.placement.threads.min(units).max(1);
    let placement = Placement::new(threads, plan.placement.cpus.clone(), units);
    let shared = Arc::new(Frames {
        core: Core::new(plan, threads),
        xsks: xsks.into_iter().map(Mutex::new).collect(),
        allowed,
        busy_polling,
    });
    let deal = placement.clone();
    RrServer::start(&placement, shared, move |s: &Frames, k| {
        echo(s, k, &deal.owned(k, units))
    })
}

struct Frames {
    core: Core,
    xsks: Vec<Mutex<Xsk>>,
    allowed: IpAddr,
    busy_polling: bool,
}

impl Shared for Frames {
    fn core(&self) -> &Core {
        &self.core
    }
}

/// Stop contract: the flag is read at every wake-up; a blocked worker waits at most
/// [`WAIT_AT_MOST`].
impl Stop for Frames {
    fn abort(&self) {
        self.core.abort();
    }
}

/// Frames answered per ring pass.
const BATCH: u32 = 64;
/// How long a blocked worker waits before it reads the abort flag again.
const WAIT_AT_MOST: Duration = Duration::from_millis(50);

/// Worker `k` answers on the sockets `owned`, requests from `allowed` only.
fn echo(frames: &Frames, k: usize, owned: &[usize]) -> Option<String> {
    let (shared, allowed) = (&frames.core, frames.allowed);
    let p = &shared.plan;
    let mine: Result<Vec<_>, _> = owned.iter().map(|&i| socket_of(&frames.xsks, i)).collect();
    let mut mine = match mine {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    let fds: Vec<_> = mine.iter().map(|x| x.fd()).collect();
    let mut multi = match Multi::new(&fds, None) {
        Ok(m) => m,
        Err(e) => return Some(format!("epoll: {e}")),
    };
    let mut ready = Vec::with_capacity(fds.len());
    let payload_len = p.response_bytes.max(SEQ_BYTES);
    let mut last_message = Instant::now();
    while !shared.aborting() {
        let (mut taken, mut answered) = (0, 0);
        for x in mine.iter_mut() {
            let (t, a) = x.answer(BATCH, |req, out| {
                let whole = udp_payload(req)
                    .is_some_and(|d| check_request(d, p.request_bytes, p.cookie).is_ok());
                if !whole {
                    return None;
                }
                let len = answer(req, allowed, payload_len, SEQ_BYTES, out)?;
                shared.maybe_stall();
                Some(len)
            });
            taken += t;
            answered += a;
        }
        if answered > 0 {
            shared.answered[k].add_to(ANSWERED, answered as u64);
        }
        if taken > answered {
            // Steered here but not answered: another address, length or cookie.
            shared.answered[k].add_to(REJECTED, (taken - answered) as u64);
        }
        let now = Instant::now();
        if taken > 0 {
            last_message = now;
        } else if p.poll.spins(now, last_message) {
            if frames.busy_polling {
                mine.iter().for_each(|x| x.poke());
            }
        } else if let Err(e) = multi.wait(now, Some(now + WAIT_AT_MOST), false, &mut ready) {
            return Some(format!("epoll on AF_XDP sockets: {e}"));
        }
    }
    None
}
