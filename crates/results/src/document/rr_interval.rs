//! A ping or rpc test's own figures of one interval, measured by the client: a leaf that
//! the intervals' section and rr's document both use, and where rr's further interval
//! figures go.

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;

/// Ping and rpc: the client's figures of one interval (flattened into the interval).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RrInterval {
    /// Completed requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Round-trip latency of this interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ns: Option<LatencySummary>,
    /// `--stages`: where this interval's round trips went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<crate::stages::Stages>,
    /// `--stages`: this interval's delay each way, with the run's clock offset taken off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oneway: Option<Box<crate::oneway::OneWay>>,
}
