//! What `sonde rpm URL` measured: responsiveness under working conditions as the IETF IPPM
//! draft (draft-ietf-ippm-responsiveness) defines it, with every component the RPM is made
//! of kept apart (the TCP, TLS and HTTP round trips of foreign probes, the loaded round
//! trip of self probes, each direction's goodput), each with its count and the draft's
//! confidence. Plain data: the method that fills it is `sonde-rpm`'s.

use serde::{Deserialize, Serialize};

pub use crate::spec::RpmParams;
use crate::tcp::{TcpSample, TcpSummary};
use crate::verdict::LimitedBy;

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
    /// The client's TCP_INFO of each load-generating connection over the interval, as the
    /// stream kind records it (`transfer`: `send` on the upload, `receive` on the
    /// download); empty where the kernel said nothing (a server that is not ours changes
    /// nothing here: these are the client's own sockets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<TcpSample>,
    /// The server's TCP_INFO of the same connections over the interval, where the far
    /// end is `sonde serve --rpm` (each connection's own, asked over it): `send` on the
    /// download, `receive` on the upload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_tcp: Vec<TcpSample>,
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
    /// The client's TCP figures over the loaded phase (the intervals once goodput
    /// saturated, or all but the first when it never did), min / median / max across
    /// the load-generating connections: the sender's view on the upload, the receiver's
    /// on the download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpSummary>,
    /// The server's, over the same intervals, where it gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_tcp_info: Option<TcpSummary>,
    /// What limited the loaded phase, judged from the client's TCP_INFO and the
    /// round trips the method measured (`sonde_results::limit::rpm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<LimitedBy>,
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
