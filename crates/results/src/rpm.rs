//! What `sonde rpm URL` measured: responsiveness under working conditions as the IETF IPPM
//! draft (draft-ietf-ippm-responsiveness) defines it, with every component the RPM is made
//! of kept apart (the TCP, TLS and HTTP round trips of foreign probes, the loaded round
//! trip of self probes, each direction's goodput), each with its count and the draft's
//! confidence. Plain data: the method that fills it is `sonde-rpm`'s.

use serde::{Deserialize, Serialize};

use crate::compare::metric::Metric;
use crate::document::Section;
use crate::kinds::Row;

/// The draft's named parameters (its "Test Parameters" table), as this run used them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RpmParams {
    /// MAD: intervals in each moving average.
    pub mad: u32,
    /// ID: the interval at which stability is judged.
    pub interval_ms: u64,
    /// TMP: the single-sided trimmed mean keeps this share (0.95: the slowest 5 % dropped).
    pub tmp: f64,
    /// SDT: stable when the moving averages' standard deviation is within this share.
    pub sdt: f64,
    /// INP: load-generating connections at the start.
    pub inp: u32,
    /// INC: connections added at each interval.
    pub inc: u32,
    /// MNP: most load-generating connections.
    pub mnp: u32,
    /// MPS: most probe pairs a second.
    pub mps: u32,
    /// PTC: the share of the measured goodput the probes may take.
    pub ptc: f64,
    /// The time limit of one direction's stage (the draft leaves it to the tool).
    pub stage_limit_ms: u64,
}

/// The draft's confidence in a metric: `low` when fewer than MAD intervals ran, `medium`
/// when they ran but did not settle within SDT, `high` when they settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// One kind of round trip over the last MAD intervals: its trimmed mean and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    /// The single-sided trimmed mean (TMP), milliseconds.
    pub trimmed_mean_ms: f64,
    /// Samples in the window.
    pub count: u64,
    /// Of them, those the trimmed mean kept.
    pub kept: u64,
}

/// RPM from its parts (`None` where the draft leaves it undefined: no samples).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Responsiveness {
    /// (foreign + self) / 2.
    pub rpm: f64,
    /// 60000 / the mean of TM(tcp_f), TM(tls_f), TM(http_f) (TLS left out over plain TCP).
    pub foreign_rpm: f64,
    /// 60000 / TM(http_l).
    pub self_rpm: f64,
    /// `tcp_f`: the TCP handshake of a foreign probe.
    pub tcp: Component,
    /// `tls_f`: the TLS handshake, per round trip (TLS 1.3: one); absent over plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Component>,
    /// `http_f`: a 1-byte GET on the fresh connection.
    pub http: Component,
    /// `http_l`: a 1-byte GET multiplexed on a load-generating connection.
    pub loaded: Component,
}

/// One interval of a stage, as the method saw it at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmInterval {
    pub end_s: f64,
    /// Load-generating connections open during it.
    pub connections: u32,
    pub goodput_bits_per_second: f64,
    /// The moving average over the last MAD intervals.
    pub moving_goodput_bits_per_second: f64,
    /// The responsiveness over the last MAD intervals' probes, once goodput saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_rpm: Option<f64>,
    pub probes: u64,
}

/// One direction's stage: load that way, probes both kinds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpmDirection {
    /// The moving average goodput at the stage's end.
    pub goodput_bits_per_second: f64,
    pub goodput_confidence: Confidence,
    /// Over the last MAD intervals; absent when no probe of a kind completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responsiveness: Option<Responsiveness>,
    pub rpm_confidence: Confidence,
    /// Load-generating connections at the end.
    pub connections: u32,
    pub duration_ms: u64,
    pub intervals: Vec<RpmInterval>,
}

/// The `end` of an `rpm` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RpmEnd {
    /// The configuration's URL (`/.well-known/nq`) as fetched.
    pub config_url: String,
    /// The load and probe URLs it named.
    pub large_download_url: String,
    pub small_download_url: String,
    pub upload_url: String,
    /// Whether the probes and load ran over TLS (`https`), and which version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<String>,
    /// The server certificate was accepted without verifying it (`--insecure`).
    #[serde(default)]
    pub insecure: bool,
    /// The whole run's responsiveness: both directions' final windows pooled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responsiveness: Option<Responsiveness>,
    /// A 1-byte GET on an idle connection before any load (the idle round trip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Component>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download: Option<RpmDirection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<RpmDirection>,
    pub params: RpmParams,
}

/// The results layer's row of the kind: its section under `end.rpm`, read back by name;
/// `sonde compare` compares its RPM, each direction's goodput and the idle round trip.
pub const ROW: Row = Row {
    metrics: |s| match s {
        Section::Rpm { rpm } => metrics(rpm),
        _ => Vec::new(),
    },
    ..Row::new(
        || Section::Rpm {
            rpm: RpmEnd::default(),
        },
        |mut v| match v.get_mut("rpm") {
            Some(inner) => Ok(Section::Rpm {
                rpm: serde_json::from_value(inner.take())?,
            }),
            None => Err(serde::de::Error::missing_field("rpm")),
        },
    )
};

/// The headline figures of a run, in the order a reader looks.
pub fn metrics(e: &RpmEnd) -> Vec<Metric> {
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

/// 60000 / milliseconds: round trips a minute (0 for a round trip of no time).
pub fn per_minute(ms: f64) -> f64 {
    if ms > 0.0 {
        60_000.0 / ms
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpm_is_sixty_thousand_over_milliseconds() {
        assert_eq!(per_minute(10.0), 6000.0);
        assert_eq!(per_minute(200.0), 300.0);
        assert_eq!(per_minute(0.0), 0.0);
    }

    #[test]
    fn confidence_reads_as_lowercase_words() {
        let s = serde_json::to_string(&[Confidence::Low, Confidence::High]).unwrap();
        assert_eq!(s, r#"["low","high"]"#);
    }
}
