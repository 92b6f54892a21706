//! The agent's side of the control protocol.
//!
//! ```text
//! AwaitHello --Hello--> AwaitSetup --Setup--> Configuring --ready()--> AwaitStart
//! AwaitStart --Start--> Running --Stop--> Finishing --send_results()--> Done
//! ```
//! `refuse()` and `fail()` end any state with an `Error` to the controller. A second
//! controller arriving while a test runs gets a session made by [`AgentSession::busy`].

use std::time::{Duration, Instant};

use sonde_results::{IntervalSample, SideResult, TestSpec};

use crate::auth::{Key, CHALLENGE_BYTES};
use crate::error::{PeerError, ProtoError};
use crate::frame::encode;
use crate::message::{Message, ThirdParty, Timeouts, MAGIC, PROTOCOL_VERSION};
use crate::session::{Machine, Wire};

#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// The controller's identity, for the agent's log.
    Hello {
        software: String,
        command: String,
    },
    /// Validate and prepare, then call `ready()` or `refuse()`. `third_party`: this
    /// agent's part in a test between two agents.
    Setup {
        spec: Box<TestSpec>,
        third_party: Option<ThirdParty>,
    },
    Start,
    Stop,
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
    wire: Wire<AgentEvent>,
    /// Planned length of the running test, for the deadline of `Stop`.
    test_length: Duration,
    /// With a key: the challenge sent in `Welcome`, which `Auth` must answer.
    auth: Option<(Key, [u8; CHALLENGE_BYTES])>,
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
            wire: Wire::new(Some(now + timeouts.handshake)),
            test_length: Duration::ZERO,
            auth: None,
        }
    }

    /// Requires the controller to answer `challenge` (fresh random bytes from the caller)
    /// with `key` before anything else.
    pub fn require_key(mut self, key: Key, challenge: [u8; CHALLENGE_BYTES]) -> Self {
        self.auth = Some((key, challenge));
        self
    }

    /// A session that only says "busy" and ends.
    pub fn busy(now: Instant) -> Self {
        let mut s = AgentSession::new("", "", &[""; 0], Timeouts::default(), now);
        s.end_with(PeerError::Busy);
        s
    }

    fn queue(&mut self, msg: &Message) -> Result<(), ProtoError> {
        self.wire.out.push_back(encode(msg)?);
        Ok(())
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
        self.allow(self.state == State::Configuring, "send Ready")?;
        self.queue(&Message::Ready { data_port, cookie })?;
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
                    command,
                },
            ) => {
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
                self.wire
                    .events
                    .push_back(AgentEvent::Hello { software, command });
                let welcome = Message::Welcome {
                    magic: MAGIC.into(),
                    version: PROTOCOL_VERSION,
                    software: self.software.clone(),
                    command: self.command.clone(),
                    capabilities: self.capabilities.clone(),
                    challenge: self.auth.as_ref().map(|(_, c)| hex::encode(c)),
                };
                self.queue(&welcome)?;
                self.state = if self.auth.is_some() {
                    State::AwaitAuth
                } else {
                    State::AwaitSetup
                };
                self.wire.deadline = Some(now + self.timeouts.handshake);
                Ok(())
            }
            (State::AwaitAuth, Message::Auth { mac }) => {
                let (key, challenge) = self.auth.as_ref().expect("AwaitAuth only with a key");
                let ok = hex::decode(&mac).is_ok_and(|m| key.verify(challenge, &m));
                if !ok {
                    self.end_with(PeerError::AuthFailed);
                    return Err(ProtoError::Peer(PeerError::AuthFailed));
                }
                self.state = State::AwaitSetup;
                Ok(())
            }
            (State::AwaitAuth, Message::Setup { .. }) => {
                self.end_with(PeerError::AuthRequired);
                Err(ProtoError::Peer(PeerError::AuthRequired))
            }
            (State::AwaitSetup, Message::Setup { spec, third_party }) => {
                self.test_length = Duration::from_millis(spec.timing().total_ms());
                self.wire.events.push_back(AgentEvent::Setup {
                    spec: Box::new(spec),
                    third_party,
                });
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
