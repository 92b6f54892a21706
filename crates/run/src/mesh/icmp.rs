//! The ICMP errors the prober's unconnected socket is told of (`IP_RECVERR`): each names
//! the probe's destination, so that a peer that answers nothing can be told apart as
//! "port unreachable" (its host up, nothing listening), "host unreachable", or silent.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

use sonde_engine::kstamps::{ErrQueue, Queued, TxStamp};

pub use sonde_proto::mesh::Unreachable as Kind;

/// Error-queue messages read per call at most, so that a flood of ICMP errors cannot
/// hold the thread (a wake-up's transmit stamps, one a probe, share it).
const MAX_PER_CALL: usize = 1024;

/// Has the kernel queue ICMP errors about `fd`'s datagrams (IPv4 or IPv6, as `v4`).
pub fn enable(fd: RawFd, v4: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    let (level, opt) = if v4 {
        (libc::SOL_IP, libc::IP_RECVERR)
    } else {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    };
    // SAFETY: a live socket and an int option of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What an errno from an ICMP error means here (ICMP's errors only, not a local one).
pub fn kind_of(origin: u8, errno: u32) -> Option<Kind> {
    if origin != libc::SO_EE_ORIGIN_ICMP && origin != libc::SO_EE_ORIGIN_ICMP6 {
        return None;
    }
    match errno as i32 {
        libc::ECONNREFUSED => Some(Kind::Port),
        libc::EHOSTUNREACH | libc::ENETUNREACH => Some(Kind::Host),
        _ => None,
    }
}

/// Gives `each` the destination and kind of every ICMP error queued on `fd` now, and
/// `stamp` every transmit stamp (the queue holds both), without waiting; at most
/// [`MAX_PER_CALL`] messages, so that a flood cannot hold the thread.
pub fn drain(
    queue: &mut ErrQueue,
    fd: RawFd,
    mut stamp: impl FnMut(TxStamp),
    mut each: impl FnMut(SocketAddr, Kind),
) {
    // A failing read leaves the queue for the next wake-up.
    let _ = queue.drain_all(fd, MAX_PER_CALL, |m| match m {
        Queued::Stamp(s) => stamp(s),
        Queued::Error { origin, errno, to } => {
            if let (Some(kind), Some(to)) = (kind_of(origin, errno), address(to)) {
                each(to, kind);
            }
        }
    });
}

/// Whether `e` is an ICMP error's, which a send or a receive reports once under
/// `IP_RECVERR` (the error itself waits in the queue).
pub fn reported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
    )
}

/// The destination the kernel wrote into `name`.
fn address(name: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match name.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((name as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((name as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), 0, a.sin6_scope_id).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// A datagram to a closed loopback port comes back as "port unreachable" naming it.
    #[test]
    fn a_closed_port_is_reported_with_its_address() {
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = closed.local_addr().unwrap();
        drop(closed);
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable(s.as_raw_fd(), true).unwrap();
        s.send_to(b"probe", to).unwrap();
        let mut got = Vec::new();
        let mut q = ErrQueue::default();
        for _ in 0..100 {
            drain(&mut q, s.as_raw_fd(), |_| {}, |a, k| got.push((a, k)));
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(got, vec![(to, Kind::Port)]);
    }

    #[test]
    fn only_icmps_unreachables_count() {
        assert_eq!(
            kind_of(libc::SO_EE_ORIGIN_ICMP, libc::ECONNREFUSED as u32),
            Some(Kind::Port)
        );
        assert_eq!(
            kind_of(libc::SO_EE_ORIGIN_ICMP6, libc::EHOSTUNREACH as u32),
            Some(Kind::Host)
        );
        assert_eq!(
            kind_of(libc::SO_EE_ORIGIN_LOCAL, libc::EMSGSIZE as u32),
            None
        );
        assert_eq!(
            kind_of(libc::SO_EE_ORIGIN_TIMESTAMPING, libc::ENOMSG as u32),
            None
        );
    }
}
