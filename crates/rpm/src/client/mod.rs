//! `sonde rpm URL`: fetches the configuration, measures the idle round trip, then runs the
//! draft's method once per direction (download, then upload), on one current-thread tokio
//! runtime. The decisions are [`crate::method`]'s; this module only opens connections,
//! sends probes and counts bytes.

pub mod conn;
mod error;
mod stage;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use http::Method;
use sonde_results::rpm::{Component, RpmEnd, RpmParams};

use crate::config::{self, NqConfig, Url};
use crate::method::{trimmed_mean, Probes};
use crate::tls::{self, Trust};
use conn::Target;
pub use error::*;

/// Idle round trips measured before any load.
pub const IDLE_PROBES: usize = 20;

/// What to measure and how.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The configuration's URL; a bare `scheme://host[:port]` means its `/.well-known/nq`.
    pub url: String,
    pub trust: Trust,
    pub params: RpmParams,
    pub download: bool,
    pub upload: bool,
}

/// A run's result; `partial` when `stop` cut it (Ctrl-C): then it holds what was measured
/// before (the idle round trips taken, each direction's ended intervals).
pub struct Outcome {
    pub end: RpmEnd,
    pub partial: bool,
}

/// Runs the whole test on this thread, looking at `stop` between idle probes and at least
/// every 100 ms of a stage.
pub fn run(opts: &ClientOptions, stop: &dyn Fn() -> bool) -> Result<Outcome, ClientError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    rt.block_on(run_async(opts, stop))
}

/// The configuration URL the user meant.
pub fn config_url(text: &str) -> Result<Url, ClientError> {
    let mut url = Url::parse(text).map_err(|e| ClientError::Url("URL".into(), e.to_string()))?;
    if url.path == "/" {
        url.path = "/.well-known/nq".into();
    }
    Ok(url)
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, ClientError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| ClientError::Resolve(host.into(), e.to_string()))?
        .next()
        .ok_or_else(|| ClientError::Resolve(host.into(), "no address".into()))
}

fn target(url: &Url, connect_host: &str, trust: &Trust) -> Result<Target, ClientError> {
    Ok(Target {
        addr: resolve(connect_host, url.port)?,
        host: url.host.clone(),
        authority: url.authority(),
        tls: match url.tls {
            true => Some(tls::client_config(trust)?),
            false => None,
        },
    })
}

/// Fetches and reads the configuration.
async fn fetch_config(url: &Url, trust: &Trust) -> Result<NqConfig, ClientError> {
    let t = target(url, &url.host, trust)?;
    let mut c = conn::open(&t).await?;
    let req = conn::request(Method::GET, url, &t.authority, conn::empty());
    let resp = conn::send(&mut c.sender, req).await?;
    let body = conn::read_to_end(resp.into_body(), config::MAX_CONFIG_BYTES + 1).await?;
    config::parse(&body).map_err(|e| ClientError::Config(url.text(), e))
}

async fn run_async(opts: &ClientOptions, stop: &dyn Fn() -> bool) -> Result<Outcome, ClientError> {
    let url = config_url(&opts.url)?;
    let cfg = fetch_config(&url, &opts.trust).await?;
    let host = cfg
        .test_endpoint
        .clone()
        .unwrap_or(cfg.small_download.host.clone());
    let small = target(&cfg.small_download, &host, &opts.trust)?;
    let (idle, tls_version) = idle(&small, &cfg.small_download, stop).await?;
    let mut partial = stop();
    let run = stage::Run {
        params: opts.params.clone(),
        small: cfg.small_download.clone(),
        small_target: small.clone(),
        large: cfg.large_download.clone(),
        large_target: target(&cfg.large_download, &host, &opts.trust)?,
        upload: cfg.upload.clone(),
        upload_target: target(&cfg.upload, &host, &opts.trust)?,
    };
    let mut pooled = Probes::default();
    let mut directions = [None, None];
    for (i, on) in [opts.download, opts.upload].into_iter().enumerate() {
        if !on || partial {
            continue;
        }
        let ran = stage::direction(&run, i == 1, stop).await?;
        pooled.extend(&ran.window);
        directions[i] = Some(ran.direction);
        partial = ran.stopped;
    }
    // Each direction's verdict from the client's TCP_INFO and the round trips, the
    // loaded one held against the idle.
    for (i, d) in directions.iter_mut().enumerate() {
        if let Some(d) = d {
            let base = (idle.count > 0).then_some(idle.trimmed_mean_ms);
            sonde_results::limit::rpm::judge_direction(d, i == 1, base);
        }
    }
    let [download, upload] = directions;
    let end = RpmEnd {
        config_url: url.text(),
        large_download_url: cfg.large_download.text(),
        small_download_url: cfg.small_download.text(),
        upload_url: cfg.upload.text(),
        tls_version,
        insecure: matches!(opts.trust, Trust::Anything),
        responsiveness: pooled.responsiveness(opts.params.tmp),
        idle: Some(idle),
        download,
        upload,
        params: opts.params.clone(),
    };
    Ok(Outcome { end, partial })
}

/// The idle round trip: [`IDLE_PROBES`] 1-byte GETs one after another on one connection
/// (fewer when `stop` cuts them).
async fn idle(
    t: &Target,
    small: &Url,
    stop: &dyn Fn() -> bool,
) -> Result<(Component, Option<String>), ClientError> {
    let mut c = conn::open(t).await?;
    let mut rtts = Vec::with_capacity(IDLE_PROBES);
    let started = Instant::now();
    for _ in 0..IDLE_PROBES {
        if stop() {
            break;
        }
        rtts.push(conn::timed_get(&mut c.sender, small, &t.authority).await?);
    }
    tracing::debug!("rpm: idle probes took {:?}", started.elapsed());
    let (mean, kept) = trimmed_mean(&rtts, 0.95).unwrap_or((0.0, 0));
    let component = Component {
        trimmed_mean_ms: mean,
        count: rtts.len() as u64,
        kept: kept as u64,
    };
    Ok((component, c.tls_version.clone()))
}
