//! TCP_INFO: what the kernel knows about one TCP connection. libc's `tcp_info` stops at
//! `tcpi_data_segs_out`, before the figures a bottleneck verdict needs (delivery rate,
//! the busy / rwnd-limited / sndbuf-limited times, the windows), so this module reads the
//! kernel's full struct (`include/uapi/linux/tcp.h`) itself. A field the running kernel
//! does not fill (it writes fewer bytes than the struct) is `None`, never zero.

use std::mem::{offset_of, size_of};
use std::os::fd::RawFd;

/// `struct tcp_info` as Linux 6.18 lays it out, up to its AccECN byte counters (280
/// bytes; an older kernel fills fewer).
#[repr(C)]
#[derive(Default)]
struct Raw {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    /// Bit 0: `tcpi_delivery_rate_app_limited`.
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    rehash: u32,
    total_rto: u16,
    total_rto_recoveries: u16,
    total_rto_time: u32,
    /// Linux 6.18's AccECN counters: CE marks received, and bytes by codepoint delivered
    /// (as the peer's AccECN feedback said) and received.
    received_ce: u32,
    delivered_e1_bytes: u32,
    delivered_e0_bytes: u32,
    delivered_ce_bytes: u32,
    received_e1_bytes: u32,
    received_e0_bytes: u32,
    received_ce_bytes: u32,
    accecn_fail_mode: u16,
    accecn_opt_seen: u16,
}

/// `tcpi_options`: ECN negotiated on the connection, and ECT seen from the peer.
const TCPI_OPT_ECN: u8 = 8;
const TCPI_OPT_ECN_SEEN: u8 = 16;

/// One reading of a connection's TCP_INFO. Times are in microseconds, rates in bytes per
/// second, windows in bytes, counts in segments; the `*_us` totals and `total_retrans`,
/// `bytes_*` only grow, so a window's figure is the difference of two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub total_retrans: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_cwnd: u32,
    pub snd_mss: u32,
    /// Slow-start threshold; `None` while TCP has not left slow start (the kernel's
    /// "infinite" 0x7fffffff).
    pub snd_ssthresh: Option<u32>,
    /// Segments the kernel holds lost now, and the reordering degree it assumes.
    pub lost: u32,
    pub reordering: u32,
    /// Segments sent and not yet acknowledged.
    pub unacked: u32,
    /// The receiver's estimate of the RTT and of the window it must offer (autotuning).
    pub rcv_rtt_us: u32,
    pub rcv_space: u32,
    pub pacing_rate: u64,
    pub min_rtt_us: Option<u32>,
    pub notsent_bytes: Option<u32>,
    pub delivery_rate: Option<u64>,
    /// The last delivery-rate sample was limited by the application, not the network.
    pub delivery_rate_app_limited: bool,
    pub busy_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: Option<u64>,
    /// Segments the peer reported receiving twice (D-SACK): retransmissions that were not
    /// needed, because the original was reordered or late rather than lost.
    pub dsack_dups: Option<u32>,
    /// The peer's advertised receive window (sender) and our own (receiver), scaled.
    pub snd_wnd: Option<u32>,
    pub rcv_wnd: Option<u32>,
    /// ECN was negotiated (classic or AccECN), and ECT was seen from the peer.
    pub ecn_negotiated: bool,
    pub ecn_seen: bool,
    /// Segments delivered that the peer reported CE-marked (ECE, or AccECN's count).
    pub delivered_ce: Option<u32>,
    /// AccECN (6.18): CE marks this end received, and CE-marked bytes delivered (by the
    /// peer's feedback) and received.
    pub received_ce: Option<u32>,
    pub delivered_ce_bytes: Option<u32>,
    pub received_ce_bytes: Option<u32>,
}

/// TCP's "no threshold yet".
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// Reads a connection's TCP_INFO; `None` for a socket that is not TCP or is closed.
pub fn tcp_info(fd: RawFd) -> Option<TcpInfo> {
    let mut raw = Raw::default();
    let mut len = size_of::<Raw>() as libc::socklen_t;
    // SAFETY: `Raw` is plain data laid out as the kernel's struct; the kernel writes at
    // most `len` bytes and says how many it wrote.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut Raw).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    Some(decode(&raw, len as usize))
}

/// The reading of `raw` of which the kernel filled the first `len` bytes.
fn decode(raw: &Raw, len: usize) -> TcpInfo {
    let has = |offset: usize, size: usize| offset + size <= len;
    macro_rules! field {
        ($f:ident) => {
            has(offset_of!(Raw, $f), size_of_val(&raw.$f)).then_some(raw.$f)
        };
    }
    TcpInfo {
        total_retrans: raw.total_retrans,
        rtt_us: raw.rtt,
        rttvar_us: raw.rttvar,
        snd_cwnd: raw.snd_cwnd,
        snd_mss: raw.snd_mss,
        snd_ssthresh: (raw.snd_ssthresh < INFINITE_SSTHRESH).then_some(raw.snd_ssthresh),
        lost: raw.lost,
        reordering: raw.reordering,
        unacked: raw.unacked,
        rcv_rtt_us: raw.rcv_rtt,
        rcv_space: raw.rcv_space,
        pacing_rate: raw.pacing_rate,
        min_rtt_us: field!(min_rtt),
        notsent_bytes: field!(notsent_bytes),
        delivery_rate: field!(delivery_rate),
        delivery_rate_app_limited: field!(flags).is_some_and(|f| f & 1 != 0),
        busy_us: field!(busy_time),
        rwnd_limited_us: field!(rwnd_limited),
        sndbuf_limited_us: field!(sndbuf_limited),
        bytes_acked: raw.bytes_acked,
        bytes_received: raw.bytes_received,
        bytes_retrans: field!(bytes_retrans),
        dsack_dups: field!(dsack_dups),
        snd_wnd: field!(snd_wnd),
        rcv_wnd: field!(rcv_wnd),
        ecn_negotiated: raw.options & TCPI_OPT_ECN != 0,
        ecn_seen: raw.options & TCPI_OPT_ECN_SEEN != 0,
        delivered_ce: field!(delivered_ce),
        received_ce: field!(received_ce),
        delivered_ce_bytes: field!(delivered_ce_bytes),
        received_ce_bytes: field!(received_ce_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn layout_matches_the_kernel_header() {
        // Offsets from include/uapi/linux/tcp.h (pahole on 6.x).
        assert_eq!(offset_of!(Raw, rto), 8);
        assert_eq!(offset_of!(Raw, total_retrans), 100);
        assert_eq!(offset_of!(Raw, pacing_rate), 104);
        assert_eq!(offset_of!(Raw, min_rtt), 148);
        assert_eq!(offset_of!(Raw, delivery_rate), 160);
        assert_eq!(offset_of!(Raw, busy_time), 168);
        assert_eq!(offset_of!(Raw, snd_wnd), 228);
        assert_eq!(offset_of!(Raw, rehash), 236);
        assert_eq!(offset_of!(Raw, received_ce), 248);
        assert_eq!(offset_of!(Raw, received_ce_bytes), 272);
        assert_eq!(offset_of!(Raw, accecn_opt_seen), 278);
        assert_eq!(size_of::<Raw>(), 280);
    }

    #[test]
    fn an_older_kernel_leaves_the_newer_fields_absent() {
        let raw = Raw {
            busy_time: 7,
            snd_wnd: 9,
            min_rtt: 5,
            ..Default::default()
        };
        // 4.9 wrote up to tcpi_delivery_rate (168 bytes).
        let t = decode(&raw, 168);
        assert_eq!(t.min_rtt_us, Some(5));
        assert_eq!(t.busy_us, None);
        assert_eq!(t.snd_wnd, None);
        assert!(decode(&raw, size_of::<Raw>()).snd_wnd.is_some());
        // 6.17 wrote up to tcpi_total_rto_time (248 bytes): no AccECN counters.
        assert_eq!(decode(&raw, 248).received_ce, None);
        assert_eq!(decode(&raw, 280).received_ce_bytes, Some(0));
    }

    #[test]
    fn a_loopback_transfer_is_counted() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        s.read_exact(&mut got).unwrap();
        let sent = tcp_info(c.as_raw_fd()).unwrap();
        let recv = tcp_info(s.as_raw_fd()).unwrap();
        assert!(sent.snd_cwnd > 0 && sent.snd_mss > 0);
        assert_eq!(recv.bytes_received, 100_000);
        assert!(sent.busy_us.is_some() && sent.min_rtt_us.is_some());
        assert!(recv.rcv_wnd.unwrap_or(1) > 0);
    }
}
