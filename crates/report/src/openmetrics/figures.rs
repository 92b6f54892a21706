//! What a run says in Prometheus terms: the metric families, a pair's label set (fixed
//! labels, then both agents' own, prefixed and sanitized), and the samples one stored
//! document gives. Both the live exporter and the backfill export read these, so a
//! series scraped from `sonde fleet --metrics` and one backfilled from the store match.

use sonde_results::document::FleetPair;
use sonde_results::spec::{Direction, TestSpec, Transport};
use sonde_results::Document;

/// A metric family of the exposition, in the order the text writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Metric {
    Throughput,
    Rtt,
    Loss,
    Retransmits,
    RunTimestamp,
    Runs,
    LimitedBy,
    Responsiveness,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    Counter,
    Summary,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Summary => "summary",
        }
    }
}

/// A family's name without its unit (prometheus-client appends the unit, and `_total` to
/// a counter's samples), its unit, type and help.
pub(crate) struct Meta {
    pub stem: &'static str,
    pub unit: Option<&'static str>,
    pub kind: Kind,
    pub help: &'static str,
}

impl Meta {
    /// The family's name: the stem and its unit.
    pub(crate) fn name(&self) -> String {
        match self.unit {
            Some(u) => format!("{}_{u}", self.stem),
            None => self.stem.to_string(),
        }
    }
}

impl Metric {
    pub(crate) const ALL: [Metric; 8] = [
        Metric::Throughput,
        Metric::Rtt,
        Metric::Loss,
        Metric::Retransmits,
        Metric::RunTimestamp,
        Metric::Runs,
        Metric::LimitedBy,
        Metric::Responsiveness,
    ];

    pub(crate) fn meta(self) -> Meta {
        let (stem, unit, kind, help) = match self {
            Metric::Throughput => ("sonde_throughput", Some("bits_per_second"), Kind::Gauge,
                "Last run's throughput as the receiver counted it (stream, pps; rpm: its goodput, forward the upload); direction forward: source to destination"),
            Metric::Rtt => ("sonde_rtt", Some("seconds"), Kind::Summary,
                "Last run's round-trip time quantiles, measured by the source (ping, rpc)"),
            Metric::Loss => ("sonde_packet_loss", Some("ratio"), Kind::Gauge,
                "Last run's packets lost per packet sent (pps; ping and rpc over UDP)"),
            Metric::Retransmits => ("sonde_retransmits", None, Kind::Counter,
                "TCP retransmits of the sender's test connections, summed over the pair's stored stream runs"),
            Metric::RunTimestamp => ("sonde_run_timestamp", Some("seconds"), Kind::Gauge,
                "When the pair's last run ended, stored or failed (Unix time)"),
            Metric::Runs => ("sonde_runs", None, Kind::Counter,
                "The pair's runs by status: ok, partial (cut short, stored), failed (nothing stored)"),
            Metric::LimitedBy => ("sonde_limited_by", None, Kind::Gauge,
                "1 for the verdict of what limited the pair's last run (end.limited_by; rpm: each direction's, by direction download, upload)"),
            Metric::Responsiveness => ("sonde_rpm", None, Kind::Gauge,
                "Last run's responsiveness, round trips per minute (IETF IPPM draft): direction download, upload, or both (the final windows pooled)"),
        };
        Meta {
            stem,
            unit,
            kind,
            help,
        }
    }
}

/// A label set: name, value, in the order written.
pub(crate) type Labels = Vec<(String, String)>;

/// One sample of one run: its family, the labels that tell it from its siblings
/// (`direction`, `quantile`, `verdict`; an rpm direction's verdict has two, `direction`
/// then `verdict`), and its value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub metric: Metric,
    pub extra: Vec<(&'static str, String)>,
    pub value: f64,
}

/// The labels no agent label can take: the pair's own and the families' extra ones. An
/// agent's labels are prefixed `source_` / `destination_`, so none can be one of these.
pub const FIXED_LABELS: [&str; 8] = [
    "fleet",
    "source",
    "destination",
    "test",
    "direction",
    "quantile",
    "verdict",
    "status",
];

/// The labels of one agent that are exported; the rest are dropped. An agent's labels
/// are untrusted input and each distinct set is a series in Prometheus.
pub const MAX_AGENT_LABELS: usize = 32;
/// Longest label value written, in bytes; a longer one is cut at a character boundary.
pub const MAX_LABEL_VALUE: usize = 256;

/// `name` in Prometheus' label syntax: every character outside `[A-Za-z0-9_]` becomes `_`
/// (`topology.kubernetes.io/zone` becomes `topology_kubernetes_io_zone`).
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c,
            false => '_',
        })
        .collect()
}

pub(crate) fn bounded(value: &str) -> String {
    let mut end = value.len().min(MAX_LABEL_VALUE);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// The pair's labels: `fleet`, `source`, `destination`, `test`, then each agent's own
/// labels prefixed `source_` / `destination_`; of two agent labels that sanitize to one
/// name, the first (by name) is kept.
pub(crate) fn label_set(pair: &FleetPair, test: &str) -> Labels {
    let mut out: Labels = [
        ("fleet", &pair.fleet[..]),
        ("source", &pair.source),
        ("destination", &pair.destination),
        ("test", test),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), bounded(v)))
    .collect();
    let agents = [
        ("source_", &pair.source_labels),
        ("destination_", &pair.destination_labels),
    ];
    for (prefix, labels) in agents {
        let kept = labels.iter().filter(|(k, _)| !k.is_empty());
        for (k, v) in kept.take(MAX_AGENT_LABELS) {
            let name = format!("{prefix}{}", sanitize(k));
            if out.iter().any(|(n, _)| *n == name) {
                continue;
            }
            out.push((name, bounded(v)));
        }
    }
    out
}

/// The pair of a run: its fleet's, or for a run outside a fleet the client's host as the
/// source and the agent's address as the destination.
pub(crate) fn pair_of(doc: &Document) -> FleetPair {
    doc.start.fleet.clone().unwrap_or_else(|| FleetPair {
        source: doc.start.client.hostname.clone(),
        // A STAMP run has no agent at the far end: its reflector is the destination; an
        // rpm run's is its configuration's URL.
        destination: match (doc.end.stamp(), doc.end.rpm()) {
            (Some(s), _) => s.reflector.clone(),
            (_, Some(r)) => r.config_url.clone(),
            _ => doc.start.server_address.clone(),
        },
        ..FleetPair::default()
    })
}

/// When the run ended: `finished_at`, else `started_at`, as Unix seconds.
pub(crate) fn ended_at(doc: &Document) -> Option<f64> {
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    [
        doc.start.finished_at.as_deref(),
        Some(&doc.start.started_at),
    ]
    .into_iter()
    .flatten()
    .find_map(|t| time::OffsetDateTime::parse(t, rfc3339).ok())
    .map(|t| t.unix_timestamp_nanos() as f64 / 1e9)
}

/// The gauge figures of one stored run, as its kind's row adds them (`gauges::samples`);
/// none is NaN or infinite.
#[derive(Default)]
pub(crate) struct Gauges(pub(crate) Vec<Sample>);

impl Gauges {
    pub(crate) fn push(&mut self, metric: Metric, extra: (&'static str, &str), value: f64) {
        self.push_labelled(metric, &[extra], value);
    }

    /// A sample with more than one label of its own, in the order written.
    pub(crate) fn push_labelled(
        &mut self,
        metric: Metric,
        extra: &[(&'static str, &str)],
        value: f64,
    ) {
        if value.is_finite() {
            self.0.push(Sample {
                metric,
                extra: extra.iter().map(|(k, v)| (*k, v.to_string())).collect(),
                value,
            });
        }
    }
}

/// The direction a stream run's own figures are of.
fn primary(doc: &Document) -> &'static str {
    match &doc.start.spec {
        TestSpec::Stream(s) if s.direction == Direction::Reverse => "reverse",
        _ => "forward",
    }
}

/// A stream run's throughput each way.
pub(crate) fn stream(doc: &Document, g: &mut Gauges) {
    let Some(s) = doc.end.stream() else { return };
    if let Some(r) = &s.receiver {
        let primary = primary(doc);
        g.push(
            Metric::Throughput,
            ("direction", primary),
            r.bits_per_second,
        );
    }
    if let Some(r) = s.reverse.as_ref().and_then(|r| r.receiver.as_ref()) {
        g.push(
            Metric::Throughput,
            ("direction", "reverse"),
            r.bits_per_second,
        );
    }
}

/// A pps run's throughput and loss.
pub(crate) fn pps(doc: &Document, g: &mut Gauges) {
    let Some(p) = doc.end.pps() else { return };
    if let Some(r) = &p.receiver {
        g.push(
            Metric::Throughput,
            ("direction", "forward"),
            r.bits_per_second,
        );
    }
    let sent = p.sender.as_ref().map(|s| s.total_packets);
    if let (Some(lost), Some(sent)) = (p.lost_packets, sent.filter(|&s| s > 0)) {
        g.push(
            Metric::Loss,
            ("direction", "forward"),
            lost as f64 / sent as f64,
        );
    }
}

/// A ping's or an rpc's round trips, and a UDP one's loss.
pub(crate) fn rr(doc: &Document, g: &mut Gauges) {
    let Some(r) = doc.end.rr() else { return };
    if let Some(l) = &r.latency_ns {
        for (q, ns) in [("0.5", l.p50), ("0.99", l.p99), ("0.999", l.p999)] {
            g.push(Metric::Rtt, ("quantile", q), ns as f64 / 1e9);
        }
    }
    let udp = matches!(&doc.start.spec,
        TestSpec::Ping(s) | TestSpec::Rpc(s) if s.transport == Transport::Udp);
    let sent = r.client.as_ref().and_then(|c| c.requests_sent);
    // `lost_messages` is written only when some were lost; the client's counts exist
    // when `unanswered_requests` does.
    let lost = r.unanswered_requests.map(|_| r.lost_messages.unwrap_or(0));
    if let (true, Some(lost), Some(sent)) = (udp, lost, sent.filter(|&s| s > 0)) {
        g.push(
            Metric::Loss,
            ("direction", "round_trip"),
            lost as f64 / sent as f64,
        );
    }
}

/// A STAMP run's round trips and loss (each way against a stateful reflector).
pub(crate) fn stamp(doc: &Document, g: &mut Gauges) {
    let Some(s) = doc.end.stamp() else { return };
    if let Some(l) = &s.latency_ns {
        for (q, ns) in [("0.5", l.p50), ("0.99", l.p99), ("0.999", l.p999)] {
            g.push(Metric::Rtt, ("quantile", q), ns as f64 / 1e9);
        }
    }
    let sent = s.sent.max(1) as f64;
    match (s.lost_forward, s.lost_reverse) {
        // Against a stateful reflector, each way (up to its last answer).
        (Some(f), Some(r)) if s.sent > 0 => {
            g.push(Metric::Loss, ("direction", "forward"), f as f64 / sent);
            g.push(Metric::Loss, ("direction", "reverse"), r as f64 / sent);
        }
        _ if s.sent > 0 => g.push(
            Metric::Loss,
            ("direction", "round_trip"),
            s.lost as f64 / sent,
        ),
        _ => {}
    }
}

/// An rpm run's responsiveness each way and pooled, each way's goodput (the client is
/// the source: the download is the reverse direction), and each way's verdict, labelled
/// `direction` as `sonde_rpm` is (`download`, `upload`). The run's own verdict is one of
/// these (`limit::rpm::judge_run`), so it is not written again without a direction: a
/// `count by (verdict)` would count the direction twice.
pub(crate) fn rpm(doc: &Document, g: &mut Gauges) {
    let Some(r) = doc.end.rpm() else { return };
    if let Some(both) = &r.responsiveness {
        g.push(Metric::Responsiveness, ("direction", "both"), both.rpm);
    }
    for (name, way, d) in [
        ("download", "reverse", &r.download),
        ("upload", "forward", &r.upload),
    ] {
        let Some(d) = d else { continue };
        if let Some(resp) = &d.responsiveness {
            g.push(Metric::Responsiveness, ("direction", name), resp.rpm);
        }
        g.push(
            Metric::Throughput,
            ("direction", way),
            d.goodput_bits_per_second,
        );
        if let Some(v) = &d.limited_by {
            let labels = [("direction", name), ("verdict", v.verdict.as_str())];
            g.push_labelled(Metric::LimitedBy, &labels, 1.0);
        }
    }
}

/// A stream run's retransmits by direction: the sender's connections' count
/// (`tcp_retransmits.connections`), where the sender reported it.
pub(crate) fn retransmits(doc: &Document) -> Vec<(&'static str, u64)> {
    let Some(s) = doc.end.stream() else {
        return Vec::new();
    };
    let primary = primary(doc);
    let reverse = s.reverse.as_ref().and_then(|r| r.sender.as_ref());
    [(primary, s.sender.as_ref()), ("reverse", reverse)]
        .into_iter()
        .filter_map(|(d, side)| Some((d, side?.tcp_retransmits.connections?)))
        .collect()
}

/// The status a stored run counts under in `sonde_runs_total`.
pub(crate) fn status(doc: &Document) -> Status {
    match doc.end.partial {
        true => Status::Partial,
        false => Status::Ok,
    }
}

/// A run's status; as a number, its index in [`Status::ALL`] and in a pair's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok = 0,
    Partial = 1,
    Failed = 2,
}

impl Status {
    pub(crate) const ALL: [Status; 3] = [Status::Ok, Status::Partial, Status::Failed];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Failed => "failed",
        }
    }
}
