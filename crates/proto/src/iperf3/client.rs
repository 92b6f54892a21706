//! The client's end of an iperf3 control connection: cookie, parameters, then each state
//! the server sends answered in order. The caller opens the data connections on
//! [`ClientEvent::CreateStreams`], starts its workers on [`ClientEvent::Running`], says
//! [`Client::end`] when its duration is over and hands its results on
//! [`ClientEvent::ExchangeResults`]. A wait for the server has a deadline in every phase
//! but the test itself, whose end is the caller's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::frame::{encode_json, Reader};
use super::{Cookie, Iperf3Error, Results, State, Test, RESULTS_MAX_BYTES};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
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

pub struct Client {
    reader: Reader,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<ClientEvent>,
    phase: Phase,
    test: Test,
    /// When the current wait for the server began, and how long it may last.
    since: Instant,
    wait: Duration,
    /// When the client began: the whole setup (cookie to TEST_RUNNING) has one `wait`
    /// too, so a server dribbling each state just in time cannot hold it a wait a step.
    born: Instant,
}

impl Client {
    /// A client for `test` whose cookie is queued; `wait` bounds every wait for the server.
    pub fn new(cookie: Cookie, test: Test, now: Instant, wait: Duration) -> Client {
        Client {
            reader: Reader::default(),
            out: VecDeque::from([cookie.0.to_vec()]),
            events: VecDeque::new(),
            phase: Phase::ParamExchange,
            test,
            since: now,
            wait,
            born: now,
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// When the server has been silent too long, or the setup has lasted too long; none
    /// while the test runs.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running | Phase::OurResults | Phase::Done | Phase::Failed => None,
            Phase::ParamExchange | Phase::CreateStreams | Phase::TestStart | Phase::TestRunning => {
                Some((self.since + self.wait).min(self.born + self.wait))
            }
            _ => Some(self.since + self.wait),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        match self.deadline() {
            Some(d) if now >= d => self.fail(Iperf3Error::Timeout {
                doing: self.phase.doing(),
                secs: self.wait.as_secs(),
            }),
            _ => Ok(()),
        }
    }

    pub fn handle_eof(&mut self) -> Result<(), Iperf3Error> {
        match self.phase {
            Phase::Done => Ok(()),
            p => self.fail(Iperf3Error::Closed(p.doing())),
        }
    }

    /// The test's duration is over: TEST_END.
    pub fn end(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        if self.phase != Phase::Running {
            return Err(Iperf3Error::Misuse("end the test"));
        }
        self.out.push_back(vec![State::TestEnd.byte()]);
        self.enter(Phase::Ended, now);
        Ok(())
    }

    /// This end's results, after [`ClientEvent::ExchangeResults`].
    pub fn send_results(&mut self, results: &Results, now: Instant) -> Result<(), Iperf3Error> {
        if self.phase != Phase::OurResults {
            return Err(Iperf3Error::Misuse("send results"));
        }
        self.out.push_back(encode_json(results));
        self.enter(Phase::TheirResults, now);
        Ok(())
    }

    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), Iperf3Error> {
        if self.phase == Phase::Failed {
            return Err(Iperf3Error::Misuse("read after a failure"));
        }
        self.reader.push(bytes);
        while self.step(now)? {}
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
                let r = match self.reader.json::<Results>("results", RESULTS_MAX_BYTES) {
                    Ok(Some(r)) => r,
                    Ok(None) => return Ok(false),
                    Err(e) => return self.fail(e),
                };
                let r = match r.checked() {
                    Ok(r) => r,
                    Err(e) => return self.fail(e),
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
                self.out.push_back(encode_json(&self.test.params()));
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

    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.since = now;
    }

    fn fail<T>(&mut self, e: Iperf3Error) -> Result<T, Iperf3Error> {
        self.phase = Phase::Failed;
        self.out.clear();
        Err(e)
    }
}
