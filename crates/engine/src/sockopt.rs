//! Socket options: the platform-specific corner of the engine (TCP_INFO is [`crate::tcp_info`],
//! re-exported here). Options are
//! set before connect/listen where TCP needs them then (buffer sizes fix window scaling).

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

pub use crate::tcp_info::{tcp_info, TcpInfo};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    pub congestion: Option<String>,
    pub nodelay: bool,
    pub sndbuf_bytes: Option<u32>,
    pub rcvbuf_bytes: Option<u32>,
    /// TOS / Traffic Class of every packet (`crate::marks`): TCP keeps the ECN bits its own.
    pub tos: Option<u8>,
}

/// Applies the options; returns what the reader should know (sizes the kernel changed).
/// An unknown congestion algorithm is an error naming it.
pub fn apply(sock: &SockRef<'_>, opts: &SocketOptions) -> io::Result<Vec<String>> {
    let mut notes = Vec::new();
    if let Some(cc) = &opts.congestion {
        sock.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("congestion control '{cc}' is not available: {e}"),
            )
        })?;
    }
    if opts.nodelay {
        sock.set_nodelay(true)?;
    }
    crate::marks::set_tos_if(sock.as_raw_fd(), opts.tos)?;
    if let Some(b) = opts.sndbuf_bytes {
        sock.set_send_buffer_size(b as usize)?;
        let got = sock.send_buffer_size()?;
        if got != b as usize {
            notes.push(format!("SO_SNDBUF {b} requested, kernel set {got} bytes"));
        }
    }
    if let Some(b) = opts.rcvbuf_bytes {
        sock.set_recv_buffer_size(b as usize)?;
        let got = sock.recv_buffer_size()?;
        if got != b as usize {
            notes.push(format!("SO_RCVBUF {b} requested, kernel set {got} bytes"));
        }
    }
    Ok(notes)
}

/// Caps a socket's sending rate at `bytes_per_s` (SO_MAX_PACING_RATE: the fq qdisc, or
/// TCP's own pacing where there is none), as iperf3's `--fq-rate` does.
pub fn set_pacing(fd: RawFd, bytes_per_s: u64) -> io::Result<()> {
    let rate: u64 = bytes_per_s;
    // SAFETY: a u64 option value of its own size; the kernel takes 64 bits since 4.20 and
    // reads the low 32 before.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&rate as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Holds a TCP socket's unsent bytes to about `bytes` (TCP_NOTSENT_LOWAT): a sender is
/// woken to write only once fewer are queued, so what it has handed the socket is what
/// left it, within that many bytes.
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    let v = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: passes a pointer to a live int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends an IPv4 UDP socket's datagrams with DF set up to the device's MTU, whatever the
/// path's (`IP_PMTUDISC_PROBE`): the kernel never fragments them, so it writes 0 as their
/// IP ID instead of hashing a per-destination counter for each (`__ip_select_ident`, a
/// tenth of a mesh agent's send path). The default sets DF on what fits the path too,
/// but keeps the right to fragment, and so the ID.
pub fn set_dont_fragment(fd: RawFd) -> io::Result<()> {
    crate::int_option::set_level_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_PROBE,
    )
}

/// The congestion control algorithm a socket uses.
pub fn congestion(fd: RawFd) -> Option<String> {
    // SAFETY: the caller's descriptor outlives this borrow.
    let sock = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let name = SockRef::from(&sock).tcp_congestion().ok()?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Connects with the options set first, within `timeout`.
pub fn connect(
    addr: SocketAddr,
    opts: &SocketOptions,
    timeout: Duration,
) -> io::Result<(TcpStream, Vec<String>)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    let notes = apply(&SockRef::from(&sock), opts)?;
    sock.connect_timeout(&addr.into(), timeout)?;
    Ok((sock.into(), notes))
}

/// A listener whose accepted sockets inherit the buffer sizes, with a backlog large enough
/// for every connection of a test to queue before it is accepted.
pub fn listen(
    addr: SocketAddr,
    opts: &SocketOptions,
    backlog: i32,
) -> io::Result<(TcpListener, Vec<String>)> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    let notes = apply(&SockRef::from(&sock), opts)?;
    sock.bind(&addr.into())?;
    sock.listen(backlog)?;
    Ok((sock.into(), notes))
}

/// SO_PREFER_BUSY_POLL (Linux 5.11); not in every libc version.
const SO_PREFER_BUSY_POLL: libc::c_int = 69;

fn set_int(fd: RawFd, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets SO_BUSY_POLL and SO_PREFER_BUSY_POLL; says in words what was applied and what the
/// kernel refused (raising them needs CAP_NET_ADMIN; old kernels lack the second).
pub fn set_busy_poll(fd: RawFd, us: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (name, opt, v) in [
        ("SO_BUSY_POLL", libc::SO_BUSY_POLL, us as libc::c_int),
        ("SO_PREFER_BUSY_POLL", SO_PREFER_BUSY_POLL, 1),
    ] {
        match set_int(fd, opt, v) {
            Ok(()) => out.push(format!("{name}={v} applied")),
            Err(e) => out.push(format!("{name}={v} refused by the kernel: {e}")),
        }
    }
    out
}

/// `n` UDP sockets bound to one address and port with SO_REUSEPORT (the kernel spreads
/// flows over them by hash), each with a receive buffer of `rcvbuf` bytes: forced past
/// rmem_max when privileged (SO_RCVBUFFORCE), else as large as rmem_max allows.
pub fn udp_reuseport_group(
    addr: SocketAddr,
    n: usize,
    rcvbuf: usize,
) -> io::Result<(Vec<std::net::UdpSocket>, Vec<String>)> {
    let mut out = Vec::with_capacity(n);
    let mut notes = Vec::new();
    let mut bind_to = addr;
    for i in 0..n.max(1) {
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_port(true)?;
        let forced = set_int(s.as_raw_fd(), libc::SO_RCVBUFFORCE, rcvbuf as libc::c_int).is_ok();
        if !forced {
            s.set_recv_buffer_size(rcvbuf)?;
        }
        s.bind(&bind_to.into())?;
        if i == 0 {
            bind_to = s.local_addr()?.as_socket().expect("an IP socket");
            notes.push(format!(
                "receive buffer {} bytes per socket{}",
                s.recv_buffer_size()?,
                if forced {
                    ""
                } else {
                    " (capped by net.core.rmem_max)"
                }
            ));
        }
        out.push(s.into());
    }
    Ok((out, notes))
}

/// The kernel's count of datagrams socket `s` dropped since it was made (SO_MEMINFO's
/// SK_MEMINFO_DROPS: a full receive buffer, or a bad checksum): the socket's own, where
/// /proc/net/udp sums every socket of a port.
pub fn socket_drops(s: &std::net::UdpSocket) -> io::Result<u64> {
    let mut mem = [0u32; 16];
    let mut len = std::mem::size_of_val(&mem) as libc::socklen_t;
    // SAFETY: `mem` is writable for `len` bytes and outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let at = libc::SK_MEMINFO_DROPS as usize;
    if (len as usize) < (at + 1) * 4 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SO_MEMINFO without a drop count",
        ));
    }
    Ok(u64::from(mem[at]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_apply_on_loopback() {
        let opts = SocketOptions {
            congestion: Some("reno".into()),
            nodelay: true,
            sndbuf_bytes: Some(1 << 20),
            rcvbuf_bytes: Some(1 << 20),
            tos: Some(46 << 2),
        };
        let (l, _) = listen(
            "127.0.0.1:0".parse().unwrap(),
            &SocketOptions::default(),
            16,
        )
        .unwrap();
        let (c, notes) = connect(l.local_addr().unwrap(), &opts, Duration::from_secs(2)).unwrap();
        // Linux doubles the requested size for bookkeeping, and says so.
        assert!(notes.iter().any(|n| n.contains("SO_SNDBUF")), "{notes:?}");
        assert_eq!(congestion(c.as_raw_fd()).as_deref(), Some("reno"));
        assert!(c.nodelay().unwrap());
        assert_eq!(
            SockRef::from(&c).tos().unwrap(),
            46 << 2,
            "IP_TOS set before connect"
        );
        let info = tcp_info(c.as_raw_fd()).unwrap();
        assert!(info.snd_mss > 0 && info.snd_cwnd > 0);
    }

    #[test]
    fn unknown_congestion_is_named() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let opts = SocketOptions {
            congestion: Some("nosuchcc".into()),
            ..Default::default()
        };
        let err = apply(&SockRef::from(&s), &opts).unwrap_err().to_string();
        assert!(err.contains("'nosuchcc'"), "{err}");
    }

    /// What leaves a socket told not to fragment, seen on a raw socket: DF set and an IP
    /// ID of 0 (no per-destination counter hashed). Without the option the same datagram
    /// leaves with DF set too (a UDP socket's default, `IP_PMTUDISC_WANT`, sets it on what
    /// fits the path) but an ID of the kernel's counter, as it may still fragment it.
    #[test]
    fn a_socket_told_not_to_fragment_sends_df_and_no_ip_id() {
        let raw = match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)) {
            Ok(r) => r,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("a raw socket on CI: {e}")
            }
            Err(e) => return println!("SKIPPED: needs CAP_NET_RAW ({e})"),
        };
        raw.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let header = |df: bool| {
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            if df {
                set_dont_fragment(tx.as_raw_fd()).unwrap();
            }
            let port = tx.local_addr().unwrap().port();
            // Three, so that a counter's ID is seen past a first 0.
            for _ in 0..3 {
                tx.send_to(b"sonde-df", rx.local_addr().unwrap()).unwrap();
            }
            let mut ids = Vec::new();
            let mut flags = Vec::new();
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 256];
            while ids.len() < 3 {
                let n = raw.recv(&mut buf).expect("our datagram on the raw socket");
                // SAFETY: recv initialised the first n bytes.
                let b: Vec<u8> = buf[..n]
                    .iter()
                    .map(|x| unsafe { x.assume_init() })
                    .collect();
                let ihl = usize::from(b[0] & 0x0f) * 4;
                let sport = u16::from_be_bytes([b[ihl], b[ihl + 1]]);
                if sport == port && b.ends_with(b"sonde-df") {
                    ids.push(u16::from_be_bytes([b[4], b[5]]));
                    flags.push(b[6] & 0x40 != 0);
                }
            }
            (ids, flags)
        };
        let (ids, df) = header(true);
        assert_eq!((ids, df), (vec![0; 3], vec![true; 3]));
        let (ids, df) = header(false);
        assert!(ids.iter().any(|i| *i != 0), "{ids:?}");
        assert_eq!(df, vec![true; 3]);
    }
}
