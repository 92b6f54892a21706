//! Opening a test's data sockets toward the agent's data port: what every kernel-socket
//! engine's client endpoint starts from.

use std::net::{IpAddr, SocketAddr, TcpStream};

use super::seam::{DataPort, OpenError};

/// How long a data (or control) connection may take to open.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The unspecified address of `addr`'s family, port 0: where a client socket binds.
pub(crate) fn any_of(addr: SocketAddr) -> SocketAddr {
    let ip: IpAddr = if addr.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    SocketAddr::new(ip, 0)
}

/// Connects one TCP data connection with `opts` and sends its header; returns the notes
/// on the options applied.
pub(crate) fn connect_data(
    to: DataPort,
    opts: &sonde_engine::SocketOptions,
    index: u32,
) -> Result<(TcpStream, Vec<String>), OpenError> {
    use std::io::Write;
    let DataPort { addr, cookie } = to;
    let err = |source| OpenError::Data {
        index,
        addr,
        source,
    };
    let (mut s, notes) =
        sonde_engine::sockopt::connect(addr, opts, CONNECT_TIMEOUT).map_err(err)?;
    let header = sonde_proto::DataHeader { cookie, index }.encode();
    s.write_all(&header).map_err(err)?;
    Ok((s, notes))
}

/// One UDP socket bound to an ephemeral port and connected to `addr`, its packets marked
/// `tos` when asked (`--dscp`, `--ecn`).
pub(crate) fn connect_udp(
    addr: SocketAddr,
    index: u32,
    tos: Option<u8>,
) -> Result<std::net::UdpSocket, OpenError> {
    let err = |source| OpenError::Data {
        index,
        addr,
        source,
    };
    let s = std::net::UdpSocket::bind(any_of(addr)).map_err(err)?;
    s.connect(addr).map_err(err)?;
    use std::os::fd::AsRawFd;
    sonde_engine::marks::set_tos_if(s.as_raw_fd(), tos).map_err(err)?;
    Ok(s)
}
