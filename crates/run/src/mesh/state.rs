//! What the mesh's thread and its readers share: the configuration and the state the
//! metrics read (a leaf: the prober and the module's root both import it).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sonde_proto::Key;
use sonde_results::mesh::{Judging, PeerStats};

use super::peers::{Peer, Source};
use super::reflector::Rate;

#[derive(Debug, Clone)]
pub struct MeshConfig {
    pub source: Source,
    /// This agent's reflector port, and its peers' where the list does not say.
    pub port: u16,
    /// The address both sockets bind (the agent's `--bind`).
    pub bind: IpAddr,
    /// This agent's `source` label: the address its peers know it by.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Probes per second per peer (`--mesh-rate`).
    pub rate: f64,
    /// Probes per second at most, all peers together (`--mesh-budget`).
    pub budget: f64,
    pub refresh: Duration,
    /// The fleet key: probes and answers carry its HMAC; none (`--insecure-no-key`):
    /// unauthenticated.
    pub key: Option<Key>,
    pub judging: Judging,
    /// The reflector's answers per second at most.
    pub reflect: Rate,
}

/// One listed peer and its figures.
#[derive(Debug)]
pub struct PeerEntry {
    pub peer: Peer,
    /// The labels its reflector answered (the list's win over them).
    pub learned: BTreeMap<String, String>,
    pub stats: PeerStats,
    pub(super) next_seq: u32,
}

impl PeerEntry {
    /// Its labels: what its reflector said, under what the list says.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = self.learned.clone();
        out.extend(self.peer.labels.clone());
        out
    }
}

/// What the metrics read: the agent's own figures and each listed peer's.
#[derive(Debug)]
pub struct MeshState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub budget_per_s: f64,
    /// Probes per second scheduled now, all peers together.
    pub rate_per_s: f64,
    pub reflected: u64,
    pub refused: u64,
    pub peers: BTreeMap<SocketAddr, PeerEntry>,
    /// Why the last reading of the list failed (the previous list is kept).
    pub list_error: Option<String>,
}
