//! A stream test's summary table: one column per (direction, side) with the figures of
//! `end`, each labelled with the side that measured it.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use sonde_results::document::EndSide;
use sonde_results::{Document, StreamSpec};

use super::common::{footer, steal};
use crate::units::{bits_per_second, bytes, ms, opt};

/// The line printed before a stream test starts.
pub fn stream_heading(spec: &StreamSpec, target: &str) -> String {
    let t = &spec.timing;
    format!(
        "sonde stream {target}: {}, {} connection(s), {:.1} s measured (+{:.1} s warm-up, {:.1} s cool-down)",
        spec.direction.as_str(),
        spec.connections,
        t.duration_ms as f64 / 1e3,
        t.warmup_ms as f64 / 1e3,
        t.cooldown_ms as f64 / 1e3
    )
}

/// The figures of one side, as (metric, value) pairs in display order.
fn column(e: &EndSide) -> Vec<(&'static str, String)> {
    let cpu = e.cpu.usage.as_ref();
    vec![
        (
            "worker threads (CPUs)",
            match &e.by.pinned_cpus {
                Some(c) => format!(
                    "{} ({})",
                    e.by.threads,
                    c.iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                None => format!("{} (not pinned)", e.by.threads),
            },
        ),
        ("bytes", bytes(e.bytes)),
        ("throughput", bits_per_second(e.bits_per_second)),
        (
            "MB/s (10^6 bytes)",
            format!("{:.1}", e.megabytes_per_second),
        ),
        ("buffers/s", format!("{:.0}", e.buffers_per_second)),
        (
            "per connection min / max",
            format!(
                "{} / {}",
                bits_per_second(e.connections.min_bits_per_second),
                bits_per_second(e.connections.max_bits_per_second)
            ),
        ),
        (
            "per connection stddev",
            bits_per_second(e.connections.stddev_bits_per_second),
        ),
        (
            "TCP retransmits (system)",
            opt(e.tcp_retransmits.system, |v| v.to_string()),
        ),
        (
            "TCP retransmits (test conns)",
            opt(e.tcp_retransmits.connections, |v| v.to_string()),
        ),
        (
            "host CPU busy",
            opt(cpu, |c| {
                let busy = c.host.busy_percent();
                format!("{busy:.1}% of {} CPUs{}", c.cpus, steal(&c.host))
            }),
        ),
        (
            "  usr / sys / softirq / irq",
            opt(cpu, |c| {
                format!(
                    "{:.1} / {:.1} / {:.1} / {:.1} %",
                    c.host.user_percent,
                    c.host.system_percent,
                    c.host.softirq_percent,
                    c.host.irq_percent
                )
            }),
        ),
        (
            "busiest CPU",
            opt(cpu, |c| {
                let busy = c.busiest.busy_percent();
                format!("cpu{} {busy:.1}%{}", c.busiest_cpu, steal(&c.busiest))
            }),
        ),
        (
            "process CPU seconds",
            opt(e.cpu.process_cpu_s, |v| format!("{v:.2}")),
        ),
        (
            "cycles/byte (host)",
            opt(e.cycles_per_byte, |v| format!("{v:.2}")),
        ),
        ("NIC", opt(e.counted.nic.as_ref(), |n| n.iface.clone())),
        (
            "NIC packets rx / tx",
            opt(e.counted.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_packets, n.tx_packets)
            }),
        ),
        (
            "NIC drops rx / tx",
            opt(e.counted.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_dropped, n.tx_dropped)
            }),
        ),
        (
            "NIC interrupts",
            opt(e.counted.interrupts, |v| v.to_string()),
        ),
    ]
}

/// A sender's TCP over the window in one line (the median connection's figures when it
/// had several); figures TCP_INFO did not give are left out, and so is the line when
/// none was read.
fn tcp_line(label: &str, e: &EndSide) -> String {
    let Some(t) = e.tcp_info.as_deref() else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(r) = t.srtt_us {
        let min = t
            .min_rtt_us
            .map_or_else(String::new, |m| format!(" (min {})", ms(m.min)));
        parts.push(format!("srtt {}{min}", ms(r.median)));
    }
    if let Some(c) = t.cwnd_segments {
        parts.push(format!("cwnd {:.0} seg", c.median));
    }
    for (name, share) in [
        ("rwnd-limited", t.rwnd_limited_percent),
        ("sndbuf-limited", t.sndbuf_limited_percent),
    ] {
        if let Some(p) = share {
            parts.push(format!("{name} {:.0} %", p.median));
        }
    }
    let retransmits = match (e.tcp_retransmits.connections, t.retransmits) {
        (Some(n), _) => Some(n as f64),
        (None, Some(r)) if t.connections == 1 => Some(r.median),
        _ => None,
    };
    if let Some(n) = retransmits {
        let all = if t.connections > 1 { " in all" } else { "" };
        parts.push(format!("retransmits {n:.0}{all}"));
    }
    if parts.is_empty() {
        return String::new();
    }
    let of = if t.connections > 1 {
        format!(", median of {} connections", t.connections)
    } else {
        String::new()
    };
    format!(
        "tcp, {label} ({}{of}): {}\n",
        e.by.measured_by.as_str(),
        parts.join(", ")
    )
}

/// Human summary of a document: one column per side and direction, then notes and the
/// partial/error status.
pub fn stream(doc: &Document) -> String {
    let Some(e) = doc.end.stream() else {
        return footer(&doc.end);
    };
    let mut labelled = vec![
        ("sender", e.sender.as_ref()),
        ("receiver", e.receiver.as_ref()),
    ];
    if let Some(r) = &e.reverse {
        labelled.extend([
            ("reverse sender", r.sender.as_ref()),
            ("reverse receiver", r.receiver.as_ref()),
        ]);
    }
    let sides: Vec<(String, &EndSide)> = labelled
        .into_iter()
        .filter_map(|(label, side)| {
            side.map(|s| (format!("{label} ({})", s.by.measured_by.as_str()), s))
        })
        .collect();
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![String::new()];
    header.extend(sides.iter().map(|(l, _)| l.clone()));
    table.set_header(header);
    let columns: Vec<_> = sides.iter().map(|(_, s)| column(s)).collect();
    if let Some(first) = columns.first() {
        for (row, (metric, _)) in first.iter().enumerate() {
            let mut cells = vec![Cell::new(metric)];
            cells.extend(
                columns
                    .iter()
                    .map(|c| Cell::new(&c[row].1).set_alignment(CellAlignment::Right)),
            );
            table.add_row(cells);
        }
    }
    let mut out = table.to_string();
    out.push('\n');
    let window = sides.first().map(|(_, s)| s.seconds).unwrap_or(0.0);
    out.push_str(&format!(
        "measured window {window:.2} s; rates are TCP payload (goodput), SI units\n"
    ));
    let mut notes: Vec<String> = Vec::new();
    for (_, s) in &sides {
        for n in &s.counted.notes {
            let n = format!("{}: {n}", s.by.measured_by.as_str());
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let senders = [("sender", e.sender.as_ref())].into_iter().chain(
        e.reverse
            .iter()
            .map(|r| ("reverse sender", r.sender.as_ref())),
    );
    for (label, side) in senders {
        out.push_str(&side.map_or_else(String::new, |s| tcp_line(label, s)));
    }
    out.push_str(&footer(&doc.end));
    out
}

/// A stream run's one figure in `sonde results list`: what its receiver received.
pub(crate) fn listed(e: &sonde_results::document::End) -> String {
    e.stream()
        .and_then(|s| s.receiver.as_ref())
        .map_or_else(|| "-".into(), |r| bits_per_second(r.bits_per_second))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::stored;
    use sonde_results::limit::{Evidence, Finding, Limit, LimitedBy, TransferEnd as Of};
    use sonde_results::tcp::{Spread, TcpSummary};
    use sonde_results::Role;

    fn spread(min: f64, median: f64) -> Option<Spread> {
        Some(Spread {
            min,
            median,
            max: median * 2.0,
        })
    }

    fn verdict() -> LimitedBy {
        LimitedBy {
            verdict: Limit::ReceiverWindow,
            strength: 0.9,
            evidence: vec![Evidence {
                end: Of::Sender,
                measured_by: Some(Role::Client),
                figure: "rwnd_limited_percent".into(),
                value: 87.0,
                unit: "%".into(),
                text: "rwnd-limited 87 % of the time".into(),
            }],
            runner_up: Some(Finding {
                verdict: Limit::Network,
                strength: 0.7,
                evidence: Vec::new(),
            }),
        }
    }

    #[test]
    fn the_summary_ends_with_the_verdict_only_when_there_is_one() {
        let mut doc = stored("v1-stream.json");
        doc.end.limited_by = None;
        let text = stream(&doc);
        assert!(!text.contains("limited by"), "{text}");
        doc.end.limited_by = Some(verdict());
        let text = stream(&doc);
        assert_eq!(
            text.lines().last().unwrap(),
            "limited by: the receiver's window (receiver_window) because rwnd-limited 87 % of the time (runner-up: network)"
        );
    }

    #[test]
    fn a_vcpu_the_hypervisor_stole_from_says_how_much_of_its_busy_time() {
        let mut doc = stored("v1-stream.json");
        let sonde_results::document::Section::Stream(s) = &mut doc.end.section else {
            panic!("a stream document");
        };
        let busy = |idle_percent: f64, steal_percent: f64| sonde_results::CpuBreakdown {
            user_percent: 100.0 - idle_percent - steal_percent,
            steal_percent,
            idle_percent,
            ..Default::default()
        };
        s.sender.as_mut().unwrap().cpu.usage = Some(sonde_results::CpuUsage {
            cpus: 2,
            host: busy(40.0, 12.0),
            busiest_cpu: 1,
            busiest: busy(5.0, 0.5),
        });
        let text = stream(&doc);
        assert!(text.contains("60.0% of 2 CPUs (steal 12.0%)"), "{text}");
        assert!(text.contains("cpu1 95.0% "), "under 1 %, not named: {text}");
    }

    #[test]
    fn a_sender_with_tcp_info_gets_its_line_with_units() {
        let mut doc = stored("v1-stream.json");
        let text = stream(&doc);
        assert!(
            !text.contains("tcp, sender"),
            "no TCP_INFO, no line: {text}"
        );
        let sonde_results::document::Section::Stream(s) = &mut doc.end.section else {
            panic!("a stream document");
        };
        let sender = s.sender.as_mut().unwrap();
        sender.tcp_retransmits.connections = Some(52047);
        sender.tcp_info = Some(Box::new(TcpSummary {
            connections: 4,
            intervals: 10,
            srtt_us: spread(90.0, 110.0),
            min_rtt_us: spread(3.0, 5.0),
            cwnd_segments: spread(200.0, 345.0),
            rwnd_limited_percent: spread(0.0, 0.2),
            ..Default::default()
        }));
        let by = sender.by.measured_by.as_str().to_string();
        let text = stream(&doc);
        let line = format!(
            "tcp, sender ({by}, median of 4 connections): srtt 0.110 ms (min 0.003 ms), cwnd 345 seg, rwnd-limited 0 %, retransmits 52047 in all\n"
        );
        assert!(text.contains(&line), "{text}");
        assert!(
            !text.contains("sndbuf-limited"),
            "an absent figure is left out"
        );
    }
}
