//! What a request/response side needs of a data plane, and the kernel-socket engine that
//! provides it: request workers on the controller, echo workers on the agent.

use std::io;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sonde_engine::rr_client::{ClientPlan, RrClient, Target, WorkerEnd};
use sonde_engine::rr_server::{RrServer, ServerPlan, ServerTarget};
use sonde_engine::wait::Poll;
use sonde_engine::Placement;
use sonde_results::{PollMode, RrSpec};

use crate::kind::{kernel_workers, no_engine, Workers, KERNEL};

/// After the last request, how long answers may still arrive.
pub const DRAIN: Duration = Duration::from_secs(2);

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
pub const ENGINES: &[&str] = &[KERNEL];

/// Starts the spec's engine's request workers; the test's clock started at `started`.
pub fn client(
    spec: &RrSpec,
    target: Target,
    placement: Placement,
    started: Instant,
) -> io::Result<Box<dyn RequestEngine>> {
    match spec.execution.engine.as_str() {
        KERNEL => kernel_client(spec, target, placement, started),
        other => Err(no_engine("request/response", other)),
    }
}

/// Starts the spec's engine's echo workers; the test's clock started at `started`.
pub fn server(
    spec: &RrSpec,
    target: ServerTarget,
    placement: Placement,
    started: Instant,
) -> io::Result<Box<dyn EchoEngine>> {
    match spec.execution.engine.as_str() {
        KERNEL => kernel_server(spec, target, placement, started),
        other => Err(no_engine("request/response", other)),
    }
}

/// Starts kernel-socket request workers.
fn kernel_client(
    spec: &RrSpec,
    target: Target,
    placement: Placement,
    started: Instant,
) -> io::Result<Box<dyn RequestEngine>> {
    let window_start = started + Duration::from_millis(spec.timing.warmup_ms);
    let window_end = window_start + Duration::from_millis(spec.timing.duration_ms);
    let stop = window_end + Duration::from_millis(spec.timing.cooldown_ms);
    let plan = ClientPlan {
        placement,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
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
        udp_loss_timeout: Duration::from_secs(1),
    };
    Ok(Box::new(RrClient::spawn(target, plan)?))
}

/// Starts kernel-socket echo workers.
fn kernel_server(
    spec: &RrSpec,
    target: ServerTarget,
    placement: Placement,
    started: Instant,
) -> io::Result<Box<dyn EchoEngine>> {
    let plan = ServerPlan {
        placement,
        request_bytes: spec.request_bytes as usize,
        response_bytes: spec.response_bytes as usize,
        poll: poll_of(spec.poll),
        stall: spec.server_stall.map(|s| {
            (
                started + Duration::from_millis(s.after_ms),
                Duration::from_millis(s.stall_ms),
            )
        }),
    };
    Ok(Box::new(RrServer::spawn(target, plan)?))
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
    fn join(&mut self) -> Vec<String> {
        RrServer::join(self)
    }
}
