//! A watch's summary: the interface and host over the command's whole run.

use sonde_results::Document;

use super::common::{footer, steal, table};
use crate::units::{bits_per_second, opt};

/// Human summary of a watch: the interface and host over the command's whole run.
pub fn watch(doc: &Document) -> String {
    let Some(w) = doc.end.watch() else {
        return footer(&doc.end);
    };
    let mut t = table(vec!["over the whole run", "value"]);
    let rate = |v: Option<f64>| opt(v, bits_per_second);
    let rows = [
        ("command exit code", opt(w.exit_code, |c| c.to_string())),
        ("seconds", format!("{:.1}", w.seconds)),
        (
            "interface",
            w.iface.clone().unwrap_or_else(|| "none".into()),
        ),
        ("received", rate(w.rx_bits_per_second)),
        ("sent", rate(w.tx_bits_per_second)),
        (
            "rx / tx packets",
            opt(w.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_packets, n.tx_packets)
            }),
        ),
        (
            "rx / tx dropped",
            opt(w.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_dropped, n.tx_dropped)
            }),
        ),
        (
            "host CPU busy",
            opt(w.cpu.as_ref(), |c| {
                format!(
                    "{:.0} % (softirq {:.0} %){}",
                    c.host.busy_percent(),
                    c.host.softirq_percent,
                    steal(&c.host)
                )
            }),
        ),
        ("TCP retransmits", opt(w.tcp_retransmits, |v| v.to_string())),
        ("interface IRQs", opt(w.interrupts, |v| v.to_string())),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    let mut out = format!("{t}\n");
    for n in &w.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&footer(&doc.end));
    out
}

/// The line a watch starts with: its command, interface and interval.
pub fn watch_heading(w: &sonde_results::WatchSpec) -> String {
    format!(
        "sonde watch: {} (interface {}, every {:.1} s)",
        w.command.join(" "),
        w.iface.as_deref().unwrap_or("none"),
        w.timing.interval_ms as f64 / 1e3
    )
}
