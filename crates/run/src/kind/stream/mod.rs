//! Stream: TCP bulk transfer over many connections, one way or both (ntttcp, iperf3).
//! Its engines are [`ENGINES`]; each implements [`StreamBackend`] in its own module.

mod engine;
mod kernel;
mod side;
mod uring;

pub use engine::{StreamBackend, StreamEngine};
pub use side::StreamSide;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use sonde_engine::sockopt::{self, SocketOptions};
use sonde_engine::{worker_threads, Placement, StreamConn, Work};
use sonde_probe::hostwatch::HostProbe;
use sonde_results::spec::TestName;
use sonde_results::{
    Direction, Engine, Role, SideResult, SpecError, StreamSpec, TestSpec, Transfer,
};

use super::budget;
use super::seam::{ClientEndpoint, DataPort, Demand, OpenResult, ServerEndpoint, TypedKind};
use super::table;
use crate::side::Side;

/// The stream kind's engines, the default first: every choice of one is [`backend`].
pub const ENGINES: &[&dyn StreamBackend] = &[&kernel::Kernel, &uring::Uring];

/// The engines of [`ENGINES`].
pub fn engines() -> Vec<Engine> {
    table::engines(ENGINES)
}

/// The stream engine that is `engine`, or why none is.
pub fn backend(engine: Engine) -> io::Result<&'static dyn StreamBackend> {
    table::find(ENGINES, "stream", engine)
}

/// The engines of [`ENGINES`] this host can run.
pub fn runnable() -> Vec<Engine> {
    table::runnable(ENGINES)
}

/// Refuses, naming the flag, what of `spec` its engine does not run.
pub fn refuse(spec: &TestSpec) -> Result<(), SpecError> {
    let Some((s, _)) = Stream::own(spec) else {
        return Ok(());
    };
    table::refuse(ENGINES, s.execution.engine, |e| e.owns(s), |e| e.refuse(s))
}

pub struct Stream;

fn options(s: &StreamSpec) -> SocketOptions {
    SocketOptions {
        congestion: s.congestion.clone(),
        nodelay: s.nodelay,
        sndbuf_bytes: s.sndbuf_bytes,
        rcvbuf_bytes: s.rcvbuf_bytes,
        tos: s.execution.marks.data_tos(),
    }
}

impl TypedKind for Stream {
    type Spec = StreamSpec;

    fn own(spec: &TestSpec) -> Option<(&StreamSpec, TestName)> {
        match spec {
            TestSpec::Stream(s) => Some((s, TestName::Stream)),
            _ => None,
        }
    }

    fn own_mut(spec: &mut TestSpec) -> Option<&mut StreamSpec> {
        match spec {
            TestSpec::Stream(s) => Some(s),
            _ => None,
        }
    }

    fn demand(&self, s: &StreamSpec, role: Role) -> Demand {
        let threads = self.workers(s, role);
        let buffers = backend(s.execution.engine).map_or(u64::from(s.buffer_bytes), |b| {
            b.bytes_per_connection(s.buffer_bytes)
        });
        let per_conn = buffers.saturating_add(budget::socket_bytes(s.sndbuf_bytes, s.rcvbuf_bytes));
        Demand {
            connections: s.total_connections(),
            rate: None,
            bits_per_s: s.rate_bits_per_s,
            message_bytes: s.buffer_bytes,
            threads,
            memory_bytes: budget::total(threads, 0, s.total_connections(), per_conn),
        }
    }

    fn workers(&self, s: &StreamSpec, role: Role) -> usize {
        let threads = role.pick(s.client_threads, s.server_threads);
        worker_threads(Work::Stream, threads, s.total_connections() as usize)
    }

    /// The kernel engine: io_uring halves a sender's system calls but moved neither
    /// throughput nor CPU per GB on this machine (BENCHMARKS.md). `--zerocopy` is
    /// io_uring's (`send_zc`), so asking for it without `--engine` asks for io_uring.
    fn fastest(&self, s: &StreamSpec, _test: TestName) -> Engine {
        match s.zerocopy {
            true => Engine::Uring,
            false => Engine::Kernel,
        }
    }

    fn open_client(&self, s: &StreamSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint> {
        let opts = options(s);
        let mut conns = Vec::new();
        let mut notes = Vec::new();
        for index in 0..s.total_connections() {
            let (stream, n) = super::connect::connect_data(to, &opts, index)?;
            if index == 0 {
                notes = n;
            }
            conns.push(stream);
        }
        Ok(Box::new(Opened {
            spec: s.clone(),
            role: Role::Client,
            conns,
            notes,
        }))
    }

    fn open_server(
        &self,
        s: &StreamSpec,
        ip: IpAddr,
        _peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>> {
        let total = s.total_connections();
        let (listener, notes) =
            sockopt::listen(SocketAddr::new(ip, 0), &options(s), total.max(128) as i32)?;
        listener.set_nonblocking(true)?;
        Ok(Box::new(Listening {
            spec: s.clone(),
            listener,
            notes,
        }))
    }

    fn summary(&self, s: &StreamSpec, _test: TestName, r: &SideResult) -> String {
        let rates: Vec<String> = r
            .stream()
            .map_or(&[][..], |s| &s.directions[..])
            .iter()
            .map(|d| {
                let verb = match d.transfer {
                    Transfer::Send => "sent",
                    Transfer::Receive => "received",
                };
                format!(
                    "{verb} {:.2} Gbit/s",
                    sonde_results::stats::bits_per_second(d.bytes, r.window_s) / 1e9
                )
            })
            .collect();
        format!(
            "stream {} x{} for {:.1} s: {}",
            s.direction.as_str(),
            s.connections,
            r.window_s,
            rates.join(", ")
        )
    }
}

/// Connections open on either end, in test-wide index order.
struct Opened {
    spec: StreamSpec,
    role: Role,
    conns: Vec<TcpStream>,
    notes: Vec<String>,
}

impl Opened {
    fn start(self, probe: HostProbe) -> io::Result<Box<dyn Side>> {
        let Opened {
            spec,
            role,
            conns,
            notes,
        } = self;
        let ex = &spec.execution;
        let threads = role.pick(spec.client_threads, spec.server_threads);
        let cpus = role.pick(&ex.client_cpus, &ex.server_cpus);
        let units = conns.len();
        let placement = Placement::new(
            worker_threads(Work::Stream, threads, units),
            cpus.clone(),
            units,
        );
        let meta: Vec<(u32, Direction)> = (0..units as u32)
            .map(|i| (i, spec.direction_of(i)))
            .collect();
        if let Some(rate) = spec.pacing_bytes_per_s() {
            pace(&conns, rate)?;
        }
        let sends = |d: Direction| (d == Direction::Forward) == (role == Role::Client);
        let conns = conns
            .into_iter()
            .zip(&meta)
            .map(|(stream, (_, d))| StreamConn {
                stream,
                send: sends(*d),
            })
            .collect();
        let (backend, note) = table::choose(ENGINES, "stream", &spec.execution, role)?;
        let notes = notes.into_iter().chain(note).collect();
        let engine = backend.start(conns, placement.clone(), &spec)?;
        Ok(Box::new(StreamSide::start(
            role, &spec, meta, engine, placement, probe, notes,
        )))
    }
}

/// This side started over connections already open and past their own handshake (a far
/// end that is not an agent: iperf3), in test-wide index order.
pub fn start_connected(
    spec: &StreamSpec,
    role: Role,
    conns: Vec<TcpStream>,
    notes: Vec<String>,
    probe: HostProbe,
) -> io::Result<Box<dyn Side>> {
    let opened = Opened {
        spec: spec.clone(),
        role,
        conns,
        notes,
    };
    opened.start(probe)
}

/// The longest a paced connection's unsent bytes last at its rate: a sender counts what
/// it hands its socket, and without a bound the socket's autotuned buffer held 1.3 s of a
/// 20 Mbit/s stream unsent (a served `iperf3 -c -R -b 20M -P 2 -t 3`: 61.8 Mbit/s handed
/// to the sockets, 42.6 received).
const PACED_UNSENT: std::time::Duration = std::time::Duration::from_millis(20);
/// The least unsent a paced connection may hold: a slow stream still writes whole blocks.
const PACED_UNSENT_MIN_BYTES: u64 = 16 * 1024;

/// Paces every connection at `bytes_per_s` (`--rate`: the test's rate split evenly), with
/// at most [`PACED_UNSENT`] of it queued unsent.
fn pace(conns: &[TcpStream], bytes_per_s: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let unsent = (bytes_per_s as f64 * PACED_UNSENT.as_secs_f64()) as u64;
    let unsent = unsent.clamp(PACED_UNSENT_MIN_BYTES, u64::from(u32::MAX)) as u32;
    for c in conns {
        sockopt::set_pacing(c.as_raw_fd(), bytes_per_s)
            .map_err(|e| io::Error::new(e.kind(), format!("--rate: SO_MAX_PACING_RATE: {e}")))?;
        sockopt::set_notsent_lowat(c.as_raw_fd(), unsent)
            .map_err(|e| io::Error::new(e.kind(), format!("--rate: TCP_NOTSENT_LOWAT: {e}")))?;
    }
    Ok(())
}

impl ClientEndpoint for Opened {
    fn start(self: Box<Self>, probe: HostProbe) -> io::Result<Box<dyn Side>> {
        Opened::start(*self, probe)
    }
}

struct Listening {
    spec: StreamSpec,
    listener: TcpListener,
    notes: Vec<String>,
}

impl ServerEndpoint for Listening {
    fn port(&self) -> io::Result<u16> {
        Ok(self.listener.local_addr()?.port())
    }

    fn listener(&self) -> Option<(&TcpListener, usize)> {
        Some((&self.listener, self.spec.total_connections() as usize))
    }

    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        _peer: IpAddr,
        _cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>> {
        let opened = Opened {
            spec: self.spec,
            role: Role::Server,
            conns,
            notes: self.notes,
        };
        opened.start(probe)
    }
}
