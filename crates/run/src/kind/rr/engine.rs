//! What a request/response side needs of a data plane, and the kernel-socket engine that
//! provides it: request workers on the controller, echo workers on the agent. The AF_XDP
//! engine (`xdp`) provides the same two traits over the same workers' plans.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, RrClient, Target, WorkerEnd};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::wait::Poll;
use sonde_engine::Placement;
use sonde_results::{Engine, PollMode, RrSpec};

use super::xdp;
use crate::kind::{kernel_workers, no_engine, Workers};

/// After the last request, how long answers may still arrive.
pub const DRAIN: Duration = Duration::from_secs(2);
/// How long a UDP request waits for its answer before it counts as lost and its place in
/// the window is sent again.
pub const UDP_LOSS_TIMEOUT: Duration = Duration::from_secs(1);

/// Running request workers, seen from the client side.
pub trait RequestEngine: Workers {
    /// Requests sent and responses received so far (monotonic).
    fn counts(&self) -> (u64, u64);
    /// Histograms handed over since the last call, by interval index.
    fn drain(&self) -> Vec<(u32, Histogram<u64>)>;
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
}

pub fn poll_of(mode: PollMode) -> Poll {
    match mode {
        PollMode::Block => Poll::Block,
        PollMode::Busy => Poll::Busy,
        PollMode::Hybrid { spin_us } => Poll::Hybrid(Duration::from_micros(spin_us as u64)),
    }
}

/// The engines a request/response side can run, by name.
pub const ENGINES: &[Engine] = &[Engine::Kernel, Engine::Xdp];

/// What the controller's request workers send on, opened before `Start`.
pub enum Carrier {
    Kernel(Target),
    Xdp(xdp::ClientPort),
}

/// What the agent's echo workers answer on, opened before `Ready`.
pub enum Answering {
    Kernel(ServerTarget),
    /// Answering `peer` only.
    Xdp {
        port: Box<xdp::ServerPort>,
        peer: IpAddr,
    },
}

/// Starts the spec's engine's request workers; the test's clock started at `started`.
pub fn client(
    spec: &RrSpec,
    carrier: Carrier,
    (placement, cookie): (Placement, u64),
    started: Instant,
) -> io::Result<Box<dyn RequestEngine>> {
    let plan = client_plan(spec, placement, cookie, started);
    match (spec.execution.engine, carrier) {
        (Engine::Kernel, Carrier::Kernel(target)) => Ok(Box::new(RrClient::spawn(target, plan)?)),
        (Engine::Xdp, Carrier::Xdp(port)) => xdp::client(port, plan),
        (other, _) => Err(no_engine("request/response", other)),
    }
}

/// Starts the spec's engine's echo workers; the test's clock started at `started`.
pub fn server(
    spec: &RrSpec,
    answering: Answering,
    (placement, cookie): (Placement, u64),
    started: Instant,
) -> io::Result<Box<dyn EchoEngine>> {
    let plan = server_plan(spec, placement, cookie, started);
    match (spec.execution.engine, answering) {
        (Engine::Kernel, Answering::Kernel(target)) => Ok(Box::new(RrServer::spawn(target, plan)?)),
        (Engine::Xdp, Answering::Xdp { port, peer }) => xdp::server(*port, peer, plan),
        (other, _) => Err(no_engine("request/response", other)),
    }
}

/// The request workers' plan: the spec's sizes, window, pacing and clock.
fn client_plan(spec: &RrSpec, placement: Placement, cookie: u64, started: Instant) -> ClientPlan {
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
    }
}

/// The echo workers' plan.
fn server_plan(spec: &RrSpec, placement: Placement, cookie: u64, started: Instant) -> ServerPlan {
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
    }
}

kernel_workers!(RrClient, RrServer);

impl RequestEngine for RrClient {
    fn counts(&self) -> (u64, u64) {
        RrClient::counts(self)
    }
    fn drain(&self) -> Vec<(u32, Histogram<u64>)> {
        RrClient::drain(self)
    }
    fn join(&mut self) -> Vec<WorkerEnd> {
        RrClient::join(self)
    }
}

impl EchoEngine for RrServer {
    fn answered(&self) -> u64 {
        RrServer::answered(self)
    }
    fn rejected(&self) -> u64 {
        RrServer::rejected(self)
    }
    fn join(&mut self) -> Vec<String> {
        RrServer::join(self)
    }
}
