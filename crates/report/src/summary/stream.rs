//! A stream test's summary table: one column per (direction, side) with the figures of
//! `end`, each labelled with the side that measured it.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use sonde_results::document::EndSide;
use sonde_results::{Document, StreamSpec};

use super::common::footer;
use crate::units::{bits_per_second, bytes, opt};

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
                format!("{:.1}% of {} CPUs", c.host.busy_percent(), c.cpus)
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
                format!("cpu{} {:.1}%", c.busiest_cpu, c.busiest.busy_percent())
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
    out.push_str(&footer(&doc.end));
    out
}
