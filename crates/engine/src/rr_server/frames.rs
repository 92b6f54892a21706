//! Echo workers on AF_XDP sockets: each request frame the XDP program steered here is
//! answered on the socket it came in on, in a frame written straight from it (addresses
//! and ports swapped, the sequence number echoed), without the kernel's UDP path.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Shared;
use crate::udp_match::SEQ_BYTES;
use crate::wait::Multi;
use crate::xdp::frame::answer;
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
                let len = answer(req, allowed, payload_len, SEQ_BYTES, out)?;
                shared.maybe_stall();
                Some(len)
            });
            taken += t;
            answered += a;
        }
        if answered > 0 {
            shared.answered[k].add([answered as u64]);
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
