//! The results each end sends the other after the test (`send_results`): CPU, whether the
//! sender counted retransmits, and per stream its bytes, retransmits, UDP jitter, losses
//! and packets. The fields iperf3's `get_results` requires are required here too.

use serde::{Deserialize, Serialize};

use super::Iperf3Error;

/// Most streams a results message may list: 128 each way.
pub const MAX_RESULT_STREAMS: usize = 256;
/// Longest server output text kept (`--get-server-output`).
const SERVER_TEXT_MAX_CHARS: usize = 64 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1: the sender counted retransmits; 0: it could not; -1: this end only received.
    #[serde(deserialize_with = "int")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResults>,
    /// The server's own `-J` output, when the client asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<serde_json::Value>,
    /// The server's text output, when the client asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
}

/// Every number iperf3 writes is a cJSON double: integral ones print as integers, large
/// ones as `1.5e+15`, and a -1 some versions cast to unsigned prints as 2^64 - 1. Read
/// them as doubles, then as the integer meant (above `i64::MAX`: -1; never a panic).
fn int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = f64::deserialize(d)?;
    Ok(match v {
        v if !v.is_finite() => -1,
        v if v >= 9.2e18 => -1,
        v => v as i64,
    })
}

/// A count: never negative (nor past `i64::MAX`, which [`int`] reads as -1); refused,
/// not read as 0, as no honest iperf3 sends one.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match int(d)? {
        v if v < 0 => Err(serde::de::Error::custom(
            "a byte count that is negative or past 2^63",
        )),
        v => Ok(v as u64),
    }
}

fn id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(int(d)?.clamp(0, i64::from(u32::MAX)) as u32)
}

fn some_int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    int(d).map(Some)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResults {
    #[serde(deserialize_with = "id")]
    pub id: u32,
    /// Sent (less the omitted) or received, by this end.
    #[serde(deserialize_with = "count")]
    pub bytes: u64,
    /// -1: not counted.
    #[serde(deserialize_with = "int")]
    pub retransmits: i64,
    /// Seconds (UDP receivers).
    pub jitter: f64,
    /// UDP datagrams lost (receivers).
    #[serde(deserialize_with = "int")]
    pub errors: i64,
    #[serde(
        default,
        deserialize_with = "some_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub omitted_errors: Option<i64>,
    /// UDP datagrams: sent, or the highest sequence number received.
    #[serde(deserialize_with = "int")]
    pub packets: i64,
    #[serde(
        default,
        deserialize_with = "some_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub omitted_packets: Option<i64>,
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
}

impl Results {
    /// Refuses what no honest iperf3 sends: too many streams, duplicate ids, numbers
    /// that are not finite; cuts the server's text to its bound.
    pub fn checked(mut self) -> Result<Results, Iperf3Error> {
        let bad = |reason: String| Iperf3Error::BadJson {
            what: "results",
            reason,
        };
        if self.streams.len() > MAX_RESULT_STREAMS {
            return Err(bad(format!(
                "{} streams, over the {MAX_RESULT_STREAMS} a test can have",
                self.streams.len()
            )));
        }
        let mut ids: Vec<u32> = self.streams.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a stream id given twice".into()));
        }
        let finite = [
            self.cpu_util_total,
            self.cpu_util_user,
            self.cpu_util_system,
        ]
        .into_iter()
        .chain(
            self.streams
                .iter()
                .flat_map(|s| [s.jitter, s.start_time, s.end_time]),
        )
        .all(f64::is_finite);
        if !finite {
            return Err(bad("a number that is not finite".into()));
        }
        if let Some(t) = &mut self.server_output_text {
            if t.len() > SERVER_TEXT_MAX_CHARS {
                let mut end = SERVER_TEXT_MAX_CHARS;
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                t.truncate(end);
            }
        }
        Ok(self)
    }

    /// The iperf3 version of the far end, when its output says (`--get-server-output`):
    /// `start.version` of its JSON, or the "iperf 3.x" its verbose text prints.
    pub fn server_version(&self) -> Option<String> {
        let from_json = self
            .server_output_json
            .as_ref()
            .and_then(|j| j.pointer("/start/version"))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let from_text = || {
            let t = self.server_output_text.as_deref()?;
            let at = t.find("iperf 3.")?;
            let word: String = t[at + 6..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
                .take(16)
                .collect();
            Some(format!("iperf {word}"))
        };
        from_json
            .or_else(from_text)
            .map(|v| v.chars().take(32).collect())
    }
}
