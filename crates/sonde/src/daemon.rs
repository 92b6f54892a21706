//! `sonde serve`: the services its flags ask for, each started from its own configuration
//! and handed to one owner ([`Services`]), which stops them in the reverse of this start
//! order: the STAMP reflector, the iperf3 server, the mesh, the mesh's `/metrics`, then the agent, whose
//! "listening" line on stdout tells scripts that every port is bound.

use std::process::ExitCode;

use sonde_run::service::{Services, Threads};
use sonde_run::signals::Interrupt;
use sonde_run::{agent, iperf3, mesh, stamp};

use crate::cli::ServeArgs;
use crate::errors::Usage;

pub fn serve(
    a: &ServeArgs,
    command_line: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    // A label given twice or too many: a usage error, as clap's for a bad one.
    let labels = a.labels().map_err(Usage::from)?;
    init_logging();
    let config = a.config(labels.clone(), command_line)?;
    let key = config.key.clone();
    let mut services = Services::new();
    if let Some(cfg) = a.stamp()? {
        let (bind, words) = (cfg.bind, cfg.describe());
        let r = stamp::ReflectorService::start(cfg)
            .map_err(|e| anyhow::anyhow!("--stamp {bind}: {e}"))?;
        // On stderr: stdout's first line is the agent's, which scripts read for its port.
        errln!("sonde stamp reflector listening on {} ({words})", r.local);
        services.add(Box::new(r));
    }
    if let Some(cfg) = a.iperf3(&config) {
        let (bind, words) = (cfg.bind, cfg.describe());
        let r = iperf3::Iperf3Server::start(cfg)
            .map_err(|e| anyhow::anyhow!("--iperf3 {bind}: {e}"))?;
        errln!("sonde iperf3 server listening on {} ({words})", r.local);
        services.add(Box::new(r));
    }
    if let Some(cfg) = a.mesh.config(
        a.bind,
        a.insecure_no_key,
        key,
        &labels,
        config.limits.allowed_dscps,
    )? {
        let m = mesh::start(cfg)?;
        errln!("sonde mesh reflecting on {}", m.reflector);
        let state = std::sync::Arc::clone(&m.state);
        services.add(Box::new(m));
        if let Some(addr) = a.mesh.metrics {
            let token = a.mesh.metrics_token_file.as_deref();
            let token = token
                .map(sonde_run::metrics_http::Token::from_file)
                .transpose()?;
            let mut metrics = Threads::new("mesh metrics");
            let stop = metrics.stop.clone();
            metrics
                .threads
                .push(sonde_run::mesh_metrics::start(addr, token, state, stop)?);
            services.add(Box::new(metrics));
        }
    }
    if let Some(rpm) = crate::rpm::service(&a.rpm)? {
        services.add(Box::new(rpm));
    }
    services.add(Box::new(agent::start(config)?));
    services.run(interrupt)?;
    Ok(ExitCode::SUCCESS)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SONDE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
