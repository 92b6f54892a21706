//! A test the controller is the client end of: it opens the data connections itself, and
//! hands a test between two agents to [`third_party`].

use std::net::SocketAddr;

use sonde_probe::hostwatch::HostProbe;
use sonde_results::{Document, Role};

use super::running::{Record, Running};
use super::third_party;
use super::{begin, session, Begun, ControllerError, LiveInterval, TestRequest};
use crate::hwstamps::Stamping;
use crate::kind;
use crate::signals::Interrupt;

/// Runs one test against the agent at `req.host` and builds its document. Errors before
/// `Start` are errors; after it, whatever happens, the document holds what was measured.
pub fn run_test(
    req: &TestRequest,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, ControllerError> {
    if let Some(from) = &req.from {
        return third_party::run_between(req, from, interrupt, live);
    }
    let Begun {
        server: addr,
        started_at,
        kind,
        mut spec,
    } = begin(req)?;
    let mut probe = HostProbe::for_peer(addr.ip());
    kind::hold_cpu_latency(&mut probe, &spec)?;
    kind.prepare(&mut spec, addr, &probe)?;
    kind::place(&mut spec, Role::Client);
    // Before the agent is asked for anything: it would wait for us meanwhile.
    let prelude = kind.prelude(&spec, kind::ClientAt::Here);
    let mut run = Running::new(session(req, &spec, addr), addr, live);
    let (mut link, h) = super::busy::until_served(addr, interrupt, |mut link| {
        // --control-dscp: best effort, a control connection is never refused for it.
        let _ = sonde_engine::marks::set_tos_if(link.fd(), spec.execution().marks.control_tos());
        run.renew(session(req, &spec, addr));
        let h = run.handshake(&mut link, interrupt)?;
        Ok((link, h))
    })?;
    let to = kind::DataPort {
        addr: SocketAddr::new(addr.ip(), h.data_port),
        cookie: h.cookie,
    };
    let opened = kind.open_client(&spec, to)?;
    // After the agent's end decided (it refuses by its own name first); an error here
    // closes the control connection, and the agent puts its device back.
    kind::hold_stamps(&mut probe, &spec, &Stamping::here(), "this host's")?;
    run.start(&mut link)?;
    let side = opened
        .start(probe)
        .map_err(|source| ControllerError::Io { addr, source })?;
    Ok(run.conclude(
        link,
        side,
        interrupt,
        Record {
            spec: &spec,
            command: &req.command,
            started_at,
            client_agent: None,
            fleet: req.fleet.clone(),
            prelude,
        },
    ))
}
