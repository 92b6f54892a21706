//! Datagrams read many at a time (`recvmmsg`), each with its arrival ([`Datagram`]: the
//! kernel's receive stamp and TTL): for a loop that reads its sockets on a schedule of its
//! own, one system call for what waited instead of one per datagram and one more to find
//! the socket empty.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;

use super::datagram::{arrival, Datagram, CONTROL_BYTES};

/// Buffers for `slots` datagrams of up to `size` bytes each, and what the last read put
/// in them.
pub struct Batch {
    size: usize,
    data: Vec<u8>,
    control: Vec<[u64; CONTROL_BYTES / 8]>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// The last read's datagrams: each with its slot.
    read: Vec<(usize, Datagram)>,
}

impl Batch {
    pub fn new(slots: usize, size: usize) -> Batch {
        let slots = slots.max(1);
        Batch {
            size,
            data: vec![0; slots * size],
            control: vec![[0; CONTROL_BYTES / 8]; slots],
            // SAFETY: all-zero is a valid sockaddr_storage, iovec and mmsghdr (null
            // pointers, set before each read).
            addrs: vec![unsafe { zeroed() }; slots],
            iovs: vec![unsafe { zeroed() }; slots],
            hdrs: vec![unsafe { zeroed() }; slots],
            read: Vec::with_capacity(slots),
        }
    }

    /// Reads what waits on `fd`, as many datagrams as there are slots, without waiting:
    /// how many (0 when none waited). A datagram longer than `size` is cut and its `len`
    /// is `size + 1`, as [`super::datagram::recv_now`]'s.
    pub fn read(&mut self, fd: RawFd) -> io::Result<usize> {
        self.read.clear();
        let slots = self.hdrs.len();
        for i in 0..slots {
            self.iovs[i] = libc::iovec {
                iov_base: self.data[i * self.size..].as_mut_ptr().cast(),
                iov_len: self.size,
            };
            // SAFETY: all-zero is a valid msghdr; its pointers are set below.
            let mut msg: libc::msghdr = unsafe { zeroed() };
            msg.msg_iov = &mut self.iovs[i];
            msg.msg_iovlen = 1;
            msg.msg_control = self.control[i].as_mut_ptr().cast();
            msg.msg_controllen = CONTROL_BYTES;
            msg.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            self.hdrs[i] = libc::mmsghdr {
                msg_hdr: msg,
                msg_len: 0,
            };
        }
        // SAFETY: every header points at live buffers of the lengths it names, all owned
        // by self and unmoved during the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                slots as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        for i in 0..n as usize {
            let h = &self.hdrs[i];
            if let Some(d) = arrival(&h.msg_hdr, h.msg_len as usize, self.size, &self.addrs[i]) {
                self.read.push((i, d));
            }
        }
        Ok(n as usize)
    }

    /// The last read's datagrams with their bytes (a cut one's bytes are its first `size`).
    pub fn iter(&self) -> impl Iterator<Item = (&Datagram, &[u8])> {
        self.read.iter().map(|(i, d)| {
            let at = i * self.size;
            (d, &self.data[at..at + d.len.min(self.size)])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// What waited is read in one call, each datagram whole, stamped and from its sender;
    /// a longer one than a slot is marked cut; an empty socket reads none.
    #[test]
    fn a_batch_reads_what_waited_each_with_its_stamp_and_sender() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        super::super::datagram::enable_arrival(rx.as_raw_fd(), false).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = Batch::new(4, 64);
        // The kernel turns receive stamps on for the first socket that asks in deferred
        // work: a datagram may arrive before it ran. Probes until one comes stamped.
        let stamped = (0..200).any(|_| {
            tx.send_to(&[0], rx.local_addr().unwrap()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
            b.read(rx.as_raw_fd()).unwrap() == 1 && b.iter().all(|(d, _)| d.rx_ns.is_some())
        });
        assert!(stamped, "no datagram came stamped in 200 probes");
        let before = super::super::io::now_real();
        for n in 1..=5u8 {
            tx.send_to(&vec![n; usize::from(n) * 10], rx.local_addr().unwrap())
                .unwrap();
        }
        tx.send_to(&[9; 100], rx.local_addr().unwrap()).unwrap();
        assert_eq!(b.read(rx.as_raw_fd()).unwrap(), 4);
        let got: Vec<_> = b.iter().map(|(d, bytes)| (*d, bytes.to_vec())).collect();
        for (k, (d, bytes)) in got.iter().enumerate() {
            let n = k as u8 + 1;
            assert_eq!(*bytes, vec![n; usize::from(n) * 10]);
            assert_eq!(d.from, tx.local_addr().unwrap());
            assert!(d.rx_ns.is_some_and(|t| t >= before), "{d:?}");
            assert_eq!(d.ttl, Some(64));
        }
        assert_eq!(b.read(rx.as_raw_fd()).unwrap(), 2);
        let lens: Vec<usize> = b.iter().map(|(d, _)| d.len).collect();
        assert_eq!(lens, [50, 65], "the 100-byte datagram is cut");
        assert_eq!(b.read(rx.as_raw_fd()).unwrap(), 0);
        assert_eq!(b.iter().count(), 0);
    }
}
