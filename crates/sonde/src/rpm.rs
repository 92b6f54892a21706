//! The binary's side of the responsiveness test: `serve --rpm` as one of serve's services,
//! and `sonde rpm URL` run, printed and kept like every test.

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use sonde_probe::hostwatch::HostProbe;
use sonde_results::document::{End, LocalStart, Section};
use sonde_results::spec::RpmSpec;
use sonde_results::{Document, TestSpec};
use sonde_rpm::server::{self, ServerConfig};
use sonde_run::service::Threads;
use sonde_run::signals::Interrupt;

use crate::cli::rpm::{RpmArgs, RpmServeArgs};
use crate::errors::{Usage, EXIT_PARTIAL};

/// Starts the RPM endpoint when `--rpm` asks for it; its line goes to stderr (stdout's
/// first line is the agent's).
pub fn service(a: &RpmServeArgs) -> anyhow::Result<Option<Threads>> {
    let Some(bind) = a.rpm else { return Ok(None) };
    let (tls, how) = match (&a.rpm_cert, &a.rpm_key, a.rpm_h2c) {
        (_, _, true) => (None, "h2c, no TLS".to_string()),
        (Some(cert), Some(key), _) => {
            let t = sonde_rpm::tls::server_from_files(cert, key, "--rpm-cert", "--rpm-key")?;
            (
                Some(t.config),
                format!("TLS 1.3, certificate sha256 {}", t.fingerprint),
            )
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
    let allow_list = a.rpm_allow.clone();
    let allow: server::Allow = Arc::new(move |ip: IpAddr| {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_loopback() || allow_list.iter().any(|c| c.contains(ip))
    });
    let limits = a.limits();
    let mut threads = Threads::new("rpm endpoint");
    let stop = threads.stop.clone();
    let cfg = ServerConfig {
        bind,
        tls: tls.clone(),
        allow,
        limits: limits.clone(),
        congestion: a.rpm_congestion.clone(),
    };
    let running = server::start(cfg, move || stop.is_set())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let allowed: Vec<String> = std::iter::once("loopback".to_string())
        .chain(a.rpm_allow.iter().map(|c| c.to_string()))
        .collect();
    errln!(
        "sonde rpm endpoint listening on {scheme}://{}/.well-known/nq ({how}; allows {}; at most {} connections)",
        running.local,
        allowed.join(", "),
        limits.max_connections
    );
    threads.threads.push(running.thread);
    Ok(Some(threads))
}

/// `sonde rpm URL`: the run as a document, stored, written and printed like every test's;
/// cut by Ctrl-C, what was measured is kept, marked partial (exit [`EXIT_PARTIAL`]).
pub fn rpm(a: &RpmArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let opts = a.options().map_err(|e| Usage::from(anyhow!(e)))?;
    let spec = RpmSpec::new(
        a.url.clone(),
        a.insecure,
        opts.params.clone(),
        opts.download,
        opts.upload,
    );
    spec.validate().map_err(|e| Usage::from(anyhow!(e)))?;
    let started_at = sonde_run::controller::now_rfc3339();
    let ran = sonde_rpm::client::run(&opts, &|| interrupt.is_set())
        .map_err(|e| anyhow!("{}: {e}", a.url))?;
    let end = ran.end;
    let peer = peer_of(&end.small_download_url);
    let host = sonde_probe::hostwatch::describe(&HostProbe::for_peer(peer));
    let start = LocalStart {
        spec: TestSpec::Rpm(spec),
        command,
        host,
        started_at,
        software: sonde_run::controller::SOFTWARE.into(),
    };
    let section = Section::Rpm { rpm: end };
    let doc = Document::local(start, Vec::new(), End::new(ran.partial, None, section));
    crate::measure::save_run(&a.output.store, &doc);
    let json = sonde_report::json(&doc);
    if let Some(path) = &a.output.output {
        crate::measure::write_atomically(path, json.as_bytes())?;
    }
    if a.output.json {
        print!("{}", sonde_report::safe::json(&json));
    } else {
        out!("{}", sonde_report::summary::rpm(&doc));
    }
    Ok(match ran.partial {
        true => ExitCode::from(EXIT_PARTIAL),
        false => ExitCode::SUCCESS,
    })
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
