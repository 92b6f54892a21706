//! What limited each direction's loaded phase of an rpm run, judged from the client's own
//! TCP_INFO of its load-generating connections and the round trips the method timed. The
//! client is the sender of the upload and the receiver of the download, so it sees the
//! upload's whole story (TCP's chronographs, retransmissions, the RTT above its minimum)
//! and, of the download, its own advertised window and the queue its probes waited in.
//! The download's sender figures (its chronographs, its retransmissions) are the
//! server's: read where the far end is `sonde serve --rpm`, which gives each connection
//! its own (`intervals[].server_tcp`), absent elsewhere.
//!
//! The rules are the stream kind's, on the same figures: a sender that waited on the
//! receiver's window or its own buffer for a share of the time was limited by it for that
//! share; what is left is the network's when a queue stood on the path or segments were
//! lost ([`super::stream::QUEUE_DELAY_NOISE_US`], [`super::LOSS_NOISE`]).
//!
//! The run's own verdict (`end.limited_by`, what every kind fills and the limits table,
//! `sonde show` and OpenMetrics read) is one direction's: [`judge_run`] says which and why.

use super::finding::{loss_signal, pick};
use super::stream::{
    network_finding, NOTHING_FOUND, QUEUE_DELAY_DECISIVE_US, QUEUE_DELAY_NOISE_US,
};
use super::window::BUFFER_BDP_FACTOR;
use crate::rpm::{RpmDirection, RpmEnd};
use crate::side::{Role, Transfer};
use crate::tcp::TcpSummary;
use crate::verdict::{Evidence, Finding, Limit, LimitedBy, TransferEnd};

const BY: Option<Role> = Some(Role::Client);

/// The loaded phase's intervals with their lengths, seconds: those once goodput
/// saturated (a moving RPM exists), or all but the first (slow start) when it never did.
fn loaded(d: &RpmDirection) -> Vec<(f64, usize)> {
    let mut out = Vec::new();
    let saturated = d.intervals.iter().any(|i| i.moving_rpm.is_some());
    for (n, i) in d.intervals.iter().enumerate() {
        let start = if n == 0 {
            0.0
        } else {
            d.intervals[n - 1].end_s
        };
        let keep = if saturated {
            i.moving_rpm.is_some()
        } else {
            n > 0
        };
        if keep && i.end_s > start {
            out.push((i.end_s - start, n));
        }
    }
    out
}

/// What the client does with a direction's bytes.
pub fn transfer(upload: bool) -> Transfer {
    match upload {
        true => Transfer::Send,
        false => Transfer::Receive,
    }
}

/// The client's TCP figures over the direction's loaded phase.
pub fn loaded_tcp(d: &RpmDirection, upload: bool) -> Option<TcpSummary> {
    let rows = loaded(d);
    let intervals = rows
        .iter()
        .map(|(secs, n)| (*secs, &d.intervals[*n].tcp[..]));
    TcpSummary::of(intervals, transfer(upload))
}

/// Fills the direction's `tcp_info` and `limited_by`; `idle_ms` is the run's idle round
/// trip (the base the loaded one is held against).
pub fn judge_direction(d: &mut RpmDirection, upload: bool, idle_ms: Option<f64>) {
    d.tcp_info = loaded_tcp(d, upload);
    let rows = loaded(d);
    let server = rows
        .iter()
        .map(|(secs, n)| (*secs, &d.intervals[*n].server_tcp[..]));
    d.server_tcp_info = TcpSummary::of(server, transfer(!upload));
    d.limited_by = judge(d, upload, idle_ms);
}

/// A direction of an rpm run, as the document names it (`end.rpm.download`, `upload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Download,
    Upload,
}

impl Way {
    /// In the order the method runs them.
    pub const BOTH: [Way; 2] = [Way::Download, Way::Upload];

    /// The document's name of it (its key under `end.rpm`, OpenMetrics' `direction`).
    pub fn as_str(self) -> &'static str {
        match self {
            Way::Download => "download",
            Way::Upload => "upload",
        }
    }

    /// Its stage in the run's section; `None` when it was not measured.
    pub fn of(self, r: &RpmEnd) -> Option<&RpmDirection> {
        match self {
            Way::Download => r.download.as_ref(),
            Way::Upload => r.upload.as_ref(),
        }
    }
}

/// The run's verdict (`end.limited_by`): each measured direction judged again from its
/// stored figures (as [`judge_direction`] judged it), and of those with a verdict, the
/// least responsive one's: the longest loaded round trip (`responsiveness.loaded`, the self
/// probes on the load-generating connections). The kind's claim is its RPM, which pools
/// both directions' probes, so the direction whose load built the longer queue pulled it
/// down most, and what limited that direction is what limited the run. Its goodput is no
/// measure to pick by: access links are asymmetric, so the upload's is lower on most of
/// them whatever limited it. A direction without a loaded round trip comes after one with;
/// a tie, or neither, is the download's (the method's first stage, the figure
/// networkQuality and mach lead with). A direction not measured, or without the client's
/// TCP_INFO, has no verdict and is never the run's. The other direction's verdict stays in
/// its own place (`end.rpm.<way>.limited_by`); the run's names its direction in every
/// figure and sentence ([`as_run`]).
pub fn judge_run(r: &RpmEnd) -> Option<LimitedBy> {
    let idle_ms = r
        .idle
        .as_ref()
        .and_then(|i| (i.count > 0).then_some(i.trimmed_mean_ms));
    let mut best: Option<(Way, LimitedBy, Option<f64>)> = None;
    for way in Way::BOTH {
        let Some(d) = way.of(r) else { continue };
        let Some(v) = judge(d, way == Way::Upload, idle_ms) else {
            continue;
        };
        let loaded = d.responsiveness.as_ref().map(|r| r.loaded.trimmed_mean_ms);
        let longer = match &best {
            None => true,
            Some((_, _, held)) => {
                loaded.unwrap_or(f64::NEG_INFINITY) > held.unwrap_or(f64::NEG_INFINITY)
            }
        };
        if longer {
            best = Some((way, v, loaded));
        }
    }
    best.map(|(way, v, _)| as_run(way, &v))
}

/// A direction's verdict as the run's: each figure named by its path under `end.rpm`
/// (`upload.tcp_info.srtt_us`) and each sentence led by the direction, so that the run's
/// verdict read alone (a limits table, `sonde show`, a comparison) says which direction
/// it is of, and is that direction's verdict in all else.
pub fn as_run(way: Way, v: &LimitedBy) -> LimitedBy {
    let name = |list: &[Evidence]| -> Vec<Evidence> {
        list.iter()
            .map(|e| Evidence {
                figure: format!("{}.{}", way.as_str(), e.figure),
                text: format!("{}: {}", way.as_str(), e.text),
                ..e.clone()
            })
            .collect()
    };
    LimitedBy {
        verdict: v.verdict,
        strength: v.strength,
        evidence: name(&v.evidence),
        runner_up: v.runner_up.as_ref().map(|f| Finding {
            evidence: name(&f.evidence),
            ..f.clone()
        }),
    }
}

/// The verdict on one direction whose `tcp_info` is filled; `None` without it.
pub fn judge(d: &RpmDirection, upload: bool, idle_ms: Option<f64>) -> Option<LimitedBy> {
    let t = d.tcp_info.as_ref()?;
    let mut found = Vec::new();
    let explained = match upload {
        true => {
            let (w, b) = sender_waits(t, Role::Client);
            let share = w.strength.max(b.strength);
            found.extend([w, b]);
            share
        }
        false => {
            let mut w = receive_window(d, t);
            // The server's own chronograph of the same window, where it gave one.
            if let Some(s) = &d.server_tcp_info {
                let (by_server, _) = sender_waits(s, Role::Server);
                w = Some(match w {
                    Some(c) => stronger_first(c, by_server),
                    None => by_server,
                });
            }
            let share = w.as_ref().map_or(0.0, |w| w.strength);
            found.extend(w);
            share
        }
    };
    found.extend(network(d, t, upload, idle_ms, explained));
    if found.iter().all(|f| f.strength < NOTHING_FOUND) {
        let text =
            "no limit of the client's found: no window or buffer waited on, no queue or loss seen";
        found.push(Finding {
            verdict: Limit::Network,
            strength: NOTHING_FOUND,
            evidence: vec![Evidence::new(
                TransferEnd::Test,
                None,
                "limited_by",
                0.0,
                "",
                text.into(),
            )],
        });
    }
    pick(found)
}

/// Two readings of one limit as one finding: the stronger's strength, its evidence first.
fn stronger_first(a: Finding, b: Finding) -> Finding {
    let (mut a, b) = if a.strength >= b.strength {
        (a, b)
    } else {
        (b, a)
    };
    a.evidence.extend(b.evidence);
    a
}

/// A sender (the client on the upload, the server on the download) waiting on the
/// receiver's window and on its own send buffer: TCP's chronographs, share of the time
/// (median connection).
fn sender_waits(t: &TcpSummary, by: Role) -> (Finding, Finding) {
    let chrono = |verdict, figure: &str, share: Option<f64>, what: &str| {
        let share = share.unwrap_or(0.0) / 100.0;
        let text = format!(
            "the {} (sender) was {what}-limited {:.0} % of the time (tcp_info, median connection)",
            by.as_str(),
            share * 100.0
        );
        let e = Evidence::new(
            TransferEnd::Sender,
            Some(by),
            figure,
            share * 100.0,
            "%",
            text,
        );
        Finding {
            verdict,
            strength: share,
            evidence: vec![e],
        }
    };
    (
        chrono(
            Limit::ReceiverWindow,
            "tcp_info.rwnd_limited_percent",
            t.rwnd_limited_percent.map(|s| s.median),
            "rwnd",
        ),
        chrono(
            Limit::SenderBuffer,
            "tcp_info.sndbuf_limited_percent",
            t.sndbuf_limited_percent.map(|s| s.median),
            "sndbuf",
        ),
    )
}

/// The download's receiver (the client) holding its window shut: the bytes a connection
/// had in flight (its share of the goodput over the loaded round trip) against the window
/// it advertised. Linux autotunes a receiver's window to [`BUFFER_BDP_FACTOR`] times what
/// arrives in a round trip, so a window that was filled beyond half was capped (by
/// `tcp_rmem` or `SO_RCVBUF`), and a full one held the transfer.
fn receive_window(d: &RpmDirection, t: &TcpSummary) -> Option<Finding> {
    let wnd = t.rcv_wnd_bytes?.median;
    // The client's own smoothed RTT (its window updates' and requests' acknowledgements
    // come back behind the download): the self probes' loaded round trip also holds the
    // time a probe's answer waited in the server's socket for this very window.
    let rtt_ms = t
        .srtt_us
        .map(|s| s.median / 1e3)
        .or_else(|| d.responsiveness.as_ref().map(|r| r.loaded.trimmed_mean_ms))?;
    let conns = d.connections.max(1) as f64;
    let in_flight = d.goodput_bits_per_second / conns / 8.0 * rtt_ms / 1e3;
    if wnd <= 0.0 {
        return None;
    }
    let fill = in_flight / wnd;
    let strength = (fill * BUFFER_BDP_FACTOR - 1.0).clamp(0.0, 1.0);
    let text = format!(
        "the client (receiver) advertised {:.1} KiB and had {:.1} KiB in flight per connection ({:.0} % of it: goodput × its smoothed RTT {:.1} ms)",
        wnd / 1024.0,
        in_flight / 1024.0,
        fill * 100.0,
        rtt_ms
    );
    let figure = "tcp_info.rcv_wnd_bytes";
    let e = Evidence::new(TransferEnd::Receiver, BY, figure, wnd, "bytes", text);
    Some(Finding {
        verdict: Limit::ReceiverWindow,
        strength,
        evidence: vec![e],
    })
}

/// A queueing delay's strength as the stream kind weighs it.
fn queue_signal(queued_us: f64) -> f64 {
    ((queued_us - QUEUE_DELAY_NOISE_US) / (QUEUE_DELAY_DECISIVE_US - QUEUE_DELAY_NOISE_US))
        .clamp(0.0, 1.0)
}

/// The path: the client's smoothed RTT above the path's base, the loaded round trip above
/// the idle one (the method's own probes, on the load-generating connections), and the
/// sender's retransmissions against the segments delivered. Scaled by the share of the
/// time a window or buffer did not explain.
fn network(
    d: &RpmDirection,
    t: &TcpSummary,
    upload: bool,
    idle_ms: Option<f64>,
    explained: f64,
) -> Option<Finding> {
    let end = match upload {
        true => TransferEnd::Sender,
        false => TransferEnd::Receiver,
    };
    let mut signals: Vec<(f64, Evidence)> = Vec::new();
    // The kernel's smoothed RTT sees the path alone; a self probe also waits in the
    // hosts' sockets (behind its own connection's unsent bytes, a server's answer behind
    // its download), so where the kernel gave one the probes say no more than it.
    let mut path_queue = None;
    // The path's base: the lowest of the connections' minima and the idle round trip (a
    // connection opened into a full queue never saw the empty path).
    let base = t
        .min_rtt_us
        .map(|m| m.min)
        .into_iter()
        .chain(idle_ms.map(|i| i * 1e3));
    if let (Some(srtt), Some(min)) = (t.srtt_us, base.reduce(f64::min)) {
        let srtt = srtt.median;
        let text = format!(
            "the client's smoothed RTT {:.2} ms (± {:.2}, tcp_info, median connection) against the path's base {:.2} ms (the lowest tcpi_min_rtt or idle round trip)",
            srtt / 1e3,
            t.rttvar_us.map_or(0.0, |v| v.median) / 1e3,
            min / 1e3
        );
        let e = Evidence::new(end, BY, "tcp_info.srtt_us", srtt, "us", text);
        path_queue = Some(queue_signal(srtt - min));
        signals.push((queue_signal(srtt - min), e));
    }
    let loaded_ms = d.responsiveness.as_ref().map(|r| r.loaded.trimmed_mean_ms);
    if let (Some(l), Some(i)) = (loaded_ms, idle_ms) {
        let text = format!(
            "the loaded round trip {l:.1} ms against the idle {i:.1} ms: {:.1} ms queued",
            l - i
        );
        let e = Evidence::new(
            TransferEnd::Test,
            BY,
            "responsiveness.loaded.trimmed_mean_ms",
            l,
            "ms",
            text,
        );
        signals.push((
            queue_signal((l - i) * 1e3).min(path_queue.unwrap_or(1.0)),
            e,
        ));
    }
    // The sender's retransmissions: the client's on the upload, the server's (where it
    // gave its readings) on the download.
    let by = if upload { Role::Client } else { Role::Server };
    if let Some((r, sent)) = retransmits(d, upload) {
        let loss = r as f64 / sent.max(1.0);
        let text = format!(
            "the {} retransmitted {r} segments ({:.2} % of the {:.0} delivered)",
            by.as_str(),
            loss * 100.0,
            sent
        );
        let figure = match upload {
            true => "intervals.tcp.retransmits",
            false => "intervals.server_tcp.retransmits",
        };
        let e = Evidence::new(
            TransferEnd::Sender,
            Some(by),
            figure,
            r as f64,
            "segments",
            text,
        );
        signals.push((loss_signal(loss), e));
    }
    network_finding(signals, explained)
}

/// The sender's retransmitted segments over the loaded phase (all connections) and the
/// segments its goodput delivered: the client's samples on the upload, the server's on
/// the download.
fn retransmits(d: &RpmDirection, upload: bool) -> Option<(u64, f64)> {
    let rows = loaded(d);
    let samples = rows
        .iter()
        .flat_map(|(_, n)| match upload {
            true => d.intervals[*n].tcp.iter(),
            false => d.intervals[*n].server_tcp.iter(),
        })
        .filter(|s| s.transfer == Transfer::Send);
    let (mut r, mut mss) = (0u64, 0u32);
    for s in samples {
        r += s.retransmits as u64;
        mss = mss.max(s.mss_bytes);
    }
    if mss == 0 {
        return None;
    }
    let secs: f64 = rows.iter().map(|(s, _)| s).sum();
    let bytes: f64 = rows
        .iter()
        .map(|(s, n)| d.intervals[*n].goodput_bits_per_second / 8.0 * s)
        .sum();
    (secs > 0.0).then_some((r, bytes / mss as f64))
}
