//! One UDP datagram with what a two-way measurement needs of its arrival: the kernel's
//! software receive stamp (real time) and the TTL or hop limit it came with (STAMP's
//! reflector returns it to the sender, RFC 8762 §4.3). A bounded wait, so a loop that
//! reads datagrams still sees its stop flag.

use std::io;
use std::mem::zeroed;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::io::{each_cmsg, recvmsg_into, software};

/// Room for a `scm_timestamping` and a TTL, with their headers.
pub(crate) const CONTROL_BYTES: usize = 128;

/// One datagram read.
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    pub len: usize,
    pub from: SocketAddr,
    /// The kernel's software receive stamp (`CLOCK_REALTIME`, ns), when it gave one.
    pub rx_ns: Option<u64>,
    /// IPv4 TTL or IPv6 hop limit, when the kernel gave it.
    pub ttl: Option<u8>,
    /// Its TOS or Traffic Class byte (DSCP and ECN: `crate::marks`), when the kernel gave it.
    pub tos: Option<u8>,
}

/// Asks the kernel for software receive stamps, the TTL (or hop limit) and the TOS (or
/// Traffic Class) of each datagram on `fd`, a UDP socket of family `v6` or not.
pub fn enable_arrival(fd: RawFd, v6: bool) -> io::Result<()> {
    let flags =
        (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
    crate::int_option::set_level_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags)?;
    crate::marks::enable_recv_tos(fd)?;
    match v6 {
        true => {
            crate::int_option::set_level_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)
        }
        false => crate::int_option::set_level_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1),
    }
}

/// As [`enable_arrival`] (called first), and the stamps of the sends that ask for them
/// (`sample::TxControl`) on the error queue, keyed (`OPT_ID`) and without their data
/// (`OPT_TSONLY`): a send that asks nothing queues nothing.
pub fn enable_departure(fd: RawFd) -> io::Result<()> {
    super::io::set_flags(
        fd,
        libc::SOF_TIMESTAMPING_RX_SOFTWARE
            | libc::SOF_TIMESTAMPING_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY,
    )
}

/// Reads one datagram into `buf`, waiting at most `wait`; `Ok(None)` when none came.
/// A datagram longer than `buf` is cut and its `len` is `buf.len() + 1`, so that a caller
/// can tell it was too long.
pub fn recv_arrival(fd: RawFd, buf: &mut [u8], wait: Duration) -> io::Result<Option<Datagram>> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one live pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(None)
        } else {
            Err(e)
        };
    }
    if r == 0 {
        return Ok(None);
    }
    recv_now(fd, buf)
}

/// Reads one datagram into `buf` if one is waiting (`Ok(None)` if none): one system call,
/// for a loop that reads on a schedule of its own, its lateness told by the stamp. A
/// datagram longer than `buf` is cut as in [`recv_arrival`].
pub fn recv_now(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
    let mut control = [0u64; CONTROL_BYTES / 8];
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut addr: libc::sockaddr_storage = unsafe { zeroed() };
    let (n, msg) = recvmsg_into(fd, buf, &mut control, Some(&mut addr), libc::MSG_DONTWAIT);
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(arrival(&msg, n as usize, buf.len(), &addr))
}

/// The datagram a receive of `n` bytes into a buffer of `room` wrote into `msg` (its
/// sender's address in `addr`); `None` for an address of another family.
pub(crate) fn arrival(
    msg: &libc::msghdr,
    n: usize,
    room: usize,
    addr: &libc::sockaddr_storage,
) -> Option<Datagram> {
    let truncated = msg.msg_flags & libc::MSG_TRUNC != 0;
    let from = socket_addr(addr)?;
    let (mut rx_ns, mut ttl, mut tos) = (None, None, None);
    each_cmsg(msg, |level, ty, data| match (level, ty) {
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) => rx_ns = software(data),
        (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT)
            if data.len() >= 4 =>
        {
            let v = i32::from_ne_bytes(data[..4].try_into().expect("4 bytes"));
            ttl = u8::try_from(v).ok();
        }
        _ => tos = crate::marks::tos_of(level, ty, data).or(tos),
    });
    let len = if truncated { room + 1 } else { n };
    Some(Datagram {
        len,
        from,
        rx_ns,
        ttl,
        tos,
    })
}

/// The address the kernel wrote, IPv4 or IPv6.
fn socket_addr(addr: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match addr.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(addr as *const libc::sockaddr_storage).cast() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let a: &libc::sockaddr_in6 =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}
