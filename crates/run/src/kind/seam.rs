//! The test-kind seam: what the controller and the agent ask of a kind ([`Kind`]) and of
//! the endpoints it opens. A leaf module: each kind implements it, and `kind`'s table lists
//! the kinds, so neither imports the other back.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use sonde_probe::hostwatch::HostProbe;
use sonde_results::document::Prelude;
use sonde_results::spec::TestName;
use sonde_results::{Engine, Role, SideResult, SpecError, TestSpec};

use crate::side::Side;

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
    /// The spec asks what this path cannot run: the flag at fault is the error's.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A setting of this host the spec asks for could not be made, naming its flag.
    #[error("{flag}: {reason}")]
    Setting { flag: &'static str, reason: String },
    /// The spec's engine cannot run here as asked (its preflight, its opening), in the
    /// engine's own words, which name the flag or the device.
    #[error("{0}")]
    Engine(io::Error),
}

/// Where the controller opens its data endpoints: the agent's data port, and the cookie
/// that proves them the test's own.
#[derive(Debug, Clone, Copy)]
pub struct DataPort {
    pub addr: SocketAddr,
    pub cookie: u64,
}

/// Where a test's client side runs, as the controller's step before the test sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAt<'a> {
    /// On the controller's host.
    Here,
    /// On another agent (a test between two agents), as the controller reached it.
    Agent(&'a str),
}

/// Endpoints opened, or why not.
pub type OpenResult<T> = Result<Box<T>, OpenError>;

/// What the controller and the agent ask of a kind, whatever its spec: object-safe, so the
/// kinds sit in one table. A kind implements [`TypedKind`] instead and is listed as
/// [`Typed`], which hands it its own spec.
pub trait Kind: Sync {
    /// What `spec` asks of the agent that runs `role`'s side of it.
    fn demand(&self, spec: &TestSpec, role: Role) -> Demand;
    /// How many workers `role`'s side runs for `spec`: what `auto` CPUs are chosen for.
    fn workers(&self, spec: &TestSpec, role: Role) -> usize;
    /// The engine a spec without `--engine` runs.
    fn fastest(&self, spec: &TestSpec) -> Engine;
    /// What both ends must agree on about the serving agent's address.
    fn fit_address(&self, spec: &mut TestSpec, agent: SocketAddr);
    /// Controller (or a client-part agent), before connecting: fits the spec to the path.
    fn prepare(
        &self,
        spec: &mut TestSpec,
        agent: SocketAddr,
        probe: &HostProbe,
    ) -> Result<(), OpenError>;
    /// Controller, placed and before connecting: what the kind measures before its test,
    /// for its own section of the document.
    fn prelude(&self, spec: &TestSpec, client: ClientAt<'_>) -> Option<Prelude>;
    /// Controller: opens the data endpoints to the agent's data port.
    fn open_client(&self, spec: &TestSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint>;
    /// Agent: opens where the test's data arrives.
    fn open_server(
        &self,
        spec: &TestSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>>;
    /// The agent's log line for a test that ended.
    fn summary(&self, spec: &TestSpec, result: &SideResult) -> String;
}

/// A test kind as its module writes it: every method takes the kind's own spec, so a
/// kind's code never matches a [`TestSpec`] it does not own.
pub trait TypedKind: Sync {
    type Spec;
    /// The kind's own spec in `spec`, and the test it names; `None`: another kind's.
    fn own(spec: &TestSpec) -> Option<(&Self::Spec, TestName)>;
    fn own_mut(spec: &mut TestSpec) -> Option<&mut Self::Spec>;
    /// What `spec` asks of the agent that runs `role`'s side of it.
    fn demand(&self, spec: &Self::Spec, role: Role) -> Demand;
    /// How many workers `role`'s side runs for `spec`: what `auto` CPUs are chosen for
    /// (`kind::place`, at the test's start).
    fn workers(&self, spec: &Self::Spec, role: Role) -> usize;
    /// The engine test `test` of this kind runs without `--engine`: the fastest measured
    /// for it (BENCHMARKS.md), among those that can run it as asked.
    fn fastest(&self, _spec: &Self::Spec, _test: TestName) -> Engine {
        Engine::Kernel
    }
    /// What both ends must agree on about the serving agent's address (pps: the address
    /// family); part of `prepare`, and all of it a controller that is no end of the test
    /// does, since the rest of `prepare` checks the sending host.
    fn fit_address(&self, _spec: &mut Self::Spec, _agent: SocketAddr) {}
    /// Controller (or a client-part agent), before connecting: fits the spec to the path
    /// to the agent at `agent`.
    fn prepare(
        &self,
        _spec: &mut Self::Spec,
        _agent: SocketAddr,
        _probe: &HostProbe,
    ) -> Result<(), OpenError> {
        Ok(())
    }
    /// Controller, placed and before connecting (the agent would wait meanwhile): what
    /// the kind measures before its test, handed to its own section of the document
    /// (rr: the tool's floor, `--self-noise`). `client`: where the client side runs.
    fn prelude(&self, _spec: &Self::Spec, _client: ClientAt<'_>) -> Option<Prelude> {
        None
    }
    /// Controller: opens the data endpoints to the agent's data port.
    fn open_client(&self, spec: &Self::Spec, to: DataPort) -> OpenResult<dyn ClientEndpoint>;
    /// Agent: opens where the test's data arrives, on `ip`, from `peer` (the controller,
    /// or the client agent): a bypass engine steers only that flow.
    fn open_server(
        &self,
        spec: &Self::Spec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>>;
    /// The agent's log line for test `test` that ended.
    fn summary(&self, spec: &Self::Spec, test: TestName, result: &SideResult) -> String;
}

/// A [`TypedKind`] in the kinds' table: the one place a spec is handed to its kind.
pub struct Typed<K>(pub K);

/// `kind::of` finds a spec's kind by its test name, so a kind only ever gets its own.
const NOT_OURS: &str = "kind::of hands each kind only its own specs";

impl<K: TypedKind> Typed<K> {
    fn own(spec: &TestSpec) -> (&K::Spec, TestName) {
        K::own(spec).expect(NOT_OURS)
    }

    fn own_mut(spec: &mut TestSpec) -> &mut K::Spec {
        K::own_mut(spec).expect(NOT_OURS)
    }
}

impl<K: TypedKind> Kind for Typed<K> {
    fn demand(&self, spec: &TestSpec, role: Role) -> Demand {
        self.0.demand(Self::own(spec).0, role)
    }
    fn workers(&self, spec: &TestSpec, role: Role) -> usize {
        self.0.workers(Self::own(spec).0, role)
    }
    fn fastest(&self, spec: &TestSpec) -> Engine {
        let (own, test) = Self::own(spec);
        self.0.fastest(own, test)
    }
    fn fit_address(&self, spec: &mut TestSpec, agent: SocketAddr) {
        self.0.fit_address(Self::own_mut(spec), agent)
    }
    fn prepare(
        &self,
        spec: &mut TestSpec,
        agent: SocketAddr,
        probe: &HostProbe,
    ) -> Result<(), OpenError> {
        self.0.prepare(Self::own_mut(spec), agent, probe)
    }
    fn prelude(&self, spec: &TestSpec, client: ClientAt<'_>) -> Option<Prelude> {
        self.0.prelude(Self::own(spec).0, client)
    }
    fn open_client(&self, spec: &TestSpec, to: DataPort) -> OpenResult<dyn ClientEndpoint> {
        self.0.open_client(Self::own(spec).0, to)
    }
    fn open_server(
        &self,
        spec: &TestSpec,
        ip: IpAddr,
        peer: IpAddr,
    ) -> io::Result<Box<dyn ServerEndpoint>> {
        self.0.open_server(Self::own(spec).0, ip, peer)
    }
    fn summary(&self, spec: &TestSpec, result: &SideResult) -> String {
        let (own, test) = Self::own(spec);
        self.0.summary(own, test, result)
    }
}

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
    /// The test's cookie is chosen and `Ready` (which tells the controller the port and
    /// the cookie) not sent yet: what must be in place before the first datagram can
    /// arrive (a pps receiver's filter counts only what arrives after it).
    fn before_ready(&mut self, _cookie: u64) {}
    /// Starts the workers now: `Start` has arrived with every data connection (by index).
    fn start(
        self: Box<Self>,
        conns: Vec<TcpStream>,
        peer: IpAddr,
        cookie: u64,
        probe: HostProbe,
    ) -> io::Result<Box<dyn Side>>;
}
