//! The responsiveness test (`sonde-rpm`) in the run layer: `serve --rpm`'s endpoint as one
//! of serve's services ([`endpoint`]), and `sonde rpm URL` from its checked flags
//! ([`RpmFlags::test`]) to one document ([`RpmTest::run`]).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::document::{End, LocalStart, Section};
use sonde_results::rpm::RpmParams;
use sonde_results::spec::RpmSpec;
use sonde_results::{Document, SpecError, TestSpec};
use sonde_rpm::client::{ClientError, ClientOptions};
use sonde_rpm::server::{self, Limits, ServerConfig, ServerError};
use sonde_rpm::tls::{TlsError, Trust};

use crate::service::Threads;
use crate::stamp::Cidr;

/// `serve --rpm`'s endpoint, as its flags describe it.
pub struct EndpointConfig {
    pub bind: SocketAddr,
    /// Networks served besides loopback (`--rpm-allow`).
    pub allow: Vec<Cidr>,
    /// `--rpm-cert` and `--rpm-key`; without them a self-signed certificate.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// `--rpm-h2c`: HTTP/2 in the clear.
    pub h2c: bool,
    pub limits: Limits,
    pub congestion: Option<String>,
}

/// Why the endpoint did not start, naming its flag.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// Starts the endpoint; its threads, and its listening line.
pub fn endpoint(cfg: EndpointConfig) -> Result<(Threads, String), EndpointError> {
    let bind = cfg.bind;
    let (tls, how) = match (&cfg.cert, cfg.h2c) {
        (_, true) => (None, "h2c, no TLS".to_string()),
        (Some((cert, key)), _) => {
            let t = sonde_rpm::tls::server_from_files(cert, key, "--rpm-cert", "--rpm-key")?;
            let how = format!("TLS 1.3, certificate sha256 {}", t.fingerprint);
            (Some(t.config), how)
        }
        _ => {
            let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
            if !bind.ip().is_unspecified() {
                names.push(bind.ip().to_string());
            }
            let t = sonde_rpm::tls::server_self_signed(names)?;
            let how = format!("TLS 1.3, self-signed certificate sha256 {}", t.fingerprint);
            (Some(t.config), how)
        }
    };
    let allow_list = cfg.allow.clone();
    let allow: server::Allow = Arc::new(move |ip: IpAddr| allowed(&allow_list, ip));
    let max_connections = cfg.limits.max_connections;
    let mut threads = Threads::new("rpm endpoint");
    let stop = threads.stop.clone();
    let server = ServerConfig {
        bind,
        tls: tls.clone(),
        allow,
        limits: cfg.limits,
        congestion: cfg.congestion,
    };
    let running = server::start(server, move || stop.is_set())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let allowed: Vec<String> = std::iter::once("loopback".to_string())
        .chain(cfg.allow.iter().map(|c| c.to_string()))
        .collect();
    let line = format!(
        "sonde rpm endpoint listening on {scheme}://{}/.well-known/nq ({how}; allows {}; at most {max_connections} connections)",
        running.local,
        allowed.join(", "),
    );
    threads.threads.push(running.thread);
    Ok((threads, line))
}

/// Loopback, or an address of the listed networks (an IPv4-mapped IPv6 address as IPv4).
fn allowed(list: &[Cidr], ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || list.iter().any(|c| c.contains(ip))
}

/// `sonde rpm URL`'s flags, as typed values.
pub struct RpmFlags {
    pub url: String,
    pub insecure: bool,
    pub ca: Option<PathBuf>,
    pub interval_ms: u64,
    pub mad: u32,
    pub max_connections: u32,
    pub max_probes: u32,
    pub stage_limit_ms: u64,
    pub download_only: bool,
    pub upload_only: bool,
}

/// A flag of `sonde rpm` refused, named.
#[derive(Debug, thiserror::Error)]
pub enum RpmFlagError {
    #[error("--interval {0} ms: at least 50 ms")]
    Interval(u64),
    #[error("--stage-limit: shorter than one --interval")]
    StageLimit,
    #[error(transparent)]
    Url(ClientError),
    #[error(transparent)]
    Spec(#[from] SpecError),
}

/// Why `sonde rpm` measured nothing: the endpoint at fault, named by its URL.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {source}")]
pub struct RpmRunError {
    pub url: String,
    pub source: ClientError,
}

/// A checked `sonde rpm`: the client's options and the spec its document records.
#[derive(Debug)]
pub struct RpmTest {
    pub options: ClientOptions,
    pub spec: RpmSpec,
}

impl RpmFlags {
    /// The test these flags ask for, refused naming the flag at fault.
    pub fn test(&self) -> Result<RpmTest, RpmFlagError> {
        if self.interval_ms < 50 {
            return Err(RpmFlagError::Interval(self.interval_ms));
        }
        if self.stage_limit_ms < self.interval_ms {
            return Err(RpmFlagError::StageLimit);
        }
        sonde_rpm::client::config_url(&self.url).map_err(RpmFlagError::Url)?;
        let trust = match (&self.ca, self.insecure) {
            (_, true) => Trust::Anything,
            (Some(f), _) => Trust::File(f.clone()),
            (None, false) => Trust::System,
        };
        let params = RpmParams {
            mad: self.mad,
            interval_ms: self.interval_ms,
            mnp: self.max_connections,
            mps: self.max_probes,
            stage_limit_ms: self.stage_limit_ms,
            ..sonde_rpm::method::default_params()
        };
        let (download, upload) = (!self.upload_only, !self.download_only);
        let spec = RpmSpec::new(
            self.url.clone(),
            self.insecure,
            params.clone(),
            download,
            upload,
        );
        spec.validate()?;
        let url = self.url.clone();
        let options = ClientOptions {
            url,
            trust,
            params,
            download,
            upload,
        };
        Ok(RpmTest { options, spec })
    }
}

impl RpmTest {
    /// Runs it to one document, judged (`end.limited_by`); cut by `stop` (Ctrl-C), what
    /// was measured is kept, the document marked partial.
    pub fn run(self, command: String, stop: &dyn Fn() -> bool) -> Result<Document, RpmRunError> {
        let started_at = crate::controller::now_rfc3339();
        let ran = sonde_rpm::client::run(&self.options, stop).map_err(|source| RpmRunError {
            url: self.options.url.clone(),
            source,
        })?;
        let peer = peer_of(&ran.end.small_download_url);
        let host = sonde_probe::hostwatch::describe(&HostProbe::for_peer(peer));
        let start = LocalStart {
            spec: TestSpec::Rpm(self.spec),
            command,
            host,
            started_at,
            software: crate::controller::SOFTWARE.into(),
        };
        let section = Section::Rpm { rpm: ran.end };
        let mut doc = Document::local(start, Vec::new(), End::new(ran.partial, None, section));
        // The run's verdict through the one front door every kind's goes through: one of
        // the directions' the client judged (`limit::rpm::judge_run` says which).
        doc.end.limited_by = sonde_results::limit::judge(&doc);
        Ok(doc)
    }
}

/// The address the probes went to (for the host's interface figures); loopback when the
/// URL's host does not resolve now.
fn peer_of(url: &str) -> IpAddr {
    use std::net::ToSocketAddrs;
    sonde_rpm::config::Url::parse(url)
        .ok()
        .and_then(|u| (u.host.as_str(), u.port).to_socket_addrs().ok()?.next())
        .map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(url: &str) -> RpmFlags {
        RpmFlags {
            url: url.into(),
            insecure: false,
            ca: None,
            interval_ms: 5000,
            mad: 4,
            max_connections: 16,
            max_probes: 100,
            stage_limit_ms: 20_000,
            download_only: false,
            upload_only: false,
        }
    }

    #[test]
    fn refusals_name_the_flag() {
        let ok = flags("https://198.18.0.2:4443").test().unwrap();
        assert!(ok.options.download && ok.options.upload);
        assert_eq!(ok.spec.params.interval_ms, 5000);
        let e = RpmFlags {
            interval_ms: 10,
            ..flags("https://h")
        };
        assert_eq!(
            e.test().unwrap_err().to_string(),
            "--interval 10 ms: at least 50 ms"
        );
        let e = RpmFlags {
            stage_limit_ms: 1000,
            ..flags("https://h")
        };
        assert_eq!(
            e.test().unwrap_err().to_string(),
            "--stage-limit: shorter than one --interval"
        );
        assert!(matches!(flags("ftp:/x").test(), Err(RpmFlagError::Url(_))));
    }

    #[test]
    fn loopback_and_listed_networks_only_mapped_v4_as_v4() {
        let list: Vec<Cidr> = vec!["198.18.0.0/15".parse().unwrap()];
        assert!(allowed(&list, "127.0.0.1".parse().unwrap()));
        assert!(allowed(&list, "198.19.1.1".parse().unwrap()));
        assert!(allowed(&list, "::ffff:198.18.0.9".parse().unwrap()));
        assert!(!allowed(&list, "198.20.0.1".parse().unwrap()));
        assert!(!allowed(&[], "198.18.0.1".parse().unwrap()));
    }
}
