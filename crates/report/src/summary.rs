//! The final summary table of a stream test: one row per (direction, side) with the
//! figures of `end`, each labelled with the side that measured it.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use sonde_results::document::EndSide;
use sonde_results::{Document, TestSpec};

use crate::units::{bits_per_second, bytes, opt};

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
        ("NIC", opt(e.nic.as_ref(), |n| n.iface.clone())),
        (
            "NIC packets rx / tx",
            opt(e.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_packets, n.tx_packets)
            }),
        ),
        (
            "NIC drops rx / tx",
            opt(e.nic.as_ref(), |n| {
                format!("{} / {}", n.rx_dropped, n.tx_dropped)
            }),
        ),
        ("NIC interrupts", opt(e.interrupts, |v| v.to_string())),
    ]
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

/// Human summary of a document: one column per side and direction, then notes and the
/// partial/error status.
pub fn stream(doc: &Document) -> String {
    let e = &doc.end;
    let mut labelled = vec![
        ("sender", e.stream_sender()),
        ("receiver", e.stream_receiver()),
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
        for n in &s.notes {
            let n = format!("{}: {n}", s.by.measured_by.as_str());
            if !notes.contains(&n) {
                notes.push(n);
            }
        }
    }
    for n in notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push_str(&one_host_line(e));
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

/// One row per measurement of `sonde lab`: throughput tests, then request/response tests.
pub fn lab(results: &[(String, Document)]) -> String {
    let status = |e: &sonde_results::document::End| {
        if e.partial {
            format!("PARTIAL: {}", e.error.as_deref().unwrap_or("cut short"))
        } else {
            "ok".into()
        }
    };
    let mut stream = Table::new();
    stream.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "throughput",
        "sent (client)",
        "received (server)",
        "retransmits",
        "host CPU busy",
        "cycles/byte",
        "status",
    ]);
    let mut packets = Table::new();
    packets.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "packet rate",
        "sent pps (client)",
        "received pps (server)",
        "lost",
        "socket drops",
        "status",
    ]);
    let mut rr = Table::new();
    rr.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "request/response",
        "messages/s",
        "RTT p50 us",
        "RTT p99 us",
        "RTT p99.9 us",
        "client CPU us/msg",
        "server CPU us/msg",
        "status",
    ]);
    for (name, doc) in results {
        let e = &doc.end;
        if let Some(p) = &e.packets {
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
                opt(e.client.as_ref().and_then(|c| c.cpu_us_per_message), |v| {
                    format!("{v:.2}")
                }),
                opt(e.server.as_ref().and_then(|c| c.cpu_us_per_message), |v| {
                    format!("{v:.2}")
                }),
                status(e),
            ]);
        }
    }
    let mut out = String::new();
    for t in [stream, rr, packets] {
        if !t.is_empty() {
            out.push_str(&format!("{t}\n"));
        }
    }
    out
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e3)
}

/// The line printed before a ping or rpc test starts.
pub fn rr_heading(spec: &TestSpec, host: &str, port: u16) -> String {
    match spec {
        TestSpec::Ping(r) | TestSpec::Rpc(r) => format!(
            "sonde {} to {host}:{port}: {:?}, {} connection(s) x {} in flight, {} B requests / {} B responses, {}{}, poll {}, {:.1} s measured (+{:.1} s warm-up)",
            spec.name(),
            r.transport,
            r.connections,
            r.window,
            r.request_bytes,
            r.response_bytes,
            if r.connect_per_request { "new connection per request, " } else { "" },
            match (r.rate_per_s, r.open_loop) {
                (Some(x), true) => format!("open loop at {x} req/s"),
                (Some(x), false) => format!("paced at {x} msg/s"),
                (None, _) => "closed loop".into(),
            },
            r.poll.label(),
            r.duration_ms as f64 / 1e3,
            r.warmup_ms as f64 / 1e3,
        )
        .to_lowercase()
        .replacen("tcp", "TCP", 1)
        .replacen("udp", "UDP", 1),
        TestSpec::Stream(_) | TestSpec::Pps(_) => String::new(),
    }
}

/// Human summary of a ping or rpc document: round-trip latency, rate, CPU per message.
pub fn rr(doc: &Document) -> String {
    let e = &doc.end;
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "round-trip time (us)",
        "min",
        "mean",
        "stddev",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        "count",
    ]);
    match &e.latency_ns {
        Some(l) => {
            table.add_row(vec![
                "client-measured".to_string(),
                us(l.min),
                format!("{:.2}", l.mean / 1e3),
                format!("{:.2}", l.stddev / 1e3),
                us(l.p50),
                us(l.p90),
                us(l.p99),
                us(l.p999),
                us(l.p9999),
                us(l.max),
                l.count.to_string(),
            ]);
        }
        None => {
            table.add_row(vec!["no response measured".to_string()]);
        }
    }
    let mut sides = Table::new();
    sides.load_preset(UTF8_FULL_CONDENSED);
    sides.set_header(vec![
        "",
        "messages/s",
        "process CPU s",
        "CPU us per message",
        "host CPU busy",
        "poll",
        "socket options",
    ]);
    for s in [&e.client, &e.server].into_iter().flatten() {
        sides.add_row(vec![
            s.by.measured_by.as_str().to_string(),
            format!("{:.0}", s.messages_per_second),
            opt(s.cpu.process_cpu_s, |v| format!("{v:.2}")),
            opt(s.cpu_us_per_message, |v| format!("{v:.2}")),
            opt(s.cpu.usage.as_ref(), |c| {
                format!("{:.1}%", c.host.busy_percent())
            }),
            s.poll.clone(),
            if s.socket_options.is_empty() {
                "-".into()
            } else {
                s.socket_options.join("; ")
            },
        ]);
    }
    let mut out = format!("{table}\n{sides}\n");
    let what = e
        .latency_is
        .as_deref()
        .unwrap_or("round_trip_time")
        .replace('_', " ");
    out.push_str(&format!(
        "latency is {what}; {} requests/s; unanswered at the end: {}",
        opt(e.requests_per_second, |r| format!("{r:.0}")),
        opt(e.unanswered_requests, |v| v.to_string())
    ));
    if let Some(n) = e.unsent_requests {
        out.push_str(&format!("; due but never sent: {n}"));
    }
    if let Some(n) = e.lost_messages {
        out.push_str(&format!("; lost: {n}"));
    }
    for (what, n) in [
        ("late replies", e.late_replies),
        ("duplicated replies", e.duplicated_replies),
        ("foreign datagrams", e.foreign_replies),
    ] {
        if let Some(n) = n.filter(|&n| n > 0) {
            out.push_str(&format!("; {what}: {n}"));
        }
    }
    out.push('\n');
    for s in [&e.client, &e.server].into_iter().flatten() {
        for n in &s.notes {
            out.push_str(&format!("note: {}: {n}\n", s.by.measured_by.as_str()));
        }
    }
    out.push_str(&one_host_line(e));
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

/// One row per receive mode: the latency/CPU trade-off side by side.
pub fn poll_comparison(docs: &[Document]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "poll",
        "messages/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "client CPU us/msg",
        "server CPU us/msg",
    ]);
    for d in docs {
        let e = &d.end;
        let l = e.latency_ns.as_ref();
        table.add_row(vec![
            e.client.as_ref().map_or("-".into(), |c| c.poll.clone()),
            opt(e.requests_per_second, |r| format!("{r:.0}")),
            opt(l, |l| us(l.p50)),
            opt(l, |l| us(l.p99)),
            opt(l, |l| us(l.p999)),
            opt(l, |l| us(l.max)),
            opt(e.client.as_ref().and_then(|c| c.cpu_us_per_message), |v| {
                format!("{v:.2}")
            }),
            opt(e.server.as_ref().and_then(|c| c.cpu_us_per_message), |v| {
                format!("{v:.2}")
            }),
        ]);
    }
    format!("\n== receive modes compared ==\n{table}\n")
}

/// The line printed before a pps test or search starts.
pub fn pps_heading(spec: &sonde_results::PpsSpec, host: &str, port: u16, search: bool) -> String {
    format!(
        "sonde pps to {host}:{port}: {} B packets on the wire ({} B UDP payload), {} flow(s), {} tx / {} rx thread(s), batch {}, {}{}",
        spec.size_bytes,
        spec.payload_bytes(),
        spec.flows,
        spec.tx_threads,
        spec.rx_threads,
        spec.batch,
        spec.rate_pps.map_or("as fast as possible".into(), |r| format!("{r:.0} packets/s offered")),
        if search {
            format!(", zero-loss search with {:.1} s trials", spec.duration_ms as f64 / 1e3)
        } else {
            format!(", {:.1} s measured (+{:.1} s warm-up)", spec.duration_ms as f64 / 1e3, spec.warmup_ms as f64 / 1e3)
        }
    )
}

/// One line per search trial.
pub fn trial_line(n: usize, t: &sonde_results::document::Trial) -> String {
    format!(
        "trial {n:2}: offered {:>12}  sent {:>10.0} pps  received {:>10.0} pps  lost {:>9} ({:.4} %)  {}{}{}",
        t.offered_pps.map_or("max".to_string(), |o| format!("{o:.0} pps")),
        t.sent_pps,
        t.received_pps,
        t.lost_packets,
        t.loss_percent,
        if t.passed { "pass" } else { "FAIL" },
        if t.sender_short { "  (sender short of the offered rate)" } else { "" },
        if t.verification { "  (verification)" } else { "" }
    )
}

/// Human summary of a pps document: both sides' rates, the loss between them, the search.
pub fn pps(doc: &Document) -> String {
    let e = &doc.end;
    let Some(p) = &e.packets else {
        return "no packet figures\n".into();
    };
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "",
        "packets",
        "packets/s",
        "wire bit/s",
        "total packets",
        "host CPU busy",
        "process CPU s",
        "NIC packets rx / tx",
        "NIC drops rx / tx",
    ]);
    for (label, side) in [
        ("sender (client)", &p.sender),
        ("receiver (server)", &p.receiver),
    ] {
        if let Some(s) = side {
            t.add_row(vec![
                label.to_string(),
                s.packets.to_string(),
                format!("{:.0}", s.packets_per_second),
                bits_per_second(s.bits_per_second),
                s.total_packets.to_string(),
                opt(s.cpu.usage.as_ref(), |c| {
                    format!("{:.1}%", c.host.busy_percent())
                }),
                opt(s.cpu.process_cpu_s, |v| format!("{v:.2}")),
                opt(s.nic.as_ref(), |n| {
                    format!("{} / {}", n.rx_packets, n.tx_packets)
                }),
                opt(s.nic.as_ref(), |n| {
                    format!("{} / {}", n.rx_dropped, n.tx_dropped)
                }),
            ]);
        }
    }
    let mut out = format!("{t}\n");
    out.push_str(&format!(
        "lost {} of the packets sent ({}); reordered {}, duplicated {}; socket drops at the receiver {}; flows with loss {} of {}\n",
        opt(p.lost_packets, |v| v.to_string()),
        opt(p.loss_percent, |v| format!("{v:.4} %")),
        opt(p.reordered_packets, |v| v.to_string()),
        opt(p.duplicated_packets, |v| v.to_string()),
        opt(p.socket_drops, |v| v.to_string()),
        opt(p.flows_with_loss, |v| v.to_string()),
        p.flows
    ));
    if let Some(r) = p.receiver_to_sender_ratio {
        out.push_str(&format!(
            "the receiver counted {:.2} % of the sender's packet rate\n",
            r * 100.0
        ));
    }
    if let Some(s) = &e.search {
        out.push_str(&format!(
            "zero-loss search (loss <= {} %, {} trials of {:.1} s): {:.0} packets/s, limited by {}\n",
            s.max_loss_percent,
            s.trials.len(),
            s.trial_ms as f64 / 1e3,
            s.result_pps,
            match s.limited_by.as_str() {
                "sender" => "the sender (it lost nothing at the highest rate it reached)",
                "loss" => "loss (between a rate without loss and one with)",
                other => other,
            }
        ));
    }
    for side in [&p.sender, &p.receiver].into_iter().flatten() {
        for n in &side.notes {
            out.push_str(&format!("note: {}: {n}\n", side.by.measured_by.as_str()));
        }
    }
    out.push_str(&one_host_line(e));
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

/// `sonde results list`: one row per stored run.
pub fn runs(runs: &[(i64, Option<String>, &Document)]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "run", "label", "test", "started", "headline", "status", "command",
    ]);
    for (id, label, d) in runs {
        let e = &d.end;
        let headline = if let Some(r) = e.stream_receiver() {
            bits_per_second(r.bits_per_second)
        } else if let (Some(rps), Some(l)) = (e.requests_per_second, &e.latency_ns) {
            format!("{rps:.0} req/s, RTT p50 {} us", us(l.p50))
        } else if let Some(p) = e.packets.as_ref().and_then(|p| p.receiver.as_ref()) {
            format!("{:.0} pps received", p.packets_per_second)
        } else {
            "-".into()
        };
        t.add_row(vec![
            id.to_string(),
            label.clone().unwrap_or_default(),
            d.test.clone(),
            d.start.started_at.clone(),
            headline,
            if e.partial {
                "partial".into()
            } else {
                "ok".into()
            },
            d.start.command.clone(),
        ]);
    }
    format!("{t}\n")
}

/// `sonde compare`: one row per metric.
pub fn comparison(a: &str, b: &str, cmp: &[sonde_results::compare::Comparison]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "metric".to_string(),
        format!("{a} (median)"),
        format!("{b} (median)"),
        "change".into(),
        "95 % interval".into(),
        "verdict".into(),
    ]);
    for c in cmp {
        t.add_row(vec![
            format!(
                "{}{}",
                c.metric,
                if c.higher_is_better {
                    " (higher is better)"
                } else {
                    " (lower is better)"
                }
            ),
            format!("{:.3} (n={})", c.median_a, c.runs_a),
            format!("{:.3} (n={})", c.median_b, c.runs_b),
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
