//! The agent's side of the control protocol.
//!
//! ```text
//! AwaitHello --Hello--> [AwaitAuth --Auth-->] AwaitSetup --Setup--> Configuring --ready()--> AwaitStart
//! AwaitStart --Start--> Running --Stop--> Finishing --send_results()--> Done
//! AwaitSetup --Stamp--> Configuring --send_stamp_done()--> Done
//! ```
//! With a key, `Welcome` carries the agent's nonce and proof, and the agent waits for the
//! controller's proof (`Auth`) before it says what it runs and its labels (`Accepted`); every frame after
//! `Auth` is sealed. `refuse()` and `fail()` end any state with an `Error` to the controller. A second
//! controller arriving while a test runs gets a session made by [`AgentSession::busy`].

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use sonde_results::{Document, IntervalSample, SideResult, StampSpec, TestSpec};

use crate::auth::{Key, Prover, CHALLENGE_BYTES};
use crate::error::{PeerError, ProtoError};
use crate::frame::{CONTROLLER_FRAME_BYTES, PRE_AUTH_FRAME_BYTES};
use crate::grant::Grant;
use crate::labels::Labels;
use crate::message::{Message, ThirdParty, Timeouts, MAGIC, PROTOCOL_VERSION};
use crate::seal::{Opener, Sealer};
use crate::session::{Machine, Wire};

/// Longest test the session's deadlines allow for (a spec's own figure is checked by the
/// agent's limits; this only keeps the arithmetic of a hostile one from overflowing).
const MAX_TEST_LENGTH: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// The controller's software, for the agent's log.
    Hello {
        software: String,
    },
    /// Validate and prepare, then call `ready()` or `refuse()`. `third_party`: this
    /// agent's part in a test between two agents.
    Setup {
        spec: Box<TestSpec>,
        third_party: Option<ThirdParty>,
    },
    Start,
    Stop,
    /// Send STAMP to `reflector` (an agent-less reflector) if this agent's operator allows
    /// it, then call `send_stamp_done()` or `refuse()`.
    Stamp {
        spec: Box<StampSpec>,
        reflector: SocketAddr,
        /// The controller's command line, for the log and the document.
        command: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitAuth,
    AwaitSetup,
    Configuring,
    AwaitStart,
    Running,
    Finishing,
    Done,
    Failed,
}

impl State {
    fn doing(self) -> &'static str {
        match self {
            State::AwaitHello => "waiting for the controller's Hello",
            State::AwaitAuth => "waiting for the controller's key",
            State::AwaitSetup => "waiting for the test setup",
            State::Configuring => "preparing the test",
            State::AwaitStart => "waiting for Start",
            State::Running => "running the test",
            State::Finishing => "finishing the test",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

pub struct AgentSession {
    state: State,
    timeouts: Timeouts,
    software: String,
    command: String,
    capabilities: Vec<String>,
    /// This agent's own labels, announced in `Accepted`.
    labels: Labels,
    wire: Wire<AgentEvent>,
    /// Planned length of the running test, for the deadline of `Stop`.
    test_length: Duration,
    /// With a key: the nonce sent in `Welcome`, which `Auth` must prove the key over.
    auth: Option<(Key, [u8; CHALLENGE_BYTES])>,
    /// The controller's nonce from `Hello`.
    controller_nonce: Vec<u8>,
    /// Where this agent is reached: the connection's local address, and addresses a NAT or
    /// relay stands for (`--reached-at`). `None`: any (sessions in memory).
    reached_at: Option<Vec<IpAddr>>,
    /// The agent address the controller dialled (`Hello`), which the proofs are bound to.
    dialled: String,
    /// The controller asked for a STAMP run (`Stamp`), not a test.
    stamp: bool,
}

impl AgentSession {
    pub fn new(
        software: &str,
        command: &str,
        capabilities: &[impl AsRef<str>],
        timeouts: Timeouts,
        now: Instant,
    ) -> Self {
        AgentSession {
            state: State::AwaitHello,
            timeouts,
            software: software.into(),
            command: command.into(),
            capabilities: capabilities.iter().map(|c| c.as_ref().into()).collect(),
            labels: Labels::new(),
            wire: Wire::new(Some(now + timeouts.hello)),
            test_length: Duration::ZERO,
            auth: None,
            controller_nonce: Vec::new(),
            reached_at: None,
            dialled: String::new(),
            stamp: false,
        }
        .reading_at_most(PRE_AUTH_FRAME_BYTES)
    }

    fn reading_at_most(mut self, max: usize) -> Self {
        self.wire.decoder.set_max(max);
        self
    }

    /// Requires the controller to prove `key` over `challenge` (this agent's nonce: fresh
    /// random bytes from the caller) before anything else.
    pub fn require_key(mut self, key: Key, challenge: [u8; CHALLENGE_BYTES]) -> Self {
        self.auth = Some((key, challenge));
        self
    }

    /// Serves only a controller that dialled one of `addresses` (the connection's local
    /// address first): a session a relay hands over from another agent is refused.
    pub fn reached_at(mut self, addresses: Vec<IpAddr>) -> Self {
        self.reached_at = Some(addresses);
        self
    }

    /// Announces `labels` (checked by the caller) to an accepted controller, never before.
    pub fn with_labels(mut self, labels: Labels) -> Self {
        self.labels = labels;
        self
    }

    /// A session that only says "busy" and ends.
    pub fn busy(now: Instant) -> Self {
        let mut s = AgentSession::new("", "", &[""; 0], Timeouts::default(), now);
        s.end_with(PeerError::Busy);
        s
    }

    fn queue(&mut self, msg: &Message) -> Result<(), ProtoError> {
        self.wire.send(msg)
    }

    fn end_with(&mut self, error: PeerError) {
        // Error messages are small; encoding cannot exceed the cap.
        let _ = self.queue(&Message::Error { error });
        self.state = State::Done;
        self.wire.deadline = None;
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    /// The test is prepared: tell the controller where to connect.
    pub fn ready(&mut self, data_port: u16, cookie: u64, now: Instant) -> Result<(), ProtoError> {
        self.ready_granting(data_port, cookie, None, now)
    }

    /// As `ready`, with the grant a client agent needs (serving part of a third-party test).
    pub fn ready_granting(
        &mut self,
        data_port: u16,
        cookie: u64,
        grant: Option<Grant>,
        now: Instant,
    ) -> Result<(), ProtoError> {
        self.allow(
            self.state == State::Configuring && !self.stamp,
            "send Ready",
        )?;
        self.queue(&Message::Ready {
            data_port,
            cookie,
            grant,
        })?;
        self.state = State::AwaitStart;
        self.wire.deadline = Some(now + self.timeouts.setup);
        Ok(())
    }

    /// Refuse the test (invalid spec, limits) and end the session.
    pub fn refuse(&mut self, error: PeerError) {
        self.end_with(error);
    }

    pub fn send_interval(&mut self, sample: IntervalSample) -> Result<(), ProtoError> {
        self.allow(
            matches!(self.state, State::Running | State::Finishing),
            "send an interval",
        )?;
        self.queue(&Message::Interval { sample })
    }

    /// Client part of a third-party test: this side has drained; the controller may stop.
    pub fn send_drained(&mut self) -> Result<(), ProtoError> {
        self.allow(self.state == State::Running, "say drained")?;
        self.queue(&Message::Drained)
    }

    pub fn send_results(&mut self, side: SideResult) -> Result<(), ProtoError> {
        self.allow(self.state == State::Finishing, "send results")?;
        self.queue(&Message::Results {
            side: Box::new(side),
        })?;
        self.state = State::Done;
        Ok(())
    }

    /// The STAMP run asked by `Stamp` is over: its document, and the session ends.
    pub fn send_stamp_done(&mut self, document: Document) -> Result<(), ProtoError> {
        self.allow(
            self.state == State::Configuring && self.stamp,
            "send a STAMP result",
        )?;
        self.queue(&Message::StampDone {
            document: Box::new(document),
        })?;
        self.state = State::Done;
        Ok(())
    }

    fn on_hello(
        &mut self,
        magic: String,
        version: u32,
        software: String,
        (nonce, agent): (String, String),
        now: Instant,
    ) -> Result<(), ProtoError> {
        if magic != MAGIC {
            return self.fail(ProtoError::BadMagic);
        }
        if version != PROTOCOL_VERSION {
            self.end_with(PeerError::VersionMismatch {
                agent: PROTOCOL_VERSION,
                client: version,
            });
            return Err(ProtoError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        self.controller_nonce = match hex::decode(&nonce) {
            Ok(n) if n.len() == CHALLENGE_BYTES => n,
            _ => {
                return self.fail(ProtoError::Malformed(format!(
                    "Hello's nonce must be {CHALLENGE_BYTES} bytes of hex"
                )))
            }
        };
        if let Some(refused) = self.not_me(&agent) {
            self.end_with(refused.clone());
            return Err(ProtoError::Peer(refused));
        }
        self.dialled = agent;
        self.wire.events.push_back(AgentEvent::Hello { software });
        let proof = self.auth.as_ref().map(|(key, mine)| {
            let nonces = (&self.controller_nonce[..], &mine[..]);
            hex::encode(key.prove(Prover::Agent, nonces, &self.dialled))
        });
        let welcome = Message::Welcome {
            magic: MAGIC.into(),
            version: PROTOCOL_VERSION,
            software: self.software.clone(),
            challenge: self.auth.as_ref().map(|(_, c)| hex::encode(c)),
            proof,
        };
        self.queue(&welcome)?;
        self.wire.deadline = Some(now + self.timeouts.handshake);
        if self.auth.is_some() {
            self.state = State::AwaitAuth;
            return Ok(());
        }
        self.accept()
    }

    /// Why `dialled` (from `Hello`) is not this agent, if it is not.
    fn not_me(&self, dialled: &str) -> Option<PeerError> {
        let mine = self.reached_at.as_ref()?;
        let ip = dialled.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
        if ip.is_some_and(|ip| mine.iter().any(|m| m.to_canonical() == ip)) {
            return None;
        }
        let listed: Vec<String> = mine.iter().map(|m| m.to_string()).collect();
        Some(PeerError::Refused {
            message: format!(
                "the controller dialled {dialled:?}, which is not this agent (reached at {}): a relay may have handed its session to the wrong agent; an address a NAT stands for is given with sonde serve --reached-at",
                listed.join(", ")
            ),
        })
    }

    /// The controller's proof of the key; right, the session is sealed from here on.
    fn on_auth(&mut self, mac: String) -> Result<(), ProtoError> {
        let (key, mine) = self.auth.as_ref().expect("AwaitAuth only with a key");
        let theirs = &self.controller_nonce;
        let nonces = (&theirs[..], &mine[..]);
        let ok = hex::decode(&mac)
            .is_ok_and(|m| key.verify(Prover::Controller, nonces, &self.dialled, &m));
        if !ok {
            self.end_with(PeerError::AuthFailed);
            return Err(ProtoError::Peer(PeerError::AuthFailed));
        }
        let keys = key.session_keys(theirs, mine);
        self.wire
            .seal(Sealer::new(keys.to_controller), Opener::new(keys.to_agent));
        self.accept()
    }

    /// Says what this agent runs, and waits for the test.
    fn accept(&mut self) -> Result<(), ProtoError> {
        self.wire.decoder.set_max(CONTROLLER_FRAME_BYTES);
        let accepted = Message::Accepted {
            command: self.command.clone(),
            capabilities: self.capabilities.clone(),
            labels: self.labels.clone(),
        };
        self.queue(&accepted)?;
        self.state = State::AwaitSetup;
        Ok(())
    }
}

impl Machine for AgentSession {
    type Event = AgentEvent;

    fn wire(&mut self) -> &mut Wire<AgentEvent> {
        &mut self.wire
    }

    fn wire_ref(&self) -> &Wire<AgentEvent> {
        &self.wire
    }

    fn doing(&self) -> &'static str {
        self.state.doing()
    }

    fn settled(&self) -> bool {
        self.is_done()
    }

    fn reading(&self) -> bool {
        !self.is_done()
    }

    fn fail(&mut self, e: ProtoError) -> Result<(), ProtoError> {
        self.state = State::Failed;
        self.wire.deadline = None;
        Err(e)
    }

    fn handle_message(&mut self, msg: Message, now: Instant) -> Result<(), ProtoError> {
        match (self.state, msg) {
            (
                State::AwaitHello,
                Message::Hello {
                    magic,
                    version,
                    software,
                    nonce,
                    agent,
                    ..
                },
            ) => self.on_hello(magic, version, software, (nonce, agent), now),
            (State::AwaitAuth, Message::Auth { mac }) => self.on_auth(mac),
            (State::AwaitAuth, Message::Setup { .. }) => {
                self.end_with(PeerError::AuthRequired);
                Err(ProtoError::Peer(PeerError::AuthRequired))
            }
            (
                State::AwaitSetup,
                Message::Setup {
                    spec, third_party, ..
                },
            ) => {
                self.test_length =
                    Duration::from_millis(spec.timing().total_ms()).min(MAX_TEST_LENGTH);
                self.wire.events.push_back(AgentEvent::Setup {
                    spec: Box::new(spec),
                    third_party,
                });
                self.state = State::Configuring;
                self.wire.deadline = None;
                Ok(())
            }
            (
                State::AwaitSetup,
                Message::Stamp {
                    spec,
                    reflector,
                    command,
                },
            ) => {
                self.wire.events.push_back(AgentEvent::Stamp {
                    spec: Box::new(spec),
                    reflector,
                    command,
                });
                self.stamp = true;
                self.state = State::Configuring;
                self.wire.deadline = None;
                Ok(())
            }
            (State::AwaitStart, Message::Start) => {
                self.wire.events.push_back(AgentEvent::Start);
                self.state = State::Running;
                // A controller that vanished without closing must not hold the agent forever.
                self.wire.deadline = Some(now + self.test_length + self.timeouts.results);
                Ok(())
            }
            (State::Running, Message::Stop) => {
                self.wire.events.push_back(AgentEvent::Stop);
                self.state = State::Finishing;
                self.wire.deadline = None;
                Ok(())
            }
            (state, msg) => self.fail(ProtoError::Unexpected {
                state: state.doing(),
                got: msg.name(),
            }),
        }
    }
}
