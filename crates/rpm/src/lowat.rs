//! The draft's send-buffer advice: keep no more than 5 ms of the connection's own rate
//! unsent in the kernel (`TCP_NOTSENT_LOWAT`, set again as the rate is learnt), so that a
//! probe's answer does not wait behind seconds of queued bulk data in our own socket. The
//! rate is the kernel's delivery-rate estimate (`TCP_INFO`); the figure is a pure function.

use std::os::fd::{AsRawFd, BorrowedFd};

/// The unsent bytes the draft allows: 5 ms of the rate.
pub const UNSENT_TIME_S: f64 = 0.005;
/// Never below one TLS record and its framing (smaller only adds wake-ups), never above
/// 8 MiB (a 13 Gbit/s rate's 5 ms).
pub const MIN_LOWAT_BYTES: u32 = 16 << 10;
pub const MAX_LOWAT_BYTES: u32 = 8 << 20;

/// The low-water mark for a delivery rate in bytes a second.
pub fn lowat_bytes(rate_bytes_per_s: u64) -> u32 {
    let b = (rate_bytes_per_s as f64 * UNSENT_TIME_S) as u64;
    b.clamp(MIN_LOWAT_BYTES as u64, MAX_LOWAT_BYTES as u64) as u32
}

/// What the kernel says of a TCP socket: delivery rate (bytes/s), bytes acked by the peer,
/// bytes received; `None` when it cannot say.
pub fn tcp_info(fd: BorrowedFd<'_>) -> Option<(u64, u64, u64)> {
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
    (r == 0).then_some((
        info.tcpi_delivery_rate,
        info.tcpi_bytes_acked,
        info.tcpi_bytes_received,
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_ms_of_the_rate_within_bounds() {
        // The draft's example: 100 Mb/s is 12.5 MB/s, 5 ms of it 62,500 bytes.
        assert_eq!(lowat_bytes(12_500_000), 62_500);
        // 1 Mb/s would be 625 bytes: one TLS record at least.
        assert_eq!(lowat_bytes(125_000), MIN_LOWAT_BYTES);
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
