//! The test-kind seam. Everything particular to one kind of test lives in its module:
//! opening the controller's and the agent's data endpoints, starting each side, what it
//! asks of an agent's limits, how many workers the agent places, and its log line. The
//! controller and the agent only ever talk to a [`Kind`], found from the spec by
//! [`of`]; [`KINDS`] is the one list of them (the agent's capabilities, suite test names).
//!
//! Adding a kind: an engine module (`sonde-engine`), a module here implementing [`Kind`]
//! with its [`Side`], a CLI module, and its variants in `TestSpec` and `Document`.

pub mod budget;
pub mod congestion;
pub mod dpdk;
pub mod dpdk_source;
pub mod path;
pub mod pps;
pub mod rr;
pub mod stream;
pub mod xdp;

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use sonde_probe::hostwatch::HostProbe;
use sonde_results::{Engine, Role, SideResult, SpecError, TestSpec};

use crate::agent::{Allow, Allowed};
use crate::side::Side;

/// The root the host readers read under: this host's own.
pub(crate) fn root() -> &'static std::path::Path {
    std::path::Path::new("/")
}

/// How long a data (or control) connection may take to open.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One kind of test as this build lists it.
pub struct Listed {
    /// The test names it runs (`TestSpec::name`, the commands).
    pub names: &'static [&'static str],
    /// Its engines by name; the first is the default.
    pub engines: &'static [Engine],
    pub kind: &'static dyn Kind,
}

/// Every kind of test this build runs.
pub const KINDS: &[Listed] = &[
    Listed {
        names: &["stream"],
        engines: stream::ENGINES,
        kind: &stream::Stream,
    },
    Listed {
        names: &["ping", "rpc"],
        engines: rr::ENGINES,
        kind: &rr::RequestResponse,
    },
    Listed {
        names: &["pps"],
        engines: pps::ENGINES,
        kind: &pps::Pps,
    },
];

/// `None` for a spec no single test runs (a load: the controller runs it as several).
fn listing(spec: &TestSpec) -> Option<&'static Listed> {
    let name = spec.name();
    KINDS.iter().find(|k| k.names.contains(&name))
}

/// The kind that runs `spec`; `None` for a spec no single test runs.
pub fn of(spec: &TestSpec) -> Option<&'static dyn Kind> {
    listing(spec).map(|l| l.kind)
}

/// Every test this build runs, by the name its command and its spec carry.
pub fn test_names() -> Vec<&'static str> {
    KINDS.iter().flat_map(|k| k.names.iter().copied()).collect()
}

/// Everything this build runs: each test name with each of its kind's engines
/// ([`TestSpec::capability`]), and that it takes either part of a test between two agents.
pub fn capabilities() -> Vec<String> {
    capabilities_allowed(&Allowed::all())
}

/// What an agent started with `allowed` announces in `Welcome`: the kernel engine's tests,
/// and only the engines and parts its operator allowed (`sonde serve --allow`).
pub fn capabilities_allowed(allowed: &Allowed) -> Vec<String> {
    let third_party = allowed
        .contains(Allow::ThirdParty)
        .then(|| sonde_proto::THIRD_PARTY.to_string());
    KINDS
        .iter()
        .flat_map(|k| {
            k.names.iter().flat_map(|name| {
                k.engines
                    .iter()
                    .filter(|engine| allowed.engine(**engine))
                    .map(|engine| sonde_results::spec::capability(name, *engine))
            })
        })
        .chain(third_party)
        .collect()
}

/// Refuses an engine the spec's kind does not have in this build, naming `--engine`
/// (and a spec no single test runs, naming the test).
pub fn check_engine(spec: &TestSpec) -> Result<(), SpecError> {
    let Some(listed) = listing(spec) else {
        return Err(SpecError {
            flag: "test",
            reason: format!("'{}' is not run as one test", spec.name()),
        });
    };
    let engines = listed.engines;
    let engine = spec.execution().engine;
    if engines.contains(&engine) {
        return Ok(());
    }
    Err(SpecError {
        flag: "--engine",
        reason: format!(
            "{} has no '{engine}' engine (it has: {})",
            spec.name(),
            engines
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Chooses `role`'s CPUs on this host when its spec says `auto`, for as many workers as
/// the kind runs there: the controller from the near end of the preferred cores, the agent
/// from the far end, so that both ends on one host (the lab) pick different ones.
pub fn place(spec: &mut TestSpec, role: Role) {
    let Some(kind) = of(spec) else { return };
    let workers = kind.workers(spec, role);
    let ex = spec.execution_mut();
    let (auto, cpus, end) = match role {
        Role::Client => (
            &mut ex.client_cpus_auto,
            &mut ex.client_cpus,
            sonde_probe::placement::End::First,
        ),
        Role::Server => (
            &mut ex.server_cpus_auto,
            &mut ex.server_cpus,
            sonde_probe::placement::End::Last,
        ),
    };
    if !std::mem::take(auto) {
        return;
    }
    let inv = sonde_probe::inventory::collect_live();
    let allowed = sonde_probe::topology::allowed_cpus();
    *cpus = sonde_probe::placement::choose(&inv, &allowed, workers, end);
}

/// Holds `--cpu-latency-us` on this side's host for as long as `probe` lives (the test);
/// the error names the flag and the device.
pub fn hold_cpu_latency(probe: &mut HostProbe, spec: &TestSpec) -> Result<(), String> {
    let Some(us) = spec.execution().cpu_latency_us else {
        return Ok(());
    };
    probe.hold_cpu_latency(us).map_err(|e| {
        format!("--cpu-latency-us: cannot hold the CPU latency limit ({e}; it needs root)")
    })
}

/// What a spec asks of an agent, set against its limits (besides its length). Computed
/// before the spec is validated, so nothing in it may wrap or panic.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// Connections or flows.
    pub connections: u32,
    /// Packets or requests per second. `None`: the kind has no such rate; `Some(None)`:
    /// unpaced.
    pub rate: Option<Option<f64>>,
    /// Bits per second of payload the busier direction carries; `None`: unpaced.
    pub bits_per_s: Option<f64>,
    pub message_bytes: u32,
    /// Worker threads this side runs.
    pub threads: usize,
    /// Memory this side may take, from [`budget`]'s estimates.
    pub memory_bytes: u64,
}

/// Why the controller could not open its data endpoints.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("opening data connection {index} to {addr}: {source}")]
    Data {
        index: u32,
        addr: SocketAddr,
        source: io::Error,
    },
    /// The spec cannot run on this path (names the flag).
    #[error("{0}")]
    Refused(String),
}

/// Where the controller opens its data endpoints: the agent's data port, and the cookie
/// that proves them the test's own.
#[derive(Debug, Clone, Copy)]
pub struct DataPort {
    pub addr: SocketAddr,
    pub cookie: u64,
}

/// Endpoints opened, or why not.
pub type OpenResult<T> = Result<Box<T>, OpenError>;

pub trait Kind: Sync {
    /// What `spec` asks of the agent that runs `role`'s side of it.
    fn demand(&self, spec: &TestSpec, role: Role) -> Demand;
    /// How many workers `role`'s side runs for `spec`: what `auto` CPUs are chosen for.
    fn workers(&self, spec: &TestSpec, role: Role) -> usize;
    /// What both ends must agree on about the serving agent's address (pps: the address
    /// family); part of `prepare`, and all of it a controller that is no end of the test
    /// does, since the rest of `prepare` checks the sending host.
    fn fit_address(&self, _spec: &mut TestSpec, _agent: SocketAddr) {}
    /// Controller (or a client-part agent), before connecting: fits the spec to the path
    /// to the agent at `agent`.
    fn prepare(
        &self,
        _spec: &mut TestSpec,
        _agent: SocketAddr,
        _probe: &HostProbe,
    ) -> Result<(), OpenError> {
        Ok(())
    }
    /// Controller: opens the data endpoints to the agent's data port.
    fn open_client(&self, spec: &TestSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint>;
    /// Agent: opens where the test's data arrives, on `ip`, from `peer` (the controller,
    /// or the client agent): a bypass engine steers only that flow.
    fn open_server(
        &self,
        spec: &TestSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>>;
    /// The agent's log line for a test that ended.
    fn summary(&self, spec: &TestSpec, result: &SideResult) -> String;
}

/// Running workers of any kind and engine: what every side asks of them besides its
/// kind's own counters (each kind's engine trait adds those).
pub trait Workers: Send {
    /// The engine's name, recorded in the result.
    fn name(&self) -> &'static str;
    /// Every worker has ended.
    fn all_done(&self) -> bool;
    /// Every worker stops now.
    fn abort(&self);
    /// How a kernel-bypass engine left the socket path; `None` for kernel sockets.
    fn bypass(&self) -> Option<sonde_results::Bypass> {
        None
    }
    /// Where the workers run when the engine decided it itself (DPDK's lcores).
    fn placed(&self) -> Option<sonde_engine::Placement> {
        None
    }
    /// A process doing the engine's work (DPDK's testpmd), whose CPU is the side's too.
    fn helper(&self) -> Option<u32> {
        None
    }
}

/// The kernel engine's worker types: their own `all_done` and `abort` answer.
macro_rules! kernel_workers {
    ($($t:ty),+) => {$(
        impl $crate::kind::Workers for $t {
            fn name(&self) -> &'static str {
                sonde_results::Engine::Kernel.name()
            }
            fn all_done(&self) -> bool {
                <$t>::all_done(self)
            }
            fn abort(&self) {
                <$t>::abort(self)
            }
        }
    )+};
}
pub(crate) use kernel_workers;

/// The controller's open data endpoints, ready to start.
pub trait ClientEndpoint {
    /// Starts the workers now: `Start` has just been sent.
    fn start(self: Box<Self>, probe: HostProbe) -> io::Result<Box<dyn Side>>;
}

/// Where the agent receives a test's data.
pub trait ServerEndpoint: Send {
    /// The port the controller is told in `Ready`.
    fn port(&self) -> io::Result<u16>;
    /// The listener data connections arrive on, and how many the test opens before `Start`.
    fn listener(&self) -> Option<(&TcpListener, usize)> {
        None
    }
    /// Starts the workers now: `Start` has arrived with every data connection (by index).
    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>>;
}

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

/// One UDP socket bound to an ephemeral port and connected to `addr`.
pub(crate) fn connect_udp(addr: SocketAddr, index: u32) -> Result<std::net::UdpSocket, OpenError> {
    let err = |source| OpenError::Data {
        index,
        addr,
        source,
    };
    let s = std::net::UdpSocket::bind(any_of(addr)).map_err(err)?;
    s.connect(addr).map_err(err)?;
    Ok(s)
}

/// A side asked for an engine its kind does not have (admission checks first, so this is
/// a peer that skipped it).
pub(crate) fn no_engine(kind: &str, engine: Engine) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{kind} has no '{engine}' engine"),
    )
}
