//! A mesh agent's own `/metrics` (`sonde serve --mesh`): per peer, its round trips as a
//! classic histogram (cumulative buckets, so that `rate()` and `histogram_quantile()`
//! aggregate pairs by zone or rack), its probes sent, answered and lost each way, the last
//! window's percentiles, the ICMP port and host unreachables its probes drew (an
//! unanswering peer counting none stayed silent), and with marked probes each direction's
//! marks and CE; for the agent, its peers and probe budget. Every peer series
//! carries both ends' own labels (`source_zone`, `destination_rack`, ...). A peer no longer
//! listed is not written: its series end with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sonde_results::mesh::{PeerFigures, Verdict, BUCKETS_S};

use super::figures::{bounded, sanitize, MAX_AGENT_LABELS};
use super::mesh_marks;
use super::text::escape;

/// The agent's side of its metrics.
pub struct MeshAgent<'a> {
    /// The address this agent probes from (its `source` label).
    pub source: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// `--mesh-budget`: probes per second this agent may send, all peers together.
    pub budget_per_s: f64,
    /// Probes per second scheduled now, all peers together (the budget used).
    pub rate_per_s: f64,
    /// Probes of other agents this one answered, and refused (unkeyed, bad MAC, over
    /// its rate).
    pub reflected: u64,
    pub refused: u64,
    /// First answers by where their probe's departure (T1) came from: the kernel's
    /// transmit stamp, and the process's clock read before the send (no stamp came).
    pub departed_kernel: u64,
    pub departed_process: u64,
    /// First answers booked by where their reflector's departure (T3) came from: its
    /// kernel's transmit stamp, told in its next answer (RFC 8972 Follow-Up Telemetry),
    /// or the clock read it wrote into the answer before sending it.
    pub t3_stamp: u64,
    pub t3_clock: u64,
}

/// One listed peer and what its probes became.
pub struct MeshPeer<'a> {
    pub address: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub stats: &'a PeerFigures,
}

type Labels = Vec<(String, String)>;
/// A per-peer counter family: name, help, and how to read it.
type PeerCounter = (&'static str, &'static str, fn(&PeerFigures) -> u64);

/// The pair's labels: `source`, `destination`, then each end's own labels prefixed
/// `source_` / `destination_` (sanitized, bounded; a name taken already is skipped).
fn pair_labels(agent: &MeshAgent<'_>, peer: &MeshPeer<'_>) -> Labels {
    let mut out: Labels = vec![
        ("source".into(), bounded(agent.source)),
        ("destination".into(), bounded(peer.address)),
    ];
    for (prefix, labels) in [("source_", agent.labels), ("destination_", peer.labels)] {
        for (k, v) in labels.iter().take(MAX_AGENT_LABELS) {
            let name = format!("{prefix}{}", sanitize(k));
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, bounded(v)));
            }
        }
    }
    out
}

fn agent_labels(agent: &MeshAgent<'_>) -> Labels {
    let mut out: Labels = vec![("source".into(), bounded(agent.source))];
    for (k, v) in agent.labels.iter().take(MAX_AGENT_LABELS) {
        let name = format!("source_{}", sanitize(k));
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, bounded(v)));
        }
    }
    out
}

/// `name{labels,extra} value`.
fn line(out: &mut String, name: &str, labels: &Labels, extra: &[(&str, &str)], value: f64) {
    out.push_str(name);
    out.push('{');
    let all = labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    for (i, (k, v)) in all.chain(extra.iter().copied()).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    let _ = writeln!(out, "}} {}", number(value));
}

/// A number as OpenMetrics writes it, with a decimal point or exponent for floats.
fn number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    format!("{v}")
}

/// A bucket bound as its `le` label: always a float (`1.0`, not `1`).
fn le(bound: f64) -> String {
    let s = format!("{bound}");
    if s.contains(['.', 'e']) {
        s
    } else {
        format!("{s}.0")
    }
}

fn header(out: &mut String, name: &str, kind: &str, unit: Option<&str>, help: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    if let Some(u) = unit {
        let _ = writeln!(out, "# UNIT {name} {u}");
    }
    let _ = writeln!(out, "# HELP {name} {help}.");
}

/// The OpenMetrics text of a mesh agent (ends with `# EOF`).
pub fn encode_mesh(agent: &MeshAgent<'_>, peers: &[MeshPeer<'_>]) -> String {
    let mut out = String::new();
    let own = agent_labels(agent);
    let pairs: Vec<(Labels, &PeerFigures)> = peers
        .iter()
        .map(|p| (pair_labels(agent, p), p.stats))
        .collect();
    agent_families(&mut out, agent, &own, peers.len());
    rtt_histogram(&mut out, &pairs);
    let counters: [PeerCounter; 6] = [
        ("sonde_mesh_probes_sent", "Probes sent to the peer", |s| {
            s.sent
        }),
        (
            "sonde_mesh_probes_answered",
            "Probes the peer answered in time",
            |s| s.settled.answered,
        ),
        (
            "sonde_mesh_probes_reordered",
            "Answers that came after an answer to a later probe",
            |s| s.reordered,
        ),
        (
            "sonde_mesh_probes_duplicated",
            "Answers received more than once",
            |s| s.duplicates,
        ),
        (
            "sonde_mesh_icmp_port_unreachable",
            "ICMP port unreachable errors about probes to the peer: its host is up, nothing listens on the port",
            |s| s.unreachable.port,
        ),
        (
            "sonde_mesh_icmp_host_unreachable",
            "ICMP host or network unreachable errors about probes to the peer",
            |s| s.unreachable.host,
        ),
    ];
    for (name, help, get) in counters {
        header(&mut out, name, "counter", None, help);
        for (labels, s) in &pairs {
            line(
                &mut out,
                &format!("{name}_total"),
                labels,
                &[],
                get(s) as f64,
            );
        }
    }
    let name = "sonde_mesh_probes_lost";
    header(&mut out, name, "counter", None,
        "Probes lost, by direction: forward (never reached the peer), reverse (the answer was lost), unknown (no later answer told)");
    for (labels, s) in &pairs {
        let t = &s.settled;
        for (dir, n) in [
            ("forward", t.lost_forward),
            ("reverse", t.lost_reverse),
            ("unknown", t.lost_unknown),
        ] {
            line(
                &mut out,
                "sonde_mesh_probes_lost_total",
                labels,
                &[("direction", dir)],
                n as f64,
            );
        }
    }
    window_gauge(&mut out, &pairs);
    oneway_gauges(&mut out, &pairs);
    marks_counters(&mut out, &pairs);
    out.push_str("# EOF\n");
    out
}

fn agent_families(out: &mut String, agent: &MeshAgent<'_>, own: &Labels, peers: usize) {
    let gauges = [
        ("sonde_mesh_peers", None, "Peers listed now", peers as f64),
        (
            "sonde_mesh_probe_budget",
            Some("per_second"),
            "Probes per second this agent may send, all peers together (--mesh-budget)",
            agent.budget_per_s,
        ),
        (
            "sonde_mesh_probe_rate",
            Some("per_second"),
            "Probes per second scheduled now, all peers together: the budget used",
            agent.rate_per_s,
        ),
    ];
    for (stem, unit, help, v) in gauges {
        let name = unit.map_or(stem.to_string(), |u| format!("{stem}_{u}"));
        header(out, &name, "gauge", unit, help);
        line(out, &name, own, &[], v);
    }
    let counters = [
        (
            "sonde_mesh_reflected",
            "Probes of keyed peers this agent answered",
            agent.reflected,
        ),
        (
            "sonde_mesh_refused",
            "Probes this agent did not answer: unkeyed, a bad MAC, over its rate",
            agent.refused,
        ),
    ];
    for (name, help, v) in counters {
        header(out, name, "counter", None, help);
        line(out, &format!("{name}_total"), own, &[], v as f64);
    }
    let name = "sonde_mesh_answered_departures";
    header(out, name, "counter", None,
        "Answered probes by where their departure (T1) came from: the kernel's transmit stamp (kernel), or the clock read before the send, no stamp having come (process)");
    for (clock, v) in [
        ("kernel", agent.departed_kernel),
        ("process", agent.departed_process),
    ] {
        line(
            out,
            &format!("{name}_total"),
            own,
            &[("clock", clock)],
            v as f64,
        );
    }
    let name = "sonde_mesh_answered_reflector_departures";
    header(out, name, "counter", None,
        "Answered probes booked by where their reflector's departure (T3) came from: its kernel's transmit stamp, told in its next answer's Follow-Up Telemetry TLV (stamp), or the clock read it wrote into the answer before sending it (clock)");
    for (t3, v) in [("stamp", agent.t3_stamp), ("clock", agent.t3_clock)] {
        line(out, &format!("{name}_total"), own, &[("t3", t3)], v as f64);
    }
}

fn rtt_histogram(out: &mut String, pairs: &[(Labels, &PeerFigures)]) {
    let name = "sonde_mesh_rtt_seconds";
    header(
        out,
        name,
        "histogram",
        Some("seconds"),
        "Round trips of the probes the peer answered, net of its reflector's hold",
    );
    for (labels, s) in pairs {
        let b = &s.rtt;
        for (bound, n) in BUCKETS_S.iter().zip(b.le) {
            line(
                out,
                &format!("{name}_bucket"),
                labels,
                &[("le", &le(*bound))],
                n as f64,
            );
        }
        line(
            out,
            &format!("{name}_bucket"),
            labels,
            &[("le", "+Inf")],
            b.count as f64,
        );
        line(out, &format!("{name}_count"), labels, &[], b.count as f64);
        line(out, &format!("{name}_sum"), labels, &[], b.sum_s);
    }
}

fn window_gauge(out: &mut String, pairs: &[(Labels, &PeerFigures)]) {
    let name = "sonde_mesh_rtt_window_seconds";
    header(
        out,
        name,
        "gauge",
        Some("seconds"),
        "The last full window's (a minute's) round-trip percentiles, from its HDR histogram",
    );
    for (labels, s) in pairs {
        let Some(w) = s.last_window else { continue };
        for (p, v) in [
            ("50", w.p50_s),
            ("99", w.p99_s),
            ("99.9", w.p999_s),
            ("100", w.max_s),
        ] {
            line(out, name, labels, &[("percentile", p)], v);
        }
    }
}

/// Each direction's marks (`serve --mesh-dscp`/`--mesh-ecn`, `mesh_marks`): the answered
/// probes by the DSCP they were sent and arrived with (a pair that bleaches EF forward
/// shows as `direction="forward",sent_dscp="46",arrived_dscp="0"`), the same by class
/// name and fate, and the CE marks among those sent ECT, whose ratio is the CE fraction.
/// Written only when some peer's probes are marked: an unmarked mesh's text is what it was.
fn marks_counters(out: &mut String, pairs: &[(Labels, &PeerFigures)]) {
    if pairs.iter().all(|(_, s)| s.marks.is_empty()) {
        return;
    }
    for (name, help, samples) in mesh_marks::families() {
        header(out, name, "counter", None, help);
        for (labels, s) in pairs {
            let m = &s.marks;
            for (way, d) in [("forward", &m.forward), ("reverse", &m.reverse)] {
                let Some(d) = d else { continue };
                for (extra, n) in samples(d) {
                    let mut all = vec![("direction", way)];
                    all.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
                    line(out, &format!("{name}_total"), labels, &all, n as f64);
                }
            }
        }
    }
}

/// Each direction's delay (the window's median), its bound, and clock faults.
fn oneway_gauges(out: &mut String, pairs: &[(Labels, &PeerFigures)]) {
    let delay = "sonde_mesh_oneway_delay_seconds";
    header(out, delay, "gauge", Some("seconds"),
        "The last window's median one-way delay: forward (source to destination), reverse; true within sonde_mesh_oneway_bound_seconds");
    for (labels, s) in pairs {
        if let Some(Verdict::Delays(f)) = s.last_oneway {
            line(
                out,
                delay,
                labels,
                &[("direction", "forward")],
                f.forward_p50_s,
            );
            line(
                out,
                delay,
                labels,
                &[("direction", "reverse")],
                f.reverse_p50_s,
            );
        }
    }
    let bound = "sonde_mesh_oneway_bound_seconds";
    header(out, bound, "gauge", Some("seconds"),
        "The bound on both directions' delays: the clocks' claimed errors, or the exchanges' fit, whichever is tighter");
    for (labels, s) in pairs {
        if let Some(Verdict::Delays(f)) = s.last_oneway {
            let from = if f.from_clocks { "clocks" } else { "exchange" };
            line(out, bound, labels, &[("from", from)], f.bound_s);
        }
    }
    let fault = "sonde_mesh_clock_fault";
    header(out, fault, "gauge", None,
        "1 when the last window's timestamps fit no clock offset or put a direction below zero beyond its bound: no delay is given");
    for (labels, s) in pairs {
        if let Some(v) = s.last_oneway {
            line(
                out,
                fault,
                labels,
                &[],
                f64::from(u8::from(v == Verdict::ClockFault)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::mesh::{Judging, PeerStats};

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Agent "a" at 1 probe/s of a budget of 1, nothing reflected.
    fn agent_a(labels: &BTreeMap<String, String>) -> MeshAgent<'_> {
        MeshAgent {
            source: "a",
            labels,
            budget_per_s: 1.0,
            rate_per_s: 1.0,
            reflected: 0,
            refused: 0,
            departed_kernel: 0,
            departed_process: 0,
            t3_stamp: 0,
            t3_clock: 0,
        }
    }

    /// The agent's text with one peer.
    fn one_peer(
        agent: &MeshAgent<'_>,
        address: &str,
        labels: &BTreeMap<String, String>,
        stats: &PeerFigures,
    ) -> String {
        encode_mesh(
            agent,
            &[MeshPeer {
                address,
                labels,
                stats,
            }],
        )
    }

    #[test]
    fn each_peer_is_a_histogram_and_counters_labelled_by_both_ends() {
        let own = map(&[("zone", "a"), ("rack", "r1")]);
        let theirs = map(&[("zone", "b"), ("topology.kubernetes.io/rack", "r\"2")]);
        let mut stats = PeerStats::new(0, &Judging::default());
        stats.on_sent(0, 0);
        stats.on_answer(0, 0, 300_000, 0);
        stats.tick(1);
        stats.shown.unreachable.port = 3;
        let agent = MeshAgent {
            source: "198.18.2.1",
            labels: &own,
            budget_per_s: 100.0,
            rate_per_s: 2.0,
            reflected: 7,
            refused: 1,
            departed_kernel: 5,
            departed_process: 2,
            t3_stamp: 4,
            t3_clock: 3,
        };
        let text = one_peer(&agent, "198.18.2.2", &theirs, &stats.figures());
        let pair = r#"source="198.18.2.1",destination="198.18.2.2",source_rack="r1",source_zone="a",destination_topology_kubernetes_io_rack="r\"2",destination_zone="b""#;
        for want in [
            format!("sonde_mesh_rtt_seconds_bucket{{{pair},le=\"0.00025\"}} 0\n"),
            format!("sonde_mesh_rtt_seconds_bucket{{{pair},le=\"0.0005\"}} 1\n"),
            format!("sonde_mesh_rtt_seconds_bucket{{{pair},le=\"1.0\"}} 1\n"),
            format!("sonde_mesh_rtt_seconds_bucket{{{pair},le=\"+Inf\"}} 1\n"),
            format!("sonde_mesh_rtt_seconds_count{{{pair}}} 1\n"),
            format!("sonde_mesh_probes_sent_total{{{pair}}} 1\n"),
            format!("sonde_mesh_probes_answered_total{{{pair}}} 1\n"),
            format!("sonde_mesh_probes_lost_total{{{pair},direction=\"forward\"}} 0\n"),
            format!("sonde_mesh_icmp_port_unreachable_total{{{pair}}} 3\n"),
            format!("sonde_mesh_icmp_host_unreachable_total{{{pair}}} 0\n"),
            "sonde_mesh_probe_budget_per_second{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\"} 100\n".into(),
            "sonde_mesh_reflected_total{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\"} 7\n".into(),
            "sonde_mesh_answered_departures_total{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\",clock=\"kernel\"} 5\n".into(),
            "sonde_mesh_answered_departures_total{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\",clock=\"process\"} 2\n".into(),
            "sonde_mesh_answered_reflector_departures_total{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\",t3=\"stamp\"} 4\n".into(),
            "sonde_mesh_answered_reflector_departures_total{source=\"198.18.2.1\",source_rack=\"r1\",source_zone=\"a\",t3=\"clock\"} 3\n".into(),
        ] {
            assert!(text.contains(&want), "no {want} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        // No peer, no peer series.
        let none = encode_mesh(&agent, &[]);
        assert!(!none.contains("destination="), "{none}");
    }

    #[test]
    fn a_closed_window_gives_each_direction_and_its_bound_or_a_fault() {
        use sonde_results::mesh::Stamps;
        let own = map(&[("rack", "r1")]);
        let j = Judging {
            window_ns: 100,
            ..Judging::default()
        };
        let mut stats = PeerStats::new(0, &j);
        for i in 0..10 {
            let t = i * 1_000_000;
            stats.on_stamps(Stamps {
                sent_ns: t,
                reflected_in_ns: t + 30_000,
                reflected_out_ns: t + 35_000,
                back_ns: t + 45_000,
                own_bound_ns: Some(500),
                peer_bound_ns: Some(500),
            });
        }
        stats.tick(200);
        let text = one_peer(&agent_a(&own), "b", &own, &stats.figures());
        let pair = r#"source="a",destination="b",source_rack="r1",destination_rack="r1""#;
        for want in [
            format!("sonde_mesh_oneway_delay_seconds{{{pair},direction=\"forward\"}} 0.00003\n"),
            format!("sonde_mesh_oneway_delay_seconds{{{pair},direction=\"reverse\"}} 0.00001\n"),
            format!("sonde_mesh_oneway_bound_seconds{{{pair},from=\"clocks\"}} 0.000001\n"),
            format!("sonde_mesh_clock_fault{{{pair}}} 0\n"),
        ] {
            assert!(text.contains(&want), "no {want} in\n{text}");
        }
    }

    /// A pair that bleaches EF forward (ECT(0) kept, one CE) and keeps it on the way back:
    /// each direction's (sent, arrived) counts and CE of ECT; an unmarked mesh writes none.
    #[test]
    fn marks_show_per_direction_what_the_path_did_and_only_when_marked() {
        let own = map(&[("rack", "r1")]);
        let mut stats = PeerStats::new(0, &Judging::default());
        let ef0 = 46 << 2 | 2;
        for i in 0..10 {
            let forward = if i == 0 { 3 } else { 2 };
            stats.on_marks(Some((ef0, forward)), Some((ef0, ef0)));
        }
        stats.on_marks(Some((ef0, 2)), None);
        let agent = agent_a(&own);
        let text = one_peer(&agent, "b", &own, &stats.figures());
        let pair = r#"source="a",destination="b",source_rack="r1",destination_rack="r1""#;
        let marks = "sonde_mesh_marks_packets_total";
        for want in [
            "# TYPE sonde_mesh_marks_packets counter\n".to_string(),
            format!(
                "{marks}{{{pair},direction=\"forward\",sent_dscp=\"46\",arrived_dscp=\"0\"}} 11\n"
            ),
            format!(
                "{marks}{{{pair},direction=\"reverse\",sent_dscp=\"46\",arrived_dscp=\"46\"}} 10\n"
            ),
            format!("sonde_mesh_ect_packets_total{{{pair},direction=\"forward\"}} 11\n"),
            format!("sonde_mesh_ce_packets_total{{{pair},direction=\"forward\"}} 1\n"),
            format!("sonde_mesh_ce_packets_total{{{pair},direction=\"reverse\"}} 0\n"),
        ] {
            assert!(text.contains(&want), "no {want} in\n{text}");
        }
        assert_eq!(text.matches(marks).count(), 2, "{text}");
        let plain = PeerStats::new(0, &Judging::default()).figures();
        let text = one_peer(&agent, "b", &own, &plain);
        assert!(
            !text.contains("marks") && !text.contains("_ce_") && !text.contains("fate"),
            "{text}"
        );
    }

    /// The same counts by class name and fate beside the numbers' (whose series are
    /// unchanged): EF bleached to CS0, re-marked to AF41 and to 5 (no name: the number),
    /// kept; an ECN change alone is a kept DSCP.
    #[test]
    fn each_dscp_is_named_as_dscp_takes_it_and_its_fate_told() {
        let own = map(&[("rack", "r1")]);
        let mut stats = PeerStats::new(0, &Judging::default());
        let ef0 = 46 << 2 | 2;
        for arrived in [2, 34 << 2 | 2, 5 << 2 | 2, 5 << 2 | 2, ef0 | 3] {
            stats.on_marks(Some((ef0, arrived)), Some((ef0, ef0)));
        }
        let text = one_peer(&agent_a(&own), "b", &own, &stats.figures());
        let pair = r#"source="a",destination="b",source_rack="r1",destination_rack="r1""#;
        let fate = |way: &str, sent: (u8, &str), arrived: (u8, &str), what: &str, n: u32| {
            format!(
                "sonde_mesh_dscp_fate_packets_total{{{pair},direction=\"{way}\",sent_dscp=\"{}\",\
                 sent_class=\"{}\",arrived_dscp=\"{}\",arrived_class=\"{}\",fate=\"{what}\"}} {n}\n",
                sent.0, sent.1, arrived.0, arrived.1
            )
        };
        let ef = (46, "ef");
        for want in [
            fate("forward", ef, (0, "cs0"), "bleached", 1),
            fate("forward", ef, (5, "5"), "remarked", 2),
            fate("forward", ef, (34, "af41"), "remarked", 1),
            fate("forward", ef, ef, "kept", 1),
            fate("reverse", ef, ef, "kept", 5),
            "# TYPE sonde_mesh_dscp_fate_packets counter\n".into(),
        ] {
            assert!(text.contains(&want), "no {want} in\n{text}");
        }
        assert_eq!(
            text.matches("sonde_mesh_dscp_fate_packets_total{").count(),
            5
        );
        // The numbers' family as it was: the same pairs, no name.
        let old = format!("sonde_mesh_marks_packets_total{{{pair},direction=\"forward\",sent_dscp=\"46\",arrived_dscp=\"5\"}} 2\n");
        assert!(text.contains(&old), "{text}");
    }
}
