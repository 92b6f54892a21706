//! Whole UDP frames (Ethernet, IPv4 or IPv6, UDP) for a sender that bypasses the kernel:
//! built once per flow, after which only the payload changes.

use std::net::{IpAddr, SocketAddr};

pub const ETH_HEADER: usize = 14;
const UDP_HEADER: usize = 8;

/// Where a flow's frames go and come from.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

fn ip_header_len(ip: &IpAddr) -> usize {
    if ip.is_ipv4() {
        20
    } else {
        40
    }
}

/// Offset of the UDP payload in a frame to `dst`.
pub fn payload_offset(dst: &SocketAddr) -> usize {
    ETH_HEADER + ip_header_len(&dst.ip()) + UDP_HEADER
}

/// The one's-complement sum of `bytes` as big-endian 16-bit words, folded.
fn sum16(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// A frame with `payload_len` zero bytes of payload; IPv4's header checksum is set, and
/// the UDP checksum (see [`fix_udp_checksum`]).
pub fn udp_frame(e: &Endpoints, payload_len: usize) -> Vec<u8> {
    let mut f = vec![0u8; payload_offset(&e.dst) + payload_len];
    write_headers(e, payload_len, &mut f);
    fix_udp_checksum(&mut f);
    f
}

/// Writes the Ethernet, IP and UDP headers of a frame with `payload_len` bytes of payload
/// at the start of `f` (which must hold them); returns the payload's offset. The UDP
/// checksum is left zero.
fn write_headers(e: &Endpoints, payload_len: usize, f: &mut [u8]) -> usize {
    let ip_len = ip_header_len(&e.dst.ip());
    let udp_len = (UDP_HEADER + payload_len) as u16;
    f[..6].copy_from_slice(&e.dst_mac);
    f[6..12].copy_from_slice(&e.src_mac);
    let ip = ETH_HEADER;
    match (e.src.ip(), e.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let total = (ip_len as u16 + udp_len).to_be_bytes();
            // Version 4, 20-byte header; don't fragment; TTL 64; UDP.
            f[ip..ip + 12]
                .copy_from_slice(&[0x45, 0, total[0], total[1], 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f[ip + 12..ip + 16].copy_from_slice(&s.octets());
            f[ip + 16..ip + 20].copy_from_slice(&d.octets());
            let csum = !(sum16(0, &f[ip..ip + 20]) as u16);
            f[ip + 10..ip + 12].copy_from_slice(&csum.to_be_bytes());
        }
        (s, d) => {
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let len = udp_len.to_be_bytes();
            f[ip..ip + 8].copy_from_slice(&[0x60, 0, 0, 0, len[0], len[1], 17, 64]);
            f[ip + 8..ip + 24].copy_from_slice(&v6(s).octets());
            f[ip + 24..ip + 40].copy_from_slice(&v6(d).octets());
        }
    }
    let udp = ip + ip_len;
    f[udp..udp + 2].copy_from_slice(&e.src.port().to_be_bytes());
    f[udp + 2..udp + 4].copy_from_slice(&e.dst.port().to_be_bytes());
    f[udp + 4..udp + 6].copy_from_slice(&udp_len.to_be_bytes());
    f[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    udp + UDP_HEADER
}

/// Writes into `out` the answer to the UDP frame `req` from `from`: MACs, addresses and
/// ports swapped, `payload_len` bytes of payload that begin with the request's first
/// `echo` bytes (zeros after them). Returns the answer's length; `None` when `req` is not
/// UDP, comes from another host, or `out` is too small.
pub fn answer(
    req: &[u8],
    from: IpAddr,
    payload_len: usize,
    echo: usize,
    out: &mut [u8],
) -> Option<usize> {
    let (asked, span) = endpoints_of(req)?;
    if asked.src.ip() != from {
        return None;
    }
    let back = Endpoints {
        src_mac: asked.dst_mac,
        dst_mac: asked.src_mac,
        src: asked.dst,
        dst: asked.src,
    };
    let at = payload_offset(&back.dst);
    let len = at + payload_len;
    if len > out.len() {
        return None;
    }
    write_headers(&back, payload_len, out);
    let payload = &req[span.0 + UDP_HEADER..span.1];
    let echoed = echo.min(payload.len()).min(payload_len);
    out[at..at + echoed].copy_from_slice(&payload[..echoed]);
    out[at + echoed..len].fill(0);
    fix_udp_checksum(&mut out[..len]);
    Some(len)
}

fn v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// Sets the UDP checksum after the payload changed: IPv4 sends none (zero, as RFC 768
/// allows); IPv6 must, over its pseudo-header.
pub fn fix_udp_checksum(f: &mut [u8]) {
    if f[12..14] != [0x86, 0xdd] {
        return;
    }
    let udp = ETH_HEADER + 40;
    f[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
    let len = (f.len() - udp) as u32;
    // Pseudo-header: both addresses, the UDP length, the protocol.
    let acc = sum16(len + 17, &f[ETH_HEADER + 8..ETH_HEADER + 40]);
    let mut csum = !(sum16(acc, &f[udp..]) as u16);
    if csum == 0 {
        csum = 0xffff;
    }
    f[udp + 6..udp + 8].copy_from_slice(&csum.to_be_bytes());
}

/// Gives a built frame the TOS byte `tos` (IPv4; IPv6's Traffic Class): the marks
/// (`--dscp`, `--ecn`) a kernel socket's `IP_TOS` would set. IPv4's header checksum is
/// made again; neither UDP checksum covers the byte.
pub fn set_tos(f: &mut [u8], tos: u8) {
    let ip = ETH_HEADER;
    match [f[12], f[13]] {
        [0x08, 0x00] => {
            f[ip + 1] = tos;
            f[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
            let csum = !(sum16(0, &f[ip..ip + 20]) as u16);
            f[ip + 10..ip + 12].copy_from_slice(&csum.to_be_bytes());
        }
        [0x86, 0xdd] => {
            f[ip] = 0x60 | (tos >> 4);
            f[ip + 1] = (tos << 4) | (f[ip + 1] & 0x0f);
        }
        _ => {}
    }
}

/// A received frame's TOS byte (IPv4) or Traffic Class (IPv6): the marks it arrived
/// with, read from the header the receiver holds anyway; `None` when it is neither.
pub fn tos_of(f: &[u8]) -> Option<u8> {
    match f.get(12..14)? {
        [0x08, 0x00] => f.get(ETH_HEADER + 1).copied(),
        [0x86, 0xdd] => {
            let (a, b) = (*f.get(ETH_HEADER)?, *f.get(ETH_HEADER + 1)?);
            Some((a << 4) | (b >> 4))
        }
        _ => None,
    }
}

/// Where a received frame's UDP header starts and its datagram ends, by the lengths its
/// headers give (a NIC may pad short frames); `None` when it is not UDP over IPv4 or IPv6
/// without extension headers.
fn udp_span(f: &[u8]) -> Option<(usize, usize)> {
    let ip = f.get(ETH_HEADER..)?;
    let be16 = |at: usize| Some(u16::from_be_bytes([*ip.get(at)?, *ip.get(at + 1)?]) as usize);
    let (proto, header, ip_end) = match f.get(12..14)? {
        [0x08, 0x00] => (*ip.get(9)?, (ip[0] & 0xf) as usize * 4, be16(2)?),
        [0x86, 0xdd] => (*ip.get(6)?, 40, 40 + be16(4)?),
        _ => return None,
    };
    if proto != 17 {
        return None;
    }
    let udp = ETH_HEADER + header;
    let ip_end = (ETH_HEADER + ip_end).min(f.len());
    let udp_len = u16::from_be_bytes([*f.get(udp + 4)?, *f.get(udp + 5)?]) as usize;
    let end = (udp + udp_len).min(ip_end);
    (udp + UDP_HEADER <= end).then_some((udp, end))
}

/// The UDP payload of a received frame (see [`udp_span`]).
pub fn udp_payload(f: &[u8]) -> Option<&[u8]> {
    let (udp, end) = udp_span(f)?;
    f.get(udp + UDP_HEADER..end)
}

/// A received UDP frame's destination port and payload.
pub fn udp_to(f: &[u8]) -> Option<(u16, &[u8])> {
    let (udp, end) = udp_span(f)?;
    let port = u16::from_be_bytes([f[udp + 2], f[udp + 3]]);
    Some((port, f.get(udp + UDP_HEADER..end)?))
}

/// Where a received UDP frame came from and went to, and its UDP span.
fn endpoints_of(f: &[u8]) -> Option<(Endpoints, (usize, usize))> {
    let span = udp_span(f)?;
    let ip = &f[ETH_HEADER..];
    let (src, dst): (IpAddr, IpAddr) = if f[12] == 0x08 {
        let a = |at: usize| -> [u8; 4] { ip[at..at + 4].try_into().expect("4 bytes") };
        (a(12).into(), a(16).into())
    } else {
        let a = |at: usize| -> [u8; 16] { ip[at..at + 16].try_into().expect("16 bytes") };
        (a(8).into(), a(24).into())
    };
    let port = |at: usize| u16::from_be_bytes([f[span.0 + at], f[span.0 + at + 1]]);
    let mac = |at: usize| -> [u8; 6] { f[at..at + 6].try_into().expect("6 bytes") };
    let e = Endpoints {
        src_mac: mac(6),
        dst_mac: mac(0),
        src: SocketAddr::new(src, port(0)),
        dst: SocketAddr::new(dst, port(2)),
    };
    Some((e, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(src: &str, dst: &str) -> Endpoints {
        Endpoints {
            src_mac: [2, 0, 0, 0, 0, 0xa],
            dst_mac: [2, 0, 0, 0, 0, 0xb],
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        }
    }

    #[test]
    fn ipv4_header_checksums_to_zero() {
        let f = udp_frame(&endpoints("198.18.0.1:4000", "198.18.0.2:5201"), 18);
        assert_eq!(f.len(), 14 + 20 + 8 + 18);
        assert_eq!(sum16(0, &f[14..34]), 0xffff);
        assert_eq!(&f[36..38], &5201u16.to_be_bytes());
        assert_eq!(payload_offset(&"198.18.0.2:1".parse().unwrap()), 42);
    }

    #[test]
    fn ipv6_udp_checksum_verifies_with_its_pseudo_header() {
        let mut f = udp_frame(&endpoints("[2001:db8::1]:4000", "[2001:db8::2]:5201"), 19);
        f[70] = 0x5a;
        fix_udp_checksum(&mut f);
        let udp = &f[54..];
        let acc = sum16(udp.len() as u32 + 17, &f[22..54]);
        assert_eq!(sum16(acc, udp), 0xffff);
    }

    #[test]
    fn a_tos_set_on_a_frame_reads_back_and_keeps_its_checksums() {
        for (src, dst) in [
            ("198.18.0.1:4000", "198.18.0.2:5201"),
            ("[2001:db8::1]:4000", "[2001:db8::2]:5201"),
        ] {
            let mut f = udp_frame(&endpoints(src, dst), 16);
            assert_eq!(tos_of(&f), Some(0), "{dst}");
            let unmarked = f.clone();
            set_tos(&mut f, 0xb9);
            assert_eq!(tos_of(&f), Some(0xb9), "{dst}");
            // Only the TOS byte and IPv4's header checksum differ.
            let changed: Vec<usize> = (0..f.len()).filter(|&i| f[i] != unmarked[i]).collect();
            if f[12] == 0x08 {
                assert_eq!(sum16(0, &f[14..34]), 0xffff, "{dst}");
                assert!(
                    changed.iter().all(|i| [15, 24, 25].contains(i)),
                    "{changed:?}"
                );
            } else {
                // Version 6 and the flow label's top nibble kept around the class.
                assert_eq!((f[14] >> 4, f[15] & 0x0f), (6, 0));
                assert_eq!(changed, [14, 15]);
                let udp = &f[54..];
                let acc = sum16(udp.len() as u32 + 17, &f[22..54]);
                assert_eq!(sum16(acc, udp), 0xffff, "the UDP checksum still holds");
            }
            set_tos(&mut f, 0);
            assert_eq!(f, unmarked, "{dst}");
        }
        assert_eq!(tos_of(&[0u8; 13]), None);
    }

    #[test]
    fn the_payload_is_found_in_both_families_and_padding_is_left_out() {
        for (src, dst) in [
            ("198.18.0.1:4000", "198.18.0.2:5201"),
            ("[2001:db8::1]:4000", "[2001:db8::2]:5201"),
        ] {
            let e = endpoints(src, dst);
            let mut f = udp_frame(&e, 6);
            let at = payload_offset(&e.dst);
            f[at..].copy_from_slice(b"sonde!");
            // Padded to the Ethernet minimum, as a NIC would.
            f.resize(60.max(f.len()), 0);
            assert_eq!(udp_payload(&f), Some(&b"sonde!"[..]), "{dst}");
        }
        let mut arp = udp_frame(&endpoints("198.18.0.1:1", "198.18.0.2:2"), 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(udp_payload(&arp), None);
        assert_eq!(udp_payload(&arp[..20]), None);
    }

    #[test]
    fn an_answer_goes_back_with_the_requests_sequence_in_both_families() {
        for (src, dst) in [
            ("198.18.0.1:4000", "198.18.0.2:5201"),
            ("[2001:db8::1]:4000", "[2001:db8::2]:5201"),
        ] {
            let e = endpoints(src, dst);
            let mut req = udp_frame(&e, 64);
            let at = payload_offset(&e.dst);
            req[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
            req[at + 8] = 0xff;
            fix_udp_checksum(&mut req);
            let mut out = vec![0xeeu8; 2048];
            assert_eq!(
                answer(&req, e.dst.ip(), 1024, 8, &mut out),
                None,
                "another host"
            );
            let len = answer(&req, e.src.ip(), 1024, 8, &mut out).unwrap();
            let back = &out[..len];
            // The same frame the peer would have built toward the client.
            let mut want = udp_frame(
                &Endpoints {
                    src_mac: e.dst_mac,
                    dst_mac: e.src_mac,
                    src: e.dst,
                    dst: e.src,
                },
                1024,
            );
            want[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
            fix_udp_checksum(&mut want);
            assert_eq!(back, &want[..], "{src}");
            assert_eq!(udp_to(back).map(|(port, _)| port), Some(4000));
            assert_eq!(udp_payload(back).unwrap().len(), 1024);
        }
        let e = endpoints("198.18.0.1:4000", "198.18.0.2:5201");
        let from = e.src.ip();
        assert_eq!(
            answer(&udp_frame(&e, 8), from, 4096, 8, &mut [0u8; 2048]),
            None
        );
    }
}
