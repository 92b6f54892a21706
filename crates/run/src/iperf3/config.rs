//! What `sonde serve --iperf3` serves: its address, the client networks besides loopback,
//! the agent's limits.

use std::net::{IpAddr, SocketAddr};

use crate::agent::Limits;
use crate::stamp::Cidr;

#[derive(Debug, Clone)]
pub struct Iperf3Config {
    pub bind: SocketAddr,
    /// Client networks served besides loopback; empty: loopback only.
    pub allow: Vec<Cidr>,
    pub limits: Limits,
    /// The agent's account of its live tests: a served test books its threads and memory
    /// there, beside them.
    pub account: std::sync::Arc<crate::agent::Account>,
    /// This agent's command line, for the documents.
    pub command: String,
}

impl Iperf3Config {
    /// Whether a client at `ip` is served.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_loopback() || self.allow.iter().any(|c| c.contains(ip))
    }

    /// How the service describes itself in its "listening" line.
    pub fn describe(&self) -> String {
        match self.allow.len() {
            0 => "loopback clients only".into(),
            n => format!("loopback and {n} allowed networks"),
        }
    }
}
