//! The request/response kind's io_uring engine: the kernel engine's sockets (TCP
//! connections, connected UDP sockets, the agent's echo socket), driven by io_uring
//! workers (`sonde_engine::uring`). A new connection per request (`--crr`) is the kernel
//! engine's: its cost is the handshake, which io_uring does not batch.

use std::io;
use std::net::IpAddr;

use sonde_engine::rr_client::{ClientPlan, RrClient, Target};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::uring::rr_server::UringTarget;
use sonde_engine::uring::{self, rr_client::RECEIVE_BYTES};
use sonde_results::{Engine, RrSpec, SpecError};

use super::engine::{EchoEngine, RequestEngine, RrBackend};
use super::kernel::{self, Spawners};
use crate::kind::seam::{DataPort, OpenResult};
use crate::kind::table::Named;

pub struct Uring;

impl Named for Uring {
    fn engine(&self) -> Engine {
        Engine::Uring
    }
    fn unavailable(&self) -> Option<String> {
        uring::available().err().map(|e| e.to_string())
    }
}

const URING: Spawners = Spawners {
    engine: Engine::Uring,
    client: spawn_client,
    server: spawn_server,
};

/// `--crr`, refused at admission; also the workers' answer to a spec that skipped it.
fn per_request() -> SpecError {
    SpecError {
        flag: "--crr",
        reason: format!(
            "a new connection per request runs on --engine {} (io_uring does not batch \
             handshakes)",
            Engine::Kernel
        ),
    }
}

fn unsupported(e: SpecError) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, e.to_string())
}

fn spawn_client(target: Target, plan: ClientPlan) -> io::Result<RrClient> {
    match target {
        Target::Sockets(sockets) => RrClient::spawn_uring(sockets, plan),
        Target::ConnectPerRequest { .. } => Err(unsupported(per_request())),
    }
}

fn spawn_server(target: ServerTarget, plan: ServerPlan) -> io::Result<RrServer> {
    let target = match target {
        ServerTarget::Sockets(s) => UringTarget::Sockets(s),
        ServerTarget::Udp { socket, allowed } => UringTarget::Udp { socket, allowed },
        ServerTarget::Accept { .. } => return Err(unsupported(per_request())),
    };
    RrServer::spawn_uring(target, plan)
}

impl RrBackend for Uring {
    fn refuse(&self, spec: &RrSpec) -> Result<(), SpecError> {
        match spec.connect_per_request {
            true => Err(per_request()),
            false => Ok(()),
        }
    }

    /// A kernel thread polling each worker's ring: an io_uring setup flag.
    fn owns(&self, spec: &RrSpec) -> Option<&'static str> {
        spec.sqpoll.then_some("--sqpoll")
    }

    fn preflight(&self, _spec: &RrSpec, _agent: IpAddr) -> io::Result<()> {
        uring::available().map_err(|e| io::Error::other(format!("--engine {}: {e}", Engine::Uring)))
    }

    /// Each worker's ring of receive buffers, and an echo's UDP answers as much again.
    fn worker_bytes(&self) -> u64 {
        2 * RECEIVE_BYTES as u64
    }

    fn open_client(&self, r: &RrSpec, to: DataPort) -> OpenResult<dyn RequestEngine> {
        kernel::open_client(r, to, URING)
    }

    fn open_server(
        &self,
        r: &RrSpec,
        ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn EchoEngine>> {
        kernel::open_server(r, ip, URING)
    }
}
