//! `sonde serve --iperf3 [ADDR:]PORT`: a service of `serve` that answers `iperf3 -c`. One
//! test at a time, as iperf3's own server (another client meanwhile is told
//! ACCESS_DENIED), within the agent's limits (duration, connections, bit rate, threads,
//! memory) and only for the networks of `--iperf3-allow` besides loopback. Each test
//! served becomes a stream document on this side, written to the log (one line, JSON).

use std::net::{SocketAddr, TcpListener};

use super::config::Iperf3Config;
use super::conn::accept_within;
use crate::service::{Service, ServiceError, Threads};
use crate::signals::Interrupt;

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
