//! The TOS byte (IPv4) or Traffic Class (IPv6) of a socket's packets: set on sending
//! (`IP_TOS` / `IPV6_TCLASS`), read on every received datagram (`IP_RECVTOS` /
//! `IPV6_RECVTCLASS`, a control message beside the timestamps the receive paths already
//! read), and counted per arriving byte without a lock. A pps receiver counts them in
//! the kernel instead ([`filter`]): the control message cost it 11 % of its rate. The
//! names of the marks (DSCP classes, ECN codepoints) are the result model's; here a mark
//! is a byte.
//!
//! TCP keeps the ECN bits its own: Linux ignores them in a stream socket's `IP_TOS` and
//! sets ECT itself when `net.ipv4.tcp_ecn` negotiated ECN, so for TCP only the DSCP set here
//! reaches the wire.

pub mod filter;

use std::io;
use std::mem::size_of;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::int_option::set_level_int;

/// Whether `fd` is an IPv6 socket (its own address's family).
pub fn is_v6(fd: RawFd) -> io::Result<bool> {
    // SAFETY: all-zero is a valid sockaddr_storage; the kernel writes at most its size.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: addr and len are live and sized.
    let r = unsafe {
        libc::getsockname(
            fd,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i32::from(addr.ss_family) == libc::AF_INET6)
}

/// Sends every packet of `fd` with `tos`. An IPv6 socket gets it as its Traffic Class and,
/// for the IPv4 packets it may send to mapped addresses, as its TOS too.
pub fn set_tos(fd: RawFd, tos: u8) -> io::Result<()> {
    let v = libc::c_int::from(tos);
    if is_v6(fd)? {
        set_level_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, v)?;
        // A v6-only socket refuses IP_TOS; its packets are all IPv6.
        let _ = set_level_int(fd, libc::IPPROTO_IP, libc::IP_TOS, v);
        Ok(())
    } else {
        set_level_int(fd, libc::IPPROTO_IP, libc::IP_TOS, v)
    }
}

/// [`set_tos`] when a mark is asked for: nothing is set otherwise, so the socket keeps
/// its default.
pub fn set_tos_if(fd: RawFd, tos: Option<u8>) -> io::Result<()> {
    match tos {
        Some(t) => set_tos(fd, t),
        None => Ok(()),
    }
}

/// Asks the kernel for each received datagram's TOS (and, on an IPv6 socket, Traffic
/// Class) as a control message, read by [`tos_of`].
pub fn enable_recv_tos(fd: RawFd) -> io::Result<()> {
    if is_v6(fd)? {
        set_level_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        // IPv4 datagrams to a dual-stack socket carry IP_TOS.
        let _ = set_level_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
        Ok(())
    } else {
        set_level_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    }
}

/// The TOS or Traffic Class of a control message (`level`, `ty`, its `data`), if it is
/// one: `IP_TOS` carries a byte, `IPV6_TCLASS` an int.
pub fn tos_of(level: i32, ty: i32, data: &[u8]) -> Option<u8> {
    match (level, ty) {
        (libc::IPPROTO_IP, libc::IP_TOS) => data.first().copied(),
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if data.len() >= 4 => {
            let v = i32::from_ne_bytes(data[..4].try_into().ok()?);
            u8::try_from(v).ok()
        }
        _ => None,
    }
}

/// Received datagrams counted by the TOS byte they arrived with: one relaxed add per
/// datagram by the one thread that reads them, sampled by any other.
pub struct TosCounts {
    by_tos: Box<[AtomicU64; 256]>,
    /// Datagrams whose TOS the kernel did not give.
    unread: AtomicU64,
}

impl Default for TosCounts {
    fn default() -> Self {
        TosCounts {
            by_tos: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            unread: AtomicU64::new(0),
        }
    }
}

impl TosCounts {
    pub fn add(&self, tos: Option<u8>) {
        let c = match tos {
            Some(t) => &self.by_tos[usize::from(t)],
            None => &self.unread,
        };
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// `(tos, datagrams)` for every byte seen, and the datagrams without one.
    pub fn snapshot(&self) -> (Vec<(u8, u64)>, u64) {
        let seen = (0..=255u8)
            .map(|t| (t, self.by_tos[usize::from(t)].load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect();
        (seen, self.unread.load(Ordering::Relaxed))
    }
}

/// Several workers' counts added up: `(tos, datagrams)` for every byte seen, and the
/// datagrams without one.
pub fn sum(counts: &[TosCounts]) -> (Vec<(u8, u64)>, u64) {
    let mut by = [0u64; 256];
    let mut unread = 0;
    for c in counts {
        let (seen, u) = c.snapshot();
        unread += u;
        for (tos, n) in seen {
            by[usize::from(tos)] += n;
        }
    }
    let seen = (0..=255u8)
        .map(|t| (t, by[usize::from(t)]))
        .filter(|&(_, n)| n > 0)
        .collect();
    (seen, unread)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// Reads one datagram's TOS through recvmsg, as the receive paths do.
    fn recv_tos(fd: RawFd) -> Option<u8> {
        let mut buf = [0u8; 64];
        let mut control = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: all-zero is a valid msghdr; its pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = 128;
        // SAFETY: msg points at live buffers of the lengths it names.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        assert!(n > 0, "{}", io::Error::last_os_error());
        let mut tos = None;
        crate::kstamps::io::each_cmsg(&msg, |l, t, d| tos = tos.or(tos_of(l, t, d)));
        tos
    }

    #[test]
    fn a_tos_set_on_sending_is_read_on_arrival_v4_and_v6() {
        for (bind, tos) in [("127.0.0.1:0", 0xb9u8), ("[::1]:0", 0x2a)] {
            let rx = UdpSocket::bind(bind).unwrap();
            let tx = UdpSocket::bind(bind).unwrap();
            enable_recv_tos(rx.as_raw_fd()).unwrap();
            tx.send_to(b"unmarked", rx.local_addr().unwrap()).unwrap();
            assert_eq!(recv_tos(rx.as_raw_fd()), Some(0), "{bind}");
            set_tos(tx.as_raw_fd(), tos).unwrap();
            tx.send_to(b"marked", rx.local_addr().unwrap()).unwrap();
            assert_eq!(recv_tos(rx.as_raw_fd()), Some(tos), "{bind}");
        }
        let counts = TosCounts::default();
        counts.add(Some(0xb9));
        counts.add(Some(0xb9));
        counts.add(None);
        assert_eq!(counts.snapshot(), (vec![(0xb9, 2)], 1));
    }
}
