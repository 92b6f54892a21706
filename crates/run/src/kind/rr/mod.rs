//! Request/response: ping (one message in flight, round-trip times; sockperf) and rpc
//! (many connections, many messages in flight; neper tcp_rr and tcp_crr, msg_gen).
//! Its engines are [`ENGINES`]; each implements [`RrBackend`] in its own module.

mod engine;
mod floor;
mod kernel;
mod side;
mod stages;
mod uring;
mod xdp;

pub use engine::{EchoEngine, RequestEngine, RrBackend, UDP_LOSS_TIMEOUT};
pub use side::{Parts, RrSide, SideEngine};

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use sonde_engine::rr_client::ClientPlan;
use sonde_engine::rr_server::ServerPlan;
use sonde_engine::{worker_threads, Placement, Work};
use sonde_probe::hostwatch::HostProbe;
use sonde_results::document::Prelude;
use sonde_results::spec::TestName;
use sonde_results::{Role, RrSpec, SideResult, SpecError, TestSpec};

use super::budget;
use super::seam::{
    ClientAt, ClientEndpoint, DataPort, Demand, OpenError, OpenResult, ServerEndpoint, TypedKind,
};
use super::table;
use crate::side::Side;
use engine::{client_plan, server_plan};

/// The request/response engines, the default first: every choice of one is [`backend`].
pub const ENGINES: &[&dyn RrBackend] = &[&kernel::Kernel, &xdp::Xdp, &uring::Uring];

/// The engines of [`ENGINES`].
pub fn engines() -> Vec<sonde_results::Engine> {
    table::engines(ENGINES)
}

/// The request/response engine that is `engine`, or why none is.
pub fn backend(engine: sonde_results::Engine) -> io::Result<&'static dyn RrBackend> {
    table::find(ENGINES, "request/response", engine)
}

/// The engines of [`ENGINES`] this host can run.
pub fn runnable() -> Vec<sonde_results::Engine> {
    table::runnable(ENGINES)
}

/// Refuses, naming the flag, what of `spec` its engine does not run.
pub fn refuse(spec: &TestSpec) -> Result<(), SpecError> {
    let Some((r, _)) = RequestResponse::own(spec) else {
        return Ok(());
    };
    table::refuse(ENGINES, r.execution.engine, |e| e.owns(r), |e| e.refuse(r))
}

/// The engine `role`'s side runs for `spec`, and the note on a default's choice.
fn chosen(spec: &RrSpec, role: Role) -> io::Result<(&'static dyn RrBackend, Option<String>)> {
    table::choose(ENGINES, "request/response", &spec.execution, role)
}

pub struct RequestResponse;

/// The workers of `role`'s end over `units` sockets: as asked, else the
/// request/response default.
fn placement(spec: &RrSpec, role: Role, units: usize) -> Placement {
    let ex = &spec.execution;
    let threads = role.pick(spec.client_threads, spec.server_threads);
    let cpus = role.pick(&ex.client_cpus, &ex.server_cpus).clone();
    Placement::new(
        worker_threads(Work::RequestResponse, threads, units),
        cpus,
        units,
    )
}

/// Starts `role`'s workers over `units` sockets (`start` gets their placement and the
/// test's clock, and says the socket options it applied) and the side that measures them.
fn start_side(
    spec: &RrSpec,
    (role, units, notes): (Role, usize, Vec<String>),
    start: impl FnOnce(Placement, Instant) -> io::Result<(SideEngine, Vec<String>)>,
    probe: HostProbe,
) -> io::Result<Box<dyn Side>> {
    let started = Instant::now();
    let mut placement = placement(spec, role, units);
    let (engine, socket_options) = start(placement.clone(), started)?;
    // A bypass engine runs no more workers than it has queues.
    let bypass = match &engine {
        SideEngine::Client(c) => c.bypass(),
        SideEngine::Server(s) => s.bypass(),
    };
    if let Some(b) = bypass {
        placement = Placement::new(
            placement.threads.min(b.queues.len()).max(1),
            placement.cpus,
            units,
        );
    }
    Ok(Box::new(RrSide::new(
        spec,
        Parts {
            engine,
            started,
            probe,
            placement,
            notes,
            socket_options,
        },
    )))
}

impl TypedKind for RequestResponse {
    type Spec = RrSpec;

    fn own(spec: &TestSpec) -> Option<(&RrSpec, TestName)> {
        match spec {
            TestSpec::Ping(r) => Some((r, TestName::Ping)),
            TestSpec::Rpc(r) => Some((r, TestName::Rpc)),
            _ => None,
        }
    }

    fn own_mut(spec: &mut TestSpec) -> Option<&mut RrSpec> {
        match spec {
            TestSpec::Ping(r) | TestSpec::Rpc(r) => Some(r),
            _ => None,
        }
    }

    fn demand(&self, r: &RrSpec, role: Role) -> Demand {
        let message = r.request_bytes.max(r.response_bytes);
        let threads = self.workers(r, role);
        // A worker's buffer and histograms; a connection's socket and window of messages.
        let per_thread = u64::from(message)
            .max(64 << 10)
            .saturating_add(budget::HISTOGRAM_BYTES);
        let per_conn = u64::from(r.window)
            .saturating_mul(u64::from(message))
            .saturating_add(budget::SOCKET_BYTES);
        let xsks = chosen(r, role).map_or(0, |(b, _)| b.worker_bytes());
        Demand {
            connections: r.connections,
            rate: Some(r.rate_per_s),
            bits_per_s: r.rate_per_s.map(|rate| rate * f64::from(message) * 8.0),
            message_bytes: message,
            // --sqpoll: a kernel thread polls each worker's ring, on this host's CPUs too.
            threads: threads.saturating_mul(1 + usize::from(r.sqpoll)),
            memory_bytes: budget::total(
                threads,
                per_thread.saturating_add(xsks),
                r.connections,
                per_conn,
            ),
        }
    }

    fn workers(&self, r: &RrSpec, role: Role) -> usize {
        placement(r, role, r.connections as usize).threads
    }

    /// rpc: io_uring, 1.3x the kernel engine's requests per second at -C 32 on this
    /// machine, 1.1x with `--stages` (BENCHMARKS.md); ping, a new connection per request
    /// and the floor (`--self-noise`) run the kernel engine.
    fn fastest(&self, r: &RrSpec, test: TestName) -> sonde_results::Engine {
        let batches = test == TestName::Rpc;
        // The floor is the kernel engine's.
        let kernel_only = r.self_noise_ms.is_some();
        if r.sqpoll || (batches && !r.connect_per_request && !kernel_only) {
            sonde_results::Engine::Uring
        } else {
            sonde_results::Engine::Kernel
        }
    }

    fn prepare(
        &self,
        r: &mut RrSpec,
        agent: SocketAddr,
        _probe: &HostProbe,
    ) -> Result<(), OpenError> {
        chosen(r, Role::Client)
            .and_then(|(b, _)| b.preflight(r, agent.ip()))
            .map_err(OpenError::Engine)
    }

    fn prelude(&self, r: &RrSpec, client: ClientAt<'_>) -> Option<Prelude> {
        let placement = || placement(r, Role::Client, r.connections as usize);
        floor::prelude(r, client, placement)
    }

    fn open_client(&self, r: &RrSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint> {
        let (engine, note) = chosen(r, Role::Client).map_err(OpenError::Engine)?;
        Ok(Box::new(Opened {
            spec: r.clone(),
            engine: engine.open_client(r, to)?,
            cookie: to.cookie,
            notes: note.into_iter().collect(),
        }))
    }

    fn open_server(
        &self,
        r: &RrSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>> {
        let (engine, note) = chosen(r, Role::Server)?;
        Ok(Box::new(Listening {
            spec: r.clone(),
            engine: engine.open_server(r, ip, peer)?,
            notes: note.into_iter().collect(),
        }))
    }

    fn summary(&self, _spec: &RrSpec, test: TestName, r: &SideResult) -> String {
        let Some(rr) = r.rr() else {
            return test.to_string();
        };
        format!(
            "{test} {}: answered {} messages in {:.1} s, {:.2} us CPU per message",
            rr.poll,
            rr.messages,
            r.window_s,
            r.process_cpu_s
                .map_or(0.0, |c| c * 1e6 / rr.messages.max(1) as f64)
        )
    }
}

/// Whether this end switched its device's hardware stamping on (`--stamps`): its
/// sockets then ask for the NIC's receive stamps too.
fn nic_stamps(probe: &HostProbe) -> bool {
    probe.stamps().is_some_and(|s| s.nic_hardware_on)
}

/// What the controller's engine opened.
struct Opened {
    spec: RrSpec,
    engine: Box<dyn RequestEngine>,
    /// Stamped into every UDP request, so that the agent's echo answers it.
    cookie: u64,
    notes: Vec<String>,
}

impl ClientEndpoint for Opened {
    fn start(self: Box<Self>, probe: HostProbe) -> io::Result<Box<dyn Side>> {
        let Opened {
            spec,
            mut engine,
            cookie,
            notes,
        } = *self;
        let units = spec.connections as usize;
        let hardware_rx = nic_stamps(&probe);
        let start = |placement, started| {
            let plan = ClientPlan {
                hardware_rx,
                ..client_plan(&spec, placement, cookie, started)
            };
            engine.start(plan)?;
            let options = engine.options();
            Ok((SideEngine::Client(engine), options))
        };
        start_side(&spec, (Role::Client, units, notes), start, probe)
    }
}

/// What the agent's engine opened.
struct Listening {
    spec: RrSpec,
    engine: Box<dyn EchoEngine>,
    notes: Vec<String>,
}

impl ServerEndpoint for Listening {
    fn port(&self) -> io::Result<u16> {
        self.engine.port()
    }

    fn before_ready(&mut self, cookie: u64) {
        self.engine.before_ready(cookie);
    }

    fn listener(&self) -> Option<(&TcpListener, usize)> {
        self.engine.listener()
    }

    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>> {
        let Listening {
            spec,
            mut engine,
            notes,
        } = *self;
        let units = engine.units(conns.len());
        let hardware_rx = nic_stamps(&probe);
        let start = |placement, started| {
            let plan = ServerPlan {
                hardware_rx,
                ..server_plan(&spec, placement, cookie, started)
            };
            let options = engine.start(conns, peer, plan)?;
            Ok((SideEngine::Server(engine), options))
        };
        start_side(&spec, (Role::Server, units, notes), start, probe)
    }
}
