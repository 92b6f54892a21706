//! Human summaries of result documents: each test kind's table in its module; here the
//! lab's, the store's and the comparison's, which span kinds.

mod load;
mod pps;
mod rr;
mod stream;

pub use load::{load, load_heading};
pub use pps::{pps, pps_heading, trial_line};
pub use rr::{cstate_comparison, poll_comparison, rr, rr_heading};
pub use stream::{stream, stream_heading};

/// Human summary of a watch: the interface and host over the command's whole run.
pub fn watch(doc: &Document) -> String {
    let Some(w) = &doc.end.watch else {
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
                    "{:.0} % (softirq {:.0} %)",
                    c.host.busy_percent(),
                    c.host.softirq_percent
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

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use sonde_results::Document;

use crate::units::{bits_per_second, opt};
use rr::{cpu_per_message, us};

/// What ends every summary: the shared host, and whether the result is partial.
fn footer(e: &sonde_results::document::End) -> String {
    let mut out = one_host_line(e);
    if e.partial {
        out.push_str(&format!(
            "PARTIAL RESULT: {}\n",
            e.error
                .as_deref()
                .unwrap_or("the test did not run to its planned end")
        ));
    }
    out
}

/// How a side left the kernel's socket path, in one line; empty for kernel sockets.
fn bypass_line(by: &sonde_results::document::MeasuredBy) -> String {
    let Some(b) = &by.bypass else {
        return String::new();
    };
    let queues: Vec<String> = b.queues.iter().map(u32::to_string).collect();
    if let Some(command) = &b.command {
        // An engine that runs a tool: what it ran, and its exact command line.
        return format!(
            "bypass: {}: {} ({}) on {}, queue {}\n  {command}\n",
            by.measured_by.as_str(),
            b.program.as_deref().unwrap_or("a tool"),
            b.version.as_deref().unwrap_or("version unknown"),
            b.interface,
            queues.join(","),
        );
    }
    let mut line = format!(
        "bypass: {}: AF_XDP on {} queue {}, {} mode",
        by.measured_by.as_str(),
        b.interface,
        queues.join(","),
        if b.zero_copy { "zero-copy" } else { "copy" },
    );
    if let Some(a) = &b.attach {
        line.push_str(&format!(", {a} XDP"));
    }
    if b.busy_poll {
        line.push_str(", busy polling");
    }
    line.push('\n');
    line
}

/// Both ends on one host: its CPU once, so that nobody adds the two sides.
fn one_host_line(e: &sonde_results::document::End) -> String {
    let Some(h) = &e.one_host else {
        return String::new();
    };
    let mut line = format!(
        "both ends ran on one host ({}): its CPU is counted once",
        h.hostname
    );
    if let Some(c) = &h.cpu {
        line.push_str(&format!(
            ", {:.1} % busy of {} CPUs",
            c.host.busy_percent(),
            c.cpus
        ));
    }
    if let Some(c) = h.cycles_per_byte {
        line.push_str(&format!(", {c:.2} cycles/byte"));
    }
    line.push_str("; each side's own figure is its process CPU\n");
    line
}

/// One row per measurement of `sonde lab`: throughput tests, then request/response tests.
/// A table in the summaries' style with this header.
pub(crate) fn table(header: impl Into<comfy_table::Row>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    t
}

pub fn lab(results: &[(String, Document)]) -> String {
    let status = |e: &sonde_results::document::End| {
        if e.partial {
            format!("PARTIAL: {}", e.error.as_deref().unwrap_or("cut short"))
        } else {
            "ok".into()
        }
    };
    let mut stream = table(vec![
        "throughput",
        "sent (client)",
        "received (server)",
        "retransmits",
        "host CPU busy",
        "cycles/byte",
        "status",
    ]);
    let mut packets = table(vec![
        "packet rate",
        "sent pps (client)",
        "received pps (server)",
        "lost",
        "socket drops",
        "status",
    ]);
    let mut rr = table(vec![
        "request/response",
        "messages/s",
        "RTT p50 us",
        "RTT p99 us",
        "RTT p99.9 us",
        "client CPU us/msg",
        "server CPU us/msg",
        "status",
    ]);
    let mut load = table(vec![
        "latency under load",
        "idle p50 us (UDP / TCP)",
        "upload: added p50 us",
        "download: added p50 us",
        "both: added p50 us",
        "status",
    ]);
    for (name, doc) in results {
        let e = &doc.end;
        if let Some(l) = &e.load {
            load.add_row(load::lab_row(name, l, status(e)));
        } else if let Some(p) = &e.packets {
            packets.add_row(vec![
                name.clone(),
                opt(p.sender.as_ref(), |s| {
                    format!("{:.0}", s.packets_per_second)
                }),
                opt(p.receiver.as_ref(), |s| {
                    format!("{:.0}", s.packets_per_second)
                }),
                opt(p.lost_packets.zip(p.loss_percent), |(l, pct)| {
                    format!("{l} ({pct:.3} %)")
                }),
                opt(p.socket_drops, |v| v.to_string()),
                status(e),
            ]);
        } else if doc.test == "stream" {
            let s = e.stream_sender();
            let r = e.stream_receiver();
            stream.add_row(vec![
                name.clone(),
                opt(s, |s| bits_per_second(s.bits_per_second)),
                opt(r, |r| bits_per_second(r.bits_per_second)),
                opt(s.and_then(|s| s.tcp_retransmits.system), |v| v.to_string()),
                opt(s.and_then(|s| s.cpu.usage.as_ref()), |c| {
                    format!("{:.0}%", c.host.busy_percent())
                }),
                opt(s.and_then(|s| s.cycles_per_byte), |v| format!("{v:.2}")),
                status(e),
            ]);
        } else {
            let l = e.latency_ns.as_ref();
            rr.add_row(vec![
                name.clone(),
                opt(e.requests_per_second, |r| format!("{r:.0}")),
                opt(l, |l| us(l.p50)),
                opt(l, |l| us(l.p99)),
                opt(l, |l| us(l.p999)),
                cpu_per_message(e.client.as_ref()),
                cpu_per_message(e.server.as_ref()),
                status(e),
            ]);
        }
    }
    let mut out = String::new();
    for t in [stream, rr, packets, load] {
        if !t.is_empty() {
            out.push_str(&format!("{t}\n"));
        }
    }
    out
}
/// The widest `sonde results list` prints: a terminal's 100 columns.
pub const LIST_WIDTH: usize = 100;

/// `s` cut to `n` characters, `…` marking the cut.
fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// A command line without its program's directory (`sonde ping …`).
fn command_line(c: &str) -> String {
    let (program, rest) = c.split_once(' ').unwrap_or((c, ""));
    let program = program.rsplit('/').next().unwrap_or(program);
    format!("{program} {rest}").trim_end().to_string()
}

/// A run's one figure for the list.
fn headline(e: &sonde_results::document::End) -> String {
    use crate::units::sig3;
    if let Some(r) = e.stream_receiver() {
        bits_per_second(r.bits_per_second)
    } else if let (Some(rps), Some(l)) = (e.requests_per_second, &e.latency_ns) {
        format!("{} req/s, P50 {} us", sig3(rps), sig3(l.p50 as f64 / 1e3))
    } else if let Some(p) = e.packets.as_ref().and_then(|p| p.receiver.as_ref()) {
        format!("{} pkt/s received", sig3(p.packets_per_second))
    } else {
        "-".into()
    }
}

/// `sonde results list`: one row per stored run, in 100 columns: the time to the second,
/// the command shortened (`sonde results show ID` has it whole).
pub fn runs(runs: &[(i64, Option<String>, &Document)]) -> String {
    let mut t = table(vec![
        "run",
        "label",
        "test",
        "started (UTC)",
        "result",
        "status",
        "command",
    ]);
    let mut rows = Vec::new();
    for (id, label, d) in runs {
        let started = d.start.started_at.replace('T', " ");
        // Stored strings, one line each: no control reaches the terminal, no row is forged.
        let line = |s: &str| crate::safe::line(s).into_owned();
        rows.push(vec![
            id.to_string(),
            shorten(&line(label.as_deref().unwrap_or("")), 12),
            line(&d.test),
            line(&started).chars().take(19).collect(),
            headline(&d.end),
            if d.end.partial { "partial" } else { "ok" }.into(),
            line(&command_line(&d.start.command)),
        ]);
    }
    // Borders take 3 columns per cell and one more; the command gets what is left.
    let used: usize = (0..6)
        .map(|c| {
            rows.iter()
                .map(|r: &Vec<String>| r[c].chars().count())
                .chain([t.header().map_or(0, |h| {
                    h.cell_iter()
                        .nth(c)
                        .map_or(0, |x| x.content().chars().count())
                })])
                .max()
                .unwrap_or(0)
        })
        .sum();
    let room = LIST_WIDTH.saturating_sub(used + 3 * 7 + 1).max(10);
    for mut r in rows {
        r[6] = shorten(&r[6], room);
        t.add_row(r);
    }
    format!("{t}\n")
}

/// `sonde compare`: one row per figure, saying how each side's figure was made.
pub fn comparison(a: &str, b: &str, cmp: &[sonde_results::compare::Comparison]) -> String {
    use crate::units::sig3;
    let mut t = table(vec![
        "metric".to_string(),
        crate::safe::line(a).into_owned(),
        crate::safe::line(b).into_owned(),
        "change".into(),
        "95 % interval".into(),
        "verdict".into(),
    ]);
    for c in cmp {
        t.add_row(vec![
            format!(
                "{}, {} ({} is better)",
                c.title,
                c.unit,
                if c.higher_is_better {
                    "higher"
                } else {
                    "lower"
                }
            ),
            format!(
                "{} ({}, n={})",
                sig3(c.value_a),
                c.aggregate.describe(),
                c.runs_a
            ),
            format!(
                "{} ({}, n={})",
                sig3(c.value_b),
                c.aggregate.describe(),
                c.runs_b
            ),
            format!("{:+.1} %", c.change_percent),
            format!(
                "[{:+.1} %, {:+.1} %]",
                c.ci95_low_percent, c.ci95_high_percent
            ),
            match c.verdict {
                sonde_results::compare::Verdict::Better => "better".into(),
                sonde_results::compare::Verdict::Worse => "WORSE".into(),
                sonde_results::compare::Verdict::NoSignificantChange => {
                    "no significant change".into()
                }
            },
        ]);
    }
    format!("{t}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::document::MeasuredBy;
    use sonde_results::{Bypass, Role};

    #[test]
    fn a_bypass_side_says_how_it_left_the_socket_path() {
        let mut by = MeasuredBy {
            measured_by: Role::Server,
            host: "h".into(),
            engine: Some("xdp".into()),
            threads: 2,
            pinned_cpus: None,
            bypass: None,
            cpu_latency: None,
        };
        assert_eq!(bypass_line(&by), "");
        by.bypass = Some(Bypass {
            interface: "eth0".into(),
            queues: vec![0, 1],
            zero_copy: true,
            attach: Some("native".into()),
            busy_poll: true,
            ..Default::default()
        });
        assert_eq!(
            bypass_line(&by),
            "bypass: server: AF_XDP on eth0 queue 0,1, zero-copy mode, native XDP, busy polling\n"
        );
        by.bypass = Some(Bypass {
            interface: "0000:3b:00.0".into(),
            queues: vec![0],
            program: Some("dpdk-testpmd rxonly on 1 forwarding lcore(s)".into()),
            command: Some("dpdk-testpmd -v -l 0,1 -- -i".into()),
            version: Some("DPDK 22.11.11".into()),
            ..Default::default()
        });
        assert_eq!(
            bypass_line(&by),
            "bypass: server: dpdk-testpmd rxonly on 1 forwarding lcore(s) (DPDK 22.11.11) on 0000:3b:00.0, queue 0\n  dpdk-testpmd -v -l 0,1 -- -i\n"
        );
    }
}
