//! The client's end of an iperf3 control connection: cookie, parameters, then each state
//! the server sends answered in order. The caller opens the data connections on
//! [`ClientEvent::CreateStreams`], starts its workers on [`ClientEvent::Running`], says
//! [`Client::end`] when its duration is over and hands its results on
//! [`ClientEvent::ExchangeResults`]. A wait for the server has a deadline in every phase
//! but the test itself, whose end is the caller's.

use std::time::{Duration, Instant};

use super::frame::encode_json;
use super::machine::{Machine, Rules};
use super::{Cookie, Iperf3Error, Results, State, Test};

#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    /// Open the data connections now, each starting with the cookie.
    CreateStreams,
    /// The server is about to start its side.
    TestStart,
    /// The test runs: start the workers.
    Running,
    /// Send this end's results ([`Client::send_results`]).
    ExchangeResults,
    /// What the server measured.
    ServerResults(Box<Results>),
    /// The test is over; the connection may close.
    Done,
}

/// How far the exchange got (the machine's own; public only as its rules' type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    ParamExchange,
    CreateStreams,
    TestStart,
    TestRunning,
    Running,
    Ended,
    OurResults,
    TheirResults,
    Display,
    ErrorCodes,
    Done,
    Failed,
}

impl Phase {
    fn doing(self) -> &'static str {
        match self {
            Phase::ParamExchange => "waiting for PARAM_EXCHANGE",
            Phase::CreateStreams => "waiting for CREATE_STREAMS",
            Phase::TestStart => "waiting for TEST_START",
            Phase::TestRunning => "waiting for TEST_RUNNING",
            Phase::Running => "the test ran",
            Phase::Ended => "waiting for EXCHANGE_RESULTS",
            Phase::OurResults => "sending our results",
            Phase::TheirResults => "waiting for the server's results",
            Phase::Display => "waiting for DISPLAY_RESULTS",
            Phase::ErrorCodes => "reading SERVER_ERROR's codes",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// The client's end: [`Machine`] under [`ClientRules`].
pub type Client = Machine<ClientRules>;

/// What the client's rules read: its test and its waits.
pub struct ClientRules {
    test: Test,
    /// How long a wait for the server may last.
    wait: Duration,
    /// When the client began: the whole setup (cookie to TEST_RUNNING) has one `wait`
    /// too, so a server dribbling each state just in time cannot hold it a wait a step.
    born: Instant,
    /// iperf3's `authtoken` parameter, for a server that requires authentication.
    authtoken: Option<String>,
}

impl Rules for ClientRules {
    type Event = ClientEvent;
    type Phase = Phase;
    const DONE: Phase = Phase::Done;
    const FAILED: Phase = Phase::Failed;
    const FAILURE_DROPS_QUEUED: bool = true;

    fn doing(phase: Phase) -> &'static str {
        phase.doing()
    }

    /// When the server has been silent too long, or the setup has lasted too long; none
    /// while the test runs.
    fn deadline(&self, phase: Phase, since: Instant) -> Option<Instant> {
        match phase {
            Phase::Running | Phase::OurResults | Phase::Done | Phase::Failed => None,
            Phase::ParamExchange | Phase::CreateStreams | Phase::TestStart | Phase::TestRunning => {
                Some((since + self.wait).min(self.born + self.wait))
            }
            _ => Some(since + self.wait),
        }
    }

    fn wait(&self) -> Duration {
        self.wait
    }

    fn may_close(phase: Phase) -> bool {
        phase == Phase::Done
    }

    fn step(m: &mut Client, now: Instant) -> Result<bool, Iperf3Error> {
        m.step(now)
    }

    /// SERVER_ERROR, its error number and the close, without the errno: what iperf3's
    /// server sends when it refuses a test's authentication (`IEAUTHTEST`), and its own
    /// client reads the error number alone.
    fn closed(m: &mut Client) -> Option<Iperf3Error> {
        if m.phase != Phase::ErrorCodes {
            return None;
        }
        let code = m.reader.take(4)?;
        let code = i32::from_be_bytes([code[0], code[1], code[2], code[3]]);
        Some(Iperf3Error::ServerError { code, errno: 0 })
    }
}

impl Client {
    /// A client for `test` whose cookie is queued; `wait` bounds every wait for the server.
    pub fn new(cookie: Cookie, test: Test, now: Instant, wait: Duration) -> Client {
        let rules = ClientRules {
            test,
            wait,
            born: now,
            authtoken: None,
        };
        Machine::with(rules, Phase::ParamExchange, vec![cookie.0.to_vec()], now)
    }

    /// This client proves itself with `token` ([`super::auth`]'s, encrypted and encoded),
    /// sent with the parameters.
    pub fn with_authtoken(mut self, token: Option<String>) -> Client {
        self.rules.authtoken = token;
        self
    }

    /// The test's duration is over: TEST_END.
    pub fn end(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::Running, "end the test")?;
        self.out.push_back(vec![State::TestEnd.byte()]);
        self.enter(Phase::Ended, now);
        Ok(())
    }

    /// This end's results, after [`ClientEvent::ExchangeResults`].
    pub fn send_results(&mut self, results: &Results, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::OurResults, "send results")?;
        self.out.push_back(encode_json(results));
        self.enter(Phase::TheirResults, now);
        Ok(())
    }

    /// One message taken, if a whole one is here.
    fn step(&mut self, now: Instant) -> Result<bool, Iperf3Error> {
        match self.phase {
            Phase::ErrorCodes => {
                let Some(codes) = self.reader.take(8) else {
                    return Ok(false);
                };
                let code = i32::from_be_bytes([codes[0], codes[1], codes[2], codes[3]]);
                let errno = i32::from_be_bytes([codes[4], codes[5], codes[6], codes[7]]);
                self.fail(Iperf3Error::ServerError { code, errno })?;
                Ok(false)
            }
            Phase::TheirResults => {
                let Some(r) = self.results()? else {
                    return Ok(false);
                };
                self.events
                    .push_back(ClientEvent::ServerResults(Box::new(r)));
                self.enter(Phase::Display, now);
                Ok(true)
            }
            Phase::Done => match self.reader.is_empty() {
                true => Ok(false),
                false => self.fail(Iperf3Error::Trailing),
            },
            Phase::Running | Phase::OurResults => {
                // Only an ending state may come now.
                let Some(b) = self.reader.byte() else {
                    return Ok(false);
                };
                self.ending(b)?;
                Ok(false)
            }
            _ => {
                let Some(b) = self.reader.byte() else {
                    return Ok(false);
                };
                self.state(b, now)?;
                Ok(true)
            }
        }
    }

    fn state(&mut self, b: u8, now: Instant) -> Result<(), Iperf3Error> {
        let expected = match self.phase {
            Phase::ParamExchange => State::ParamExchange,
            Phase::CreateStreams => State::CreateStreams,
            Phase::TestStart => State::TestStart,
            Phase::TestRunning => State::TestRunning,
            Phase::Ended => State::ExchangeResults,
            Phase::Display => State::DisplayResults,
            _ => return self.ending(b),
        };
        if State::from_byte(b) != Some(expected) {
            return self.ending(b);
        }
        let (next, event) = match expected {
            State::ParamExchange => {
                let params = super::Params {
                    authtoken: self.rules.authtoken.clone(),
                    ..self.rules.test.params()
                };
                self.out.push_back(encode_json(&params));
                (Phase::CreateStreams, None)
            }
            State::CreateStreams => (Phase::TestStart, Some(ClientEvent::CreateStreams)),
            State::TestStart => (Phase::TestRunning, Some(ClientEvent::TestStart)),
            State::TestRunning => (Phase::Running, Some(ClientEvent::Running)),
            State::ExchangeResults => (Phase::OurResults, Some(ClientEvent::ExchangeResults)),
            _ => {
                self.out.push_back(vec![State::IperfDone.byte()]);
                (Phase::Done, Some(ClientEvent::Done))
            }
        };
        self.events.extend(event);
        self.enter(next, now);
        Ok(())
    }

    /// A state out of turn: the server's refusals and ends, or a protocol error.
    fn ending(&mut self, b: u8) -> Result<(), Iperf3Error> {
        match State::from_byte(b) {
            Some(State::AccessDenied) => self.fail(Iperf3Error::AccessDenied),
            Some(State::ServerTerminate) => self.fail(Iperf3Error::ServerTerminated),
            Some(State::ServerError) => {
                self.phase = Phase::ErrorCodes;
                Ok(())
            }
            _ => self.fail(Iperf3Error::UnexpectedState {
                byte: b as i8,
                doing: self.phase.doing(),
            }),
        }
    }
}
