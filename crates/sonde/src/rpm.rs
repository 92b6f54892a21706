//! The binary's side of the responsiveness test: `serve --rpm` as one of serve's services,
//! and `sonde rpm URL` run, printed and kept like every test.

use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use sonde_results::rpm::{Component, Responsiveness, RpmDirection, RpmEnd};
use sonde_rpm::server::{self, ServerConfig};
use sonde_run::service::Threads;

use crate::cli::rpm::{RpmArgs, RpmServeArgs};
use crate::errors::Usage;

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

/// `sonde rpm URL`.
pub fn rpm(a: &RpmArgs) -> anyhow::Result<ExitCode> {
    let opts = a.options().map_err(|e| Usage::from(anyhow!(e)))?;
    let end = sonde_rpm::client::run(&opts).map_err(|e| anyhow!("{}: {e}", a.url))?;
    if a.output.json {
        jsonln!("{}", serde_json::to_string_pretty(&end)?);
    } else {
        out!("{}", render(&end));
    }
    Ok(ExitCode::SUCCESS)
}

fn component(name: &str, c: &Component) -> String {
    format!(
        "  {name:<8} {:>9.2} ms  ({} samples, {} kept)\n",
        c.trimmed_mean_ms, c.count, c.kept
    )
}

fn responsiveness(r: &Responsiveness) -> String {
    let mut s = format!(
        "  RPM {:.0} (foreign {:.0}, self {:.0})\n",
        r.rpm, r.foreign_rpm, r.self_rpm
    );
    s += &component("tcp", &r.tcp);
    if let Some(t) = &r.tls {
        s += &component("tls", t);
    }
    s += &component("http", &r.http);
    s += &component("loaded", &r.loaded);
    s
}

fn direction(name: &str, d: &RpmDirection) -> String {
    let mut s = format!(
        "{name}: {:.1} Mbit/s over {} connections (goodput confidence {:?}, RPM confidence {:?}, {:.1} s)\n",
        d.goodput_bits_per_second / 1e6,
        d.connections,
        d.goodput_confidence,
        d.rpm_confidence,
        d.duration_ms as f64 / 1e3
    );
    if let Some(r) = &d.responsiveness {
        s += &responsiveness(r);
    }
    s
}

/// The human text of a result.
pub fn render(end: &RpmEnd) -> String {
    let mut s = format!("responsiveness of {}\n", end.config_url);
    if let Some(r) = &end.responsiveness {
        s += &format!(
            "RPM {:.0} (foreign {:.0}, self {:.0})\n",
            r.rpm, r.foreign_rpm, r.self_rpm
        );
    }
    if let Some(i) = &end.idle {
        s += &format!(
            "idle round trip {:.2} ms ({} samples)\n",
            i.trimmed_mean_ms, i.count
        );
    }
    if let Some(d) = &end.download {
        s += &direction("download", d);
    }
    if let Some(u) = &end.upload {
        s += &direction("upload", u);
    }
    if end.insecure {
        s += "the server's certificate was not verified (--insecure)\n";
    }
    s
}
