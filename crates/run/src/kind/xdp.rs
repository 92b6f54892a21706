//! The AF_XDP path that every kind's `xdp` engine shares: what a host must have to run it
//! (checked before the agent is asked), the path to a peer (`path`), and the redirect
//! program with a socket on every receive queue, attached before any of the
//! test's packets arrive.

use super::host::root;
use std::io;
use std::net::{IpAddr, Ipv4Addr};

use sonde_engine::xdp::{self, Attached, Port, Steer, Xsk, XskConfig};
use sonde_probe::{host, netdev};
use sonde_results::{Bypass, Engine};

/// SO_BUSY_POLL time of a spinning receiver's sockets, in microseconds.
pub const BUSY_POLL_US: u32 = 50;

/// An error that says what to do about it, for the failures a user can meet.
pub fn explain(doing: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (AF_XDP needs root, or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF)"
        }
        Some(libc::EAFNOSUPPORT) => " (this kernel has no AF_XDP: CONFIG_XDP_SOCKETS)",
        Some(libc::EOPNOTSUPP) => " (the driver supports neither native nor generic XDP here)",
        Some(libc::ERANGE) | Some(libc::EINVAL) if doing.starts_with("attach") => {
            " (is the MTU too large for XDP on this driver?)"
        }
        _ => "",
    };
    io::Error::new(
        e.kind(),
        format!("--engine {}: {doing}: {e}{why}", Engine::Xdp),
    )
}

pub fn refuse(reason: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("--engine {}: {reason}", Engine::Xdp),
    )
}

pub fn v4(ip: IpAddr) -> io::Result<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Ok(a),
        IpAddr::V6(a) => Err(refuse(format!(
            "IPv6 ({a}) is not supported yet: the next hop's MAC comes from the IPv4 neighbour table"
        ))),
    }
}

/// Bytes of each AF_XDP frame: the largest packet either side can send or take.
pub fn frame_bytes() -> u32 {
    XskConfig::default().frame_bytes
}

/// Refuses, before the agent is asked, a test this host cannot run over AF_XDP.
pub fn preflight(agent: IpAddr, size_bytes: u32) -> io::Result<()> {
    xdp::available().map_err(|e| explain("opening an AF_XDP socket", e))?;
    if size_bytes > frame_bytes() {
        return Err(refuse(format!(
            "--size {size_bytes} exceeds the AF_XDP frame of {} bytes",
            frame_bytes()
        )));
    }
    if agent.is_loopback() {
        return Err(refuse(format!(
            "{agent} is loopback: AF_XDP needs a real interface"
        )));
    }
    v4(agent).map(|_| ())
}

/// The interface carrying traffic to `peer` and the MACs of a frame to it.
pub fn path_to(local: Ipv4Addr, peer: Ipv4Addr) -> io::Result<(String, [u8; 6], [u8; 6])> {
    super::path::path_to(local, peer).map_err(|e| refuse(e.to_string()))
}

/// The interface's index and queue counts (receive, transmit).
pub fn queues_of(iface: &str) -> io::Result<(u32, u32, u32)> {
    let index = xdp::ifindex(iface).map_err(|e| explain(&format!("interface {iface}"), e))?;
    let (rx, tx) = netdev::queues(root(), iface).map_err(io::Error::other)?;
    Ok((index, rx.max(1), tx.max(1)))
}

/// One socket on each of `queues` of the interface.
pub fn sockets(iface: &str, index: u32, queues: &[u32]) -> io::Result<Vec<Xsk>> {
    queues
        .iter()
        .map(|&q| {
            Xsk::open(index, q, XskConfig::default(), None)
                .map_err(|e| explain(&format!("AF_XDP socket on {iface} queue {q}"), e))
        })
        .collect()
}

/// The redirect program on an interface and a socket on each of its receive queues.
pub struct Steered {
    pub program: Attached,
    pub xsks: Vec<Xsk>,
    pub bypass: Bypass,
    pub notes: Vec<String>,
}

/// The test's flow from `peer` to `local` with `port`, as the program matches it; a
/// well-known port is refused.
pub fn flow(peer: IpAddr, local: IpAddr, port: Port) -> io::Result<Steer> {
    Steer::new(v4(peer)?, v4(local)?, port).map_err(|e| refuse(e.to_string()))
}

/// Attaches the redirect program for the flow `steer` names on the interface holding its
/// destination address, with a socket on every receive queue; `busy`: the sockets also
/// get busy polling (SO_BUSY_POLL microseconds, packets per poll).
pub fn steer(steer: Steer, busy: Option<(u32, u32)>) -> io::Result<Steered> {
    let ip = IpAddr::V4(steer.dst);
    let iface =
        host::interface_with(ip).ok_or_else(|| refuse(format!("no interface holds {ip}")))?;
    if iface == "lo" {
        return Err(refuse(format!(
            "{ip} is on loopback: AF_XDP needs a real interface"
        )));
    }
    let (index, rx_queues, _) = queues_of(&iface)?;
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))?;
    let mtu: u32 = mtu.trim().parse().map_err(io::Error::other)?;
    if mtu + 14 > frame_bytes() {
        return Err(refuse(format!(
            "{iface}'s MTU of {mtu} bytes does not fit an AF_XDP frame of {} bytes: lower it to {} or use the kernel engine",
            frame_bytes(),
            frame_bytes() - 14
        )));
    }
    let queues: Vec<u32> = (0..rx_queues).collect();
    let xsks = sockets(&iface, index, &queues)?;
    let program = xdp::attach(index, steer, rx_queues, None)
        .map_err(|e| explain(&format!("attaching the XDP program to {iface}"), e))?;
    for (q, x) in queues.iter().zip(&xsks) {
        program
            .route_queue(*q, x.fd())
            .map_err(|e| explain(&format!("routing {iface} queue {q} to its socket"), e))?;
    }
    let mut notes = Vec::new();
    let busy_poll = busy.is_some_and(|(usecs, budget)| {
        let set: io::Result<()> = xsks.iter().try_for_each(|x| x.busy_poll(usecs, budget));
        if let Err(e) = &set {
            notes.push(format!("busy polling of the AF_XDP sockets refused: {e}"));
        }
        set.is_ok()
    });
    let (which, port) = steer.port_named();
    let bypass = Bypass {
        interface: iface,
        queues,
        zero_copy: xsks.iter().all(|x| x.zero_copy),
        attach: Some(program.mode.name().into()),
        program: Some(format!(
            "UDP {which} port {port}, from {} to {} only, to the queue's AF_XDP socket; all else to the kernel",
            steer.src, steer.dst
        )),
        busy_poll,
        ..Default::default()
    };
    Ok(Steered {
        program,
        xsks,
        bypass,
        notes,
    })
}
