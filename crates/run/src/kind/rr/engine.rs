//! What a request/response side needs of a data plane (running request and echo workers),
//! what an engine implements to be in the kind's table ([`RrBackend`]: preflight, the
//! client's and the agent's ports), and the workers' plans every engine runs.

use std::io;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, WorkerEnd};
use sonde_engine::rr_server::ServerPlan;
use sonde_engine::stamps::StageHists;
use sonde_engine::Placement;
use sonde_results::RrSpec;

use crate::kind::seam::{DataPort, OpenResult};
use crate::kind::table::Named;
use crate::kind::workers::{poll_of, Workers};

/// After the last request, how long answers may still arrive.
pub const DRAIN: Duration = Duration::from_secs(2);
/// How long a UDP request waits for its answer before it counts as lost and its place in
/// the window is sent again.
pub const UDP_LOSS_TIMEOUT: Duration = Duration::from_secs(1);

/// Running request workers, seen from the client side.
pub trait RequestEngine: Workers {
    /// Requests sent and responses received so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Gives `each` the histograms handed over since the last call, by interval index.
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>));
    /// With `--stages`: gives `each` the stage histograms handed over since the last call.
    fn drain_stages(&self, _each: &mut dyn FnMut(u32, &StageHists)) {}
    fn join(&mut self) -> Vec<WorkerEnd>;
}

/// Running echo workers, seen from the agent's side.
pub trait EchoEngine: Workers {
    /// Responses sent so far (monotonic).
    fn answered(&self) -> u64;
    /// UDP datagrams dropped unanswered: not the test's requests (another address,
    /// length or cookie).
    fn rejected(&self) -> u64;
    /// Errors the workers met.
    fn join(&mut self) -> Vec<String>;
    /// The workers' system calls, once joined, where the engine counts them.
    fn syscalls(&self) -> Option<u64> {
        None
    }
}

/// A request/response engine: what it refuses up front and what each end opens.
pub trait RrBackend: Named + Sync {
    /// Refuses, before the agent is asked, what this host or spec cannot run.
    fn preflight(&self, _spec: &RrSpec, _agent: IpAddr) -> io::Result<()> {
        Ok(())
    }
    /// Memory a worker takes besides its buffer and histograms (AF_XDP: UMEM and rings).
    fn worker_bytes(&self) -> u64 {
        0
    }
    /// Controller: opens what the request workers send on, to the agent's data port.
    fn open_client(&self, spec: &RrSpec, to: DataPort) -> OpenResult<dyn ClientPort>;
    /// Agent: opens where requests from `peer` arrive, on `ip`, before `Ready`.
    fn open_server(
        &self,
        spec: &RrSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerPort>>;
}

/// What the controller's request workers send on, opened before `Start`.
pub trait ClientPort {
    /// Notes on the socket options applied.
    fn options(&self) -> Vec<String>;
    /// Starts the request workers on it.
    fn start(self: Box<Self>, plan: ClientPlan) -> io::Result<Box<dyn RequestEngine>>;
}

/// Where the agent's echo workers answer, opened before `Ready`.
pub trait ServerPort: Send {
    /// The port the controller is told in `Ready`.
    fn port(&self) -> io::Result<u16>;
    /// The listener data connections arrive on, and how many arrive before `Start`.
    fn listener(&self) -> Option<(&TcpListener, usize)> {
        None
    }
    /// What the echo workers are dealt (sockets or queues), once `conns` arrived.
    fn units(&self, conns: usize) -> usize;
    /// Starts echo workers answering `peer` only, on `conns` (TCP) or its own sockets;
    /// also the notes on the socket options applied.
    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<(Box<dyn EchoEngine>, Vec<String>)>;
}

/// The request workers' plan: the spec's sizes, window, pacing and clock.
pub fn client_plan(
    spec: &RrSpec,
    placement: Placement,
    cookie: u64,
    started: Instant,
) -> ClientPlan {
    let window_start = started + Duration::from_millis(spec.timing.warmup_ms);
    let window_end = window_start + Duration::from_millis(spec.timing.duration_ms);
    let stop = window_end + Duration::from_millis(spec.timing.cooldown_ms);
    ClientPlan {
        placement,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
        cookie,
        window: spec.window as usize,
        poll: poll_of(spec.poll),
        pace: spec
            .rate_per_s
            .map(|r| Duration::from_secs_f64(spec.connections as f64 / r)),
        open_loop: spec.open_loop,
        window_start,
        window_end,
        interval: Duration::from_millis(spec.timing.interval_ms),
        stop_sending_at: stop,
        drain_until: stop + DRAIN,
        udp_loss_timeout: UDP_LOSS_TIMEOUT,
        sqpoll: spec.sqpoll,
        stages: spec.stages,
    }
}

/// The echo workers' plan.
pub fn server_plan(
    spec: &RrSpec,
    placement: Placement,
    cookie: u64,
    started: Instant,
) -> ServerPlan {
    ServerPlan {
        placement,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
        cookie,
        poll: poll_of(spec.poll),
        stall: spec.server_stall.map(|s| {
            (
                started + Duration::from_millis(s.after_ms),
                Duration::from_millis(s.stall_ms),
            )
        }),
        sqpoll: spec.sqpoll,
        stages: spec.stages,
    }
}
