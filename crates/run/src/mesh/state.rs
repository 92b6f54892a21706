//! What the mesh's thread and its readers share: the state the metrics read, the prober's
//! machine in it (a leaf: the socket loop and the module's root both import it).

use std::collections::BTreeMap;

use sonde_proto::mesh::{Peers, Prober};

/// What the metrics read: the agent's own figures and the prober's, each listed peer's
/// among them.
pub struct MeshState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub budget_per_s: f64,
    pub reflected: u64,
    pub refused: u64,
    /// Why the last reading of the list failed (the previous list is kept).
    pub list_error: Option<String>,
    /// The prober's machine: the listed peers and their figures.
    pub prober: Prober,
}

impl MeshState {
    /// The listed peers and their figures.
    pub fn peers(&self) -> &Peers {
        self.prober.peers()
    }

    /// Probes per second scheduled now, all peers together.
    pub fn rate_per_s(&self) -> f64 {
        self.prober.rate_per_s()
    }
}
