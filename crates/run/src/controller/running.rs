//! The controller's end of a running test: the handshake to `Ready`, `Start`, the shared
//! control loop, the live display of both sides' intervals, and the document at the end.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sonde_proto::{ClientEvent, ClientSession, Labels, Session};
use sonde_results::document::Inputs;
use sonde_results::{Document, IntervalSample, SideResult, TestSpec};

use super::{now_rfc3339, ControllerError, LiveInterval, SOFTWARE};
use crate::control::Link;
use crate::drive::{drive, Cut, Flow, Party};
use crate::side::Side;
use crate::signals::Interrupt;

/// After the planned end, how long receivers may take to see every FIN.
const DRAIN: Duration = Duration::from_secs(3);

/// Pairs the two sides' interval samples and hands each pair to the display once.
#[derive(Default)]
struct Pairing {
    client: Vec<IntervalSample>,
    server: Vec<IntervalSample>,
    shown: usize,
}

impl Pairing {
    fn show(&mut self, live: &mut dyn FnMut(LiveInterval<'_>), force: bool) {
        loop {
            let i = self.shown;
            let (c, s) = (self.client.get(i), self.server.get(i));
            // Wait for the agent's sample unless ours has already moved on (agent late or gone).
            let ready = (c.is_some() && s.is_some())
                || (c.is_some() && (force || self.client.len() > i + 1));
            if !ready {
                return;
            }
            live(LiveInterval {
                client: c,
                server: s,
            });
            self.shown += 1;
        }
    }
}

/// What the document records about the run besides the measurements.
pub struct Record<'a> {
    pub spec: &'a TestSpec,
    pub command: &'a str,
    pub started_at: String,
    /// A test between two agents: the one that ran the client side.
    pub client_agent: Option<sonde_results::document::ClientAgent>,
    /// A fleet's run: its pair, as the fleet file names it.
    pub fleet: Option<sonde_results::document::FleetPair>,
    /// What the test's kind measured before it, for its own section (`Kind::prelude`).
    pub prelude: Option<sonde_results::document::Prelude>,
}

/// What a handshake learnt: the agent's command line and labels, its data port, the cookie
/// and (a serving part of a third-party test) the grant for the client agent.
pub struct Handshake {
    pub command: Option<String>,
    /// The agent's own labels, cut to the rules by the session.
    pub labels: Labels,
    /// What the session dropped of the labels the agent announced.
    pub label_note: Option<String>,
    pub data_port: u16,
    pub cookie: u64,
    pub grant: Option<sonde_proto::Grant>,
}

/// One turn of the control link before the test: what `session` has to say sent, then
/// what the agent said read (unless interrupted).
pub fn turn(
    link: &mut Link,
    session: &mut ClientSession,
    addr: SocketAddr,
    interrupt: &Interrupt,
) -> Result<(), ControllerError> {
    link.send(session)
        .map_err(|source| ControllerError::Io { addr, source })?;
    if interrupt.is_set() {
        return Err(ControllerError::Interrupted);
    }
    link.step(session, None, None)
        .map_err(|source| ControllerError::Protocol { addr, source })?;
    Ok(())
}

/// Hello to Ready over `link`.
pub fn handshake(
    link: &mut Link,
    session: &mut ClientSession,
    addr: SocketAddr,
    interrupt: &Interrupt,
) -> Result<Handshake, ControllerError> {
    let (mut command, mut labels, mut label_note) = (None, Labels::new(), None);
    loop {
        turn(link, session, addr, interrupt)?;
        while let Some(ev) = session.poll_event() {
            match ev {
                ClientEvent::Welcome {
                    command: c,
                    labels: l,
                    label_note: n,
                    ..
                } => (command, labels, label_note) = (Some(c), l, n),
                ClientEvent::Ready {
                    data_port,
                    cookie,
                    grant,
                } => {
                    return Ok(Handshake {
                        command,
                        labels,
                        label_note,
                        data_port,
                        cookie,
                        grant,
                    })
                }
                _ => {}
            }
        }
    }
}

/// The controller's end of a test: its session, what the agent sent, and the display.
pub struct Running<'a> {
    session: ClientSession,
    addr: SocketAddr,
    pairing: Pairing,
    live: &'a mut dyn FnMut(LiveInterval<'_>),
    server_command: Option<String>,
    server_labels: Labels,
    /// What was dropped of the agent's labels, for its side's notes.
    label_note: Option<String>,
    server_result: Option<SideResult>,
    stop_sent: bool,
    /// Why the test ended early, for the document.
    error: Option<String>,
}

impl<'a> Running<'a> {
    pub fn new(
        session: ClientSession,
        addr: SocketAddr,
        live: &'a mut dyn FnMut(LiveInterval<'_>),
    ) -> Running<'a> {
        Running {
            session,
            addr,
            pairing: Pairing::default(),
            live,
            server_command: None,
            server_labels: Labels::new(),
            label_note: None,
            server_result: None,
            stop_sent: false,
            error: None,
        }
    }

    /// A fresh session in place of the one given (another try at a busy agent).
    pub(super) fn renew(&mut self, session: ClientSession) {
        self.session = session;
    }

    /// Hello to Ready: the agent's data port, the test's cookie and any grant.
    pub fn handshake(
        &mut self,
        link: &mut Link,
        interrupt: &Interrupt,
    ) -> Result<Handshake, ControllerError> {
        let mut h = handshake(link, &mut self.session, self.addr, interrupt)?;
        self.server_command = h.command.take();
        self.server_labels = std::mem::take(&mut h.labels);
        self.label_note = h.label_note.take();
        Ok(h)
    }

    /// Sends `Start`: the data endpoints are open, the workers start next.
    pub fn start(&mut self, link: &mut Link) -> Result<(), ControllerError> {
        let addr = self.addr;
        self.session
            .start(Instant::now())
            .map_err(|source| ControllerError::Protocol { addr, source })?;
        link.send(&mut self.session)
            .map_err(|source| ControllerError::Io { addr, source })
    }

    /// Drives the started `side` to the agent's results, then builds the document from
    /// both sides, partial if the test was cut.
    pub fn conclude(
        mut self,
        mut link: Link,
        mut side: Box<dyn Side>,
        interrupt: &Interrupt,
        record: Record<'_>,
    ) -> Document {
        if let Err(cut) = drive(&mut link, &mut self, side.as_mut(), interrupt) {
            let addr = self.addr;
            self.error.get_or_insert_with(|| match cut {
                Cut::Interrupted => "interrupted (Ctrl-C)".into(),
                Cut::Write(e) => format!("control connection: {e}"),
                Cut::Session(e) => format!("agent at {addr}: {e}"),
                Cut::Local(why) => why,
            });
        }
        self.pairing.show(self.live, true);
        drop(link);
        let client = side.into_result(self.error.is_some());
        if let (Some(server), Some(note)) = (self.server_result.as_mut(), self.label_note) {
            server.notes.push(note);
        }
        let inputs = Inputs {
            spec: record.spec,
            command: record.command.to_string(),
            server_command: self.server_command,
            server_address: self.addr.to_string(),
            started_at: record.started_at,
            software: SOFTWARE.into(),
            client: &client,
            server: self.server_result.as_ref(),
            client_intervals: &self.pairing.client,
            server_intervals: &self.pairing.server,
            error: self.error,
            client_agent: record.client_agent,
            finished_at: Some(now_rfc3339()),
            server_labels: self.server_labels,
            fleet: record.fleet,
            prelude: record.prelude,
        };
        Document::assemble(inputs, sonde_results::limit::judge)
    }
}

impl Party for Running<'_> {
    type S = ClientSession;

    fn session(&mut self) -> &mut ClientSession {
        &mut self.session
    }

    fn on_sample(&mut self, sample: IntervalSample) -> Result<(), Cut> {
        self.pairing.client.push(sample);
        self.pairing.show(self.live, false);
        Ok(())
    }

    /// Says stop once this side's receivers have drained, or when they are overdue.
    fn on_turn(&mut self, side: &mut dyn Side, now: Instant) -> Result<(), Cut> {
        if self.stop_sent {
            return Ok(());
        }
        if let Some(fault) = side.fault() {
            self.error.get_or_insert(fault);
        }
        let drained = side.is_draining() && side.all_done();
        let overdue = now > side.planned_end() + DRAIN;
        if drained || overdue {
            if overdue && !drained {
                self.error =
                    Some("receivers did not see the end of every connection in time".into());
            }
            side.finish_senders();
            self.session
                .stop(now)
                .map_err(|e| Cut::Local(e.to_string()))?;
            self.stop_sent = true;
        }
        Ok(())
    }

    fn on_events(&mut self) -> Flow {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                ClientEvent::Interval(s) => self.pairing.server.push(s),
                ClientEvent::Results(r) => self.server_result = Some(*r),
                _ => {}
            }
        }
        self.pairing.show(self.live, false);
        if self.session.is_done() {
            Flow::Done
        } else {
            Flow::Go
        }
    }
}
