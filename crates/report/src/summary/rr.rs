//! A ping or rpc test's summary: rate, latency percentiles and CPU per message, and the
//! table comparing receive modes.

use sonde_results::document::{RrEndSide, SelfNoise};
use sonde_results::{ControlThread, Document, TestSpec};

use super::common::{footer, steal, table, us};
use crate::units::{opt, sig3, thousands};

/// A side's CPU microseconds per message, as the tables show it.
pub(super) fn cpu_per_message(side: Option<&RrEndSide>) -> String {
    opt(side.and_then(|s| s.cpu_us_per_message), |v| {
        format!("{v:.2}")
    })
}

/// The tool's own floor (`--self-noise`) on one line, to read the test's tail against.
pub(super) fn floor_line(f: &SelfNoise) -> String {
    let l = &f.latency_ns;
    let us = |ns: u64| sig3(ns as f64 / 1e3);
    format!(
        "tool floor (in-process echo over a Unix {} socket, no network): P50 {} us, P99.9 {} us, P99.99 {} us, max {} us ({:.1} s, {} messages)\n",
        f.socket.strip_prefix("unix_").unwrap_or(&f.socket),
        us(l.p50),
        us(l.p999),
        us(l.p9999),
        us(l.max),
        f.seconds,
        thousands(f.messages as i64),
    )
}

/// The line printed before a ping or rpc test starts.
pub fn rr_heading(spec: &TestSpec, target: &str) -> String {
    match spec {
        TestSpec::Ping(r) | TestSpec::Rpc(r) => format!(
            "sonde {} {target}: {:?}, {} connection(s) x {} in flight, {} B requests / {} B responses, {}{}, poll {}, {:.1} s measured (+{:.1} s warm-up)",
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
            r.timing.duration_ms as f64 / 1e3,
            r.timing.warmup_ms as f64 / 1e3,
        )
        .to_lowercase()
        .replacen("tcp", "TCP", 1)
        .replacen("udp", "UDP", 1),
        _ => String::new(),
    }
}

/// Human summary of a ping or rpc document: round-trip latency, rate, CPU per message.
pub fn rr(doc: &Document) -> String {
    let Some(e) = doc.end.rr() else {
        return footer(&doc.end);
    };
    let mut t = table(vec![
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
            let mut row = vec![
                "client-measured".to_string(),
                us(l.min),
                format!("{:.2}", l.mean / 1e3),
                format!("{:.2}", l.stddev / 1e3),
            ];
            row.extend(l.tail().map(us));
            row.push(l.count.to_string());
            t.add_row(row);
        }
        None => {
            t.add_row(vec!["no response measured".to_string()]);
        }
    }
    let mut sides = table(vec![
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
                format!("{:.1}%{}", c.host.busy_percent(), steal(&c.host))
            }),
            s.poll.clone(),
            if s.socket_options.is_empty() {
                "-".into()
            } else {
                s.socket_options.join("; ")
            },
        ]);
    }
    let stages = e.stages.as_ref().map(super::stages::stages_table);
    let oneway = e.oneway.as_deref().map(super::stages::oneway_table);
    let mut out = format!(
        "{t}\n{}{}{sides}\n",
        stages.unwrap_or_default(),
        oneway.unwrap_or_default()
    );
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
        ("datagrams the agent dropped", e.rejected_requests),
    ] {
        if let Some(n) = n.filter(|&n| n > 0) {
            out.push_str(&format!("; {what}: {n}"));
        }
    }
    out.push('\n');
    if let Some(f) = &e.self_noise {
        out.push_str(&floor_line(f));
    }
    for s in [&e.client, &e.server].into_iter().flatten() {
        out.push_str(&super::common::bypass_line(&s.by));
        if let Some(l) = &s.by.cpu_latency {
            out.push_str(&format!(
                "{}: CPU latency limit {} us (in force {}), idle states kept out: {}\n",
                s.by.measured_by.as_str(),
                l.requested_us,
                opt(l.in_force_us, |v| format!("{v} us")),
                if l.excluded_idle_states.is_empty() {
                    "none".to_string()
                } else {
                    l.excluded_idle_states.join(", ")
                }
            ));
        }
        if let Some(st) = &s.by.stamps {
            out.push_str(&super::common::stamps_line(s.by.measured_by.as_str(), st));
        }
        for n in &s.counted.notes {
            out.push_str(&format!("note: {}: {n}\n", s.by.measured_by.as_str()));
        }
        if let Some(c) = &s.counted.control_thread {
            out.push_str(&control_line(s.by.measured_by.as_str(), c));
        }
    }
    out.push_str(&footer(&doc.end));
    out
}

/// The tool's own work beside a side's measuring workers, and whether it could disturb them.
fn control_line(side: &str, c: &ControlThread) -> String {
    let cpus: Vec<String> = c.cpus.iter().map(|c| c.to_string()).collect();
    let place = if c.apart {
        format!("kept off the workers' CPUs (ran on {})", cpus.join(","))
    } else {
        format!(
            "could share the workers' CPUs ({}): its wake-ups may be in the tail",
            cpus.join(",")
        )
    };
    format!(
        "{side}: control thread in the window: {} wake-ups, {:.1} ms CPU, {place}\n",
        c.wakeups, c.cpu_ms
    )
}

/// Runs side by side: the `lead` columns that tell them apart, then latency and CPU per
/// message.
fn compared(
    title: &str,
    lead: &[&str],
    cells: impl Fn(&Document) -> Vec<String>,
    docs: &[Document],
) -> String {
    let tail = [
        "mean us",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "client CPU us/msg",
        "server CPU us/msg",
    ];
    let mut t = table(lead.iter().chain(&tail).copied().collect::<Vec<_>>());
    for d in docs {
        let e = d.end.rr();
        let l = e.and_then(|e| e.latency_ns.as_ref());
        let mut row = cells(d);
        row.extend([
            opt(l, |l| format!("{:.2}", l.mean / 1e3)),
            opt(l, |l| us(l.p50)),
            opt(l, |l| us(l.p99)),
            opt(l, |l| us(l.p999)),
            opt(l, |l| us(l.max)),
            cpu_per_message(e.and_then(|e| e.client.as_ref())),
            cpu_per_message(e.and_then(|e| e.server.as_ref())),
        ]);
        t.add_row(row);
    }
    format!("\n== {title} ==\n{t}\n")
}

/// One row per receive mode: the latency/CPU trade-off side by side.
pub fn poll_comparison(docs: &[Document]) -> String {
    let cells = |d: &Document| {
        let e = d.end.rr();
        vec![
            e.and_then(|e| e.client.as_ref())
                .map_or("-".into(), |c| c.poll.clone()),
            opt(e.and_then(|e| e.requests_per_second), |r| format!("{r:.0}")),
        ]
    };
    compared(
        "receive modes compared",
        &["poll", "messages/s"],
        cells,
        docs,
    )
}

/// The deepest idle state a side's CPU latency limit allowed, by name.
fn deepest_allowed(side: Option<&RrEndSide>) -> Option<String> {
    let l = side?.by.cpu_latency.as_ref()?;
    l.idle_states
        .iter()
        .rfind(|s| !l.excluded_idle_states.contains(s))
        .cloned()
}

/// One row per CPU latency limit (`--cstate-sweep`): latency and CPU by deepest allowed
/// idle state, as the DPDK receive-mode report tabulates it.
pub fn cstate_comparison(docs: &[Document]) -> String {
    let cells = |d: &Document| {
        vec![
            deepest_allowed(d.end.rr().and_then(|r| r.client.as_ref()))
                .unwrap_or_else(|| "-".into()),
            opt(d.start.spec.execution().cpu_latency_us, |v| v.to_string()),
        ]
    };
    compared(
        "latency by deepest CPU idle state allowed (this host's states)",
        &["deepest idle state allowed", "limit us"],
        cells,
        docs,
    )
}

/// A ping's or an rpc's one figure in `sonde results list`: its rate and P50.
pub(crate) fn listed(e: &sonde_results::document::End) -> String {
    let Some(r) = e.rr() else { return "-".into() };
    match (r.requests_per_second, &r.latency_ns) {
        (Some(rps), Some(l)) => format!(
            "{} req/s, P50 {} us",
            crate::units::sig3(rps),
            crate::units::sig3(l.p50 as f64 / 1e3)
        ),
        _ => "-".into(),
    }
}
