//! The ICMP errors the prober's unconnected socket is told of (`IP_RECVERR`): each names
//! the probe's destination, so that a peer that answers nothing can be told apart as
//! "port unreachable" (its host up, nothing listening), "host unreachable", or silent.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

pub use sonde_proto::mesh::Unreachable as Kind;

/// Error-queue messages read per call at most, so that a flood of ICMP errors cannot
/// hold the thread.
const MAX_PER_CALL: usize = 256;

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

/// Gives `each` the destination and kind of every ICMP error queued on `fd` now,
/// without waiting (other messages, a timestamp's, are read away).
pub fn drain(fd: RawFd, mut each: impl FnMut(SocketAddr, Kind)) {
    for _ in 0..MAX_PER_CALL {
        // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
        let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut control = [0u64; 64];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: msg's buffers are live for the call; no data buffer (the error's
        // payload, our own probe, is not needed).
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return;
        }
        let mut err = None;
        // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros walk it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
                if (level, ty) == (libc::SOL_IP, libc::IP_RECVERR)
                    || (level, ty) == (libc::SOL_IPV6, libc::IPV6_RECVERR)
                {
                    let e: libc::sock_extended_err =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    err = kind_of(e.ee_origin, e.ee_errno);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let (Some(kind), Some(to)) = (err, address(&name)) {
            each(to, kind);
        }
    }
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
        for _ in 0..100 {
            drain(s.as_raw_fd(), |a, k| got.push((a, k)));
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
