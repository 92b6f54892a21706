//! Sampled stages: one message in `every` is stamped at both ends, the others cost
//! nothing. The receive stamp stays on for the socket (`RX_SOFTWARE`: a clock read the
//! kernel makes anyway), and only the read that completes a sampled message takes it
//! (`rx_read`: the others are plain `recv`s). The stamps of a send are asked for on that
//! send only, with a `SO_TIMESTAMPING` control message on its `sendmsg`, so an unsampled
//! send queues nothing on the error queue and wakes nothing. A UDP send's stamps carry
//! the message's own sequence number as their key (`SCM_TS_OPT_ID`, Linux 6.13); before
//! that the kernel counts the stamped datagrams, which sampling by sequence makes
//! `sequence / every`.
//!
//! Which messages: those whose index on their connection (TCP) or sequence number (UDP)
//! is a multiple of `every`. Both ends know `every` from the spec and the index from the
//! request itself (its place on the stream, or the sequence number it carries), so the
//! echo stamps exactly the requests the client sampled.

use std::io;
use std::os::fd::RawFd;

/// The key of a UDP send's stamps, given per send (`include/uapi/asm-generic/socket.h`).
const SCM_TS_OPT_ID: libc::c_int = 81;

/// What a sampled send asks for: qdisc and driver stamps.
const TX_RECORD: u32 = libc::SOF_TIMESTAMPING_TX_SCHED | libc::SOF_TIMESTAMPING_TX_SOFTWARE;

/// Receive stamps on, stamps of sends only when a send asks (ids as in `io::enable`).
const SAMPLED_FLAGS: libc::c_uint = libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// The NIC's receive stamps too, on the raw hardware clock (`ts[2]` of each receive's
/// `scm_timestamping`, beside the software `ts[0]`): asked only where this end switched
/// its device's hardware stamping on (`--stamps`). In the same control message as the
/// software stamp, so nothing else is queued or read. The NIC's transmit stamps are not
/// asked: each would be one more message on the error queue, which the sampled reads
/// (`ErrQueue::read_expected`) do not expect.
const HARDWARE_RX: libc::c_uint =
    libc::SOF_TIMESTAMPING_RX_HARDWARE | libc::SOF_TIMESTAMPING_RAW_HARDWARE;

/// One message in `every` stamped (1: every message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    pub every: u32,
    /// UDP sends key their stamps by the message's sequence (`SCM_TS_OPT_ID`).
    pub opt_id: bool,
    /// The NIC's receive stamps too ([`HARDWARE_RX`]).
    pub hardware_rx: bool,
}

impl Sampling {
    /// One in `every`, keyed per send where this kernel allows.
    pub fn new(every: u32) -> Sampling {
        Sampling {
            every: every.max(1),
            opt_id: opt_id_per_send(),
            hardware_rx: false,
        }
    }

    /// Every message stamped, the socket asking for every send's stamps (the previous
    /// builds' `--stages`).
    pub fn all() -> Sampling {
        Sampling {
            every: 1,
            opt_id: false,
            hardware_rx: false,
        }
    }

    /// With the NIC's receive stamps too when `on` (this end's device stamps in hardware).
    pub fn with_hardware_rx(self, on: bool) -> Sampling {
        Sampling {
            hardware_rx: on,
            ..self
        }
    }

    /// Whether message `index` (TCP: its place; UDP: its sequence) is stamped. Asked of
    /// every message at both ends: a power of two (every default) takes a mask, not a
    /// division (a 64-bit division costs tens of cycles, several a message).
    #[inline]
    pub fn sampled(&self, index: u64) -> bool {
        let every = u64::from(self.every);
        match every.is_power_of_two() {
            true => index & (every - 1) == 0,
            false => index.is_multiple_of(every),
        }
    }

    /// The first stamped message at or after `index`.
    #[inline]
    pub fn next_sampled(&self, index: u64) -> u64 {
        let every = u64::from(self.every);
        match every.is_power_of_two() {
            true => index.saturating_add(every - 1) & !(every - 1),
            false => index.div_ceil(every).saturating_mul(every),
        }
    }

    /// Whether a send asks for its stamps itself (a control message); else the socket
    /// asks for every send's.
    #[inline]
    pub fn per_send(&self) -> bool {
        self.every > 1
    }

    /// Switches `fd`'s stamps on: every send's, or (sampled) only receives'.
    pub fn enable(&self, fd: RawFd) -> io::Result<()> {
        let hardware = if self.hardware_rx { HARDWARE_RX } else { 0 };
        match self.per_send() {
            false => super::io::set_flags(fd, super::io::FLAGS | hardware),
            true => super::io::set_flags(fd, SAMPLED_FLAGS | hardware),
        }
    }

    /// The id the kernel gives a sampled UDP message's stamps: its sequence when keyed per
    /// send (or every message is stamped), else the count of stamped datagrams before it.
    pub fn udp_key(&self, seq: u64) -> u32 {
        match self.per_send() && !self.opt_id {
            true => (seq / u64::from(self.every)) as u32,
            false => seq as u32,
        }
    }
}

/// Whether this kernel keys a send's stamps by a per-send id (Linux 6.13 and later).
pub fn opt_id_per_send() -> bool {
    // SAFETY: all-zero is a valid utsname, written by the call.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is live and writable.
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    let release: String = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8 as char)
        .collect();
    kernel_at_least(&release, (6, 13))
}

/// Whether a kernel release string (`6.18.0-foo`) is at least `want`.
fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(a), Some(b)) if (a, b) >= want)
}

/// The control messages of a sampled send: `SO_TIMESTAMPING` asking for its stamps and,
/// for UDP on a kernel that has it, `SCM_TS_OPT_ID` with its key. Aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub struct TxControl {
    buf: [u8; 64],
    len: usize,
}

impl TxControl {
    /// Asks for the stamps of one send; `key`: its stamps' id (UDP with `SCM_TS_OPT_ID`).
    pub fn new(key: Option<u32>) -> TxControl {
        TxControl::asking(TX_RECORD, key)
    }

    /// Asks for the driver's stamp of one send only (the echo's send stage needs no
    /// other): one stamp, one clone of the packet, fewer on the error queue.
    pub fn driver_only(key: Option<u32>) -> TxControl {
        TxControl::asking(libc::SOF_TIMESTAMPING_TX_SOFTWARE, key)
    }

    fn asking(record: u32, key: Option<u32>) -> TxControl {
        let mut c = TxControl {
            buf: [0; 64],
            len: 0,
        };
        c.push(libc::SO_TIMESTAMPING, record);
        if let Some(k) = key {
            c.push(SCM_TS_OPT_ID, k);
        }
        c
    }

    /// Appends one `SOL_SOCKET` control message carrying a u32.
    fn push(&mut self, ty: libc::c_int, value: u32) {
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic.
        let (space, len) = unsafe { (libc::CMSG_SPACE(4) as usize, libc::CMSG_LEN(4) as usize) };
        let at = self.len;
        assert!(at + space <= self.buf.len(), "two control messages fit");
        let hdr = libc::cmsghdr {
            cmsg_len: len as _,
            cmsg_level: libc::SOL_SOCKET,
            cmsg_type: ty,
        };
        // SAFETY: the header fits at `at` (checked), which is 8-aligned in an 8-aligned
        // buffer (CMSG_SPACE rounds to 8); the value follows the header.
        unsafe {
            let p = self.buf.as_mut_ptr().add(at);
            std::ptr::write_unaligned(p.cast::<libc::cmsghdr>(), hdr);
            let data = p.add(len - 4);
            std::ptr::write_unaligned(data.cast::<u32>(), value);
        }
        self.len += space;
    }

    /// For a `msghdr`'s `msg_control` and `msg_controllen`.
    pub fn as_ptr(&self) -> *mut libc::c_void {
        self.buf.as_ptr() as *mut libc::c_void
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Sends `buf` on `fd` like `wait::send` (non-blocking, `Ok(0)` when full), to `to` when
/// given (an unconnected UDP socket), asking for its stamps with `ctl`.
pub fn send_stamped(
    fd: RawFd,
    buf: &[u8],
    to: Option<&socket2::SockAddr>,
    ctl: &TxControl,
) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr; its pointers are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.as_ptr();
    msg.msg_controllen = ctl.len();
    if let Some(a) = to {
        msg.msg_name = a.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = a.len();
    }
    crate::wait::sent(|| {
        // SAFETY: msg names live buffers of the lengths it gives; MSG_NOSIGNAL turns a dead
        // peer into EPIPE.
        unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) }
    })
}

/// Datagrams one [`send_batch`] sends at most.
pub const SEND_BATCH: usize = 32;

/// Sends `msgs` (each its bytes and destination) on the unconnected UDP socket `fd` in
/// one `sendmmsg`, non-blocking, at most [`SEND_BATCH`]; with `ask`, each asks for its
/// driver stamp ([`TxControl::driver_only`]), keyed from `ask`'s first key on, one more
/// each, when keyed. Returns how many left, in order (0: the socket is full); the kernel
/// stops at a datagram it refuses, and returns its error when it is the first.
pub fn send_batch(
    fd: RawFd,
    msgs: &[(&[u8], std::net::SocketAddr)],
    ask: Option<(bool, u32)>,
) -> io::Result<usize> {
    // One datagram (a reflector's answer) builds one header, not a batch's: the
    // batch's arrays were most of the user-space cost of an answer.
    match msgs.len() {
        1 => send_up_to::<1>(fd, msgs, ask),
        _ => send_up_to::<SEND_BATCH>(fd, msgs, ask),
    }
}

/// [`send_batch`] with room for `N` datagrams.
fn send_up_to<const N: usize>(
    fd: RawFd,
    msgs: &[(&[u8], std::net::SocketAddr)],
    ask: Option<(bool, u32)>,
) -> io::Result<usize> {
    let n = msgs.len().min(N);
    let names: [Option<socket2::SockAddr>; N] =
        std::array::from_fn(|i| msgs.get(i).map(|m| socket2::SockAddr::from(m.1)));
    let ctls: [Option<TxControl>; N] = std::array::from_fn(|i| {
        ask.filter(|_| i < n).map(|(keyed, first)| {
            TxControl::driver_only(keyed.then(|| first.wrapping_add(i as u32)))
        })
    });
    // SAFETY: all-zero is a valid iovec and mmsghdr; their pointers are set below.
    let mut iovs: [libc::iovec; N] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
    for (i, (buf, _)) in msgs.iter().take(n).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let h = &mut hdrs[i].msg_hdr;
        h.msg_iov = &mut iovs[i];
        h.msg_iovlen = 1;
        if let Some(a) = &names[i] {
            h.msg_name = a.as_ptr() as *mut libc::c_void;
            h.msg_namelen = a.len();
        }
        if let Some(c) = &ctls[i] {
            h.msg_control = c.as_ptr();
            h.msg_controllen = c.len();
        }
    }
    crate::wait::sent(|| {
        // SAFETY: the first n headers name live buffers, addresses and control messages
        // of the lengths they give.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        r as isize
    })
}

#[cfg(test)]
mod tests {
    use super::super::io::{ErrQueue, TxPoint};
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsRawFd;

    /// The mask of a power of two and the division of any other N pick the same
    /// messages.
    #[test]
    fn sampled_messages_are_the_multiples_of_n() {
        for every in [1, 2, 3, 16, 64, 100, 65_536] {
            let s = Sampling {
                every,
                opt_id: false,
                hardware_rx: false,
            };
            for i in (0..300u64).chain([u64::MAX - 70_000, u64::MAX - 1, u64::MAX]) {
                let n = u64::from(every);
                assert_eq!(s.sampled(i), i % n == 0, "{i} in {every}");
                let next = (i..=u64::MAX).take(70_000).find(|m| m % n == 0);
                if let Some(next) = next {
                    assert_eq!(s.next_sampled(i), next, "after {i} in {every}");
                }
            }
        }
    }

    /// One `sendmmsg` of three datagrams to two sockets: all arrive, each stamped once
    /// under its own key (this kernel's per-send keys, or the socket's count).
    #[test]
    fn a_batch_leaves_in_one_call_each_datagram_stamped_under_its_key() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (v, w) = (
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        super::super::datagram::enable_departure(u.as_raw_fd()).unwrap();
        let (a, b) = (v.local_addr().unwrap(), w.local_addr().unwrap());
        let msgs: [(&[u8], _); 3] = [(b"one", a), (b"two", b), (b"three", a)];
        let keyed = opt_id_per_send();
        let sent = send_batch(u.as_raw_fd(), &msgs, Some((keyed, 100))).unwrap();
        assert_eq!(sent, 3);
        let mut buf = [0u8; 16];
        let got: Vec<usize> = [&v, &w, &v]
            .iter()
            .map(|s| s.recv(&mut buf).unwrap())
            .collect();
        assert_eq!(got, [3, 3, 5]);
        let mut keys = Vec::new();
        for _ in 0..50 {
            ErrQueue::default()
                .drain(u.as_raw_fd(), |t| keys.push((t.key, t.point)))
                .unwrap();
            if keys.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let first = if keyed { 100 } else { 0 };
        let want: Vec<_> = (first..first + 3).map(|k| (k, TxPoint::Driver)).collect();
        assert_eq!(keys, want);
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(kernel_at_least("6.18.0-1-cloud", (6, 13)));
        assert!(kernel_at_least("6.13", (6, 13)));
        assert!(kernel_at_least("7.0.1", (6, 13)));
        assert!(!kernel_at_least("6.12.9", (6, 13)));
        assert!(!kernel_at_least("5.15.0", (6, 13)));
        assert!(!kernel_at_least("garbage", (6, 13)));
    }

    /// Sampled sockets: only the sends that asked leave stamps; UDP's carry the given key
    /// (this kernel has `SCM_TS_OPT_ID`) or, without it, the count of stamped datagrams;
    /// TCP's the id of the asking send's last byte.
    #[test]
    fn only_the_sends_that_ask_are_stamped_with_their_key() {
        assert_eq!(Sampling::new(4).opt_id, opt_id_per_send());
        // This kernel's keys per send, and the older kernels' count (asked for without
        // SCM_TS_OPT_ID here), which sampling by sequence makes seq / 4.
        for s in [
            Sampling::new(4),
            Sampling {
                every: 4,
                opt_id: false,
                hardware_rx: false,
            },
        ] {
            let u = UdpSocket::bind("127.0.0.1:0").unwrap();
            let v = UdpSocket::bind("127.0.0.1:0").unwrap();
            u.connect(v.local_addr().unwrap()).unwrap();
            s.enable(u.as_raw_fd()).unwrap();
            for seq in 0..12u64 {
                let ctl = TxControl::new(s.opt_id.then_some(seq as u32));
                match s.sampled(seq) {
                    true => send_stamped(u.as_raw_fd(), &[1; 40], None, &ctl).unwrap(),
                    false => u.send(&[1; 40]).unwrap(),
                };
            }
            let mut got = Vec::new();
            ErrQueue::default()
                .drain(u.as_raw_fd(), |t| {
                    if t.point == TxPoint::Driver {
                        got.push(t.key)
                    }
                })
                .unwrap();
            let want: Vec<u32> = [0, 4, 8].iter().map(|&q| s.udp_key(q)).collect();
            assert_eq!(want, if s.opt_id { [0, 4, 8] } else { [0, 1, 2] });
            assert_eq!(got, want, "opt_id {}", s.opt_id);
        }

        let s = Sampling::new(4);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nodelay(true).unwrap();
        let (mut srv, _) = l.accept().unwrap();
        s.enable(c.as_raw_fd()).unwrap();
        for i in 0..3u64 {
            let ctl = TxControl::new(None);
            match i == 1 {
                true => send_stamped(c.as_raw_fd(), &[2; 100], None, &ctl).unwrap(),
                false => crate::wait::send(c.as_raw_fd(), &[2; 100]).unwrap(),
            };
            let mut b = [0u8; 100];
            srv.read_exact(&mut b).unwrap();
        }
        let mut tcp = Vec::new();
        ErrQueue::default()
            .drain(c.as_raw_fd(), |t| tcp.push((t.key, t.point)))
            .unwrap();
        assert_eq!(tcp, [(199, TxPoint::Sched), (199, TxPoint::Driver)]);

        // The echo's ask: the driver's stamp only.
        let ctl = TxControl::driver_only(None);
        send_stamped(c.as_raw_fd(), &[2; 100], None, &ctl).unwrap();
        let mut b = [0u8; 100];
        srv.read_exact(&mut b).unwrap();
        let mut echo = Vec::new();
        ErrQueue::default()
            .drain(c.as_raw_fd(), |t| echo.push((t.key, t.point)))
            .unwrap();
        assert_eq!(echo, [(399, TxPoint::Driver)]);
    }
}
