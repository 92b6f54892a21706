//! `sonde lab`'s summary: one table per kind of measurement, a row per measurement.

use sonde_results::document::{End, Section};
use sonde_results::Document;

use super::common::us;
use super::common::{steal, table};
use super::load::lab_row;
use super::rr::{cpu_per_message, floor_line};
use crate::units::{bits_per_second, opt};

/// One row per measurement of `sonde lab`: throughput tests, then request/response tests.
pub fn lab(results: &[(String, Document)]) -> String {
    let status = |e: &End| {
        if e.partial {
            format!("PARTIAL: {}", e.error.as_deref().unwrap_or("cut short"))
        } else {
            "ok".into()
        }
    };
    // A run without a verdict (cut short, or stored before verdicts) shows a dash.
    let limit = |e: &End| {
        e.limited_by
            .as_ref()
            .map_or_else(|| "-".into(), |l| l.verdict.to_string())
    };
    let mut stream = table(vec![
        "throughput",
        "sent (client)",
        "received (server)",
        "retransmits",
        "host CPU busy",
        "cycles/byte",
        "limited by",
        "status",
    ]);
    let mut packets = table(vec![
        "packet rate",
        "sent pps (client)",
        "received pps (server)",
        "lost",
        "socket drops",
        "limited by",
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
        "limited by",
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
    let mut shared = None;
    // The tool's floors, each under the request/response table; why an added latency is
    // negative, once, under the load table.
    let mut floors = String::new();
    let mut load_notes = String::new();
    for (name, doc) in results {
        let e = &doc.end;
        let name = name.clone();
        match &e.section {
            Section::Load { load: l } => {
                load.add_row(lab_row(&name, l, status(e)));
                for note in l.added_latency.iter().filter_map(|a| a.note.as_deref()) {
                    let line = format!("{name}: added latency {note}\n");
                    if !load_notes.contains(&line) {
                        load_notes.push_str(&line);
                    }
                }
            }
            Section::Pps(p) => {
                let Some(p) = &p.packets else { continue };
                packets.add_row(vec![
                    name,
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
                    limit(e),
                    status(e),
                ]);
            }
            Section::Stream(_) => {
                shared = shared.or(e.one_host.as_ref().map(|h| h.hostname.clone()));
                let mut row = stream_row(e);
                row.insert(0, name);
                row.push(limit(e));
                row.push(status(e));
                stream.add_row(row);
            }
            Section::Rr(r) => {
                if let Some(f) = &r.self_noise {
                    floors.push_str(&format!("{name}: {}", floor_line(f)));
                }
                let l = r.latency_ns.as_ref();
                rr.add_row(vec![
                    name,
                    opt(r.requests_per_second, |r| format!("{r:.0}")),
                    opt(l, |l| us(l.p50)),
                    opt(l, |l| us(l.p99)),
                    opt(l, |l| us(l.p999)),
                    cpu_per_message(r.client.as_ref()),
                    cpu_per_message(r.server.as_ref()),
                    limit(e),
                    status(e),
                ]);
            }
            // A kind without a lab table (a watch, a STAMP run) is not in the lab.
            _ => {}
        }
    }
    let mut out = String::new();
    for (t, after) in [
        (stream, ""),
        (rr, floors.as_str()),
        (packets, ""),
        (load, load_notes.as_str()),
    ] {
        if !t.is_empty() {
            out.push_str(&format!("{t}\n{after}"));
            if let Some(host) = shared.take() {
                out.push_str(&format!(
                    "host CPU busy and cycles/byte: both ends ran on one host ({host}), counted once\n"
                ));
            }
        }
    }
    out
}

/// A stream's figures: sent and received, retransmits, and the host's CPU busy and
/// cycles per byte: the one host's when both ends shared it (the sides then hold none).
fn stream_row(e: &End) -> Vec<String> {
    let Some(st) = e.stream() else {
        return Vec::new();
    };
    let (s, r) = (st.sender.as_ref(), st.receiver.as_ref());
    let (cpu, cycles) = match &e.one_host {
        Some(h) => (h.cpu.as_ref(), h.cycles_per_byte),
        None => (
            s.and_then(|s| s.cpu.usage.as_ref()),
            s.and_then(|s| s.cycles_per_byte),
        ),
    };
    vec![
        opt(s, |s| bits_per_second(s.bits_per_second)),
        opt(r, |r| bits_per_second(r.bits_per_second)),
        opt(s.and_then(|s| s.tcp_retransmits.system), |v| v.to_string()),
        opt(cpu, |c| {
            format!("{:.0}%{}", c.host.busy_percent(), steal(&c.host))
        }),
        opt(cycles, |v| format!("{v:.2}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::stored;

    #[test]
    fn a_stream_on_one_host_shows_that_hosts_cpu_once() {
        let doc = stored("v1-stream.json");
        let host = doc.end.one_host.clone().expect("both ends on one host");
        let sender = doc.end.stream().unwrap().sender.clone().unwrap();
        assert!(sender.cpu.usage.is_none() && sender.cycles_per_byte.is_none());
        let out = lab(&[("stream -P 2".into(), doc)]);
        let row = out
            .lines()
            .find(|l| l.contains("stream -P 2"))
            .expect("the stream's row");
        let busy = format!("{:.0}%", host.cpu.unwrap().host.busy_percent());
        let cycles = format!("{:.2}", host.cycles_per_byte.unwrap());
        assert!(row.contains(&busy), "{busy} missing: {row}");
        assert!(row.contains(&cycles), "{cycles} missing: {row}");
        assert!(!row.contains("n/a"), "{row}");
        let note = format!(
            "both ends ran on one host ({}), counted once",
            host.hostname
        );
        assert_eq!(out.matches(&note).count(), 1, "{out}");
    }

    #[test]
    fn a_negative_added_latency_is_explained_once_under_the_load_table() {
        use sonde_results::document::load::{AddedLatency, BELOW_IDLE_WAKE_UP};
        let mut doc = stored("v1-load.json");
        let out = lab(&[("load -P 4".into(), doc.clone())]);
        assert!(!out.contains("below idle"), "{out}");
        let Section::Load { load } = &mut doc.end.section else {
            unreachable!("a load")
        };
        for a in load.added_latency.iter_mut() {
            *a = AddedLatency::new(a.phase, a.transport, (-37_800, 1_000), None);
        }
        let out = lab(&[("load -P 4".into(), doc)]);
        let line = format!("load -P 4: added latency {BELOW_IDLE_WAKE_UP}\n");
        assert_eq!(out.matches(&line).count(), 1, "{out}");
        assert!(out.contains("-38 / -38"), "the figures stay: {out}");
    }

    #[test]
    fn a_ping_with_its_floor_shows_it_in_its_summary_and_under_the_labs_table() {
        let mut doc = stored("v1-ping-udp.json");
        assert!(!super::super::rr::rr(&doc).contains("tool floor"));
        let Section::Rr(r) = &mut doc.end.section else {
            unreachable!("a ping")
        };
        let mut latency = r.latency_ns.clone().unwrap();
        (latency.p50, latency.p999, latency.p9999, latency.max) = (5_120, 12_000, 40_400, 80_000);
        r.self_noise = Some(sonde_results::document::SelfNoise {
            socket: "unix_seqpacket".into(),
            seconds: 1.0,
            messages: 180_000,
            latency_ns: latency,
        });
        let line = "tool floor (in-process echo over a Unix seqpacket socket, no network): \
                    P50 5.12 us, P99.9 12.0 us, P99.99 40.4 us, max 80.0 us (1.0 s, 180,000 messages)";
        let summary = super::super::rr::rr(&doc);
        assert_eq!(summary.matches(line).count(), 1, "{summary}");
        let out = lab(&[("ping --udp".into(), doc)]);
        let table_end = out.find("ping --udp: tool floor").expect(&out);
        assert!(
            out[table_end..].starts_with(&format!("ping --udp: {line}\n")),
            "{out}"
        );
        assert!(
            out[..table_end].contains("RTT p50 us"),
            "the floor follows the table: {out}"
        );
    }
}
