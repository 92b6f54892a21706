//! `sonde serve --mesh SOURCE`'s flags: the peer list, the probe rate and budget, and the
//! agent's own `/metrics`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sonde_run::mesh::{self, MeshConfig, Source};

use super::flags::parse_duration_ms;

#[derive(Args, Debug)]
pub struct MeshArgs {
    /// Probe peers continuously with STAMP (keyed with --key-file) and answer theirs: a
    /// file of peers, one a line (`ADDR[:PORT] [open] [KEY=VALUE]...`; `open` for an
    /// agent-less STAMP reflector such as a router, the labels are the peer's), or
    /// dns:NAME (the agents' headless Service: every A/AAAA answer is a peer). Read again
    /// every --mesh-refresh.
    #[arg(long, value_name = "SOURCE")]
    pub mesh: Option<String>,
    /// UDP port of this agent's STAMP reflector, and the peers' where the list does not
    /// say.
    #[arg(long, default_value_t = mesh::DEFAULT_PORT, value_name = "PORT", requires = "mesh")]
    pub mesh_port: u16,
    /// Probes per second to each peer.
    #[arg(long, default_value_t = mesh::DEFAULT_RATE, value_parser = positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_rate: f64,
    /// Probes per second at most, all peers together: with more peers than it allows at
    /// --mesh-rate, each peer gets an equal share.
    #[arg(long, default_value_t = mesh::DEFAULT_BUDGET, value_parser = positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_budget: f64,
    /// How often the peer list is read (resolved) again.
    #[arg(long, default_value = "30", value_parser = duration, value_name = "SECS", requires = "mesh")]
    pub mesh_refresh: Duration,
    /// This agent's `source` label in the metrics: the address its peers probe [default:
    /// --bind].
    #[arg(long, value_name = "NAME", requires = "mesh")]
    pub mesh_name: Option<String>,
    /// A probe unanswered this long is lost.
    #[arg(long, default_value = "2", value_parser = duration, value_name = "SECS", requires = "mesh")]
    pub mesh_timeout: Duration,
    /// The window of each peer's HDR histogram (its percentiles in
    /// sonde_mesh_rtt_window_seconds).
    #[arg(long, default_value = "60", value_parser = duration, value_name = "SECS", requires = "mesh")]
    pub mesh_window: Duration,
    /// Answers per second this agent's reflector sends at most, all peers together.
    #[arg(long, default_value_t = 10_000.0, value_parser = positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_reflect_max: f64,
    /// Serve the mesh's figures at http://ADDR:PORT/metrics (OpenMetrics, for Prometheus).
    #[arg(long, value_name = "ADDR:PORT", requires = "mesh")]
    pub metrics: Option<SocketAddr>,
    /// With --metrics: answer only scrapes that present this file's token
    /// (`Authorization: Bearer TOKEN`); others get 401. Mode 0600, ours or root's.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token_file: Option<PathBuf>,
}

/// SECS (or with an `ms` or `s` suffix) as a `Duration`.
fn duration(s: &str) -> Result<Duration, String> {
    parse_duration_ms(s).map(Duration::from_millis)
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}

impl MeshArgs {
    /// The mesh these flags describe, or none without --mesh.
    /// `bind` and `insecure_no_key` are `serve`'s.
    pub fn config(
        &self,
        bind: std::net::IpAddr,
        insecure_no_key: bool,
        key: Option<sonde_proto::Key>,
        labels: &sonde_proto::Labels,
    ) -> anyhow::Result<Option<MeshConfig>> {
        let Some(source) = &self.mesh else {
            return Ok(None);
        };
        let source = Source::parse(source, self.mesh_port).map_err(anyhow::Error::msg)?;
        if key.is_none() && !insecure_no_key {
            anyhow::bail!("--mesh needs --key-file (its probes and answers carry the fleet key's HMAC), or --insecure-no-key on an isolated network");
        }
        Ok(Some(MeshConfig {
            source,
            port: self.mesh_port,
            bind,
            name: self.mesh_name.clone().unwrap_or_else(|| bind.to_string()),
            labels: labels.clone(),
            rate: self.mesh_rate,
            budget: self.mesh_budget,
            refresh: self.mesh_refresh,
            timeout: self.mesh_timeout,
            window: self.mesh_window,
            reflect_max: self.mesh_reflect_max,
            key,
        }))
    }
}
