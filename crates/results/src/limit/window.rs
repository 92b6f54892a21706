//! The stream figures the rules read, gathered once from the document, and the two limits
//! a socket's size sets: the receiver's window and the sender's buffer.

use crate::document::{Document, EndSide};
use crate::spec::StreamSpec;
use crate::tcp::{Spread, TcpSummary};
use crate::verdict::{Evidence, Finding, Limit, TransferEnd};

/// A socket buffer the user set below this many bandwidth-delay products of its
/// connection (its share of the goodput × smoothed RTT) cannot keep the path full:
/// Linux's own receive autotuning sizes the buffer at twice what the application read in
/// an RTT (`tcp_rcv_space_adjust`), and the kernel keeps about half of a buffer for its
/// bookkeeping.
pub const BUFFER_BDP_FACTOR: f64 = 2.0;

/// How strongly a buffer below [`BUFFER_BDP_FACTOR`] bandwidth-delay products says it was
/// the limit: a strong suspect, not proof (TCP's own chronographs are proof, where they
/// fire).
pub const BUFFER_BELOW_BDP: f64 = 0.6;

/// The primary direction's figures.
pub(super) struct Facts<'a> {
    pub snd: &'a EndSide,
    /// Share of the time (0 to 1) the sender waited on the receiver's window, and on its
    /// own buffer, from TCP's chronographs or the sockets' sizes, with why.
    pub window_share: f64,
    pub buffer_share: f64,
    /// Each reason with how much of the share it gave.
    window_why: Vec<(f64, Evidence)>,
    buffer_why: Vec<(f64, Evidence)>,
    /// Retransmitted segments, those D-SACKed as needless, and the lost share of those sent.
    pub retransmits: Option<u64>,
    pub spurious: Option<u64>,
    pub loss: Option<f64>,
    pub srtt_us: Option<f64>,
    pub min_rtt_us: Option<f64>,
    /// Share of the sender's interval samples with unsent data in its socket.
    pub unsent_share: Option<f64>,
}

impl<'a> Facts<'a> {
    pub fn of(
        doc: &Document,
        spec: Option<&StreamSpec>,
        snd: &'a EndSide,
        rcv: Option<&'a EndSide>,
    ) -> Facts<'a> {
        let tcp = snd.tcp_info.as_deref();
        let median = |f: fn(&TcpSummary) -> Option<Spread>| tcp.and_then(f).map(|s| s.median);
        let mss = snd
            .connections
            .per_connection
            .iter()
            .find_map(|c| c.snd_mss_bytes)
            .filter(|m| *m > 0);
        let spurious = spurious(doc);
        let retransmits = snd.tcp_retransmits.connections;
        let loss = retransmits.zip(mss).map(|(r, mss)| {
            let segments = (snd.bytes as f64 / mss as f64).max(1.0);
            r.saturating_sub(spurious.unwrap_or(0)) as f64 / segments
        });
        let srtt_us = median(|t| t.srtt_us);
        // Each socket has its own buffer: a connection's share of the goodput, its BDP.
        let conns = snd.connections.count.max(1) as f64;
        let goodput = rcv.unwrap_or(snd).bits_per_second / conns;
        let bdp = srtt_us.map(|rtt| goodput / 8.0 * rtt / 1e6);
        let mut f = Facts {
            snd,
            window_share: 0.0,
            buffer_share: 0.0,
            window_why: Vec::new(),
            buffer_why: Vec::new(),
            retransmits,
            spurious,
            loss,
            srtt_us,
            min_rtt_us: median(|t| t.min_rtt_us),
            unsent_share: unsent_share(doc),
        };
        let chrono = |f: fn(&TcpSummary) -> Option<Spread>| median(f).map(|p| p / 100.0);
        f.judge_window(
            chrono(|t| t.rwnd_limited_percent),
            median(|t| t.snd_wnd_bytes),
            median(|t| t.cwnd_segments)
                .zip(mss)
                .map(|(c, m)| c * m as f64),
            median(|t| t.busy_percent).map_or(1.0, |b| b / 100.0),
        );
        let by = snd.by.measured_by;
        let sizes = spec.map_or((None, None), |s| (s.rcvbuf_bytes, s.sndbuf_bytes));
        f.judge_buffer(chrono(|t| t.sndbuf_limited_percent), by);
        if let (Some(bdp), Some(rcvbuf)) = (bdp, sizes.0) {
            let e = small_buffer(
                ("--rcvbuf", "spec.rcvbuf_bytes"),
                rcvbuf,
                bdp,
                TransferEnd::Receiver,
                rcv.map(|r| r.by.measured_by),
            );
            if let Some(e) = e {
                f.window_share = f.window_share.max(BUFFER_BELOW_BDP);
                f.window_why.push((BUFFER_BELOW_BDP, e));
            }
        }
        if let (Some(bdp), Some(sndbuf)) = (bdp, sizes.1) {
            if let Some(e) = small_buffer(
                ("--sndbuf", "spec.sndbuf_bytes"),
                sndbuf,
                bdp,
                TransferEnd::Sender,
                Some(by),
            ) {
                f.buffer_share = f.buffer_share.max(BUFFER_BELOW_BDP);
                f.buffer_why.push((BUFFER_BELOW_BDP, e));
            }
        }
        f
    }

    /// TCP's rwnd-limited share, or, when the receiver's advertised window was below the
    /// congestion window, the whole time TCP had data in flight.
    fn judge_window(
        &mut self,
        chrono: Option<f64>,
        wnd: Option<f64>,
        cwnd: Option<f64>,
        busy: f64,
    ) {
        let by = Some(self.snd.by.measured_by);
        if let Some(share) = chrono {
            self.window_share = share;
            let text = format!(
                "sender rwnd-limited {:.0} % of the time (median connection)",
                share * 100.0
            );
            let figure = "tcp_info.rwnd_limited_percent";
            let e = Evidence::new(TransferEnd::Sender, by, figure, share * 100.0, "%", text);
            self.window_why.push((share, e));
        }
        if let (Some(w), Some(c)) = (wnd, cwnd) {
            if w < c {
                self.window_share = self.window_share.max(busy);
                let text = format!(
                    "the receiver's advertised window ({:.0} KiB) was smaller than the congestion window ({:.0} KiB)",
                    w / 1024.0,
                    c / 1024.0
                );
                let figure = "tcp_info.snd_wnd_bytes";
                let e = Evidence::new(TransferEnd::Sender, by, figure, w, "bytes", text);
                self.window_why.push((busy, e));
            }
        }
    }

    fn judge_buffer(&mut self, chrono: Option<f64>, by: crate::side::Role) {
        if let Some(share) = chrono {
            self.buffer_share = share;
            let text = format!(
                "sender sndbuf-limited {:.0} % of the time (median connection)",
                share * 100.0
            );
            let figure = "tcp_info.sndbuf_limited_percent";
            let e = Evidence::new(
                TransferEnd::Sender,
                Some(by),
                figure,
                share * 100.0,
                "%",
                text,
            );
            self.buffer_why.push((share, e));
        }
    }
}

/// The user's buffer `bytes` when it is below [`BUFFER_BDP_FACTOR`] × `bdp`, as evidence.
fn small_buffer(
    (flag, figure): (&str, &str),
    bytes: u32,
    bdp: f64,
    end: TransferEnd,
    by: Option<crate::side::Role>,
) -> Option<Evidence> {
    let need = BUFFER_BDP_FACTOR * bdp;
    (f64::from(bytes) < need).then(|| {
        let text = format!(
            "{flag} {:.0} KiB is below twice a connection's bandwidth-delay product ({:.0} KiB)",
            f64::from(bytes) / 1024.0,
            need / 1024.0
        );
        Evidence::new(end, by, figure, f64::from(bytes), "bytes", text)
    })
}

/// The receiver's window and the sender's buffer as findings. A window that stayed
/// closed because the receiving application could not read is its CPU's limit, not the
/// window's; a saturated receiver (`l_r`) halves the window's finding: the evidence
/// cannot tell a slow reader from a small buffer (which itself costs the receiver CPU in
/// window updates), so the window stays in sight as the runner-up.
pub(super) fn buffers(f: &Facts<'_>, l_r: f64) -> (Finding, Finding) {
    let window = Finding {
        verdict: Limit::ReceiverWindow,
        strength: f.window_share * (1.0 - l_r / 2.0),
        evidence: strongest_first(&f.window_why),
    };
    let buffer = Finding {
        verdict: Limit::SenderBuffer,
        strength: f.buffer_share,
        evidence: strongest_first(&f.buffer_why),
    };
    (window, buffer)
}

/// The reasons that gave a share, strongest first; the first one even when none did.
fn strongest_first(why: &[(f64, Evidence)]) -> Vec<Evidence> {
    let mut v = why.to_vec();
    v.sort_by(|a, b| b.0.total_cmp(&a.0));
    v.into_iter()
        .enumerate()
        .filter(|(i, (share, _))| *i == 0 || *share > 0.0)
        .map(|(_, (_, e))| e)
        .collect()
}

/// The primary sender's retransmissions the receiver reported as duplicates (D-SACK),
/// over the window's intervals; `None` when the kernel does not count them.
fn spurious(doc: &Document) -> Option<u64> {
    doc.intervals
        .iter()
        .filter_map(|i| i.sender.as_ref())
        .flat_map(|s| s.tcp())
        .map(|t| t.dsack_dups.map(u64::from))
        .sum()
}

/// Share of the primary sender's samples with bytes written and not yet sent.
fn unsent_share(doc: &Document) -> Option<f64> {
    let seen: Vec<bool> = doc
        .intervals
        .iter()
        .filter_map(|i| i.sender.as_ref())
        .flat_map(|s| s.tcp())
        .filter_map(|t| t.notsent_bytes.map(|n| n > 0))
        .collect();
    (!seen.is_empty()).then(|| seen.iter().filter(|&&b| b).count() as f64 / seen.len() as f64)
}
