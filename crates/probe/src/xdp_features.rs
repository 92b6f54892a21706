//! What XDP an interface's driver offers, as the kernel itself states it: the `netdev`
//! generic-netlink family's `xdp-features` (Linux 6.3 and later), the same flags that
//! `ynl --family netdev --do dev-get` prints. Asking changes nothing on the interface,
//! unlike trying to attach a program or bind a zero-copy socket.

use std::io;

const NETLINK_GENERIC: libc::c_int = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// nlmsghdr (16 bytes) then genlmsghdr (4 bytes).
const HEADERS: usize = 20;

/// `xdp-features` bits (enum netdev_xdp_act).
const XDP_ACT_BASIC: u64 = 1;
const XDP_ACT_REDIRECT: u64 = 1 << 1;
const XDP_ACT_XSK_ZEROCOPY: u64 = 1 << 3;

/// The XDP an interface offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpFeatures {
    /// The driver runs XDP programs itself (XDP_PASS/DROP/TX/ABORTED), and redirects.
    pub native: bool,
    /// AF_XDP sockets can share the driver's rings (zero-copy).
    pub zero_copy: bool,
}

impl XdpFeatures {
    fn of(bits: u64) -> XdpFeatures {
        XdpFeatures {
            native: bits & (XDP_ACT_BASIC | XDP_ACT_REDIRECT) == XDP_ACT_BASIC | XDP_ACT_REDIRECT,
            zero_copy: bits & XDP_ACT_XSK_ZEROCOPY != 0,
        }
    }
}

/// One generic-netlink request: headers, then attributes.
fn request(family: u16, cmd: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0u8; HEADERS];
    for (kind, value) in attrs {
        let len = 4 + value.len();
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(value);
        m.resize(m.len().next_multiple_of(4), 0);
    }
    let total = m.len() as u32;
    m[0..4].copy_from_slice(&total.to_ne_bytes());
    m[4..6].copy_from_slice(&family.to_ne_bytes());
    m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m[16] = cmd;
    m[17] = 1; // version
    m
}

/// The attributes of the first message of a reply, or the error it carries.
fn attributes(reply: &[u8]) -> io::Result<Vec<(u16, &[u8])>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short netlink reply");
    let len = u32::from_ne_bytes(reply.get(0..4).ok_or_else(bad)?.try_into().expect("4")) as usize;
    let kind = u16::from_ne_bytes(reply[4..6].try_into().expect("2"));
    let msg = reply.get(..len).ok_or_else(bad)?;
    if kind == NLMSG_ERROR {
        let errno = i32::from_ne_bytes(msg.get(16..20).ok_or_else(bad)?.try_into().expect("4"));
        return Err(io::Error::from_raw_os_error(-errno));
    }
    let mut out = Vec::new();
    let mut rest = msg.get(HEADERS..).ok_or_else(bad)?;
    while rest.len() >= 4 {
        let alen = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let akind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        let value = rest.get(4..alen).ok_or_else(bad)?;
        out.push((akind, value));
        rest = rest.get(alen.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// The `netdev` family's id in a CTRL_CMD_GETFAMILY reply.
pub fn family_id(reply: &[u8]) -> io::Result<u16> {
    let attrs = attributes(reply)?;
    let id = attrs.iter().find(|(k, _)| *k == CTRL_ATTR_FAMILY_ID);
    id.and_then(|(_, v)| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no family id"))
}

/// The XDP features in a NETDEV_CMD_DEV_GET reply.
pub fn features(reply: &[u8]) -> io::Result<XdpFeatures> {
    let attrs = attributes(reply)?;
    let f = attrs.iter().find(|(k, _)| *k == NETDEV_A_DEV_XDP_FEATURES);
    f.and_then(|(_, v)| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
        .map(XdpFeatures::of)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no xdp-features"))
}

/// A generic-netlink socket, closed on drop.
struct Genl(std::os::fd::OwnedFd);

impl Genl {
    fn open() -> io::Result<Genl> {
        use std::os::fd::FromRawFd;
        // SAFETY: a plain socket(2) call; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socket(2) has just returned this descriptor.
        Ok(Genl(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends one request and reads its reply into `buf`.
    fn ask<'b>(&self, req: &[u8], buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_raw_fd();
        // SAFETY: req and buf are live for the lengths passed; the kernel is the peer.
        let n = unsafe {
            if libc::send(fd, req.as_ptr().cast(), req.len(), 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0)
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(&buf[..n as usize])
    }
}

/// The XDP features of interface `ifindex` in this namespace; an error on kernels before
/// 6.3 (no `netdev` family).
pub fn query(ifindex: u32) -> io::Result<XdpFeatures> {
    let genl = Genl::open()?;
    let mut buf = vec![0u8; 8192];
    let name = b"netdev\0";
    let req = request(
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        &[(CTRL_ATTR_FAMILY_NAME, name)],
    );
    let family = family_id(genl.ask(&req, &mut buf)?)?;
    let index = ifindex.to_ne_bytes();
    let req = request(
        family,
        NETDEV_CMD_DEV_GET,
        &[(NETDEV_A_DEV_IFINDEX, &index)],
    );
    features(genl.ask(&req, &mut buf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_bits_read_as_the_kernel_defines_them() {
        // veth: basic, redirect, rx-sg (no zero-copy); i40e adds xsk-zerocopy.
        assert_eq!(
            XdpFeatures::of(0b10_0011),
            XdpFeatures {
                native: true,
                zero_copy: false
            }
        );
        assert!(XdpFeatures::of(0b1111).zero_copy);
        assert!(!XdpFeatures::of(0).native);
    }

    #[test]
    fn a_request_is_padded_and_sized() {
        let r = request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &[(2, b"netdev\0")]);
        assert_eq!(r.len(), 20 + 12);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 32);
        assert_eq!(&r[24..31], b"netdev\0");
    }

    #[test]
    fn an_error_reply_is_an_error() {
        let mut e = vec![0u8; 36];
        e[0..4].copy_from_slice(&36u32.to_ne_bytes());
        e[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        e[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        let err = features(&e).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV));
    }

    #[test]
    fn loopback_answers_on_this_kernel() {
        match query(1) {
            // lo offers no XDP of its own: generic mode only, no zero-copy.
            Ok(f) => assert_eq!(
                f,
                XdpFeatures {
                    native: false,
                    zero_copy: false
                }
            ),
            // Kernels before 6.3 have no netdev family.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
        }
    }
}
