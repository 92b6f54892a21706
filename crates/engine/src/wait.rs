//! How a request/response worker waits for its next message, in one of three receive
//! modes: `Block` (sleep in the kernel until data), `Busy` (non-blocking calls in a
//! loop), `Hybrid` (spin for a while after the last message, then block). The sockets
//! stay in blocking mode; spinning uses MSG_DONTWAIT per call.

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::poller::Epoll;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    Block,
    Busy,
    Hybrid(Duration),
}

impl Poll {
    /// Whether the next wait spins, given when the last message arrived.
    #[inline]
    pub fn spins(self, now: Instant, last_message: Instant) -> bool {
        match self {
            Poll::Block => false,
            Poll::Busy => true,
            Poll::Hybrid(d) => now.saturating_duration_since(last_message) < d,
        }
    }
}

/// Milliseconds for poll/epoll from a deadline: rounded up so a wake-up is never early,
/// `-1` for none. Sub-millisecond remainders are spun by the caller.
pub fn timeout_ms(now: Instant, deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => d
            .saturating_duration_since(now)
            .as_millis()
            .min(i32::MAX as u128) as i32,
    }
}

/// Waits until `fd` is readable or `timeout_ms` passes (`ppoll` on one descriptor).
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(r > 0)
}

/// Result of one receive call.
pub enum Recv {
    Data(usize),
    /// Nothing to read now (MSG_DONTWAIT).
    Empty,
    /// The peer closed (or our socket was shut down to stop us).
    Closed,
}

#[inline]
pub fn recv(fd: RawFd, buf: &mut [u8], dontwait: bool) -> io::Result<Recv> {
    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // SAFETY: buf is live and writable for its length.
        let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if r > 0 {
            return Ok(Recv::Data(r as usize));
        }
        if r == 0 {
            return Ok(Recv::Closed);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(Recv::Empty),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Sends without blocking; `Ok(0)` when the socket buffer is full.
#[inline]
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is live for its length; MSG_NOSIGNAL turns a dead peer into EPIPE.
        let r = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Readiness over several sockets: an epoll set whose tokens are positions.
pub struct Multi {
    ep: Epoll,
    events: Vec<libc::epoll_event>,
}

impl Multi {
    pub fn new(fds: &[RawFd], wake: RawFd) -> io::Result<Multi> {
        let ep = Epoll::new()?;
        for (i, &fd) in fds.iter().enumerate() {
            ep.add(fd, libc::EPOLLIN as u32, i as u64)?;
        }
        ep.add(wake, libc::EPOLLIN as u32, u64::MAX)?;
        Ok(Multi {
            ep,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; fds.len() + 1],
        })
    }

    /// Positions of readable sockets into `ready`; `false` when the wake fd fired.
    pub fn wait(&mut self, timeout_ms: i32, ready: &mut Vec<usize>) -> io::Result<bool> {
        ready.clear();
        let n = self.ep.wait(&mut self.events, timeout_ms)?;
        for ev in &self.events[..n] {
            let token = ev.u64;
            if token == u64::MAX {
                return Ok(false);
            }
            ready.push(token as usize);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_spins_only_shortly_after_a_message() {
        let t = Instant::now();
        let h = Poll::Hybrid(Duration::from_micros(50));
        assert!(h.spins(t + Duration::from_micros(10), t));
        assert!(!h.spins(t + Duration::from_micros(60), t));
        assert!(Poll::Busy.spins(t + Duration::from_secs(9), t));
        assert!(!Poll::Block.spins(t, t));
        assert_eq!(timeout_ms(t, None), -1);
        assert_eq!(timeout_ms(t, Some(t + Duration::from_micros(2500))), 2);
        assert_eq!(timeout_ms(t + Duration::from_secs(1), Some(t)), 0);
    }
}
