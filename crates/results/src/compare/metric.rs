//! A run's headline figures ([`Metric`]) and each kind's own: what `document::Row::metrics`
//! points at, so that the comparison reads any kind through its row.

use crate::document::{PacketsEnd, RrEnd, StreamEnd};
use crate::rpm::RpmEnd;
use crate::side::Role;

/// A headline figure of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Machine name, with its unit (`rtt_p99_us`): JSON and `--fail-if-worse` use it.
    pub key: &'static str,
    /// As a reader names it (`RTT P99`), and its unit.
    pub title: String,
    pub unit: &'static str,
    pub value: f64,
    pub higher_is_better: bool,
    pub measured_by: Role,
    /// A percentile of the run's round trips: groups of runs compare the percentile of
    /// their merged histograms.
    pub quantile: Option<f64>,
}

impl Metric {
    pub(crate) fn new(key: &'static str, title: &str, unit: &'static str, value: f64) -> Metric {
        Metric {
            key,
            title: title.into(),
            unit,
            value,
            higher_is_better: true,
            measured_by: Role::Client,
            quantile: None,
        }
    }

    pub(crate) fn lower_is_better(self) -> Metric {
        Metric {
            higher_is_better: false,
            ..self
        }
    }

    fn by(self, measured_by: Role) -> Metric {
        Metric {
            measured_by,
            ..self
        }
    }
}

/// A STAMP run: its round trips as a ping's, then its loss (lower is better).
pub(crate) fn stamp_metrics(e: &crate::document::stamp::StampEnd) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Some(l) = &e.latency_ns {
        for (key, title, q, v) in [
            ("rtt_p50_us", "RTT P50", 0.5, l.p50),
            ("rtt_p99_us", "RTT P99", 0.99, l.p99),
        ] {
            let m = Metric::new(key, title, "µs", v as f64 / 1e3).lower_is_better();
            out.push(Metric {
                quantile: Some(q),
                ..m
            });
        }
    }
    if e.sent > 0 {
        let lost = 100.0 * e.lost as f64 / e.sent as f64;
        out.push(Metric::new("lost_percent", "Packets lost", "%", lost).lower_is_better());
    }
    out
}

pub(crate) fn stream_metrics(e: &StreamEnd) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Some(r) = &e.receiver {
        let m = Metric::new(
            "receiver_gbit_per_s",
            "Throughput received",
            "Gbit/s",
            r.bits_per_second / 1e9,
        );
        out.push(m.by(r.by.measured_by));
    }
    if let Some(s) = &e.sender {
        if let Some(c) = s.cycles_per_byte {
            let m = Metric::new(
                "sender_cycles_per_byte",
                "Sender CPU cycles per byte",
                "cycles/B",
                c,
            );
            out.push(m.lower_is_better().by(s.by.measured_by));
        }
    }
    out
}

pub(crate) fn rr_metrics(e: &RrEnd, ping: bool) -> Vec<Metric> {
    let mut out = Vec::new();
    let rate = e
        .requests_per_second
        .map(|r| Metric::new("requests_per_second", "Request rate", "requests/s", r));
    out.extend(rate.clone().filter(|_| !ping));
    if let Some(l) = &e.latency_ns {
        for (key, title, q, v) in [
            ("rtt_p50_us", "RTT P50", 0.5, l.p50),
            ("rtt_p99_us", "RTT P99", 0.99, l.p99),
            ("rtt_p999_us", "RTT P99.9", 0.999, l.p999),
        ] {
            let m = Metric::new(key, title, "µs", v as f64 / 1e3).lower_is_better();
            out.push(Metric {
                quantile: Some(q),
                ..m
            });
        }
    }
    out.extend(rate.filter(|_| ping));
    if let Some(c) = e.client.as_ref().and_then(|c| c.cpu_us_per_message) {
        let m = Metric::new(
            "client_cpu_us_per_message",
            "Client CPU per message",
            "µs",
            c,
        );
        out.push(m.lower_is_better());
    }
    out
}

pub(crate) fn pps_metrics(p: &PacketsEnd) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Some(r) = &p.receiver {
        let m = Metric::new(
            "received_packets_per_second",
            "Packets received",
            "packets/s",
            r.packets_per_second,
        );
        out.push(m.by(r.by.measured_by));
    }
    if let Some(l) = p.loss_percent {
        out.push(
            Metric::new("loss_percent", "Packet loss", "%", l)
                .lower_is_better()
                .by(Role::Server),
        );
    }
    out
}

/// A load test's added P50 per loaded phase and ping: lower is better.
pub(crate) fn load_metrics(l: &crate::document::load::LoadEnd) -> Vec<Metric> {
    use crate::spec::{Phase, Transport};
    l.added_latency
        .iter()
        .filter_map(|a| {
            let key = match (a.phase, a.transport) {
                (Phase::Upload, Transport::Udp) => "upload_added_udp_p50_us",
                (Phase::Upload, Transport::Tcp) => "upload_added_tcp_p50_us",
                (Phase::Download, Transport::Udp) => "download_added_udp_p50_us",
                (Phase::Download, Transport::Tcp) => "download_added_tcp_p50_us",
                (Phase::Both, Transport::Udp) => "both_added_udp_p50_us",
                (Phase::Both, Transport::Tcp) => "both_added_tcp_p50_us",
                (Phase::Idle, _) => return None,
            };
            let ping = match a.transport {
                Transport::Udp => "UDP",
                Transport::Tcp => "TCP",
            };
            let title = format!("{ping} RTT P50 added by {} load", a.phase.as_str());
            Some(Metric::new(key, &title, "µs", a.p50_added_ns as f64 / 1e3).lower_is_better())
        })
        .collect()
}

/// A responsiveness run's headline figures, in the order a reader looks.
pub fn rpm_metrics(e: &RpmEnd) -> Vec<Metric> {
    let mut out = Vec::new();
    if let Some(r) = &e.responsiveness {
        out.push(Metric::new("rpm", "Responsiveness", "RPM", r.rpm));
        out.push(Metric::new(
            "self_rpm",
            "Responsiveness, self probes",
            "RPM",
            r.self_rpm,
        ));
        out.push(Metric::new(
            "foreign_rpm",
            "Responsiveness, foreign probes",
            "RPM",
            r.foreign_rpm,
        ));
    }
    for (key, title, d) in [
        ("download_mbit_per_s", "Download goodput", &e.download),
        ("upload_mbit_per_s", "Upload goodput", &e.upload),
    ] {
        if let Some(d) = d {
            out.push(Metric::new(
                key,
                title,
                "Mbit/s",
                d.goodput_bits_per_second / 1e6,
            ));
        }
    }
    if let Some(i) = &e.idle {
        out.push(
            Metric::new("idle_rtt_ms", "Idle round trip", "ms", i.trimmed_mean_ms)
                .lower_is_better(),
        );
    }
    out
}
