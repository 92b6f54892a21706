//! `sonde serve --iperf3 [ADDR:]PORT`: a service of `serve` that answers `iperf3 -c`. One
//! test at a time, as iperf3's own server (another client meanwhile is told
//! ACCESS_DENIED), within the agent's limits (duration, connections, bit rate, threads,
//! memory) and only for the networks of `--iperf3-allow` besides loopback. Each test
//! served becomes a stream document on this side, written to the log (one line, JSON).

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::agent::Limits;
use crate::service::{Service, ServiceError, Threads};
use crate::signals::Interrupt;
use crate::stamp::Cidr;

/// How often the accept loop looks at its stop flag.
const LOOK_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct Iperf3Config {
    pub bind: SocketAddr,
    /// Client networks served besides loopback; empty: loopback only.
    pub allow: Vec<Cidr>,
    pub limits: Limits,
    /// This agent's command line, for the documents.
    pub command: String,
}

impl Iperf3Config {
    /// Whether a client at `ip` is served.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_loopback() || self.allow.iter().any(|c| c.contains(ip))
    }

    /// How the service describes itself in its "listening" line.
    pub fn describe(&self) -> String {
        match self.allow.len() {
            0 => "loopback clients only".into(),
            n => format!("loopback and {n} allowed networks"),
        }
    }
}

pub struct Iperf3Server {
    pub local: SocketAddr,
    threads: Threads,
}

impl Iperf3Server {
    pub fn start(cfg: Iperf3Config) -> std::io::Result<Iperf3Server> {
        let listener = TcpListener::bind(cfg.bind)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let mut threads = Threads::new("iperf3 server");
        let stop = threads.stop.clone();
        threads.spawn("iperf3", move || accept_loop(&listener, &cfg, &stop))?;
        Ok(Iperf3Server { local, threads })
    }
}

impl Service for Iperf3Server {
    fn name(&self) -> &'static str {
        "iperf3 server"
    }
    fn stop(&self) {
        self.threads.stop.set();
    }
    fn finished(&self) -> bool {
        self.threads.finished()
    }
    fn join(self: Box<Self>) -> Result<(), ServiceError> {
        Box::new(self.threads).join()
    }
}

/// Waits up to [`LOOK_EVERY`] for a connection on `listener`.
pub(crate) fn accept_within(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let r = unsafe { libc::poll(&mut fd, 1, LOOK_EVERY.as_millis() as i32) };
    if r <= 0 {
        return None;
    }
    let (s, peer) = listener.accept().ok()?;
    s.set_nonblocking(false).ok()?;
    Some((s, peer))
}

fn accept_loop(listener: &TcpListener, cfg: &Iperf3Config, stop: &Interrupt) {
    while !stop.is_set() {
        let Some((stream, peer)) = accept_within(listener) else {
            continue;
        };
        if !cfg.allows(peer.ip()) {
            tracing::warn!(
                "iperf3 client {peer} refused: not loopback nor in --iperf3-allow (closed unanswered)"
            );
            continue;
        }
        match super::serve_one::serve(stream, peer, listener, cfg, stop) {
            Ok((doc, summary)) => {
                tracing::info!("iperf3 test from {peer} served: {summary}");
                match serde_json::to_string(&doc) {
                    Ok(json) => tracing::info!("iperf3 document {json}"),
                    Err(e) => tracing::warn!("iperf3 document from {peer}: {e}"),
                }
            }
            Err(e) => tracing::warn!("iperf3 client {peer}: {e}"),
        }
    }
}
