//! Echo workers on AF_XDP sockets: each request frame the XDP program steered here is
//! answered on the socket it came in on, in a frame written straight from it (addresses
//! and ports swapped, the sequence number echoed), without the kernel's UDP path. As on
//! the socket path, only whole requests with the test's cookie are answered.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Shared, ANSWERED, REJECTED};
use crate::udp_match::{check_request, SEQ_BYTES};
use crate::wait::Multi;
use crate::xdp::frame::{answer, udp_payload};
use crate::xdp::{socket_of, Xsk};

/// Frames answered per ring pass.
const BATCH: u32 = 64;
/// How long a blocked worker waits before it reads the abort flag again.
pub(super) const WAIT_AT_MOST: Duration = Duration::from_millis(50);

/// Worker `k` answers on the sockets `owned`, requests from `allowed` only.
pub(super) fn echo(
    shared: &Shared,
    k: usize,
    xsks: &[Mutex<Xsk>],
    owned: &[usize],
    allowed: IpAddr,
    busy_polling: bool,
) -> Option<String> {
    let p = &shared.plan;
    let mine: Result<Vec<_>, String> = owned.iter().map(|&i| socket_of(xsks, i)).collect();
    let mut mine = match mine {
        Ok(m) => m,
        Err(e) => return Some(e),
    };
    let fds: Vec<_> = mine.iter().map(|x| x.fd()).collect();
    let mut multi = match Multi::new(&fds, None) {
        Ok(m) => m,
        Err(e) => return Some(format!("epoll: {e}")),
    };
    let mut ready = Vec::with_capacity(fds.len());
    let payload_len = p.response_bytes.max(SEQ_BYTES);
    let mut last_message = Instant::now();
    while !shared.aborting.load(Ordering::Relaxed) {
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
            if busy_polling {
                mine.iter().for_each(|x| x.poke());
            }
        } else if let Err(e) = multi.wait(now, Some(now + WAIT_AT_MOST), false, &mut ready) {
            return Some(format!("epoll on AF_XDP sockets: {e}"));
        }
    }
    None
}
