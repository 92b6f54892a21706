//! `sonde serve --mesh ... --metrics ADDR:PORT`: the mesh's state as OpenMetrics, encoded
//! from the live figures (nothing kept for a peer that left the list) at most once per
//! [`RENDER_PERIOD`]: copied under the state's lock, encoded after it, and written to every
//! scrape within the period as the same shared bytes (24 MB at 10,000 peers).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::mesh::MeshState;
use crate::signals::Interrupt;
use sonde_report::openmetrics::{encode_mesh, MeshAgent, MeshPeer};
use sonde_results::mesh::PeerFigures;

use crate::metrics_http::{Access, MetricsError, Token};

/// How long one rendering of the mesh's metrics is served: a probe's figures move once
/// a second at the default rate; Prometheus scrapes every 15 s.
pub const RENDER_PERIOD: Duration = Duration::from_secs(1);

/// What one scrape shows, copied under the state's lock (a few bytes a peer).
struct Snapshot {
    name: String,
    labels: BTreeMap<String, String>,
    budget_per_s: f64,
    rate_per_s: f64,
    reflected: u64,
    refused: u64,
    departures: sonde_proto::mesh::Departures,
    reflections: sonde_proto::mesh::Reflections,
    /// Each peer's address, labels and figures, in address order.
    peers: Vec<(String, BTreeMap<String, String>, PeerFigures)>,
}

fn snapshot(state: &Mutex<MeshState>) -> Snapshot {
    let s = state.lock().unwrap_or_else(PoisonError::into_inner);
    Snapshot {
        name: s.name.clone(),
        labels: s.labels.clone(),
        budget_per_s: s.budget_per_s,
        rate_per_s: s.rate_per_s(),
        reflected: s.reflected,
        refused: s.refused,
        departures: s.prober.departures(),
        reflections: s.prober.reflections(),
        peers: s
            .peers()
            .iter()
            .map(|(a, e)| (a.ip().to_string(), e.labels(), e.stats.figures()))
            .collect(),
    }
}

/// The text of one scrape: the figures copied under the lock, encoded after it (24 MB
/// at 10,000 peers: the prober never waits for that).
pub fn text(state: &Mutex<MeshState>) -> String {
    let s = snapshot(state);
    let agent = MeshAgent {
        source: &s.name,
        labels: &s.labels,
        budget_per_s: s.budget_per_s,
        rate_per_s: s.rate_per_s,
        reflected: s.reflected,
        refused: s.refused,
        departed_kernel: s.departures.kernel,
        departed_process: s.departures.process,
        t3_stamp: s.reflections.stamp,
        t3_clock: s.reflections.clock,
    };
    let peers: Vec<MeshPeer<'_>> = s
        .peers
        .iter()
        .map(|(address, labels, stats)| MeshPeer {
            address,
            labels,
            stats,
        })
        .collect();
    encode_mesh(&agent, &peers)
}

/// Serves the mesh's metrics until `stop`; the error names --metrics.
pub fn start(
    addr: std::net::SocketAddr,
    token: Option<Token>,
    state: Arc<Mutex<MeshState>>,
    stop: Interrupt,
) -> Result<std::thread::JoinHandle<()>, MetricsError> {
    let access = Access { token, tls: None };
    let render = move || text(&state);
    let (local, handle) = crate::metrics_http::serve(addr, render, RENDER_PERIOD, access, stop)?;
    tracing::info!("mesh metrics: http://{local}/metrics");
    Ok(handle)
}
