//! `sonde serve --mesh ... --metrics ADDR:PORT`: the mesh's state as OpenMetrics, encoded
//! from the live figures (nothing kept for a peer that left the list) at most once per
//! [`RENDER_PERIOD`], under the state's lock but never while writing to the network:
//! every scrape within the period is written the same shared bytes (24 MB at 10,000 peers).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sonde_report::openmetrics::{encode_mesh, MeshAgent, MeshPeer};
use sonde_run::mesh::MeshState;
use sonde_run::signals::Interrupt;

use crate::metrics_http::{Access, Token};

/// How long one rendering of the mesh's metrics is served: a probe's figures move once
/// a second at the default rate; Prometheus scrapes every 15 s.
pub const RENDER_PERIOD: Duration = Duration::from_secs(1);

/// The text of one scrape.
pub fn text(state: &Mutex<MeshState>) -> String {
    let s = state.lock().unwrap();
    let agent = MeshAgent {
        source: &s.name,
        labels: &s.labels,
        budget_per_s: s.budget_per_s,
        rate_per_s: s.rate_per_s,
        reflected: s.reflected,
        refused: s.refused,
    };
    let named: Vec<(String, _)> = s
        .peers
        .iter()
        .map(|(a, e)| (a.ip().to_string(), e.labels()))
        .collect();
    let peers: Vec<MeshPeer<'_>> = s
        .peers
        .values()
        .zip(&named)
        .map(|(e, (a, labels))| MeshPeer {
            address: a,
            labels,
            stats: &e.stats,
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
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let access = Access { token, tls: None };
    let render = move || text(&state);
    let (local, handle) = crate::metrics_http::serve(addr, render, RENDER_PERIOD, access, stop)?;
    tracing::info!("mesh metrics: http://{local}/metrics");
    Ok(handle)
}
