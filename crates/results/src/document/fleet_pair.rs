//! A fleet run's place in its fleet, known before its document is assembled: a leaf the
//! document's inputs and its `start` both use.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Labels by name.
type Labels = BTreeMap<String, String>;

/// A fleet test's place in its fleet: the pair, each end's labels, the round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetPair {
    /// The fleet file's `name`.
    pub fleet: String,
    /// The agent that sent (ran the client side), by its name in the fleet.
    pub source: String,
    pub destination: String,
    /// The source's labels: the fleet file's, and the agent's own (`sonde serve --label`)
    /// where the file does not name the same one (see [`FleetPair::with_agents_labels`]).
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub destination_labels: BTreeMap<String, String>,
    /// The scheduler's round, from 1.
    pub round: u32,
    /// The fleet file's test case in words (`stream -P 8 -t 10`), the `test` label of its
    /// metrics.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub test: String,
    /// `sonde fleet --every`: the pass that ran it, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<u32>,
}

impl FleetPair {
    /// This pair with each end's own labels, as the run recorded them (`client_own`: the
    /// client agent's, the source; `server_own`: the serving agent's, the destination),
    /// merged in under the fleet file's: on a conflict the file wins, since the operator
    /// wrote it for this fleet.
    pub fn with_agents_labels(
        &self,
        client_own: Option<&Labels>,
        server_own: &Labels,
    ) -> FleetPair {
        let merge = |file: &Labels, own: Option<&Labels>| {
            let mut merged = own.cloned().unwrap_or_default();
            merged.extend(file.iter().map(|(k, v)| (k.clone(), v.clone())));
            merged
        };
        FleetPair {
            source_labels: merge(&self.source_labels, client_own),
            destination_labels: merge(&self.destination_labels, Some(server_own)),
            ..self.clone()
        }
    }
}
