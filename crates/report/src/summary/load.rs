//! A load test's summary: per phase the pings' percentiles beside the load's throughput,
//! then the headline, the latency load added to idle.

use sonde_results::document::load::{AddedLatency, LoadEnd, PhaseEnd};
use sonde_results::{Document, LatencySummary, LoadSpec, Phase, TestSpec, Transport};

use super::common::{footer, table};
use crate::units::{bits_per_second, opt};

/// The line printed before a load test starts.
pub fn load_heading(spec: &LoadSpec, target: &str) -> String {
    let t = spec.load.timing();
    let phases: Vec<&str> = spec.phases.iter().map(|p| p.as_str()).collect();
    let load = match spec.load.as_ref() {
        TestSpec::Stream(s) => format!("stream -P {}", s.connections),
        TestSpec::Rpc(r) => format!(
            "rpc, {} connection(s) x {} in flight",
            r.connections, r.window
        ),
        other => other.name().to_string(),
    };
    format!(
        "sonde load {target}: phases {}, {:.1} s each (+{:.1} s warm-up); UDP and TCP ping at {} /s each, {} B; load: {load}",
        phases.join(", "),
        t.duration_ms as f64 / 1e3,
        t.warmup_ms as f64 / 1e3,
        spec.ping_rate_per_s,
        spec.ping_bytes,
    )
}

/// Microseconds with one decimal.
fn us(ns: Option<u64>) -> String {
    opt(ns, |v| format!("{:.1}", v as f64 / 1e3))
}

fn phase_row(p: &PhaseEnd) -> Vec<String> {
    let bps = |v: Option<f64>| opt(v, bits_per_second);
    let cpu = |v: Option<f64>| opt(v, |c| format!("{c:.0}"));
    vec![
        p.phase.as_str().to_string(),
        us(p.udp_rtt_ns.as_ref().map(|l| l.p50)),
        us(p.udp_rtt_ns.as_ref().map(|l| l.p99)),
        us(p.tcp_rtt_ns.as_ref().map(|l| l.p50)),
        us(p.tcp_rtt_ns.as_ref().map(|l| l.p99)),
        bps(p.load.upload_bits_per_second),
        bps(p.load.download_bits_per_second),
        opt(p.tcp_retransmits, |r| r.to_string()),
        format!(
            "{} / {}",
            cpu(p.client_cpu_busy_percent),
            cpu(p.server_cpu_busy_percent)
        ),
    ]
}

/// The headline: what each loaded phase added to idle's P50 and P99, a negative one with
/// its note (why, under the line).
pub fn added_lines(l: &LoadEnd) -> String {
    let mut out = String::new();
    for a in &l.added_latency {
        let t = match a.transport {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        };
        out.push_str(&format!(
            "{:<8} {t} ping: {:+.1} us at P50, {:+.1} us at P99 over idle\n",
            a.phase.as_str(),
            a.p50_added_ns as f64 / 1e3,
            a.p99_added_ns as f64 / 1e3,
        ));
        if let Some(note) = &a.note {
            out.push_str(&format!("{:<8} {note}\n", ""));
        }
        if let Some(line) = stages_line(a) {
            out.push_str(&format!("{:<8} {line}\n", ""));
        }
        if let (Some(f), Some(r)) = (a.forward_p50_added_ns, a.reverse_p50_added_ns) {
            out.push_str(&format!(
                "{:<8} by direction at P50: forward (to the agent) {:+.1} us, reverse {:+.1} us\n",
                "",
                f as f64 / 1e3,
                r as f64 / 1e3
            ));
        }
    }
    out
}

/// Where the added P50 went (`--stages`): the stages that grew most, largest first.
fn stages_line(a: &AddedLatency) -> Option<String> {
    let mut grown: Vec<_> = a.stages_p50_added_ns.iter().collect();
    if grown.is_empty() {
        return None;
    }
    grown.sort_by_key(|(_, ns)| -(ns.abs()));
    let parts: Vec<String> = grown
        .iter()
        .take(3)
        .map(|(s, ns)| format!("{} {:+.1} us", s.label(), **ns as f64 / 1e3))
        .collect();
    Some(format!("by stage at P50: {}", parts.join(", ")))
}

/// The lab's row: idle's P50 of both pings, then what each loaded phase added to it.
pub(super) fn lab_row(name: &str, l: &LoadEnd, status: String) -> Vec<String> {
    let pair = |u: Option<f64>, t: Option<f64>| {
        let f = |v: Option<f64>| opt(v, |v| format!("{:+.0}", v / 1e3));
        format!("{} / {}", f(u), f(t))
    };
    let idle = l.phase(Phase::Idle);
    let p50 = |r: Option<&LatencySummary>| r.map(|r| r.p50 as f64);
    let mut row = vec![
        name.to_string(),
        pair(
            idle.and_then(|p| p50(p.udp_rtt_ns.as_ref())),
            idle.and_then(|p| p50(p.tcp_rtt_ns.as_ref())),
        )
        .replace('+', ""),
    ];
    for phase in [Phase::Upload, Phase::Download, Phase::Both] {
        let added = |t: Transport| {
            l.added_latency
                .iter()
                .find(|a| a.phase == phase && a.transport == t)
                .map(|a| a.p50_added_ns as f64)
        };
        row.push(pair(added(Transport::Udp), added(Transport::Tcp)));
    }
    row.push(status);
    row
}

/// Human summary of a load document.
pub fn load(doc: &Document) -> String {
    let Some(l) = doc.end.load() else {
        return footer(&doc.end);
    };
    let mut t = table(vec![
        "phase",
        "UDP p50 (us)",
        "UDP p99 (us)",
        "TCP p50 (us)",
        "TCP p99 (us)",
        "upload",
        "download",
        "retrans",
        "CPU % here / agent",
    ]);
    for p in &l.phases {
        t.add_row(phase_row(p));
    }
    let mut out = format!("{t}\n");
    if l.added_latency.is_empty() {
        out.push_str("no idle phase: no added latency to report\n");
    } else {
        out.push_str("latency added under load (round trip, timed from the intended send):\n");
        out.push_str(&added_lines(l));
    }
    out.push_str(&footer(&doc.end));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use sonde_results::document::load::{AddedLatency, BELOW_IDLE_HELD, BELOW_IDLE_WAKE_UP};

    fn rendered(p50_ns: i64, p99_ns: i64, cpu_latency_us: Option<u32>) -> String {
        let a = AddedLatency::new(
            Phase::Upload,
            Transport::Udp,
            (p50_ns, p99_ns),
            cpu_latency_us,
        );
        added_lines(&LoadEnd {
            phases: Vec::new(),
            added_latency: vec![a],
        })
    }

    #[test]
    fn the_stages_that_grew_most_are_named_under_the_line() {
        use sonde_results::stages::Stage;
        let mut a = AddedLatency::new(Phase::Upload, Transport::Udp, (2_100_000, 0), None);
        a.stages_p50_added_ns = [
            (Stage::ClientQdisc, 2_000_000),
            (Stage::ServerWake, -30_000),
            (Stage::Outside, 90_000),
            (Stage::ClientSend, 1_000),
        ]
        .into();
        let text = added_lines(&LoadEnd {
            phases: vec![],
            added_latency: vec![a],
        });
        assert!(
            text.contains("by stage at P50: client qdisc+driver +2000.0 us, outside the hosts +90.0 us, server receive wake-up -30.0 us"),
            "{text}"
        );
        assert!(!text.contains("client send stack"), "three at most: {text}");
    }

    #[test]
    fn a_negative_added_latency_says_why_under_its_line() {
        // The review's run: idle P50 195 us, 158 us under load.
        let out = rendered(-37_800, 12_000, None);
        let want = "upload   UDP ping: -37.8 us at P50, +12.0 us at P99 over idle\n         below idle: idle CPUs sleep between pings and pay their wake-up, which load spares them; --cpu-latency-us 0 keeps CPUs awake in every phase\n";
        assert_eq!(out, want);
        assert!(out.contains(BELOW_IDLE_WAKE_UP));
        // CPUs held awake: the wake-up is not why, and the note says so.
        let out = rendered(-1_000, -2_000, Some(0));
        assert!(
            out.ends_with(&format!("{:<8} {BELOW_IDLE_HELD}\n", "")),
            "{out}"
        );
        assert!(!out.contains(BELOW_IDLE_WAKE_UP), "{out}");
    }

    #[test]
    fn a_positive_added_latency_is_printed_bare() {
        let out = rendered(37_800, 120_000, None);
        assert_eq!(
            out,
            "upload   UDP ping: +37.8 us at P50, +120.0 us at P99 over idle\n"
        );
        assert!(!out.contains("below idle"), "{out}");
    }
}
