//! `sonde serve --mesh SOURCE`: every agent a prober. The agent sends small STAMP probes
//! (keyed with the fleet key, under its address's key: `keys`) to each peer of its list at
//! a rate per peer within a total budget, answers its peers' probes with its own
//! reflector, and keeps per peer what the probes became (`sonde_results::mesh`); the
//! binary serves that as `/metrics`. One thread, two UDP sockets (the reflector on
//! `--mesh-port`, the prober on an ephemeral port) read on a schedule and timed by the
//! kernel's receive stamps, no allocation per probe. A peer that leaves the list leaves
//! the state (no stale series).

mod answers;
mod config;
mod departures;
mod follow_ups;
mod icmp;
mod keys;
mod peers;
mod prober;
#[cfg(test)]
mod redteam_follow_ups;
mod reflector;
mod state;
#[cfg(test)]
mod tests;
mod tx_stamps;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sonde_engine::kstamps::datagram;

pub use config::{
    MeshAgent, MeshConfig, MeshFlagError, MeshFlags, ANSWERS_PER_RATE, MIN_REFRESH, SETTLE_TIMEOUTS,
};
pub use peers::{parse_file, Peer, Source};
pub use reflector::Rate;
pub use sonde_proto::mesh::{PeerEntry, Peers};
pub use state::MeshState;

use crate::service::{Running, Threads};

/// The STAMP port (RFC 8762): where an agent's reflector listens by default.
pub const DEFAULT_PORT: u16 = sonde_proto::stamp::STAMP_PORT;
/// Probes per second per peer by default: Pingmesh's and R-Pingmesh's rate between racks.
pub const DEFAULT_RATE: f64 = 1.0;
/// Probes per second an agent sends at most by default, all peers together: 1,000 peers at
/// one probe every 10 s is 100.
pub const DEFAULT_BUDGET: f64 = 100.0;
/// How often the list is read again by default.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("cannot bind the mesh's reflector on {addr} (--mesh-port): {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error(transparent)]
    List(#[from] peers::PeersError),
    #[error("mesh socket: {0}")]
    Io(#[from] io::Error),
}

/// What a running mesh shows (its threads, the prober's and its clock's, are the
/// [`Running`] service's).
pub struct Mesh {
    pub state: Arc<Mutex<MeshState>>,
    /// Where the reflector listens (its port, when `--mesh-port 0` chose one).
    pub reflector: SocketAddr,
}

/// The reflector's socket (on `--mesh-port`) and the prober's, set up: non-blocking, large
/// buffers, each packet stamped on arrival, probes marked.
fn sockets(cfg: &MeshConfig) -> Result<(UdpSocket, UdpSocket), MeshError> {
    let addr = SocketAddr::new(cfg.bind, cfg.port);
    let reflector = UdpSocket::bind(addr).map_err(|source| MeshError::Bind { addr, source })?;
    let prober = UdpSocket::bind(SocketAddr::new(cfg.bind, 0))?;
    for s in [&reflector, &prober] {
        s.set_nonblocking(true)?;
        prober::grow_buffers(s);
        // Both are read on a schedule: each packet is timed by its arrival stamp.
        datagram::enable_arrival(s.as_raw_fd(), addr.is_ipv6())?;
        if addr.is_ipv4() {
            // Best effort: without it each datagram costs the kernel an IP ID.
            let _ = sonde_engine::sockopt::set_dont_fragment(s.as_raw_fd());
        }
    }
    // Every probe leaves with the mesh's marks; answers take theirs one by one.
    sonde_engine::marks::set_tos_if(prober.as_raw_fd(), cfg.tos)?;
    Ok((reflector, prober))
}

/// Binds the sockets, reads the list once (a bad list is an error naming it) and starts
/// probing until stopped.
pub fn start(cfg: MeshConfig) -> Result<Running<Mesh>, MeshError> {
    let (reflector, prober) = sockets(&cfg)?;
    let first = cfg.source.read(cfg.port).map_err(MeshError::List)?;
    let local = reflector.local_addr()?;
    // A session of its own (SSID, not 0) at each start.
    let ssid = (crate::random::u64() as u16).max(1);
    let config = cfg.prober(ssid, crate::random::u64(), crate::stamp::clock::boot_id());
    let mut machine = sonde_proto::mesh::Prober::new(config);
    // The first list taken before any thread starts: the first scrape shows its peers.
    let started = std::time::Instant::now();
    let mesh_key = cfg.key.as_ref().map(sonde_proto::mesh::stamp_key);
    let mut routes = mesh_key.map(|k| keys::Keys::new(k, cfg.bind));
    let change = machine.set_list(0, prober::listed(cfg.bind, &mut routes, first));
    let each = machine.rate_per_s() / machine.peers().len().max(1) as f64;
    prober::say(change, machine.peers().len(), each);
    let state = Arc::new(Mutex::new(MeshState {
        name: cfg.name.clone(),
        labels: cfg.labels.clone(),
        budget_per_s: cfg.budget,
        reflected: 0,
        refused: 0,
        list_error: None,
        prober: machine,
    }));
    // The clock's error bound (u64::MAX: not synchronised), read on a thread of its own.
    let bound = Arc::new(AtomicU64::new(u64::MAX));
    let mut threads = Threads::new("mesh");
    let (stop, read) = (threads.stop.clone(), Arc::clone(&bound));
    threads.spawn("sonde-mesh-clock", move || {
        prober::watch_clock(&read, &stop)
    })?;
    let (stop, shared) = (threads.stop.clone(), Arc::clone(&state));
    threads.spawn("sonde-mesh", move || {
        let mut p = prober::SocketLoop::new(cfg, reflector, prober, shared, bound, started);
        p.run(&stop);
    })?;
    Ok(Running {
        handle: Mesh {
            state,
            reflector: local,
        },
        threads,
    })
}
