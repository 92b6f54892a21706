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

    /// The time of a message, for [`Poll::spins`]: only hybrid needs it, so the other
    /// modes read no clock (`fallback` is returned unchanged).
    #[inline]
    pub fn stamp(self, fallback: Instant) -> Instant {
        match self {
            Poll::Hybrid(_) => Instant::now(),
            _ => fallback,
        }
    }
}

/// Time left until `deadline` as a timespec for ppoll/epoll_pwait2; `None`: wait forever.
fn timespec(now: Instant, deadline: Option<Instant>) -> Option<libc::timespec> {
    deadline.map(|d| {
        let left = d.saturating_duration_since(now);
        libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        }
    })
}

/// Waits until `fd` is readable or `deadline` passes, with nanosecond timeouts (ppoll), so
/// that pacing below a millisecond needs no spinning.
pub fn wait_readable(fd: RawFd, now: Instant, deadline: Option<Instant>) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, now, deadline)
}

/// Waits until `fd` has one of `events` (POLLIN, POLLOUT) or `deadline` passes.
pub fn wait_for(
    fd: RawFd,
    events: libc::c_short,
    now: Instant,
    deadline: Option<Instant>,
) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = timespec(now, deadline);
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one live pollfd; tsp is null or points to a live timespec.
    let r = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
    crate::syscalls::one();
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

/// Lets timed waits of the calling thread end on time: the default 50 us timer slack would
/// blur pacing at high rates.
pub fn tight_timer_slack() {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Result of one receive call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        crate::syscalls::one();
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

/// Sends `len` bytes of `buf`'s start on a blocking socket, for connect-per-request
/// exchanges; stops quietly at the first error (the exchange then fails on its read).
pub fn send_blocking(fd: RawFd, buf: &[u8], len: usize) {
    let mut left = len.min(buf.len());
    while left > 0 {
        // SAFETY: buf is live for at least `left` bytes.
        let r = unsafe { libc::send(fd, buf.as_ptr().cast(), left, libc::MSG_NOSIGNAL) };
        crate::syscalls::one();
        if r <= 0 {
            return;
        }
        left -= r as usize;
    }
}

/// Whether a read ended at its timeout (SO_RCVTIMEO reads as `WouldBlock`), not on an
/// error of the socket.
pub fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Sends without blocking; `Ok(0)` when the socket buffer is full.
#[inline]
pub fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    sent(|| {
        // SAFETY: buf is live for its length; MSG_NOSIGNAL turns a dead peer into EPIPE.
        unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        }
    })
}

/// What a non-blocking send call returned: the bytes, `Ok(0)` when the socket buffer is
/// full; the call again after a signal.
#[inline]
pub(crate) fn sent(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let r = call();
        crate::syscalls::one();
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
    fds: Vec<RawFd>,
    /// Sockets also watched for room to write.
    writable: Vec<bool>,
}

impl Multi {
    /// `wake`: an fd whose readiness ends a wait early (an abort), if any.
    pub fn new(fds: &[RawFd], wake: Option<RawFd>) -> io::Result<Multi> {
        let ep = Epoll::new()?;
        for (i, &fd) in fds.iter().enumerate() {
            ep.add(fd, libc::EPOLLIN as u32, i as u64)?;
        }
        if let Some(wake) = wake {
            ep.add(wake, libc::EPOLLIN as u32, u64::MAX)?;
        }
        Ok(Multi {
            ep,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; fds.len() + 1],
            fds: fds.to_vec(),
            writable: vec![false; fds.len()],
        })
    }

    /// Whether socket `i` also wakes a wait when it has room to write (a sender whose
    /// socket buffer filled); changes the epoll set only when the answer changes.
    pub fn watch_writable(&mut self, i: usize, on: bool) -> io::Result<()> {
        if self.writable[i] != on {
            let events = libc::EPOLLIN as u32 | if on { libc::EPOLLOUT as u32 } else { 0 };
            self.ep.modify(self.fds[i], events, i as u64)?;
            self.writable[i] = on;
        }
        Ok(())
    }

    /// Positions of readable sockets into `ready`; `false` when the wake fd fired.
    /// `spin`: return at once.
    pub fn wait(
        &mut self,
        now: Instant,
        deadline: Option<Instant>,
        spin: bool,
        ready: &mut Vec<usize>,
    ) -> io::Result<bool> {
        ready.clear();
        let deadline = if spin { Some(now) } else { deadline };
        let n = self
            .ep
            .wait_until(&mut self.events, timespec(now, deadline))?;
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

/// `recvfrom` on a UDP socket: the datagram's length and sender. Unlike std's
/// `recv_from`, which panics on it, the empty address of a receive ended by an abort's
/// `shutdown` is `None`.
pub fn recv_from(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<std::net::SocketAddr>)> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: buf is live and writable for its length; storage holds `len` bytes.
    let n = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    crate::syscalls::one();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, sockaddr(storage, len)))
}

/// The IPv4 or IPv6 address in the first `len` bytes of `storage`, if it holds one.
pub fn sockaddr(
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<std::net::SocketAddr> {
    // SAFETY: the kernel wrote `len` bytes of a socket address into `storage`.
    unsafe { socket2::SockAddr::new(storage, len) }.as_socket()
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
        let ts = timespec(t, Some(t + Duration::from_micros(2500))).unwrap();
        assert_eq!((ts.tv_sec, ts.tv_nsec), (0, 2_500_000));
        assert!(timespec(t, None).is_none());
    }

    #[test]
    fn sub_millisecond_timed_wait_is_on_time() {
        let _quiet = crate::timing_lock();
        tight_timer_slack();
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        use std::os::fd::AsRawFd;
        // Never early; and the quickest of 20 waits under a millisecond, which a wait
        // rounded to poll()'s milliseconds never is. The quickest, not each: other work on
        // the machine can wake any one wait late by milliseconds (< 5 ms failed so).
        let mut quickest = Duration::MAX;
        for _ in 0..20 {
            let t = Instant::now();
            let deadline = Some(t + Duration::from_micros(300));
            let ready = wait_readable(a.as_raw_fd(), t, deadline).unwrap();
            let took = t.elapsed();
            assert!(!ready);
            assert!(took >= Duration::from_micros(300), "{took:?}");
            quickest = quickest.min(took);
        }
        assert!(quickest < Duration::from_millis(1), "{quickest:?}");
    }
}
