//! The tool's own floor (`--self-noise`): the test's request loop against the test's echo
//! workers, over local socket pairs instead of a network. It measures the loop plus this
//! host's cost of waking a thread and of its Unix socket path: no NIC, no wire, no peer.
//! A test's tail far above it is the path's; one close to it is the tool's or the host's.
//!
//! The client workers run where the test's run (its placement); the echo runs on
//! `echo_cpus` when given (the caller's CPUs apart from the client's, as the agent's echo
//! would be), else it inherits the process's CPU mask, so with the process confined to
//! one CPU (`taskset -c 0`) both share that CPU.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::pool::Placement;
use crate::rr_client::{ClientPlan, RrClient, RrSocket, Target};
use crate::rr_server::{RrServer, ServerPlan, ServerTarget};
use crate::wait::Poll;

/// Before the measured window: the first round trips fault in pages and warm caches.
const WARMUP: Duration = Duration::from_millis(100);
/// After the window, how long the last answers may take (and a datagram's loss timeout:
/// nothing is lost on a local pair, so a request unanswered that long is a fault).
const DRAIN: Duration = Duration::from_millis(500);
/// Stamped into every datagram request; the echo answers whatever its pair carries.
const COOKIE: u64 = 0x5e1f_401e;

/// What to measure: the test's sizes, window, receive mode and client placement, closed
/// loop (a paced test's floor would be its rate's few messages).
#[derive(Debug, Clone)]
pub struct NoisePlan {
    /// Datagram pairs (SOCK_SEQPACKET: a request stays one message, matched by sequence
    /// number, as over UDP), or stream pairs (as over TCP).
    pub datagram: bool,
    pub connections: usize,
    pub window: usize,
    pub request_bytes: usize,
    pub response_bytes: usize,
    pub poll: Poll,
    /// The client workers' threads and CPUs.
    pub placement: Placement,
    /// Where the echo runs; `None`: wherever the process may.
    pub echo_cpus: Option<Vec<usize>>,
    pub duration: Duration,
}

/// The floor: every round trip answered in the window.
#[derive(Debug)]
pub struct Floor {
    pub histogram: Histogram<u64>,
    pub seconds: f64,
}

/// Runs the loop against a local echo for `plan.duration` (after a short warm-up) and
/// returns its round trips; every thread it started is joined and every socket closed.
pub fn measure(plan: &NoisePlan) -> io::Result<Floor> {
    let n = plan.connections.max(1);
    let (mut near, mut far) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let (a, b) = socket_pair(plan.datagram)?;
        let datagram = plan.datagram;
        near.push(RrSocket::Local { fd: a, datagram });
        far.push(RrSocket::Local { fd: b, datagram });
    }
    let echo_plan = ServerPlan::echo(
        Placement::new(plan.placement.threads, plan.echo_cpus.clone(), n),
        plan.request_bytes,
        plan.response_bytes,
        COOKIE,
        plan.poll,
    );
    let mut echo = RrServer::spawn(ServerTarget::Sockets(far), echo_plan)?;
    let window_start = Instant::now() + WARMUP;
    let window_end = window_start + plan.duration;
    let client = RrClient::spawn(Target::Sockets(near), client_plan(plan, window_start));
    let outcome = client.map(|mut c| run_out(&mut c, window_end));
    echo.abort();
    let echo_errors = echo.join();
    let (histogram, mut errors) = outcome?;
    errors.extend(echo_errors);
    if !errors.is_empty() || histogram.is_empty() {
        let why = errors
            .first()
            .map_or("no round trip completed", |e| e.as_str());
        return Err(io::Error::other(format!("local echo: {why}")));
    }
    Ok(Floor {
        histogram,
        seconds: plan.duration.as_secs_f64(),
    })
}

/// The test's client plan, closed loop, with the whole window as one interval.
fn client_plan(plan: &NoisePlan, window_start: Instant) -> ClientPlan {
    let window_end = window_start + plan.duration;
    ClientPlan {
        placement: plan.placement.clone(),
        request_bytes: plan.request_bytes,
        response_bytes: plan.response_bytes,
        cookie: COOKIE,
        window: plan.window,
        poll: plan.poll,
        pace: None,
        open_loop: false,
        window_start,
        window_end,
        interval: plan.duration.max(Duration::from_millis(1)),
        stop_sending_at: window_end,
        drain_until: window_end + DRAIN,
        udp_loss_timeout: DRAIN,
        sqpoll: false,
        stages: false,
        stage_every: 1,
        hardware_rx: false,
        read_tos: false,
    }
}

/// Waits for the client's workers to finish (or stops them once overdue), joins them
/// and returns their round trips and errors.
fn run_out(client: &mut RrClient, window_end: Instant) -> (Histogram<u64>, Vec<String>) {
    let overdue = window_end + 2 * DRAIN;
    std::thread::sleep(window_end.saturating_duration_since(Instant::now()));
    while !client.all_done() && Instant::now() < overdue {
        std::thread::sleep(Duration::from_millis(5));
    }
    client.abort();
    let errors = client.join().into_iter().filter_map(|e| e.error).collect();
    let mut total = Histogram::new_with_bounds(1, crate::MAX_LATENCY_NS, 3).expect("valid bounds");
    client.drain(&mut |_, h| {
        total
            .add(h)
            .expect("the workers' histograms share its bounds")
    });
    (total, errors)
}

/// A connected pair of Unix sockets, closed on exec.
fn socket_pair(datagram: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let kind = if datagram {
        libc::SOCK_SEQPACKET
    } else {
        libc::SOCK_STREAM
    };
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors socketpair writes.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
