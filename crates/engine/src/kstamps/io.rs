//! The system calls of kernel timestamping: switching it on for a socket, a receive that
//! also returns the packet's arrival stamp, and reading the stamps of sent data from the
//! socket's error queue, many at a time.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::RawFd;

use crate::wait::Recv;

/// What the kernel reports of each send (`ee_info` of a stamp on the error queue).
pub(crate) const SCM_TSTAMP_SND: u32 = 0;
pub(crate) const SCM_TSTAMP_SCHED: u32 = 1;

/// Stamps read from the error queue in one call.
const BATCH: usize = 16;
/// Room for a `scm_timestamping` (three timespecs) and a `sock_extended_err` with the
/// offender's address (IPv6: 16 + 28 bytes), with their headers.
const CONTROL_BYTES: usize = 256;

/// Software stamps of sent data (entering the qdisc, handed to the driver), of received
/// data, tagged with the send's id (`OPT_ID`: bytes for TCP, datagrams for UDP, from when
/// it was switched on), without the data itself on the error queue (`OPT_TSONLY`).
pub(super) const FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SCHED
    | libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// Switches kernel timestamps on for `fd`; the ids of sent data count from here.
pub fn enable(fd: RawFd) -> io::Result<()> {
    set_flags(fd, FLAGS)
}

/// `fd`'s SO_TIMESTAMPING flags (every send's stamps, or the sampled set).
pub(super) fn set_flags(fd: RawFd, flags: libc::c_uint) -> io::Result<()> {
    let flags = libc::c_int::try_from(flags).map_err(|_| io::ErrorKind::InvalidInput)?;
    crate::int_option::set_level_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags)
}

/// The real-time clock in nanoseconds: the clock the kernel stamps packets on.
#[inline]
pub fn now_real() -> u64 {
    // SAFETY: all-zero is a valid timespec, written by the call.
    let mut ts: libc::timespec = unsafe { zeroed() };
    // SAFETY: ts is live and writable.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ns_of(&ts)
}

fn ns_of(ts: &libc::timespec) -> u64 {
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Where a stamp of sent data was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxPoint {
    /// Entering the qdisc (`TX_SCHED`).
    Sched,
    /// Handed to the driver (`TX_SOFTWARE`).
    Driver,
}

/// A stamp of sent data: the id of the send it belongs to, where, and when (real time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxStamp {
    pub key: u32,
    pub point: TxPoint,
    pub ns: u64,
}

/// Receives into `buf` like `wait::recv`, also returning the kernel's software stamp of
/// the last packet read (real time, ns), and the sender's address when asked.
pub fn recv_stamped(
    fd: RawFd,
    buf: &mut [u8],
    dontwait: bool,
    from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<(Recv, Option<u64>)> {
    recv_marked(fd, buf, dontwait, from).map(|(r, rx, _)| (r, rx))
}

/// [`recv_stamped`], also returning the datagram's TOS / Traffic Class when the socket
/// asked for it (`crate::marks::enable_recv_tos`).
pub fn recv_marked(
    fd: RawFd,
    buf: &mut [u8],
    dontwait: bool,
    mut from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<(Recv, Option<u64>, Option<u8>)> {
    let mut control = [0u64; CONTROL_BYTES / 8];
    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
    loop {
        let (r, msg) = recvmsg_into(fd, buf, &mut control, from.as_deref_mut(), flags);
        crate::syscalls::one();
        if r > 0 {
            let mut tos = None;
            each_cmsg(&msg, |l, t, d| tos = tos.or(crate::marks::tos_of(l, t, d)));
            return Ok((Recv::Data(r as usize), rx_stamp(&msg), tos));
        }
        if r == 0 {
            return Ok((Recv::Closed, None, None));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok((Recv::Empty, None, None)),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// One `recvmsg` into `buf` with `control` for its control messages and, when asked, the
/// sender's address: the set-up every stamped receive shares. Returns the call's result
/// and the header the kernel filled, for [`each_cmsg`] (its data pointer is cleared: the
/// iovec was the call's).
pub(crate) fn recvmsg_into(
    fd: RawFd,
    buf: &mut [u8],
    control: &mut [u64],
    from: Option<&mut libc::sockaddr_storage>,
    flags: libc::c_int,
) -> (isize, libc::msghdr) {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(control);
    if let Some(addr) = from {
        msg.msg_name = (addr as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    }
    // SAFETY: msg points at live buffers of the lengths it names.
    let r = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    msg.msg_iov = std::ptr::null_mut();
    msg.msg_iovlen = 0;
    (r, msg)
}

/// Room for a receive's control messages: one `scm_timestamping` (three timespecs) with
/// its header.
pub const RX_CONTROL_BYTES: usize = 64;

/// The software receive stamp among control messages the kernel wrote elsewhere than in a
/// `msghdr` of ours (io_uring's `recvmsg_out` layout puts them inside a receive buffer, at
/// any alignment): they are copied to an aligned buffer first.
pub fn rx_stamp_of(control: &[u8]) -> Option<u64> {
    let mut aligned = [0u64; CONTROL_BYTES / 8];
    let n = control.len().min(CONTROL_BYTES);
    // SAFETY: copying n bytes into a buffer of CONTROL_BYTES >= n.
    unsafe {
        std::ptr::copy_nonoverlapping(control.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), n)
    };
    // SAFETY: all-zero is a valid msghdr; it names the aligned copy.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_control = aligned.as_mut_ptr().cast();
    msg.msg_controllen = n;
    rx_stamp(&msg)
}

/// The software stamp among `msg`'s control messages.
fn rx_stamp(msg: &libc::msghdr) -> Option<u64> {
    let mut found = None;
    each_cmsg(msg, |level, ty, data| {
        if level == libc::SOL_SOCKET && ty == libc::SO_TIMESTAMPING {
            super::kinds::note(data);
            found = software(data);
        }
    });
    found
}

/// The first of a `scm_timestamping`'s three stamps (software), if set.
pub(crate) fn software(data: &[u8]) -> Option<u64> {
    if data.len() < size_of::<libc::timespec>() {
        return None;
    }
    // SAFETY: the kernel wrote a timespec there; read unaligned.
    let ts: libc::timespec = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let ns = ns_of(&ts);
    (ns != 0).then_some(ns)
}

/// Calls `each(level, type, data)` for every control message of `msg`.
pub(crate) fn each_cmsg(msg: &libc::msghdr, mut each: impl FnMut(i32, i32, &[u8])) {
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG macros walk it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = (*c).cmsg_len as usize - (data as usize - c as usize);
            each(
                (*c).cmsg_level,
                (*c).cmsg_type,
                std::slice::from_raw_parts(data, len),
            );
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// Reads a socket's error queue: stamps of sent data, [`BATCH`] per system call.
pub struct ErrQueue {
    control: Box<[[u64; CONTROL_BYTES / 8]; BATCH]>,
    /// Where each message's datagram went (an ICMP error's), for [`ErrQueue::drain_all`].
    names: Box<[libc::sockaddr_storage; BATCH]>,
}

impl Default for ErrQueue {
    fn default() -> Self {
        ErrQueue {
            control: Box::new([[0; CONTROL_BYTES / 8]; BATCH]),
            // SAFETY: all-zero is a valid sockaddr_storage.
            names: Box::new([unsafe { zeroed() }; BATCH]),
        }
    }
}

/// One message of an error queue: a stamp of sent data, or another error (an ICMP
/// error's under `IP_RECVERR`: its origin, its errno, where its datagram went).
#[derive(Clone, Copy)]
pub enum Queued<'a> {
    Stamp(TxStamp),
    Error {
        origin: u8,
        errno: u32,
        to: &'a libc::sockaddr_storage,
    },
}

impl ErrQueue {
    /// Stamps read from the error queue in one call, at most.
    pub const BATCH: usize = BATCH;

    /// Gives `each` every stamp queued on `fd` now, without waiting; returns how many.
    pub fn drain(&mut self, fd: RawFd, mut each: impl FnMut(TxStamp)) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let got = self.read_batch(fd, &mut each)?;
            total += got;
            if got < BATCH {
                return Ok(total);
            }
        }
    }

    /// Reads the `expect` stamps the caller awaits in one call that asks for that many
    /// and no more (a sampled send's: the kernel stops there, without the failed dequeue
    /// a larger batch ends with); returns how many it read. More than `expect` queued
    /// (stamps of sends coalesced or not yet read) stay queued and keep the socket's
    /// `EPOLLERR` up, so the next wait drains them with [`ErrQueue::drain`].
    pub fn read_expected(
        &mut self,
        fd: RawFd,
        expect: usize,
        mut each: impl FnMut(TxStamp),
    ) -> io::Result<usize> {
        self.read_up_to(fd, expect.clamp(1, BATCH), &mut each)
    }

    /// Gives `each` every message queued on `fd` now, stamps and errors alike, at most
    /// `most` (rounded up to a batch), [`BATCH`] per system call, without waiting;
    /// returns how many it read. A socket with both `IP_RECVERR` and stamps of sends has
    /// one queue: one reader.
    pub fn drain_all(
        &mut self,
        fd: RawFd,
        most: usize,
        mut each: impl FnMut(Queued<'_>),
    ) -> io::Result<usize> {
        let mut total = 0;
        while total < most {
            let (msgs, n) = self.recv_queue(fd, BATCH)?;
            for (m, name) in msgs[..n].iter().zip(self.names.iter()) {
                match queued(&m.msg_hdr) {
                    (Some(s), _) => each(Queued::Stamp(s)),
                    (None, Some(e)) => each(Queued::Error {
                        origin: e.ee_origin,
                        errno: e.ee_errno,
                        to: name,
                    }),
                    (None, None) => {}
                }
            }
            total += n;
            if n < BATCH {
                break;
            }
        }
        Ok(total)
    }

    /// One `recvmmsg` of the error queue; returns how many messages it read.
    fn read_batch(&mut self, fd: RawFd, each: &mut impl FnMut(TxStamp)) -> io::Result<usize> {
        self.read_up_to(fd, BATCH, each)
    }

    /// One `recvmmsg` of at most `most` (<= [`BATCH`]) messages of the error queue.
    fn read_up_to(
        &mut self,
        fd: RawFd,
        most: usize,
        each: &mut impl FnMut(TxStamp),
    ) -> io::Result<usize> {
        let (msgs, n) = self.recv_queue(fd, most)?;
        for m in &msgs[..n] {
            if let Some(s) = tx_stamp(&m.msg_hdr) {
                each(s);
            }
        }
        Ok(n)
    }

    /// One `recvmmsg(MSG_ERRQUEUE | MSG_DONTWAIT)` of at most `most` (<= [`BATCH`])
    /// messages into this reader's control buffers and names: the headers, and how many
    /// the kernel filled (0 when nothing waited).
    fn recv_queue(
        &mut self,
        fd: RawFd,
        most: usize,
    ) -> io::Result<([libc::mmsghdr; BATCH], usize)> {
        // SAFETY: all-zero is a valid mmsghdr; its pointers are set below.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        let bufs = self.control.iter_mut().zip(self.names.iter_mut());
        for (m, (c, name)) in msgs.iter_mut().zip(bufs) {
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = CONTROL_BYTES;
            m.msg_hdr.msg_name = (name as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
        // SAFETY: msgs, their control buffers and names are live for the call (the buffers
        // are this reader's, which the headers point into); the kernel writes at most
        // `most` <= BATCH of them.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                most.min(BATCH) as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        crate::syscalls::one();
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok((msgs, 0)),
                _ => Err(e),
            };
        }
        Ok((msgs, n as usize))
    }
}

/// The stamp and its id in one error-queue message, if it is a stamp of sent data.
fn tx_stamp(msg: &libc::msghdr) -> Option<TxStamp> {
    queued(msg).0
}

/// One error-queue message: its stamp of sent data, or else its error (if any).
fn queued(msg: &libc::msghdr) -> (Option<TxStamp>, Option<libc::sock_extended_err>) {
    let (mut ns, mut ext) = (None, None);
    each_cmsg(msg, |level, ty, data| match (level, ty) {
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) => {
            super::kinds::note(data);
            ns = software(data)
        }
        (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
            if data.len() >= size_of::<libc::sock_extended_err>() =>
        {
            // SAFETY: the kernel wrote a sock_extended_err there; read unaligned.
            ext = Some(unsafe {
                std::ptr::read_unaligned::<libc::sock_extended_err>(data.as_ptr().cast())
            });
        }
        _ => {}
    });
    let Some(ext) = ext else {
        return (None, None);
    };
    if ext.ee_errno != libc::ENOMSG as u32 || ext.ee_origin != libc::SO_EE_ORIGIN_TIMESTAMPING {
        return (None, Some(ext));
    }
    let point = match ext.ee_info {
        SCM_TSTAMP_SCHED => TxPoint::Sched,
        SCM_TSTAMP_SND => TxPoint::Driver,
        _ => return (None, None),
    };
    let stamp = ns.map(|ns| TxStamp {
        key: ext.ee_data,
        point,
        ns,
    });
    (stamp, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    /// On loopback both sends' software stamps come back with the ids of the sends' last
    /// bytes (TCP) or datagrams (UDP), in order, and a receive carries its arrival stamp,
    /// all between the clock readings around them.
    #[test]
    fn loopback_stamps_each_send_and_receive() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.set_nodelay(true).unwrap();
        enable(c.as_raw_fd()).unwrap();
        enable(s.as_raw_fd()).unwrap();
        let before = now_real();
        for _ in 0..3 {
            (&c).write_all(&[7u8; 100]).unwrap();
        }
        let mut got = [0u8; 300];
        s.read_exact(&mut got).unwrap();
        let mut stamps = Vec::new();
        ErrQueue::default()
            .drain(c.as_raw_fd(), |t| stamps.push(t))
            .unwrap();
        let after = now_real();
        let keys: Vec<_> = stamps.iter().map(|t| (t.key, t.point)).collect();
        for k in [99, 199, 299] {
            assert!(keys.contains(&(k, TxPoint::Sched)), "{keys:?}");
            assert!(keys.contains(&(k, TxPoint::Driver)), "{keys:?}");
        }
        assert!(stamps.iter().all(|t| (before..=after).contains(&t.ns)));
        // Switching receive stamps on is deferred to a kernel work item.
        std::thread::sleep(std::time::Duration::from_millis(50));
        (&s).write_all(&[1u8; 10]).unwrap();
        let mut buf = [0u8; 64];
        let (r, at) = recv_stamped(c.as_raw_fd(), &mut buf, false, None).unwrap();
        assert_eq!(r, Recv::Data(10));
        let at = at.expect("an arrival stamp");
        assert!((after..=now_real()).contains(&at));

        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let v = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable(u.as_raw_fd()).unwrap();
        for _ in 0..2 {
            u.send_to(&[3u8; 40], v.local_addr().unwrap()).unwrap();
        }
        let mut udp = Vec::new();
        ErrQueue::default()
            .drain(u.as_raw_fd(), |t| udp.push((t.key, t.point)))
            .unwrap();
        for k in [0, 1] {
            assert!(udp.contains(&(k, TxPoint::Driver)), "{udp:?}");
        }
    }

    /// A read of the stamps expected takes that many and no more (the rest stay queued
    /// for a drain), and asks for at least one and at most a batch.
    #[test]
    fn a_read_of_the_expected_stamps_takes_no_more() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let v = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable(u.as_raw_fd()).unwrap();
        for _ in 0..3 {
            u.send_to(&[3u8; 40], v.local_addr().unwrap()).unwrap();
        }
        let mut q = ErrQueue::default();
        let mut first = Vec::new();
        let n = q
            .read_expected(u.as_raw_fd(), 2, |t| first.push(t))
            .unwrap();
        assert_eq!((n, first.len()), (2, 2));
        assert_eq!(first[0].key, 0);
        let mut rest = Vec::new();
        assert_eq!(q.drain(u.as_raw_fd(), |t| rest.push(t)).unwrap(), 4);
        assert!(rest.iter().all(|t| t.key >= 1), "{rest:?}");
        assert_eq!(q.read_expected(u.as_raw_fd(), 0, |_| {}).unwrap(), 0);
    }

    /// One reader for one queue: a datagram to a closed port leaves its stamp and the
    /// ICMP error it drew (`IP_RECVERR`), both read by one drain, the error naming the
    /// datagram's destination.
    #[test]
    fn one_drain_reads_stamps_and_icmp_errors() {
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = closed.local_addr().unwrap();
        drop(closed);
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable(u.as_raw_fd()).unwrap();
        crate::int_option::set_level_int(u.as_raw_fd(), libc::SOL_IP, libc::IP_RECVERR, 1).unwrap();
        u.send_to(&[3u8; 40], to).unwrap();
        let (mut stamps, mut errors) = (0, Vec::new());
        let mut q = ErrQueue::default();
        for _ in 0..100 {
            q.drain_all(u.as_raw_fd(), 64, |m| match m {
                Queued::Stamp(s) => stamps += usize::from(s.point == TxPoint::Driver),
                Queued::Error { origin, errno, to } => {
                    // SAFETY: the kernel wrote a sockaddr_in for this IPv4 socket.
                    let a: libc::sockaddr_in = unsafe {
                        std::ptr::read_unaligned((to as *const libc::sockaddr_storage).cast())
                    };
                    errors.push((origin, errno as i32, u16::from_be(a.sin_port)))
                }
            })
            .unwrap();
            if !errors.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(stamps, 1);
        let icmp = (libc::SO_EE_ORIGIN_ICMP, libc::ECONNREFUSED, to.port());
        assert_eq!(errors, [icmp]);
    }

    /// An empty error queue is not an error, and a socket without stamps gives none.
    #[test]
    fn an_empty_queue_reads_nothing() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let n = ErrQueue::default().drain(u.as_raw_fd(), |_| {}).unwrap();
        assert_eq!(n, 0);
    }
}
