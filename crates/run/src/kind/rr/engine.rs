//! What an engine implements to be in the request/response table ([`RrBackend`]: its
//! refusals, preflight and what each end opens), each end's side of it from opening to
//! joining ([`RequestEngine`], [`EchoEngine`]), and the workers' plans every engine runs.

use std::io;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::kstamps::StageHists;
use sonde_engine::rr_client::{ClientPlan, WorkerEnd};
use sonde_engine::rr_server::ServerPlan;
use sonde_engine::Placement;
use sonde_results::{RrSpec, SpecError};

use crate::kind::seam::{DataPort, OpenResult};
use crate::kind::table::Named;
use crate::kind::workers::{poll_of, Workers};

/// The datagrams that arrived by their TOS, and those counted on a CPU past the possible
/// ones; or why the kernel refused to count them (a filter it would not load or attach).
pub type ArrivedTos = Result<(Vec<(u8, u64)>, u64), String>;

/// After the last request, how long answers may still arrive.
pub const DRAIN: Duration = Duration::from_secs(2);
/// How long a UDP request waits for its answer before it counts as lost and its place in
/// the window is sent again.
pub const UDP_LOSS_TIMEOUT: Duration = Duration::from_secs(1);

/// The controller's side of an engine: what it opened to the agent's data port before
/// `Start`, then the request workers started on it.
pub trait RequestEngine: Workers {
    /// Notes on the socket options applied.
    fn options(&self) -> Vec<String>;
    /// Starts the request workers on what was opened.
    fn start(&mut self, plan: ClientPlan) -> io::Result<()>;
    /// Requests sent and responses received so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Gives `each` the histograms handed over since the last call, by interval index.
    fn drain(&self, each: &mut dyn FnMut(u32, &Histogram<u64>));
    /// With `--stages`: gives `each` the stage histograms handed over since the last call.
    fn drain_stages(&self, _each: &mut dyn FnMut(u32, &StageHists)) {}
    fn join(&mut self) -> Vec<WorkerEnd>;
    /// Whether the workers' ends count their system calls (the socket engines do).
    fn counts_syscalls(&self) -> bool {
        false
    }
    /// UDP with marks: the answers by the TOS they arrived with, where the engine reads it.
    fn arrived_tos(&self) -> Option<ArrivedTos> {
        None
    }
}

/// The agent's side of an engine: where requests arrive, opened before `Ready`, then the
/// echo workers started on it.
pub trait EchoEngine: Workers {
    /// The port the controller is told in `Ready`.
    fn port(&self) -> io::Result<u16>;
    /// The listener data connections arrive on, and how many arrive before `Start`.
    fn listener(&self) -> Option<(&TcpListener, usize)> {
        None
    }
    /// What the echo workers are dealt (sockets or queues), once `conns` arrived.
    fn units(&self, conns: usize) -> usize;
    /// Starts echo workers answering `peer` only, on `conns` (TCP) or its own sockets;
    /// the notes on the socket options applied.
    fn start(
        &mut self,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        plan: ServerPlan,
    ) -> io::Result<Vec<String>>;
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
    /// The kernel stamps the workers read by kind, once joined, where counted.
    fn stamps(&self) -> Option<sonde_engine::kstamps::StampKinds> {
        None
    }
    /// UDP with marks: the requests by the TOS they arrived with, where the engine reads it.
    fn arrived_tos(&self) -> Option<ArrivedTos> {
        None
    }
    /// The cookie is known and the controller not yet told the port: what must count
    /// from the test's first request (io_uring's marks filter) is put in place.
    fn before_ready(&mut self, _cookie: u64) {}
}

/// A request/response engine in the kind's table: what it refuses and what each end opens.
pub trait RrBackend: Named + Sync {
    /// Refuses, naming the flag, what of `spec` this engine does not run (checked once,
    /// with the engine, by `kind::refuse` wherever a spec is admitted).
    fn refuse(&self, _spec: &RrSpec) -> Result<(), SpecError> {
        Ok(())
    }
    /// The flag of `spec` that only this engine runs, when it is asked (`--sqpoll`).
    fn owns(&self, _spec: &RrSpec) -> Option<&'static str> {
        None
    }
    /// Refuses, before the agent is asked, what this host cannot run.
    fn preflight(&self, _spec: &RrSpec, _agent: IpAddr) -> io::Result<()> {
        Ok(())
    }
    /// Memory a worker takes besides its buffer and histograms (AF_XDP: UMEM and rings).
    fn worker_bytes(&self) -> u64 {
        0
    }
    /// Controller: opens what the request workers send on, to the agent's data port.
    fn open_client(&self, spec: &RrSpec, to: DataPort) -> OpenResult<dyn RequestEngine>;
    /// Agent: opens where requests from `peer` arrive, on `ip`, before `Ready`.
    fn open_server(
        &self,
        spec: &RrSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn EchoEngine>>;
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
        stage_every: spec.stage_every(),
        // Set by the side from what its end did with `--stamps` (`kind::hold_stamps`).
        hardware_rx: false,
        read_tos: reads_tos(spec),
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
        stage_every: spec.stage_every(),
        // Set by the side from what its end did with `--stamps` (`kind::hold_stamps`).
        hardware_rx: false,
        clock_shift_ns: spec.server_clock_shift_ns.unwrap_or(0),
        read_tos: reads_tos(spec),
    }
}

/// UDP with marks asked for: each end counts what it received by the TOS it arrived with.
pub(super) fn reads_tos(spec: &RrSpec) -> bool {
    spec.transport == sonde_results::Transport::Udp && spec.execution.marks.data_tos().is_some()
}
