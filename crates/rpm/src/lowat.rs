//! The draft's send-buffer advice: keep no more than 5 ms of the connection's own rate
//! unsent in the kernel (`TCP_NOTSENT_LOWAT`, set again as the rate is learnt), so that a
//! probe's answer does not wait behind seconds of queued bulk data in our own socket. The
//! rate is the kernel's delivery-rate estimate (`TCP_INFO`); the figure is a pure function.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// The unsent bytes the draft allows: 5 ms of the rate.
pub const UNSENT_TIME_S: f64 = 0.005;
/// Never below 4 KiB (smaller only adds wake-ups: a 6.5 Mbit/s connection's 5 ms), never
/// above 8 MiB (a 13 Gbit/s rate's 5 ms).
pub const MIN_LOWAT_BYTES: u32 = 4 << 10;
pub const MAX_LOWAT_BYTES: u32 = 8 << 20;

/// The low-water mark for a delivery rate in bytes a second.
pub fn lowat_bytes(rate_bytes_per_s: u64) -> u32 {
    let b = (rate_bytes_per_s as f64 * UNSENT_TIME_S) as u64;
    b.clamp(MIN_LOWAT_BYTES as u64, MAX_LOWAT_BYTES as u64) as u32
}

/// What the kernel says of a TCP socket.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpNow {
    /// The delivery-rate estimate, bytes a second.
    pub rate: u64,
    /// Bytes the peer acknowledged.
    pub acked: u64,
    /// Bytes received.
    pub received: u64,
    /// Bytes written and not yet sent.
    pub notsent: u32,
}

/// What the kernel says of a TCP socket; `None` when it cannot say.
pub fn tcp_info(fd: BorrowedFd<'_>) -> Option<TcpNow> {
    // SAFETY: tcp_info is plain data; the kernel fills at most `len` bytes of it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid fd, a buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(TcpNow {
        rate: info.tcpi_delivery_rate,
        acked: info.tcpi_bytes_acked,
        received: info.tcpi_bytes_received,
        notsent: info.tcpi_notsent_bytes,
    })
}

/// Sets `TCP_NOTSENT_LOWAT`; false when the kernel refused it.
pub fn set_lowat(fd: BorrowedFd<'_>, bytes: u32) -> bool {
    let v = bytes as libc::c_int;
    // SAFETY: a valid fd and an int option.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Sets the socket's congestion control (`TCP_CONGESTION`); false when refused. The name
/// must be one the kernel lists as available (see [`available_congestion`]): as root an
/// unknown one would make the kernel load a module.
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> bool {
    // SAFETY: a valid fd and a byte string of the given length.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    r == 0
}

/// The congestion controls this kernel has loaded.
pub fn available_congestion() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// The mark in force (for tests and the log).
pub fn lowat(fd: BorrowedFd<'_>) -> Option<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid fd and an int option.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v as u32)
}

/// The longest a writer waits before it looks at its socket again.
pub const MAX_PAUSE: Duration = Duration::from_millis(20);

/// How long a writer waits before its next write, so that no more than the mark is ever
/// unsent: `None` (write now) while under the mark; else the time the rate takes to drain
/// the excess (at least 1 ms, at most [`MAX_PAUSE`]). A writer on an async runtime needs
/// this: it writes until the kernel refuses, and `TCP_NOTSENT_LOWAT` only gates `poll`.
pub fn pause(notsent: u32, rate_bytes_per_s: u64) -> Option<Duration> {
    let mark = lowat_bytes(rate_bytes_per_s);
    let over = notsent.checked_sub(mark).filter(|&o| o > 0)?;
    let s = over as f64 / rate_bytes_per_s.max(1) as f64;
    Some(Duration::from_secs_f64(s).clamp(Duration::from_millis(1), MAX_PAUSE))
}

/// Waits, on the runtime's timer, until `socket` has no more than the mark unsent: what
/// an endless body does before each chunk; the chunk's size, 5 ms of the rate.
pub struct Gate {
    socket: std::sync::Arc<std::os::fd::OwnedFd>,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Gate {
    pub fn new(socket: std::sync::Arc<std::os::fd::OwnedFd>) -> Gate {
        Gate { socket, wait: None }
    }

    /// Ready with the next chunk's size once the socket's unsent bytes are under the mark.
    pub fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<usize> {
        use std::future::Future;
        use std::os::fd::AsFd;
        loop {
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return std::task::Poll::Pending;
                }
                self.wait = None;
            }
            let now = tcp_info(self.socket.as_fd()).unwrap_or_default();
            match pause(now.notsent, now.rate) {
                None => return std::task::Poll::Ready(lowat_bytes(now.rate) as usize),
                Some(d) => self.wait = Some(Box::pin(tokio::time::sleep(d))),
            }
        }
    }
}

/// The first `n` bytes (a gate's chunk: at most [`MAX_LOWAT_BYTES`]) of one buffer of
/// zeros that every bulk body, the server's and the client's, sends slices of.
pub fn zeros(n: usize) -> bytes::Bytes {
    static ZEROS: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    let all = ZEROS.get_or_init(|| bytes::Bytes::from(vec![0u8; MAX_LOWAT_BYTES as usize]));
    all.slice(..n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_ms_of_the_rate_within_bounds() {
        // The draft's example: 100 Mb/s is 12.5 MB/s, 5 ms of it 62,500 bytes.
        assert_eq!(lowat_bytes(12_500_000), 62_500);
        // 1 Mb/s would be 625 bytes: one TLS record at least.
        assert_eq!(lowat_bytes(125_000), MIN_LOWAT_BYTES);
        assert_eq!(pause(10_000, 2_500_000), None);
        // 20 kB over the 12.5 kB mark of 2.5 MB/s: 8 ms to drain to it.
        assert_eq!(
            pause(12_500 + 20_000, 2_500_000),
            Some(Duration::from_millis(8))
        );
        assert_eq!(pause(1 << 30, 1), Some(MAX_PAUSE));
        assert_eq!(lowat_bytes(u64::MAX), MAX_LOWAT_BYTES);
    }

    #[test]
    fn the_mark_is_set_on_a_real_socket() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(set_lowat(s.as_fd(), 62_500));
        assert_eq!(lowat(s.as_fd()), Some(62_500));
        assert!(tcp_info(s.as_fd()).is_some());
    }
}
