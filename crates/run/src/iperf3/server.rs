//! `sonde serve --iperf3 [ADDR:]PORT`: a service of `serve` that answers `iperf3 -c`. One
//! test at a time, as iperf3's own server (another client meanwhile is told
//! ACCESS_DENIED), within the agent's limits (duration, connections, bit rate, threads,
//! memory) and only for the networks of `--iperf3-allow` besides loopback. Connections
//! that come while it is busy before a test starts wait their turn, taken fairly between
//! addresses ([`super::queue`]): one that holds the slot silently cannot lock others out.
//! Each test served becomes a stream document on this side, written to the log (one line,
//! JSON).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use super::config::Iperf3Config;
use super::conn::accept_within;
use super::queue;
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

/// A connection waiting for the test slot, and since when.
struct Waiting {
    stream: TcpStream,
    peer: SocketAddr,
    at: Instant,
}

/// Takes every connection pending on `listener` into `waiting` (the queue's rules: allowed
/// sources only, per-address and overall caps), closing those it pushes out.
fn admit_pending(listener: &TcpListener, cfg: &Iperf3Config, waiting: &mut Vec<Waiting>) {
    while let Ok((stream, peer)) = listener.accept() {
        if !cfg.allows(peer.ip()) {
            tracing::warn!(
                "iperf3 client {peer} refused: not loopback nor in --iperf3-allow (closed unanswered)"
            );
            continue;
        }
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let sources: Vec<_> = waiting.iter().map(|w| w.peer.ip()).collect();
        if let Some(k) = queue::evictee(&sources, peer.ip()) {
            let out = waiting.remove(k);
            tracing::warn!(
                "iperf3 client {}: closed unserved, its address has too many waiting",
                out.peer
            );
        }
        waiting.push(Waiting {
            stream,
            peer,
            at: Instant::now(),
        });
    }
}

fn accept_loop(listener: &TcpListener, cfg: &Iperf3Config, stop: &Interrupt) {
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut turns = queue::Turns::default();
    while !stop.is_set() {
        admit_pending(listener, cfg, &mut waiting);
        let now = Instant::now();
        waiting.retain(|w| !queue::expired(w.at, now));
        let sources: Vec<_> = waiting.iter().map(|w| w.peer.ip()).collect();
        let Some(k) = turns.next(&sources) else {
            // Nobody waits: sleep until someone comes (or the stop flag's next look).
            if let Some((stream, peer)) = accept_within(listener) {
                if cfg.allows(peer.ip()) {
                    waiting.push(Waiting {
                        stream,
                        peer,
                        at: Instant::now(),
                    });
                } else {
                    tracing::warn!(
                        "iperf3 client {peer} refused: not loopback nor in --iperf3-allow (closed unanswered)"
                    );
                }
            }
            continue;
        };
        let Waiting { stream, peer, .. } = waiting.remove(k);
        turns.given(peer.ip());
        let served =
            super::serve_one::open(stream, peer, stop).and_then(|o| match o.test.protocol {
                sonde_proto::iperf3::Protocol::Udp => {
                    super::udp_serve::serve(o, listener, cfg, stop)
                }
                _ => super::serve_one::serve_stream(o, listener, cfg, stop),
            });
        match served {
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
