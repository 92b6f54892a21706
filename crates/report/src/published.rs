//! The tables readers of published network reports know, one per test type, each column
//! with its unit and each figure to three significant digits (counts exact): msg_gen's
//! `Test | P50 | P99 | P99.9 | RPC/s` for ping and rpc, ntttcp's throughput in Gbit/s, MB/s
//! and buffers/s with packets and CPU for stream, testpmd's sent and received packets/s
//! for pps, flent's latency by phase for load. Each caption says who measured what.

use sonde_results::compare::{metrics, Metric};
use sonde_results::document::{IntervalFigures, MeasuredBy, Section};
use sonde_results::spec::TestName;
use sonde_results::{Document, LatencySummary, Role, TestSpec};

use crate::html::page::{ReportRun, SAME_HOST};
use crate::table::Table;
use crate::units::{sig3, thousands};

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), sig3)
}

fn count(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| thousands(v as i64))
}

fn us(v: u64) -> String {
    sig3(v as f64 / 1e3)
}

fn role(r: Role) -> &'static str {
    match r {
        Role::Client => "client",
        Role::Server => "server",
    }
}

/// One table per kind of test among the runs, as the lab's summary has them: a row per
/// run, named by its configuration, with its kind's headline figures as columns (so no
/// table carries another kind's empty columns), each column a figure, its unit and the
/// side that measured it (a figure another run measured from the other side gets its own
/// column).
pub fn summary(runs: &[ReportRun<'_>]) -> Vec<Table> {
    // In the order reports list the kinds, each under its row's title.
    TestName::ALL
        .iter()
        .filter_map(|&kind| {
            let of_kind: Vec<&ReportRun<'_>> = runs.iter().filter(|r| r.doc.test == kind).collect();
            (!of_kind.is_empty()).then(|| kind_summary(&of_kind, crate::summary::row(kind).title))
        })
        .collect()
}

/// The summary table of runs of one kind (`what`).
fn kind_summary(runs: &[&ReportRun<'_>], what: &str) -> Table {
    let per_run: Vec<Vec<Metric>> = runs.iter().map(|r| metrics(r.doc)).collect();
    let mut columns: Vec<(&str, Role, String)> = Vec::new();
    for m in per_run.iter().flatten() {
        let head = format!("{} {} ({})", m.title, m.unit, role(m.measured_by));
        if !columns
            .iter()
            .any(|(k, by, _)| *k == m.key && *by == m.measured_by)
        {
            columns.push((m.key, m.measured_by, head));
        }
    }
    let mut head = vec!["Run"];
    head.extend(columns.iter().map(|(_, _, h)| h.as_str()));
    head.push("Status");
    let mut t = Table::new(
        format!("{what}: each run's headline figures; each column says its unit and the side that measured it."),
        &head,
    );
    for (r, figures) in runs.iter().zip(&per_run) {
        let mut row = vec![r.name.clone()];
        row.extend(columns.iter().map(|(key, by, _)| {
            let m = figures
                .iter()
                .find(|m| m.key == *key && m.measured_by == *by);
            m.map_or_else(|| "-".into(), |m| sig3(m.value))
        }));
        row.push(if r.doc.end.partial {
            format!(
                "partial: {}",
                r.doc.end.error.as_deref().unwrap_or("cut short")
            )
        } else {
            "complete".into()
        });
        t.row(row);
    }
    t
}

/// ping and rpc, as msg_gen prints them: rate and round-trip percentiles.
fn rr(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "Request/response (ping, rpc): rate and round-trip time measured by the client; CPU per message by each side.",
        &[
            "Run", "Test", "Requests/s", "P50 µs", "P90 µs", "P99 µs", "P99.9 µs", "P99.99 µs",
            "Max µs", "Samples", "Client CPU µs/msg", "Server CPU µs/msg",
        ],
    );
    for r in runs {
        let (TestSpec::Ping(s) | TestSpec::Rpc(s)) = &r.doc.start.spec else {
            continue;
        };
        let Some(e) = r.doc.end.rr() else {
            continue;
        };
        let transport = match s.transport {
            sonde_results::Transport::Tcp => "TCP",
            sonde_results::Transport::Udp => "UDP",
        };
        let test = format!(
            "{} {transport} {}×{}, {} B",
            r.doc.test, s.connections, s.window, s.request_bytes
        );
        let l = e.latency_ns.as_ref();
        let p = |f: fn(&LatencySummary) -> u64| l.map_or_else(|| "n/a".into(), |l| us(f(l)));
        let cpu = |s: Option<&sonde_results::document::RrEndSide>| {
            num(s.and_then(|s| s.cpu_us_per_message))
        };
        t.row(vec![
            r.name.clone(),
            test,
            num(e.requests_per_second),
            p(|l| l.p50),
            p(|l| l.p90),
            p(|l| l.p99),
            p(|l| l.p999),
            p(|l| l.p9999),
            p(|l| l.max),
            count(l.map(|l| l.count)),
            cpu(e.client.as_ref()),
            cpu(e.server.as_ref()),
        ]);
        if let Some(f) = &e.self_noise {
            t.row(floor_row(&r.name, f));
        }
    }
    t
}

/// The row under a run of the tool's own floor (`--self-noise`), to read its tail against.
fn floor_row(name: &str, f: &sonde_results::document::SelfNoise) -> Vec<String> {
    let l = &f.latency_ns;
    let socket = f.socket.strip_prefix("unix_").unwrap_or(&f.socket);
    let mut row = vec![
        format!("{name}: tool floor"),
        format!("in-process echo over a Unix {socket} socket, no network"),
        num(Some(f.messages as f64 / f.seconds.max(1e-9))),
    ];
    row.extend(l.tail().map(us));
    row.extend([count(Some(f.messages)), "-".into(), "-".into()]);
    row
}

/// The host CPU busy of a side. Both ends on one host: that host's, in the sender's
/// column only; the receiver's says so rather than count the host twice.
fn busy(doc: &Document, usage: Option<&sonde_results::CpuUsage>, sender: bool) -> String {
    match &doc.end.one_host {
        Some(_) if !sender => SAME_HOST.into(),
        Some(one) => num(one.cpu.as_ref().map(|c| c.host.busy_percent())),
        None => num(usage.map(|c| c.host.busy_percent())),
    }
}

/// stream, as ntttcp prints it: throughput three ways, packets each side, CPU.
fn stream(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "TCP stream: throughput received, measured by the receiver; packets by each side's NIC counters; CPU is whole-host busy (both ends on one host: that host once, under the sender).",
        &[
            "Run", "Connections", "Throughput Gbit/s", "MB/s", "Buffers/s", "Packets sent",
            "Packets received", "Retransmits", "Sender CPU %", "Receiver CPU %", "Cycles/byte",
        ],
    );
    for r in runs {
        let Some(e) = r.doc.end.stream() else {
            continue;
        };
        let (Some(s), Some(rx)) = (&e.sender, &e.receiver) else {
            continue;
        };
        let nic = |side: &sonde_results::document::EndSide, tx: bool| {
            side.counted
                .nic
                .as_ref()
                .map(|n| if tx { n.tx_packets } else { n.rx_packets })
        };
        t.row(vec![
            r.name.clone(),
            rx.connections.count.to_string(),
            sig3(rx.bits_per_second / 1e9),
            sig3(rx.megabytes_per_second),
            sig3(rx.buffers_per_second),
            count(nic(s, true)),
            count(nic(rx, false)),
            count(s.tcp_retransmits.connections),
            busy(r.doc, s.cpu.usage.as_ref(), true),
            busy(r.doc, rx.cpu.usage.as_ref(), false),
            // Both ends on one host: its cycles per byte, counted once (the sides hold none).
            num(r
                .doc
                .end
                .one_host
                .as_ref()
                .map_or(s.cycles_per_byte, |h| h.cycles_per_byte)),
        ]);
    }
    t
}

/// pps, as testpmd's port statistics read: packets and packets/s each way, loss.
fn pps(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "UDP packet rate: TX by the sender, RX by the receiver, over the measured window; loss over the whole test; CPU is whole-host busy (both ends on one host: that host once, under TX).",
        &[
            "Run", "Engine", "Size B", "Flows", "TX packets", "TX packets/s", "RX packets",
            "RX packets/s", "Loss %", "TX CPU %", "RX CPU %",
        ],
    );
    for r in runs {
        let Some(p) = r.doc.end.pps().and_then(|p| p.packets.as_ref()) else {
            continue;
        };
        let (tx, rx) = (p.sender.as_ref(), p.receiver.as_ref());
        let engine = tx
            .or(rx)
            .and_then(|s| s.by.engine.clone())
            .unwrap_or_else(|| sonde_results::Engine::Kernel.to_string());
        t.row(vec![
            r.name.clone(),
            engine,
            p.size_bytes.to_string(),
            p.flows.to_string(),
            count(tx.map(|s| s.packets)),
            num(tx.map(|s| s.packets_per_second)),
            count(rx.map(|s| s.packets)),
            num(rx.map(|s| s.packets_per_second)),
            num(p.loss_percent),
            busy(r.doc, tx.and_then(|s| s.cpu.usage.as_ref()), true),
            busy(r.doc, rx.and_then(|s| s.cpu.usage.as_ref()), false),
        ]);
    }
    t
}

/// load, as flent's RRUL summary reads: each phase's throughput and both pings.
fn load(runs: &[ReportRun<'_>]) -> Table {
    let mut t = Table::new(
        "Latency under load: round trips timed by the controller from the intended send; throughput by each direction's receiver.",
        &[
            "Run", "Phase", "Upload Mbit/s", "Download Mbit/s", "UDP P50 µs", "UDP P99 µs",
            "TCP P50 µs", "TCP P99 µs", "UDP lost", "Retransmits",
        ],
    );
    for r in runs {
        let Some(l) = r.doc.end.load() else {
            continue;
        };
        for p in &l.phases {
            let q = |s: &Option<LatencySummary>, f: fn(&LatencySummary) -> u64| {
                s.as_ref().map_or_else(|| "n/a".into(), |s| us(f(s)))
            };
            t.row(vec![
                r.name.clone(),
                p.phase.as_str().into(),
                num(p.load.upload_bits_per_second.map(|b| b / 1e6)),
                num(p.load.download_bits_per_second.map(|b| b / 1e6)),
                q(&p.udp_rtt_ns, |s| s.p50),
                q(&p.udp_rtt_ns, |s| s.p99),
                q(&p.tcp_rtt_ns, |s| s.p50),
                q(&p.tcp_rtt_ns, |s| s.p99),
                count(p.udp_lost),
                count(p.tcp_retransmits),
            ]);
        }
    }
    t
}

/// Every test type's table that has a row.
pub fn tables(runs: &[ReportRun<'_>]) -> Vec<Table> {
    [rr(runs), stream(runs), pps(runs), load(runs)]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect()
}

/// One series of per-interval figures: its name and, per interval, (start s, end s, value).
pub type IntervalSeries = (String, Vec<(f64, f64, f64)>);

/// The series of a run's time-series chart, with their unit: sender and receiver of one
/// direction, each named with the side that measured it.
pub fn interval_series(doc: &Document) -> (&'static str, Vec<IntervalSeries>) {
    let pick = |f: &dyn Fn(&IntervalFigures) -> Option<f64>| -> Vec<(f64, f64, f64)> {
        doc.intervals
            .iter()
            .filter_map(|i| Some((i.start_s, i.end_s, f(i)?)))
            .collect()
    };
    let by = |s: Option<&MeasuredBy>| s.map_or("n/a", |b| role(b.measured_by));
    let (tx, rx) = match &doc.end.section {
        Section::Stream(s) => (
            by(s.sender.as_ref().map(|s| &s.by)),
            by(s.receiver.as_ref().map(|s| &s.by)),
        ),
        Section::Pps(p) => (
            by(p.sender.as_ref().map(|s| &s.by)),
            by(p.receiver.as_ref().map(|s| &s.by)),
        ),
        _ => ("n/a", "n/a"),
    };
    match doc.test {
        TestName::Pps => (
            "packets/s",
            vec![
                (
                    format!("sent, by the sender ({tx})"),
                    pick(&|i| i.sender.as_ref()?.packets_per_second()),
                ),
                (
                    format!("received, by the receiver ({rx})"),
                    pick(&|i| i.receiver.as_ref()?.packets_per_second()),
                ),
            ],
        ),
        TestName::Stream => (
            "throughput, Gbit/s",
            vec![
                (
                    format!("sent, by the sender ({tx})"),
                    pick(&|i| Some(i.sender.as_ref()?.bits_per_second / 1e9)),
                ),
                (
                    format!("received, by the receiver ({rx})"),
                    pick(&|i| Some(i.receiver.as_ref()?.bits_per_second / 1e9)),
                ),
            ],
        ),
        _ => (
            "requests/s",
            vec![(
                "completed, by the client".into(),
                pick(&|i| i.rr()?.requests_per_second),
            )],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::stored;

    #[test]
    fn runs_are_named_by_configuration_a_table_per_kind_with_its_columns_only() {
        let files = [
            "v1-stream.json",
            "v1-rpc.json",
            "v1-ping-udp.json",
            "v1-pps.json",
            "v1-load.json",
            "v1-watch.json",
            "v1-bidir.json",
        ];
        let docs: Vec<Document> = files.iter().map(|f| stored(f)).collect();
        let stored: Vec<_> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (i as i64, None, d))
            .collect();
        let runs = ReportRun::named(stored);
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        // As bench/doc_keys.py ran them: `stream -P 2`, `rpc -C 2`, `ping --udp`.
        assert_eq!(names[..3], ["stream -P 2", "rpc -C 2", "ping UDP"]);
        let tables = summary(&runs);
        let kinds = [
            "TCP stream",
            "Ping",
            "Request/response (rpc)",
            "UDP packet rate (pps)",
            "Latency under load",
            "Watched commands",
        ];
        assert_eq!(tables.len(), kinds.len(), "one table per kind");
        for (t, kind) in tables.iter().zip(kinds) {
            assert!(t.caption.starts_with(&format!("{kind}: ")), "{}", t.caption);
            // Every run of the kind, and only those: both streams in the stream table.
            let want: Vec<&str> = runs
                .iter()
                .filter(|r| crate::summary::row(r.doc.test).title == kind)
                .map(|r| r.name.as_str())
                .collect();
            let got: Vec<&str> = t.rows.iter().map(|r| r[0].as_str()).collect();
            assert_eq!(got, want, "{kind}");
            for row in &t.rows {
                assert_eq!(row.len(), t.head.len());
            }
            // Only the kind's columns: every figure column has a figure in some row.
            for c in 1..t.head.len() - 1 {
                assert!(
                    t.rows.iter().any(|r| r[c] != "-"),
                    "{kind}: column {} is empty",
                    t.head[c]
                );
            }
        }
        let col = |t: &Table, h: &str| t.head.iter().position(|x| x.starts_with(h));
        let (stream, ping, rpc, pps, load) =
            (&tables[0], &tables[1], &tables[2], &tables[3], &tables[4]);
        assert_eq!(stream.rows.len(), 2, "stream -P 2 and the bidir stream");
        let rps = col(rpc, "Request rate").unwrap();
        let rate = docs[1].end.rr().unwrap().requests_per_second.unwrap();
        assert_eq!(rpc.rows[0][rps], sig3(rate));
        assert!(
            col(stream, "Request rate").is_none(),
            "a stream has no request rate"
        );
        assert!(col(ping, "RTT P50").is_some() && col(pps, "RTT P50").is_none());
        assert!(col(pps, "Packets received").is_some());
        assert!(col(load, "UDP RTT P50 added by upload load").is_some());
        assert_eq!(col(ping, "UDP RTT P50 added"), None);
        assert_eq!(tables[5].head, ["Run", "Status"]);
    }

    #[test]
    fn one_hosts_cpu_and_cycles_are_shown_once() {
        let doc = stored("v1-stream.json");
        let runs = ReportRun::named(vec![(1, None, &doc)]);
        let t = stream(&runs);
        let col = |h: &str| t.head.iter().position(|x| x == h).unwrap();
        let host = doc.end.one_host.as_ref().unwrap();
        let row = &t.rows[0];
        let busy = host.cpu.as_ref().unwrap().host.busy_percent();
        assert_eq!(row[col("Sender CPU %")], sig3(busy));
        assert_eq!(row[col("Receiver CPU %")], SAME_HOST);
        assert_eq!(row[col("Cycles/byte")], sig3(host.cycles_per_byte.unwrap()));
    }

    #[test]
    fn a_runs_floor_is_the_row_under_it() {
        let mut doc = stored("v1-ping-udp.json");
        let before = rr(&ReportRun::named(vec![(1, None, &doc)])).rows.len();
        let Section::Rr(e) = &mut doc.end.section else {
            unreachable!("a ping")
        };
        let mut latency = e.latency_ns.clone().unwrap();
        (latency.p50, latency.max) = (5_120, 80_000);
        e.self_noise = Some(sonde_results::document::SelfNoise {
            socket: "unix_seqpacket".into(),
            seconds: 2.0,
            messages: 300_000,
            latency_ns: latency,
        });
        let runs = ReportRun::named(vec![(1, None, &doc)]);
        let t = rr(&runs);
        assert_eq!(t.rows.len(), before + 1);
        let row = t.rows.last().unwrap();
        let col = |h: &str| t.head.iter().position(|x| x == h).unwrap();
        assert_eq!(row[0], format!("{}: tool floor", runs[0].name));
        assert!(
            row[col("Test")].contains("Unix seqpacket socket"),
            "{row:?}"
        );
        assert_eq!(row[col("Requests/s")], "150,000");
        assert_eq!(
            (row[col("P50 µs")].as_str(), row[col("Max µs")].as_str()),
            ("5.12", "80.0")
        );
        assert_eq!(row[col("Samples")], "300,000");
        assert_eq!(row.len(), t.head.len());
    }
}
