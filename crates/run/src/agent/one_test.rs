//! One test on the agent, from Hello to Results, in five steps: handshake (until a valid
//! `Setup`, within `HANDSHAKE_WITHIN` of accept), admit (the test slot, limits, the spec),
//! open (the kind's data endpoint, `Ready`, the data connections until `Start`:
//! `data_conns`), drive (the shared control loop, until `Stop`), finish (drain, `Results`).

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sonde_probe::hostwatch::HostProbe;
use sonde_proto::{
    AgentEvent, AgentSession, PeerError, ProtoError, Session, TargetTest, ThirdParty, Timeouts,
};
use sonde_results::{IntervalSample, Role, TestSpec};

use super::conn::{Conn, TestError, LINGER};
use super::shared::{Shared, Slot};
use super::sources::{Entered, HANDSHAKE_WITHIN};
use crate::control::Link;
use crate::controller::SOFTWARE;
use crate::drive::{drive, Cut, Flow, Party};
use crate::kind::{self, Kind};
use crate::side::Side;
use crate::signals::Interrupt;

/// After `Stop`, how long this side's workers may take to end.
const DRAIN: Duration = Duration::from_secs(3);
/// Runs one test from Hello to Results (the connection `accepted` then, holding a
/// handshake place, `first` what it sent before: its `Hello` read at the door); returns
/// the log line's summary.
pub(super) fn run(
    control: TcpStream,
    (peer, accepted, first): (SocketAddr, Instant, Vec<u8>),
    place: Entered,
    shared: &Shared,
) -> Result<String, TestError> {
    let local_ip = control.local_addr()?.ip();
    let mut conn = Conn {
        session: new_session(shared, local_ip),
        link: Link::new(control)?,
    };
    let until = accepted + HANDSHAKE_WITHIN;
    let asked = match handshake(&mut conn, (peer, until, first), place, shared) {
        Ok(s) => s,
        Err(TestError::ShuttingDown) => return Err(TestError::ShuttingDown),
        Err(e) => return Err(TestError::Handshake(Box::new(e))),
    };
    let (spec, part) = match asked {
        Asked::Test(spec, part) => (spec, part),
        Asked::Stamp(spec, reflector, command) => {
            return super::stamp_part::run(&mut conn, spec, (reflector, &command), shared)
        }
    };
    let role = match part {
        Some(ThirdParty::Client { .. }) => Role::Client,
        _ => Role::Server,
    };
    let (slot, mut spec, kind, notes) = admit(&mut conn, spec, shared, role, part.is_some())?;
    let key = shared.cfg.key.as_ref();
    // A client part's log line names where it sent: the operator sees every destination.
    let sent_to = match &part {
        Some(ThirdParty::Client { server, .. }) => format!("client part to {server}: "),
        Some(ThirdParty::Server { client }) => format!("serving {client}: "),
        None => String::new(),
    };
    let side = match part {
        Some(ThirdParty::Client {
            server,
            cookie,
            grant,
        }) => {
            let proven = super::consent::check(key, server, cookie, grant.as_ref()).and_then(
                |(key, client)| {
                    let test = TargetTest {
                        client,
                        server,
                        cookie,
                    };
                    super::target::prove(key, test, super::target::via(&spec))
                        .map_err(super::consent::PartRefused::from)
                },
            );
            if let Err(e) = proven {
                // The booking goes before the refusal is sent: a peer that retries at once
                // is not refused for this attempt's share.
                drop(slot);
                let message = e.to_string();
                return Err(conn.refuse(PeerError::Refused { message }));
            }
            let to = kind::DataPort {
                addr: server,
                cookie,
            };
            open_client_part(&mut conn, kind, &mut spec, to, shared)?
        }
        Some(ThirdParty::Server { client }) => {
            let Some(key) = key else {
                return Err(conn.refuse(PeerError::Refused {
                    message: "a serving part of a test between two agents needs --key-file on this agent (the client agent checks a grant made with it)".into(),
                }));
            };
            let to = Peer {
                ip: client,
                grant_with: Some(key),
            };
            open(&mut conn, kind, &spec, local_ip, to, shared)?
        }
        None => {
            let to = Peer {
                ip: peer.ip(),
                grant_with: None,
            };
            open(&mut conn, kind, &spec, local_ip, to, shared)?
        }
    };
    let result = run_started(&mut conn, side, &shared.interrupt, role, notes)?;
    Ok(format!("{sent_to}{}", kind.summary(&spec, &result)))
}

/// The session of a controller that reached this agent at `local_ip`.
/// A packet-rate test with an agent runs one way, the controller's senders to the
/// agent's receivers, whose count is the test's honest figure and whose limits are the
/// agent's admission. A spec asking the agent to send too (`-R`, `--bidir`: an iperf3 far
/// end's options) is refused by name, not run forward under a document that says
/// otherwise, nor turned into a sender at a controller's word.
fn one_way(spec: &TestSpec) -> Result<(), sonde_results::SpecError> {
    let TestSpec::Pps(p) = spec else {
        return Ok(());
    };
    let flag = match (p.reverse, p.bidir) {
        (true, _) => "-R",
        (_, true) => "--bidir",
        _ => return Ok(()),
    };
    Err(sonde_results::SpecError {
        flag,
        reason: "a sonde agent only receives a pps test's packets; the far end sends \
                 only when it is an iperf3 server (--iperf3)"
            .into(),
    })
}

fn new_session(shared: &Shared, local_ip: IpAddr) -> AgentSession {
    let mut capabilities = kind::capabilities_allowed(&shared.cfg.allow);
    // Announced whatever `--stamp-targets` says, so that a refusal names the flag.
    capabilities.push(sonde_proto::STAMP_SENDER.into());
    if shared.cfg.stamp_sender_key.is_some() {
        capabilities.push(sonde_proto::STAMP_SENDER_KEY.into());
    }
    let session = AgentSession::new(
        SOFTWARE,
        &shared.cfg.command,
        &capabilities,
        Timeouts::default(),
        Instant::now(),
    )
    .with_labels(shared.cfg.labels.clone())
    .reached_at(
        std::iter::once(local_ip)
            .chain(shared.cfg.reached_at.iter().copied())
            .collect(),
    );
    match &shared.cfg.key {
        Some(key) => session.require_key(key.clone(), crate::random::nonce()),
        None => session,
    }
}

/// What a controller asked for once the handshake is over (one per connection: the
/// inline spec costs nothing worth a box).
#[allow(clippy::large_enum_variant)]
enum Asked {
    /// A test (`Setup`): its spec, and this agent's part if the controller is not an end.
    Test(TestSpec, Option<ThirdParty>),
    /// A STAMP run to an agent-less reflector (`Stamp`).
    Stamp(sonde_results::StampSpec, SocketAddr, String),
}

/// Hello to Setup (the spec, and this agent's part if the controller is not an end of the
/// test) or to a STAMP run, by `until`; the handshake `place` is given back when it ends, one way or the
/// other, before any lingering, and its address remembered if it proved the key.
fn handshake(
    conn: &mut Conn,
    (peer, until, mut first): (SocketAddr, Instant, Vec<u8>),
    place: Entered,
    shared: &Shared,
) -> Result<Asked, TestError> {
    loop {
        conn.link.send(&mut conn.session)?;
        if shared.interrupt.is_set() {
            return Err(TestError::ShuttingDown);
        }
        if Instant::now() >= until {
            return Err(TestError::TooSlow);
        }
        let fed = if first.is_empty() {
            conn.link
                .step(&mut conn.session, Some(until), None)
                .map(|_| ())
        } else {
            let bytes = std::mem::take(&mut first);
            conn.session.handle_bytes(&bytes, Instant::now())
        };
        if let Err(e) = fed {
            drop(place);
            if let ProtoError::BadMac { .. } = e {
                // Our side of the channel is intact: say why we stop.
                conn.session.refuse(PeerError::Refused {
                    message: e.to_string(),
                });
            }
            // The session may have queued an Error saying why (version, key): deliver it,
            // and linger only then (a silent or late peer is closed at once).
            let mut said = false;
            let session = &mut conn.session;
            let _ = conn.link.flush(|| {
                let frame = session.poll_transmit();
                said |= frame.is_some();
                frame
            });
            if said {
                conn.link.close_gracefully(LINGER);
            }
            return Err(e.into());
        }
        let mut setup = None;
        while let Some(ev) = conn.session.poll_event() {
            match ev {
                AgentEvent::Setup { spec, third_party } => {
                    setup = Some(Asked::Test(*spec, third_party))
                }
                AgentEvent::Stamp {
                    spec,
                    reflector,
                    command,
                } => setup = Some(Asked::Stamp(*spec, reflector, command)),
                AgentEvent::Hello { software, .. } => tracing::debug!("{peer} runs {software:?}"),
                _ => {}
            }
        }
        if let Some(s) = setup {
            if shared.cfg.key.is_some() {
                place.proven();
            }
            return Ok(s);
        }
    }
}

/// The test slot, the kind and engine, what `--allow` opts into (the engine, a
/// `third_party` part), this agent's limits and the spec's own checks; then what reaches a
/// process or the kernel is confined to this agent's own configuration and host (testpmd's
/// arguments and device, the congestion control), and `--server-cpus auto` (or `--cpus
/// auto` for a client part) is resolved on this host.
fn admit<'a>(
    conn: &mut Conn,
    mut spec: TestSpec,
    shared: &'a Shared,
    role: Role,
    third_party: bool,
) -> Result<(Slot<'a>, TestSpec, &'static dyn Kind, Vec<String>), TestError> {
    let Some(mut slot) = shared.take_slot() else {
        return Err(conn.refuse(PeerError::Busy));
    };
    let (Some(kind), Ok(())) = (kind::of(&spec), kind::has_engine(&spec)) else {
        return Err(conn.refuse(PeerError::Unsupported {
            test: spec.capability(),
        }));
    };
    if let Err(e) = shared.cfg.allow.check(&spec, third_party) {
        let message = e.to_string();
        return Err(conn.refuse(PeerError::Refused { message }));
    }
    let limits = &shared.cfg.limits;
    let notes: Vec<String> = match role {
        Role::Client => limits.pace_client_part(&mut spec).into_iter().collect(),
        Role::Server => Vec::new(),
    };
    if let Some(why) = limits.check(&spec, kind, role) {
        return Err(conn.refuse(PeerError::Refused { message: why }));
    }
    let source = kind::dpdk_source::Source::Remote(&shared.cfg.dpdk);
    let checked = spec
        .validate()
        .and_then(|()| one_way(&spec))
        .and_then(|()| kind::refuse(&spec))
        .and_then(|()| kind::congestion::check(&spec, kind::root()))
        .and_then(|()| kind::dpdk_source::confine(&mut spec, role, source));
    if let Err(e) = checked {
        return Err(conn.refuse(PeerError::InvalidSpec {
            flag: e.flag.into(),
            reason: e.reason.clone(),
        }));
    }
    let demand = kind.demand(&spec, role);
    let client_bits = match role {
        Role::Client => limits.client_bits(&spec, &demand),
        Role::Server => 0.0,
    };
    if let Err(why) = shared.book(&mut slot, &demand, client_bits) {
        let message = why.to_string();
        return Err(conn.refuse(PeerError::Refused { message }));
    }
    kind::place(&mut spec, role);
    Ok((slot, spec, kind, notes))
}

/// Where a served test's data comes from: the controller, or (third-party) a client agent
/// that needs a grant made with this agent's key.
struct Peer<'a> {
    ip: IpAddr,
    grant_with: Option<&'a sonde_proto::Key>,
}

/// The kind's data endpoint, `Ready`, the data connections, and the side started at
/// `Start`.
fn open(
    conn: &mut Conn,
    kind: &dyn Kind,
    spec: &TestSpec,
    local_ip: IpAddr,
    to: Peer<'_>,
    shared: &Shared,
) -> Result<Box<dyn Side>, TestError> {
    let peer = to.ip;
    // --control-dscp, on this end of the control connection too (best effort).
    let _ = sonde_engine::marks::set_tos_if(conn.link.fd(), spec.execution().marks.control_tos());
    let mut probe = HostProbe::for_peer(peer);
    if let Err(e) = kind::hold_cpu_latency(&mut probe, spec)
        .and_then(|()| kind::hold_stamps(&mut probe, spec, &shared.cfg.stamping, "the agent's"))
    {
        let message = e.to_string();
        return Err(conn.refuse(PeerError::Refused { message }));
    }
    let mut endpoint = match kind.open_server(spec, local_ip, peer) {
        Ok(e) => e,
        Err(e) => {
            return Err(conn.refuse(PeerError::Refused {
                message: e.to_string(),
            }))
        }
    };
    let cookie = crate::random::u64();
    endpoint.before_ready(cookie);
    let port = endpoint.port()?;
    let grant = to
        .grant_with
        .map(|key| super::consent::grant(key, peer, SocketAddr::new(local_ip, port), cookie));
    // Third-party: the client agent's challenge is answered until the test starts.
    let server = SocketAddr::new(local_ip, port);
    let prover = match to.grant_with {
        Some(key) => Some(prove_until_start(conn, key, spec, (peer, server), cookie)?),
        None => None,
    };
    conn.session
        .ready_granting(port, cookie, grant, Instant::now())?;
    conn.link.send(&mut conn.session)?;
    let conns = super::data_conns::accept_data(conn, endpoint.listener(), cookie, peer, shared)?;
    drop(prover);
    Ok(endpoint.start(conns, peer, cookie, probe)?)
}

/// The serving part's answers to its client agent's challenge (`target`), or the refusal
/// when its data port cannot take them.
fn prove_until_start(
    conn: &mut Conn,
    key: &sonde_proto::Key,
    spec: &TestSpec,
    (client, server): (IpAddr, SocketAddr),
    cookie: u64,
) -> Result<super::target::Prover, TestError> {
    let test = TargetTest {
        client,
        server,
        cookie,
    };
    let via = super::target::via(spec);
    super::target::Prover::start(key.clone(), test, via).map_err(|e| {
        conn.refuse(PeerError::Refused {
            message: format!(
                "cannot answer the client agent's challenge at {server} ({via:?}): {e}"
            ),
        })
    })
}

/// The client part of a test between two agents: the kind fits the spec to this host's
/// path to the serving agent and opens the data connections to it, `Ready` says so, and
/// the side starts at `Start`, as a controller's would.
fn open_client_part(
    conn: &mut Conn,
    kind: &dyn Kind,
    spec: &mut TestSpec,
    to: kind::DataPort,
    shared: &Shared,
) -> Result<Box<dyn Side>, TestError> {
    let interrupt = &shared.interrupt;
    let mut probe = HostProbe::for_peer(to.addr.ip());
    let refused = |conn: &mut Conn, message: String| conn.refuse(PeerError::Refused { message });
    if let Err(e) = kind::hold_cpu_latency(&mut probe, spec).and_then(|()| {
        kind::hold_stamps(&mut probe, spec, &shared.cfg.stamping, "the client agent's")
    }) {
        return Err(refused(conn, e.to_string()));
    }
    if let Err(e) = kind.prepare(spec, to.addr, &probe) {
        return Err(refused(conn, e.to_string()));
    }
    let opened = match kind.open_client(spec, to) {
        Ok(o) => o,
        Err(e) => return Err(refused(conn, format!("client part, to {}: {e}", to.addr))),
    };
    conn.session.ready(0, 0, Instant::now())?;
    loop {
        conn.link.send(&mut conn.session)?;
        if interrupt.is_set() {
            return Err(TestError::ShuttingDown);
        }
        conn.link.step(&mut conn.session, None, None)?;
        if let Some(AgentEvent::Start) = conn.session.poll_event() {
            return Ok(opened.start(probe)?);
        }
    }
}

/// Drives a started side until `Stop`, drains it and sends its results, with `notes` (what
/// the agent changed of the spec). A client part says when it has drained, as the
/// controller's own side would decide it.
pub fn run_started(
    conn: &mut Conn,
    mut side: Box<dyn Side>,
    interrupt: &Interrupt,
    role: Role,
    notes: Vec<String>,
) -> Result<sonde_results::SideResult, TestError> {
    let mut end = AgentEnd {
        session: &mut conn.session,
        say_drained: role == Role::Client,
    };
    match drive(&mut conn.link, &mut end, side.as_mut(), interrupt) {
        Ok(()) => {}
        Err(Cut::Interrupted) => {
            return Err(conn.refuse(PeerError::Aborted {
                message: "the agent is shutting down".into(),
            }))
        }
        Err(Cut::Write(e)) => return Err(e.into()),
        Err(Cut::Session(e)) => return Err(TestError::Lost(e.to_string())),
        Err(Cut::Local(why)) => return Err(TestError::Lost(why)),
    }
    // The controller's window ends a little before ours (it started first): what our last
    // interval measured so far is sent rather than lost. A client part ends as a
    // controller's side does, with its window.
    if role == Role::Server {
        if let Some(sample) = side.cut_interval() {
            conn.session.send_interval(sample)?;
        }
    }
    side.finish_senders();
    let until = Instant::now() + DRAIN;
    while !side.all_done() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut result = side.into_result(false);
    result.notes.extend(notes);
    conn.session.send_results(result.clone())?;
    conn.link.send(&mut conn.session)?;
    Ok(result)
}

/// The control loop's agent end: sends each interval (and, for a client part, that it
/// drained), ends at `Stop`.
struct AgentEnd<'a> {
    session: &'a mut AgentSession,
    say_drained: bool,
}

impl Party for AgentEnd<'_> {
    type S = AgentSession;

    fn session(&mut self) -> &mut AgentSession {
        self.session
    }

    fn on_sample(&mut self, sample: IntervalSample) -> Result<(), Cut> {
        self.session.send_interval(sample).map_err(Cut::Session)
    }

    fn on_turn(&mut self, side: &mut dyn Side, _now: Instant) -> Result<(), Cut> {
        if self.say_drained && side.is_draining() && side.all_done() {
            self.session.send_drained().map_err(Cut::Session)?;
            self.say_drained = false;
        }
        Ok(())
    }

    fn on_events(&mut self) -> Flow {
        match self.session.poll_event() {
            Some(AgentEvent::Stop) => Flow::Done,
            _ => Flow::Go,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::PpsSpec;

    #[test]
    fn a_pps_spec_asking_the_agent_to_send_is_refused_by_name() {
        let pps = |reverse, bidir| {
            TestSpec::Pps(PpsSpec {
                reverse,
                bidir,
                ..PpsSpec::default()
            })
        };
        assert_eq!(one_way(&pps(true, false)).unwrap_err().flag, "-R");
        let e = one_way(&pps(false, true)).unwrap_err();
        assert_eq!(e.flag, "--bidir");
        assert!(e.reason.contains("--iperf3"), "{}", e.reason);
        assert!(one_way(&pps(false, false)).is_ok());
    }
}
