//! `sonde serve`: the services its flags ask for, each started from its own configuration
//! and handed to one owner ([`Services`]), which stops them in the reverse of this start
//! order: the STAMP reflector, the iperf3 server, the mesh, the mesh's `/metrics`, then the agent, whose
//! "listening" line on stdout tells scripts that every port is bound.

use std::process::ExitCode;

use sonde_run::agent;
use sonde_run::serve::{self, MeshMetrics};
use sonde_run::service::Services;
use sonde_run::signals::Interrupt;

use crate::cli::ServeArgs;
use crate::errors::Usage;

pub fn serve(
    a: &ServeArgs,
    command_line: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    // A label given twice or too many: a usage error, as clap's for a bad one.
    let labels = serve::labels(&a.labels).map_err(|e| Usage::from(anyhow::Error::new(e)))?;
    serve::log_to_stderr();
    let config = a.config(labels, command_line)?;
    let mut services = Services::new();
    let say = |line: &str| errln!("{line}");
    serve::stamp(&mut services, a.stamp()?, &say)?;
    serve::iperf3(&mut services, a.iperf3, &a.iperf3_allow, &config, &say)?;
    let metrics = MeshMetrics {
        addr: a.mesh.metrics,
        token_file: a.mesh.metrics_token_file.clone(),
    };
    let mesh = a.mesh.config(serve::mesh_agent(&config))?;
    serve::mesh(&mut services, mesh, &metrics, &say)?;
    serve::rpm(&mut services, a.rpm.endpoint(), &say)?;
    services.add(Box::new(agent::start(config)?));
    services.run(interrupt)?;
    Ok(ExitCode::SUCCESS)
}
