//! `sonde serve`'s optional services, each started from its config, added to the one owner
//! ([`Services`]) and its listening line said (on stderr in the binary: stdout's first line
//! is the agent's, which scripts read for its port). The binary calls them in the start
//! order `daemon.rs` states.

use std::net::SocketAddr;
use std::path::PathBuf;

use sonde_proto::labels::{check, LabelError, Labels, MAX_LABELS};
use sonde_proto::stamp::DscpPolicy;
use sonde_results::marks::{Dscp, MarkError};

use crate::agent::{ServeConfig, DEFAULT_TEST_DSCPS};
use crate::iperf3::{Iperf3Config, Iperf3Server};
use crate::mesh::{MeshAgent, MeshConfig, MeshError};
use crate::metrics_http::{MetricsError, Token};
use crate::service::{Services, Threads};
use crate::stamp::{Cidr, ReflectorConfig, ReflectorService};

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

/// The agent the mesh probes from and answers as: `config`'s address, key, labels and
/// the DSCPs its tests may send.
pub fn mesh_agent(config: &ServeConfig) -> MeshAgent {
    MeshAgent {
        bind: config.bind,
        insecure_no_key: config.insecure_no_key,
        key: config.key.clone(),
        labels: config.labels.clone(),
        allowed_dscps: config.limits.allowed_dscps,
    }
}

/// The agent's log on stderr, at `SONDE_LOG`'s level (`info` by default), coloured only
/// on a terminal: stdout's lines are for scripts.
pub fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SONDE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// A service's address that is not `[ADDR:]PORT`, with examples on the service's port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{given}' is not [ADDR:]PORT ({examples})")]
pub struct NotABind {
    given: String,
    examples: &'static str,
}

/// `--stamp` / `--iperf3 [ADDR:]PORT`: a bare port listens on every IPv4 address.
pub fn parse_stamp_bind(s: &str) -> Result<SocketAddr, NotABind> {
    bind(s, "862, 198.18.0.1:862, [::1]:862")
}

/// `--rpm [ADDR:]PORT`, as [`parse_stamp_bind`].
pub fn parse_rpm_bind(s: &str) -> Result<SocketAddr, NotABind> {
    bind(s, "4443, 198.18.0.2:4443, [::1]:4443")
}

fn bind(s: &str, examples: &'static str) -> Result<SocketAddr, NotABind> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok((std::net::Ipv4Addr::UNSPECIFIED, port).into());
    }
    let given = s.into();
    s.parse().map_err(|_| NotABind { given, examples })
}

/// `--label`s that cannot make one set, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelsError {
    #[error("--label given {0} times: an agent carries at most {MAX_LABELS} labels")]
    TooMany(usize),
    #[error("--label {key} given twice ({key}={first} and {key}={value})")]
    Twice {
        key: String,
        first: String,
        value: String,
    },
}

/// `--label`s as one set: at most [`MAX_LABELS`], no key twice.
pub fn labels(pairs: &[(String, String)]) -> Result<Labels, LabelsError> {
    if pairs.len() > MAX_LABELS {
        return Err(LabelsError::TooMany(pairs.len()));
    }
    let mut set = Labels::new();
    for (key, value) in pairs {
        if let Some(first) = set.insert(key.clone(), value.clone()) {
            let (key, value) = (key.clone(), value.clone());
            return Err(LabelsError::Twice { key, first, value });
        }
    }
    Ok(set)
}

/// One `--label KEY=VALUE` refused.
#[derive(Debug, thiserror::Error)]
pub enum LabelFlagError {
    #[error("'{0}' is not KEY=VALUE")]
    NotAPair(String),
    #[error("label '{0}': {1}")]
    Label(String, LabelError),
}

/// One `--label KEY=VALUE`, checked against the rules controllers apply.
pub fn parse_label(s: &str) -> Result<(String, String), LabelFlagError> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| LabelFlagError::NotAPair(s.into()))?;
    check(key, value).map_err(|e| LabelFlagError::Label(key.into(), e))?;
    Ok((key.into(), value.into()))
}

/// One of `--allow-dscp` / `--stamp-allow-dscp`: a DSCP, or `any` (`None`).
pub fn parse_allowed_dscp(s: &str) -> Result<Option<Dscp>, MarkError> {
    match s.trim().eq_ignore_ascii_case("any") {
        true => Ok(None),
        false => Dscp::parse(s).map(Some),
    }
}

/// `--allow-dscp`'s classes as the agent's mask of DSCPs a test may send: every class
/// but network control by default, all with `any`.
pub fn test_dscps(listed: &[Option<Dscp>]) -> u64 {
    listed.iter().fold(DEFAULT_TEST_DSCPS, |m, d| {
        d.map_or(u64::MAX, |d| m | 1 << d.value())
    })
}

/// `--stamp-allow-dscp`'s classes as the reflector's policy (`any`: every one).
pub fn reflector_dscps(listed: &[Option<Dscp>]) -> DscpPolicy {
    match listed.iter().copied().collect::<Option<Vec<_>>>() {
        Some(listed) => DscpPolicy::allowing(listed.iter().map(|d| d.value())),
        None => DscpPolicy::ANY,
    }
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

/// `--iperf3`: the iperf3 server on `bind`, serving `allow`'s networks besides loopback
/// (`--iperf3-allow`) within the agent's limits; nothing without a bind.
pub fn iperf3(
    services: &mut Services,
    bind: Option<SocketAddr>,
    allow: &[Cidr],
    agent: &ServeConfig,
    say: &dyn Fn(&str),
) -> Result<(), ServeError> {
    let Some(bind) = bind else { return Ok(()) };
    let cfg = Iperf3Config {
        bind,
        allow: allow.to_vec(),
        limits: agent.limits.clone(),
        account: std::sync::Arc::clone(&agent.account),
        command: agent.command.clone(),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_are_one_set_each_key_once_at_most_32() {
        let set = labels(&pairs(&[("zone", "a"), ("rack", "7")])).unwrap();
        assert_eq!(set.len(), 2);
        let e = labels(&pairs(&[("zone", "a"), ("zone", "b")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--label zone given twice (zone=a and zone=b)"
        );
        let many: Vec<_> = (0..33)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        assert_eq!(
            labels(&many).unwrap_err().to_string(),
            "--label given 33 times: an agent carries at most 32 labels"
        );
        assert_eq!(parse_label("zone=a").unwrap(), ("zone".into(), "a".into()));
        assert_eq!(
            parse_label("zone").unwrap_err().to_string(),
            "'zone' is not KEY=VALUE"
        );
        assert!(parse_label("__x=1")
            .unwrap_err()
            .to_string()
            .starts_with("label '__x': "));
    }

    #[test]
    fn allowed_dscps_widen_the_defaults_and_any_allows_all() {
        let ef = parse_allowed_dscp("ef").unwrap();
        assert_eq!(test_dscps(&[]), DEFAULT_TEST_DSCPS);
        assert_eq!(
            test_dscps(&[parse_allowed_dscp("cs6").unwrap()]),
            DEFAULT_TEST_DSCPS | 1 << 48
        );
        assert_eq!(
            test_dscps(&[ef, parse_allowed_dscp("ANY").unwrap()]),
            u64::MAX
        );
        assert_eq!(reflector_dscps(&[]), DscpPolicy::default());
        assert_eq!(reflector_dscps(&[ef]), DscpPolicy::allowing([46]));
        assert_eq!(reflector_dscps(&[ef, None]), DscpPolicy::ANY);
        assert!(parse_allowed_dscp("64").is_err());
    }

    /// A bare port listens on every IPv4 address; anything else names the service's
    /// examples, as the binary said them before they moved here.
    #[test]
    fn binds_are_a_port_or_an_address_and_port() {
        assert_eq!(parse_stamp_bind("862").unwrap().to_string(), "0.0.0.0:862");
        assert_eq!(
            parse_rpm_bind("[::1]:4443").unwrap().to_string(),
            "[::1]:4443"
        );
        assert_eq!(
            parse_stamp_bind("x:y").unwrap_err().to_string(),
            "'x:y' is not [ADDR:]PORT (862, 198.18.0.1:862, [::1]:862)"
        );
        assert_eq!(
            parse_rpm_bind("70000").unwrap_err().to_string(),
            "'70000' is not [ADDR:]PORT (4443, 198.18.0.2:4443, [::1]:4443)"
        );
    }
}
