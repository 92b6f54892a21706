//! What an agent will run for a controller: a limit refuses a test, it never trims one.

use sonde_results::TestSpec;

use crate::kind::{Demand, Kind};

/// What the agent will run for a controller.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_duration_ms: u64,
    pub max_connections: u32,
    /// Packets or requests per second a test may ask for; unpaced tests are refused too.
    pub max_rate: Option<f64>,
    pub max_message_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration_ms: 3_600_000,
            max_connections: sonde_results::spec::MAX_CONNECTIONS,
            max_rate: None,
            max_message_bytes: sonde_results::spec::MAX_MESSAGE_BYTES,
        }
    }
}

impl Limits {
    /// The first limit `spec` exceeds, in words naming the agent's flag.
    pub fn check(&self, spec: &TestSpec, kind: &dyn Kind) -> Option<String> {
        let total_ms = spec.timing().total_ms();
        let Demand {
            connections: conns,
            rate,
            message_bytes: msg,
        } = kind.demand(spec);
        if total_ms > self.max_duration_ms {
            return Some(format!(
                "the test lasts {:.1} s, over this agent's --max-duration of {:.1} s",
                total_ms as f64 / 1e3,
                self.max_duration_ms as f64 / 1e3
            ));
        }
        if conns > self.max_connections {
            return Some(format!(
                "{conns} connections or flows, over this agent's --max-connections of {}",
                self.max_connections
            ));
        }
        if msg > self.max_message_bytes {
            return Some(format!(
                "{msg}-byte messages, over this agent's --max-message of {}",
                self.max_message_bytes
            ));
        }
        if let (Some(max), Some(rate)) = (self.max_rate, rate) {
            match rate {
                Some(r) if r <= max => {}
                Some(r) => {
                    return Some(format!(
                        "{r} per second, over this agent's --max-rate of {max}"
                    ))
                }
                None => {
                    return Some(format!(
                        "an unpaced test; this agent's --max-rate of {max} needs --rate"
                    ))
                }
            }
        }
        None
    }
}
