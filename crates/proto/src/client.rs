//! The controller's side of the control protocol.
//!
//! ```text
//! AwaitWelcome --Welcome--> AwaitAccepted --Accepted--> AwaitReady --Ready--> Ready --start()--> Running
//! Running --stop()--> AwaitResults --Results--> Done
//! AwaitAccepted --Accepted--> AwaitStamp --StampDone--> Done     (with_stamp_reflector)
//! ```
//! With a key the controller checks the agent's proof in `Welcome` before it proves the key
//! itself (`Auth`), and refuses an agent that asks for no key; every frame after `Auth` is
//! sealed. Any state: `Error` from the agent, end of stream, a deadline passed or an unexpected
//! message moves to `Failed` with a typed error.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sonde_results::{Document, IntervalSample, Role, SideResult, TestSpec};

use crate::auth::{Key, Prover, CHALLENGE_BYTES};
use crate::bounds;
use crate::error::{PeerError, ProtoError};
use crate::grant::Grant;
use crate::labels::{self, Labels};
use crate::message::{
    Message, ThirdParty, Timeouts, MAGIC, PROTOCOL_VERSION, STAMP_SENDER, STAMP_SENDER_KEY,
    THIRD_PARTY,
};
use crate::seal::{Opener, Sealer};
use crate::session::{Machine, Wire};
use crate::ticket::Ticket;

#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// The agent accepted us (its `Accepted`); its identity and labels, for the record.
    Welcome {
        software: String,
        command: String,
        /// The agent's own labels, cut to the rules of [`crate::labels`].
        labels: Labels,
        /// What was dropped of the labels the agent announced, and why.
        label_note: Option<String>,
    },
    Ready {
        data_port: u16,
        cookie: u64,
        /// Serving part of a third-party test: what the client agent needs to send.
        grant: Option<Grant>,
    },
    Interval(IntervalSample),
    /// A client-part agent's side has drained (third-party tests).
    Drained,
    Results(Box<SideResult>),
    /// The agent's STAMP run toward an agent-less reflector (`with_stamp_reflector`).
    Stamp(Box<Document>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitWelcome,
    AwaitAccepted,
    AwaitReady,
    Ready,
    Running,
    AwaitResults,
    AwaitStamp,
    Done,
    Failed,
}

impl State {
    fn doing(self) -> &'static str {
        match self {
            State::AwaitWelcome => "waiting for the agent's Welcome",
            State::AwaitAccepted => "waiting for the agent to accept the key",
            State::AwaitReady => "waiting for the agent to get ready",
            State::Ready => "waiting to start",
            State::Running => "running the test",
            State::AwaitResults => "waiting for the agent's results",
            State::AwaitStamp => "waiting for the agent's STAMP run",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

pub struct ClientSession {
    state: State,
    spec: TestSpec,
    key: Option<Key>,
    third_party: Option<ThirdParty>,
    timeouts: Timeouts,
    wire: Wire<ClientEvent>,
    /// This controller's nonce, sent in `Hello`.
    nonce: [u8; CHALLENGE_BYTES],
    software: String,
    command: String,
    /// The agent's software from `Welcome`.
    agent_software: String,
    /// The agent's address as dialled, sent in `Hello` and bound into both proofs.
    agent: String,
    /// `Interval` frames taken so far: [`crate::bounds`] caps them.
    intervals_seen: u64,
    /// A STAMP run from the agent to this agent-less reflector instead of a test.
    stamp_reflector: Option<SocketAddr>,
    /// Whether an authenticated STAMP run is asked only of an agent announcing
    /// [`STAMP_SENDER_KEY`] (always, but for a test playing a controller that does not).
    stamp_key_check: bool,
    /// This controller's wall-clock time (ms since the epoch) for `Hello`'s ticket; none,
    /// no ticket.
    unix_ms: Option<u64>,
    /// When `start()` said Start: no sample is taken before its interval began.
    started: Option<Instant>,
    /// The bytes of the samples taken so far ([`crate::bounds::retained_bytes`]).
    retained: u64,
    /// A partial sample was taken (one may come before its interval's time).
    partial_seen: bool,
}

impl ClientSession {
    /// Queues `Hello`; the spec is sent once the agent's version is known to match and, with
    /// a key, each side has proven it. Give it a fresh nonce with `with_nonce`.
    pub fn new(
        spec: TestSpec,
        software: &str,
        command: &str,
        timeouts: Timeouts,
        now: Instant,
    ) -> Self {
        let mut s = ClientSession {
            state: State::AwaitWelcome,
            spec,
            key: None,
            third_party: None,
            timeouts,
            wire: Wire::new(Some(now + timeouts.handshake)),
            nonce: [0; CHALLENGE_BYTES],
            software: software.into(),
            command: command.into(),
            agent_software: String::new(),
            agent: String::new(),
            intervals_seen: 0,
            stamp_reflector: None,
            stamp_key_check: true,
            unix_ms: None,
            started: None,
            retained: 0,
            partial_seen: false,
        };
        s.queue_hello();
        s
    }

    /// This controller's half of the handshake: fresh random bytes from the caller (the
    /// `Hello` queued by `new` is replaced).
    pub fn with_nonce(mut self, nonce: [u8; CHALLENGE_BYTES]) -> Self {
        self.nonce = nonce;
        self.wire.out.clear();
        self.queue_hello();
        self
    }

    /// The agent's address as this controller dialled it (the connected socket's peer):
    /// the agent refuses a `Hello` for another address, and both proofs name it, so a
    /// relay cannot hand this session to another agent of the fleet.
    pub fn dialling(mut self, agent: std::net::IpAddr) -> Self {
        self.agent = agent.to_canonical().to_string();
        self.wire.out.clear();
        self.queue_hello();
        self
    }

    fn queue_hello(&mut self) {
        let ticket = match (&self.key, self.unix_ms) {
            (Some(key), Some(ms)) => Some(Ticket::new(key, &self.nonce, &self.agent, ms)),
            _ => None,
        };
        self.queue(&Message::Hello {
            magic: MAGIC.into(),
            version: PROTOCOL_VERSION,
            software: self.software.clone(),
            nonce: hex::encode(self.nonce),
            agent: self.agent.clone(),
            ticket,
        });
    }

    /// Proves `key` to the agent, and requires the agent to prove it first.
    pub fn with_key(mut self, key: Option<Key>) -> Self {
        self.key = key;
        self.wire.out.clear();
        self.queue_hello();
        self
    }

    /// With a key, `Hello` carries a ticket made at `unix_ms` (this host's wall clock, ms
    /// since the epoch): the agent's places kept for key holders, whoever holds the others
    /// ([`crate::ticket`]).
    pub fn with_ticket_at(mut self, unix_ms: u64) -> Self {
        self.unix_ms = Some(unix_ms);
        self.wire.out.clear();
        self.queue_hello();
        self
    }

    /// Gives the agent its part in a test between two agents; it must announce
    /// [`THIRD_PARTY`].
    pub fn with_third_party(mut self, part: ThirdParty) -> Self {
        self.third_party = Some(part);
        self
    }

    /// Asks the agent, which must announce [`STAMP_SENDER`], to run the spec (a STAMP
    /// spec) toward `reflector` and send back its document, instead of a test.
    pub fn with_stamp_reflector(mut self, reflector: SocketAddr) -> Self {
        self.stamp_reflector = Some(reflector);
        self
    }

    /// Asks for an authenticated STAMP run whatever the agent announced: for a test of
    /// the agent's own refusal, playing a controller that skips this check.
    #[doc(hidden)]
    pub fn without_stamp_key_check(mut self) -> Self {
        self.stamp_key_check = false;
        self
    }

    fn queue(&mut self, msg: &Message) {
        // Our own messages are small and well-formed; failing to encode one is a bug.
        self.wire.send(msg).expect("encoding a controller message");
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn liveness(&self, spec_interval: Duration) -> Duration {
        spec_interval * 2 + self.timeouts.liveness
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.spec.timing().interval_ms)
    }

    /// Data connections are open: tell the agent to start its clock.
    pub fn start(&mut self, now: Instant) -> Result<(), ProtoError> {
        self.allow(self.state == State::Ready, "start")?;
        self.queue(&Message::Start);
        self.state = State::Running;
        self.started = Some(now);
        // The agent is silent through warm-up; its first sample comes one interval later.
        self.wire.deadline = Some(
            now + Duration::from_millis(self.spec.timing().warmup_ms)
                + self.liveness(self.interval()),
        );
        Ok(())
    }

    /// Our part is over: ask for the agent's results.
    pub fn stop(&mut self, now: Instant) -> Result<(), ProtoError> {
        self.allow(self.state == State::Running, "stop")?;
        self.queue(&Message::Stop);
        self.state = State::AwaitResults;
        self.wire.deadline = Some(now + self.timeouts.results);
        Ok(())
    }

    fn on_welcome(
        &mut self,
        magic: String,
        version: u32,
        software: String,
        challenge: Option<String>,
        proof: Option<String>,
        now: Instant,
    ) -> Result<(), ProtoError> {
        if magic != MAGIC {
            return self.fail(ProtoError::BadMagic);
        }
        if version != PROTOCOL_VERSION {
            return self.fail(ProtoError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        self.agent_software = software;
        self.state = State::AwaitAccepted;
        self.wire.deadline = Some(now + self.timeouts.handshake);
        match (challenge, &self.key) {
            (None, None) => Ok(()),
            (None, Some(_)) => self.fail(ProtoError::AgentWithoutKey),
            (Some(_), None) => self.fail(ProtoError::Peer(PeerError::AuthRequired)),
            (Some(c), Some(key)) => {
                let key = key.clone();
                self.prove(&key, &c, proof.as_deref().unwrap_or(""))
            }
        }
    }

    /// Checks the agent's proof, then proves the key and seals the session.
    fn prove(&mut self, key: &Key, challenge: &str, proof: &str) -> Result<(), ProtoError> {
        let agent_nonce = match hex::decode(challenge) {
            Ok(n) if n.len() == CHALLENGE_BYTES => n,
            _ => {
                return self.fail(ProtoError::Malformed(
                    "the agent's nonce is not 32 bytes of hex".into(),
                ))
            }
        };
        let ours = self.nonce;
        let nonces = (&ours[..], &agent_nonce[..]);
        let proven =
            hex::decode(proof).is_ok_and(|p| key.verify(Prover::Agent, nonces, &self.agent, &p));
        if !proven {
            return self.fail(ProtoError::AgentProof {
                agent: self.agent.clone(),
            });
        }
        let mac = hex::encode(key.prove(Prover::Controller, nonces, &self.agent));
        self.queue(&Message::Auth { mac });
        let keys = key.session_keys(&ours, &agent_nonce);
        self.wire
            .seal(Sealer::new(keys.to_agent), Opener::new(keys.to_controller));
        Ok(())
    }

    /// The agent accepted us: if it runs the test, send it.
    fn on_accepted(
        &mut self,
        command: String,
        capabilities: Vec<String>,
        labels: Labels,
        now: Instant,
    ) -> Result<(), ProtoError> {
        if let Some(reflector) = self.stamp_reflector {
            return self.ask_stamp(reflector, &capabilities, (command, labels), now);
        }
        let test = self.spec.capability();
        if !capabilities.contains(&test) {
            return self.fail(ProtoError::Peer(PeerError::Unsupported { test }));
        }
        if self.third_party.is_some() && !capabilities.iter().any(|c| c == THIRD_PARTY) {
            return self.fail(ProtoError::Peer(PeerError::Unsupported {
                test: THIRD_PARTY.into(),
            }));
        }
        self.welcome(command, labels);
        let mut spec = self.spec.clone();
        // An engine chosen by default that the agent does not run (an older agent, or a
        // host without it): the agent runs the kernel engine, and never sees the word.
        if spec.execution().engine_auto && !capabilities.contains(&spec.engine_capability()) {
            spec.execution_mut().engine = sonde_results::Engine::Kernel;
        }
        let setup = Message::Setup {
            spec,
            third_party: self.third_party.clone(),
            command: self.command.clone(),
        };
        self.queue(&setup);
        self.state = State::AwaitReady;
        self.wire.deadline = Some(now + self.timeouts.setup);
        Ok(())
    }
}

impl ClientSession {
    /// The agent's welcome as an event. The agent is untrusted: a rogue one's thousands
    /// of labels or megabyte values must not reach the document or the metrics.
    fn welcome(&mut self, command: String, labels: Labels) {
        let (labels, label_note) = labels::bound(labels);
        self.wire.events.push_back(ClientEvent::Welcome {
            software: std::mem::take(&mut self.agent_software),
            command,
            labels,
            label_note,
        });
    }

    /// Sends `Stamp` to an agent that announced it runs STAMP, and waits for its
    /// document as long as the spec sends and awaits answers, and a results' timeout.
    fn ask_stamp(
        &mut self,
        reflector: SocketAddr,
        capabilities: &[String],
        (command, labels): (String, Labels),
        now: Instant,
    ) -> Result<(), ProtoError> {
        let TestSpec::Stamp(spec) = &self.spec else {
            return self.fail(ProtoError::Malformed(
                "a STAMP run needs a STAMP spec".into(),
            ));
        };
        if !capabilities.iter().any(|c| c == STAMP_SENDER) {
            return self.fail(ProtoError::Peer(PeerError::Unsupported {
                test: STAMP_SENDER.into(),
            }));
        }
        if spec.authenticated
            && self.stamp_key_check
            && !capabilities.iter().any(|c| c == STAMP_SENDER_KEY)
        {
            return self.fail(ProtoError::Peer(PeerError::Refused {
                message: "authenticated STAMP from this agent needs its operator's key for the reflectors (sonde serve --stamp-sender-key-file): it holds none".into(),
            }));
        }
        let length = Duration::from_millis(spec.timing.total_ms().saturating_add(spec.timeout_ms));
        let stamp = Message::Stamp {
            spec: spec.clone(),
            reflector,
            command: self.command.clone(),
        };
        self.welcome(command, labels);
        self.queue(&stamp);
        self.state = State::AwaitStamp;
        self.wire.deadline = Some(now + self.timeouts.setup + length + self.timeouts.results);
        Ok(())
    }

    /// The agent's STAMP document, if it is one of the run asked for: a STAMP run to our
    /// reflector, with no more intervals than the spec has.
    fn on_stamp_done(&mut self, doc: Box<Document>) -> Result<(), ProtoError> {
        let reflector = self.stamp_reflector.map(|r| r.to_string());
        let most = bounds::most_intervals(&self.spec) as usize;
        let why = match doc.end.stamp() {
            None => Some(bounds::Excess::NotStamp),
            Some(s) if Some(&s.reflector) != reflector.as_ref() => {
                Some(bounds::Excess::OtherReflector(s.reflector.clone()))
            }
            Some(_) if doc.intervals.len() > most => Some(bounds::Excess::StampIntervals {
                intervals: doc.intervals.len(),
                most,
            }),
            Some(_) => None,
        };
        if let Some(why) = why {
            return self.fail(ProtoError::Excess(why));
        }
        self.wire.events.push_back(ClientEvent::Stamp(doc));
        self.state = State::Done;
        self.wire.deadline = None;
        Ok(())
    }

    /// Keeps a sample within the spec's bounds; one beyond them fails the session, so a
    /// rogue agent cannot grow the controller's memory past what the test needs.
    fn on_interval(&mut self, sample: IntervalSample, now: Instant) -> Result<(), ProtoError> {
        let role = match self.third_party {
            Some(ThirdParty::Client { .. }) => Role::Client,
            _ => Role::Server,
        };
        let at = bounds::Arrival {
            seen: self.intervals_seen,
            retained: self.retained,
            since_start: self
                .started
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s)),
            partial_seen: self.partial_seen,
        };
        match bounds::check_sample(&self.spec, role, at, &sample) {
            Ok(bytes) => self.retained += bytes,
            Err(why) => return self.fail(ProtoError::Excess(why)),
        }
        self.partial_seen |= sample.partial;
        self.intervals_seen += 1;
        let last = u64::from(sample.index) + 1 >= self.spec.timing().intervals();
        self.wire.events.push_back(ClientEvent::Interval(sample));
        if self.state == State::Running {
            // After the window's last sample the agent is silent through cool-down
            // and the drain of every connection, until we send Stop.
            let quiet = if last {
                Duration::from_millis(self.spec.timing().cooldown_ms) + self.timeouts.drain
            } else {
                Duration::ZERO
            };
            self.wire.deadline = Some(now + quiet + self.liveness(self.interval()));
        }
        Ok(())
    }
}

impl Machine for ClientSession {
    type Event = ClientEvent;

    fn wire(&mut self) -> &mut Wire<ClientEvent> {
        &mut self.wire
    }

    fn wire_ref(&self) -> &Wire<ClientEvent> {
        &self.wire
    }

    fn doing(&self) -> &'static str {
        self.state.doing()
    }

    fn settled(&self) -> bool {
        matches!(self.state, State::Done | State::Failed)
    }

    fn reading(&self) -> bool {
        self.state != State::Failed
    }

    fn fail(&mut self, e: ProtoError) -> Result<(), ProtoError> {
        self.state = State::Failed;
        self.wire.deadline = None;
        Err(e)
    }

    fn handle_message(&mut self, msg: Message, now: Instant) -> Result<(), ProtoError> {
        match (self.state, msg) {
            (_, Message::Error { error }) => {
                let e = match error {
                    PeerError::VersionMismatch { agent, .. } => ProtoError::VersionMismatch {
                        ours: PROTOCOL_VERSION,
                        theirs: agent,
                    },
                    other => ProtoError::Peer(other),
                };
                self.fail(e)
            }
            (
                State::AwaitWelcome,
                Message::Welcome {
                    magic,
                    version,
                    software,
                    challenge,
                    proof,
                },
            ) => self.on_welcome(magic, version, software, challenge, proof, now),
            (
                State::AwaitAccepted,
                Message::Accepted {
                    command,
                    capabilities,
                    labels,
                },
            ) => self.on_accepted(command, capabilities, labels, now),
            (
                State::AwaitReady,
                Message::Ready {
                    data_port,
                    cookie,
                    grant,
                },
            ) => {
                self.wire.events.push_back(ClientEvent::Ready {
                    data_port,
                    cookie,
                    grant,
                });
                self.state = State::Ready;
                self.wire.deadline = None;
                Ok(())
            }
            (State::Running | State::AwaitResults, Message::Interval { sample }) => {
                self.on_interval(sample, now)
            }
            (State::Running | State::AwaitResults, Message::Drained) => {
                self.wire.events.push_back(ClientEvent::Drained);
                Ok(())
            }
            (State::AwaitStamp, Message::StampDone { document }) => self.on_stamp_done(document),
            (State::AwaitResults, Message::Results { side }) => {
                self.wire.events.push_back(ClientEvent::Results(side));
                self.state = State::Done;
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
