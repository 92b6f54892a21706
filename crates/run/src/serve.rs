//! `sonde serve`'s optional services, each started from its config, added to the one owner
//! ([`Services`]) and its listening line said (on stderr in the binary: stdout's first line
//! is the agent's, which scripts read for its port). The binary calls them in the start
//! order `daemon.rs` states.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::iperf3::{Iperf3Config, Iperf3Server};
use crate::mesh::{MeshConfig, MeshError};
use crate::metrics_http::{MetricsError, Token};
use crate::service::{Services, Threads};
use crate::stamp::{ReflectorConfig, ReflectorService};

/// Why a service did not start, naming its flag.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--stamp {bind}: {source}")]
    Stamp {
        bind: SocketAddr,
        source: std::io::Error,
    },
    #[error("--iperf3 {bind}: {source}")]
    Iperf3 {
        bind: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Mesh(#[from] MeshError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error(transparent)]
    Rpm(#[from] crate::rpm::EndpointError),
}

/// `--stamp`: the STAMP reflector.
pub fn stamp(
    services: &mut Services,
    cfg: Option<ReflectorConfig>,
    say: &dyn Fn(&str),
) -> Result<(), ServeError> {
    let Some(cfg) = cfg else { return Ok(()) };
    let (bind, words) = (cfg.bind, cfg.describe());
    let r = ReflectorService::start(cfg).map_err(|source| ServeError::Stamp { bind, source })?;
    say(&format!(
        "sonde stamp reflector listening on {} ({words})",
        r.local
    ));
    services.add(Box::new(r));
    Ok(())
}

/// `--iperf3`: the iperf3 server.
pub fn iperf3(
    services: &mut Services,
    cfg: Option<Iperf3Config>,
    say: &dyn Fn(&str),
) -> Result<(), ServeError> {
    let Some(cfg) = cfg else { return Ok(()) };
    let (bind, words) = (cfg.bind, cfg.describe());
    let r = Iperf3Server::start(cfg).map_err(|source| ServeError::Iperf3 { bind, source })?;
    say(&format!(
        "sonde iperf3 server listening on {} ({words})",
        r.local
    ));
    services.add(Box::new(r));
    Ok(())
}

/// `--rpm`: the responsiveness test's endpoint.
pub fn rpm(
    services: &mut Services,
    cfg: Option<crate::rpm::EndpointConfig>,
    say: &dyn Fn(&str),
) -> Result<(), ServeError> {
    let Some(cfg) = cfg else { return Ok(()) };
    let (threads, line) = crate::rpm::endpoint(cfg)?;
    say(&line);
    services.add(Box::new(threads));
    Ok(())
}

/// The mesh's `--metrics` and `--metrics-token-file`.
pub struct MeshMetrics {
    pub addr: Option<SocketAddr>,
    pub token_file: Option<PathBuf>,
}

/// `--mesh`: the mesh, then its `/metrics` when asked.
pub fn mesh(
    services: &mut Services,
    cfg: Option<MeshConfig>,
    metrics: &MeshMetrics,
    say: &dyn Fn(&str),
) -> Result<(), ServeError> {
    let Some(cfg) = cfg else { return Ok(()) };
    let m = crate::mesh::start(cfg)?;
    say(&format!("sonde mesh reflecting on {}", m.reflector));
    let state = std::sync::Arc::clone(&m.state);
    services.add(Box::new(m));
    if let Some(addr) = metrics.addr {
        let token = metrics.token_file.as_deref().map(Token::from_file);
        let token = token.transpose()?;
        let mut threads = Threads::new("mesh metrics");
        let stop = threads.stop.clone();
        let served = crate::mesh_metrics::start(addr, token, state, stop)?;
        threads.threads.push(served);
        services.add(Box::new(threads));
    }
    Ok(())
}
