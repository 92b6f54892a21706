//! A test between two agents (`--from A --to B`): the controller connects to both and
//! authenticates to both; B takes the server side as for any controller, told that the
//! data comes from A; A runs the client side against B's data port. On the controller,
//! A's side is a [`RemoteSide`]: the control loop drives it like a local one, so the
//! document is built exactly as for a test the controller is an end of. The controller's
//! own host sends no test traffic.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use sonde_proto::{ClientEvent, ClientSession, Labels, Session, ThirdParty};
use sonde_results::document::ClientAgent;
use sonde_results::{Document, IntervalSample, Role, SideResult, TestSpec};

use super::running::{handshake, Record, Running};
use super::{begin, resolve, session, Begun, ControllerError, LiveInterval, TestRequest};
use crate::control::Link;
use crate::kind::ClientAt;
use crate::side::Side;
use crate::signals::Interrupt;

/// Runs `req` with the agent at `from` as the client side and `req.host` serving.
pub fn run_between(
    req: &TestRequest,
    from: &str,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, ControllerError> {
    let Begun {
        server,
        started_at,
        kind,
        mut spec,
    } = begin(req)?;
    let client = resolve(from, req.port)?;
    // The rest of `prepare` (the sender's own MTU, bypass checks) runs on the client agent.
    kind.fit_address(&mut spec, server);
    let session = |part, at| session(req, &spec, at).with_third_party(part);
    let serving = || {
        let client = client.ip();
        session(ThirdParty::Server { client }, server)
    };
    let mut run = Running::new(serving(), server, live);
    let (mut b_link, h) = super::busy::until_served(server, interrupt, |mut link| {
        run.renew(serving());
        let h = run.handshake(&mut link, interrupt)?;
        Ok((link, h))
    })?;
    let part = ThirdParty::Client {
        server: SocketAddr::new(server.ip(), h.data_port),
        cookie: h.cookie,
        grant: h.grant,
    };
    let mut a = RemoteSide::open(client, || session(part.clone(), client), &spec, interrupt)?;
    run.start(&mut b_link)?;
    a.start()?;
    let client_agent = Some(ClientAgent {
        address: client.to_string(),
        command: a.command.clone(),
        labels: a.labels.clone(),
    });
    let prelude = kind.prelude(&spec, ClientAt::Agent(from));
    Ok(run.conclude(
        b_link,
        Box::new(a),
        interrupt,
        Record {
            spec: &spec,
            command: &req.command,
            started_at,
            client_agent,
            fleet: req.fleet.clone(),
            prelude,
        },
    ))
}

/// The client side of a test, run by another agent and seen through its control
/// connection: its intervals, when it drained, its result.
pub struct RemoteSide {
    addr: SocketAddr,
    link: Link,
    session: ClientSession,
    /// The agent's command line and own labels, for the record.
    command: Option<String>,
    labels: Labels,
    /// What was dropped of the labels it announced, for its side's notes.
    label_note: Option<String>,
    test_length: Duration,
    planned_end: Instant,
    samples: VecDeque<IntervalSample>,
    drained: bool,
    stopped: bool,
    result: Option<SideResult>,
    fault: Option<String>,
}

impl RemoteSide {
    /// Connects, authenticates and sets up the client part, until the agent is `Ready`
    /// (its data connections to the serving agent are open).
    fn open(
        addr: SocketAddr,
        session: impl Fn() -> ClientSession,
        spec: &TestSpec,
        interrupt: &Interrupt,
    ) -> Result<RemoteSide, ControllerError> {
        let (link, session, h) = super::busy::until_served(addr, interrupt, |mut link| {
            let mut session = session();
            let h = handshake(&mut link, &mut session, addr, interrupt)?;
            Ok((link, session, h))
        })?;
        let test_length = Duration::from_millis(spec.timing().total_ms());
        Ok(RemoteSide {
            addr,
            link,
            session,
            command: h.command,
            labels: h.labels,
            label_note: h.label_note,
            test_length,
            planned_end: Instant::now() + test_length,
            samples: VecDeque::new(),
            drained: false,
            stopped: false,
            result: None,
            fault: None,
        })
    }

    /// Says `Start`: the agent starts its side now.
    fn start(&mut self) -> Result<(), ControllerError> {
        let addr = self.addr;
        let now = Instant::now();
        self.session
            .start(now)
            .map_err(|source| ControllerError::Protocol { addr, source })?;
        self.planned_end = now + self.test_length;
        self.link
            .send(&mut self.session)
            .map_err(|source| ControllerError::Io { addr, source })
    }

    /// Feeds the session what arrived, without waiting, and takes its events.
    fn pump(&mut self) {
        while self.fault.is_none() {
            let now = Some(Instant::now());
            if let Err(e) = self.link.step(&mut self.session, now, None) {
                self.fault = Some(format!("client agent at {}: {e}", self.addr));
            }
            let mut any = false;
            while let Some(ev) = self.session.poll_event() {
                any = true;
                match ev {
                    ClientEvent::Interval(s) => self.samples.push_back(s),
                    ClientEvent::Drained => self.drained = true,
                    ClientEvent::Results(r) => self.result = Some(*r),
                    _ => {}
                }
            }
            if !any || self.session.is_done() {
                return;
            }
        }
    }
}

impl Side for RemoteSide {
    fn next_deadline(&self) -> Option<Instant> {
        // Samples already read are handed out one per turn.
        (!self.samples.is_empty()).then(Instant::now)
    }

    fn on_time(&mut self, _now: Instant) -> Option<IntervalSample> {
        self.pump();
        self.samples.pop_front()
    }

    fn is_draining(&self) -> bool {
        self.drained || self.fault.is_some() || Instant::now() >= self.planned_end
    }

    fn all_done(&self) -> bool {
        (self.drained || self.fault.is_some()) && self.samples.is_empty()
    }

    fn planned_end(&self) -> Instant {
        self.planned_end
    }

    fn finish_senders(&mut self) {
        if self.stopped || self.fault.is_some() {
            return;
        }
        self.stopped = true;
        let sent = self
            .session
            .stop(Instant::now())
            .map_err(|e| e.to_string())
            .and_then(|()| self.link.send(&mut self.session).map_err(|e| e.to_string()));
        if let Err(e) = sent {
            self.fault = Some(format!("client agent at {}: {e}", self.addr));
        }
    }

    fn wake_fd(&self) -> Option<RawFd> {
        self.fault.is_none().then(|| self.link.fd())
    }

    fn fault(&self) -> Option<String> {
        self.fault.clone()
    }

    /// Asks for the agent's result (if not yet) and waits for it, as long as the session
    /// allows; a lost agent leaves a side with no figure that says why.
    fn into_result(mut self: Box<Self>, _partial: bool) -> SideResult {
        self.finish_senders();
        while self.result.is_none() && self.fault.is_none() {
            if let Err(e) = self.link.step(&mut self.session, None, None) {
                self.fault = Some(format!("client agent at {}: {e}", self.addr));
            }
            self.pump();
        }
        match self.result.take() {
            Some(mut r) => {
                r.notes.extend(self.label_note.take());
                r
            }
            None => SideResult::missing(
                Role::Client,
                self.fault.take().unwrap_or_else(|| "no result".into()),
            ),
        }
    }
}
