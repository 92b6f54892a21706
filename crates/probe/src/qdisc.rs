//! The root qdisc of an interface and its counters, as `tc -s qdisc show dev IFACE` reads
//! them: one RTM_GETQDISC dump over rtnetlink, in this process's namespace. A sender's
//! packets wait there before the device takes them; a shaper's throttling shows as
//! overlimits, a queue it cannot empty as backlog.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use sonde_results::QdiscCounters;

const RTM_GETQDISC: u16 = 38;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// nlmsghdr (16 bytes), then struct tcmsg (20 bytes).
const NLMSG_HDR: usize = 16;
const TCMSG: usize = 20;
const TCA_KIND: u16 = 1;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
/// The parent of a root qdisc.
const TC_H_ROOT: u32 = 0xffff_ffff;

/// One reading of a qdisc's counters, in the fields the window's delta has ([`delta`]):
/// monotonic counts (the backlog: a gauge); the caller sets the interface's name.
pub type QdiscSnap = QdiscCounters;

/// The root qdisc of interface `ifindex`; `None` when it has none that queues (noqueue).
pub fn root(ifindex: u32) -> io::Result<Option<QdiscSnap>> {
    let sock = Rtnl::open()?;
    sock.send(&dump_request())?;
    let mut buf = vec![0u8; 32 << 10];
    let mut found = None;
    loop {
        let n = sock.recv(&mut buf)?;
        let (done, root) = parse_dump(&buf[..n], ifindex)?;
        found = found.or(root);
        if done || n == 0 {
            break;
        }
    }
    Ok(found.filter(|q| q.kind != "noqueue"))
}

/// The interface's index in this namespace.
pub fn ifindex(iface: &str) -> Option<u32> {
    let name = std::ffi::CString::new(iface).ok()?;
    // SAFETY: a NUL-terminated name that outlives the call.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (i != 0).then_some(i)
}

/// An RTM_GETQDISC dump of every interface's qdiscs (the kernel filters none by index).
fn dump_request() -> Vec<u8> {
    let mut m = vec![0u8; NLMSG_HDR + TCMSG];
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[16] = libc::AF_UNSPEC as u8;
    m
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink: {what}"))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The attributes in `b`: (type, value).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        let Some(value) = b.get(4..len.max(4)) else {
            break;
        };
        out.push((kind, value));
        b = b.get(len.max(4).next_multiple_of(4)..).unwrap_or(&[]);
    }
    out
}

/// One datagram of the dump: whether it ended the dump, and the root qdisc of `ifindex`
/// if this datagram holds it.
fn parse_dump(mut b: &[u8], ifindex: u32) -> io::Result<(bool, Option<QdiscSnap>)> {
    let mut found = None;
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0).ok_or_else(|| bad("short header"))? as usize;
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        let msg = b.get(..len).filter(|_| len >= NLMSG_HDR);
        let msg = msg.ok_or_else(|| bad("message past its datagram"))?;
        match kind {
            NLMSG_DONE => return Ok((true, found)),
            NLMSG_ERROR => {
                let errno = u32_at(msg, NLMSG_HDR).ok_or_else(|| bad("short error"))? as i32;
                return Err(io::Error::from_raw_os_error(-errno));
            }
            _ => {
                if let Some(q) = root_of(&msg[NLMSG_HDR..], ifindex) {
                    found = Some(q);
                }
            }
        }
        b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Ok((false, found))
}

/// The qdisc a tcmsg and its attributes describe, if it is `ifindex`'s root.
fn root_of(body: &[u8], ifindex: u32) -> Option<QdiscSnap> {
    let index = u32_at(body, 4)?;
    let parent = u32_at(body, 12)?;
    if index != ifindex || parent != TC_H_ROOT {
        return None;
    }
    let mut q = QdiscSnap::default();
    for (kind, value) in attrs(body.get(TCMSG..)?) {
        match kind {
            TCA_KIND => {
                let name = value.split(|&c| c == 0).next().unwrap_or(&[]);
                q.kind = String::from_utf8_lossy(name).into_owned();
            }
            TCA_STATS2 => stats2(value, &mut q),
            _ => {}
        }
    }
    Some(q)
}

/// gnet_stats_basic (bytes u64, packets u32) and gnet_stats_queue (qlen, backlog, drops,
/// requeues, overlimits: u32 each).
fn stats2(nested: &[u8], q: &mut QdiscSnap) {
    for (kind, v) in attrs(nested) {
        match kind {
            TCA_STATS_BASIC => q.packets = u32_at(v, 8).unwrap_or(0).into(),
            TCA_STATS_QUEUE => {
                let f = |i: usize| u64::from(u32_at(v, i * 4).unwrap_or(0));
                q.backlog_packets = f(0);
                q.backlog_bytes = f(1);
                q.drops = f(2);
                q.requeues = f(3);
                q.overlimits = f(4);
            }
            _ => {}
        }
    }
}

/// `b`'s counters since `a` (32-bit counters wrap: taken modulo 2^32), with `b`'s backlog;
/// `None` when the qdisc was replaced between the two.
pub fn delta(a: &QdiscSnap, b: &QdiscSnap) -> Option<QdiscCounters> {
    if a.kind != b.kind || a.iface != b.iface {
        return None;
    }
    let d = |x: u64, y: u64| (y as u32).wrapping_sub(x as u32) as u64;
    Some(QdiscCounters {
        iface: b.iface.clone(),
        kind: b.kind.clone(),
        packets: d(a.packets, b.packets),
        drops: d(a.drops, b.drops),
        overlimits: d(a.overlimits, b.overlimits),
        requeues: d(a.requeues, b.requeues),
        backlog_bytes: b.backlog_bytes,
        backlog_packets: b.backlog_packets,
    })
}

/// An rtnetlink socket, closed on drop.
struct Rtnl(OwnedFd);

impl Rtnl {
    fn open() -> io::Result<Rtnl> {
        // SAFETY: a plain socket(2) call; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socket(2) has just returned this descriptor.
        Ok(Rtnl(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn send(&self, req: &[u8]) -> io::Result<()> {
        // SAFETY: req is live for the length passed.
        let r = unsafe { libc::send(self.0.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is live and writable for the length passed.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One RTM_NEWQDISC message: a tbf at the root of `ifindex` with its counters.
    fn message(ifindex: u32, parent: u32) -> Vec<u8> {
        let attr = |kind: u16, value: &[u8]| {
            let mut a = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
            a.extend_from_slice(&kind.to_ne_bytes());
            a.extend_from_slice(value);
            a.resize(a.len().next_multiple_of(4), 0);
            a
        };
        let mut basic = 1_000_000u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&15_625u32.to_ne_bytes());
        basic.extend_from_slice(&0u32.to_ne_bytes());
        let queue: Vec<u8> = [0u32, 17_728, 3, 0, 41_263]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let stats = [attr(TCA_STATS_BASIC, &basic), attr(TCA_STATS_QUEUE, &queue)].concat();
        let mut body = vec![0u8; TCMSG];
        body[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        body[12..16].copy_from_slice(&parent.to_ne_bytes());
        body.extend(attr(TCA_KIND, b"tbf\0"));
        body.extend(attr(TCA_STATS2, &stats));
        let mut m = vec![0u8; NLMSG_HDR];
        m[0..4].copy_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&36u16.to_ne_bytes()); // RTM_NEWQDISC
        m.extend(body);
        m
    }

    #[test]
    fn the_root_qdisc_of_the_interface_is_read_from_its_dump() {
        // Another interface's root, this one's child, then this one's root.
        let dump = [
            message(2, TC_H_ROOT),
            message(5, 0x8001_0001),
            message(5, TC_H_ROOT),
        ];
        let (done, q) = parse_dump(&dump.concat(), 5).unwrap();
        assert!(!done);
        let q = q.expect("the root qdisc");
        assert_eq!(q.kind, "tbf");
        assert_eq!(
            (
                q.packets,
                q.backlog_packets,
                q.backlog_bytes,
                q.drops,
                q.overlimits
            ),
            (15_625, 0, 17_728, 3, 41_263)
        );
        assert_eq!(
            parse_dump(&message(2, TC_H_ROOT), 5).unwrap(),
            (false, None)
        );
    }

    #[test]
    fn the_dump_ends_and_an_error_is_an_error() {
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert_eq!(parse_dump(&done, 5).unwrap(), (true, None));
        let mut err = done.clone();
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            parse_dump(&err, 5).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
    }

    #[test]
    fn counters_are_deltas_across_a_wrap_and_the_backlog_is_the_last() {
        let a = QdiscSnap {
            kind: "tbf".into(),
            overlimits: u64::from(u32::MAX - 9),
            backlog_bytes: 500,
            ..Default::default()
        };
        let b = QdiscSnap {
            kind: "tbf".into(),
            overlimits: 10,
            backlog_bytes: 64,
            ..Default::default()
        };
        let d = delta(&a, &b).unwrap();
        assert_eq!((d.overlimits, d.backlog_bytes), (20, 64));
        let replaced = QdiscSnap {
            kind: "fq_codel".into(),
            ..b
        };
        assert_eq!(delta(&a, &replaced), None);
    }

    #[test]
    fn loopback_has_no_queueing_root_qdisc_here() {
        // lo runs noqueue unless someone shaped it: read as none.
        let lo = ifindex("lo").expect("lo");
        assert_eq!(root(lo).unwrap(), None);
    }
}
