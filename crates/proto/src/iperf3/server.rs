//! The server's end of an iperf3 control connection: cookie, parameters, and each state
//! answered in order. The caller decides on [`ServerEvent::Params`] ([`Server::accept`]
//! or [`Server::refuse`]), accepts the data connections, says [`Server::start`], and on
//! [`ServerEvent::TestEnd`] stops its workers and says [`Server::exchange`]. Every wait
//! for the client has a deadline, the test's own included (its duration and a margin):
//! a silent or slow client costs a bounded time, and lengths are checked before any
//! buffering.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::frame::{encode_json, Reader};
use super::{
    Cookie, Iperf3Error, Params, Results, State, Test, COOKIE_BYTES, PARAMS_MAX_BYTES,
    RESULTS_MAX_BYTES,
};

#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The client's cookie: its data connections will carry it.
    Cookie(Cookie),
    /// The test the client asks for: accept or refuse it.
    Params(Box<Test>),
    /// The client says the test is over: stop, then [`Server::exchange`].
    TestEnd,
    /// What the client measured: answer with [`Server::send_results`].
    ClientResults(Box<Results>),
    /// The client has seen the results; the connection may close.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Cookie,
    Params,
    Decide,
    Streams,
    Running,
    Exchange,
    TheirResults,
    OurResults,
    Display,
    Done,
    Failed,
}

impl Phase {
    fn doing(self) -> &'static str {
        match self {
            Phase::Cookie => "waiting for the cookie",
            Phase::Params => "waiting for the parameters",
            Phase::Decide => "deciding on the parameters",
            Phase::Streams => "waiting for the data connections",
            Phase::Running => "the test ran",
            Phase::Exchange => "stopping",
            Phase::TheirResults => "waiting for the client's results",
            Phase::OurResults => "sending our results",
            Phase::Display => "waiting for IPERF_DONE",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

pub struct Server {
    reader: Reader,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<ServerEvent>,
    phase: Phase,
    since: Instant,
    /// How long the current wait may last.
    wait: Duration,
    /// The bound of every wait but the test's.
    step_wait: Duration,
}

impl Server {
    pub fn new(now: Instant, wait: Duration) -> Server {
        Server {
            reader: Reader::default(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            phase: Phase::Cookie,
            since: now,
            wait,
            step_wait: wait,
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// When the client has been silent too long (in the test: the test is overdue).
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Decide | Phase::Exchange | Phase::OurResults | Phase::Done | Phase::Failed => {
                None
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
            // A client may close right after IPERF_DONE, or after DISPLAY_RESULTS.
            Phase::Done | Phase::Display => {
                self.phase = Phase::Done;
                Ok(())
            }
            p => self.fail(Iperf3Error::Closed(p.doing())),
        }
    }

    /// Runs the test asked for: CREATE_STREAMS.
    pub fn accept(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::Decide, "accept")?;
        self.out.push_back(vec![State::CreateStreams.byte()]);
        self.enter(Phase::Streams, now);
        Ok(())
    }

    /// Refuses the test with iperf3's error number `code` (its client names it).
    /// What was queued before (PARAM_EXCHANGE) still goes first.
    pub fn refuse(&mut self, code: i32) {
        self.out.push_back(vec![State::ServerError.byte()]);
        let mut codes = code.to_be_bytes().to_vec();
        codes.extend_from_slice(&0i32.to_be_bytes());
        self.out.push_back(codes);
        self.phase = Phase::Failed;
    }

    /// Every data connection is here and the workers start: TEST_START, TEST_RUNNING. The
    /// client must say TEST_END within `run_for`.
    pub fn start(&mut self, run_for: Duration, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::Streams, "start")?;
        self.out.push_back(vec![State::TestStart.byte()]);
        self.out.push_back(vec![State::TestRunning.byte()]);
        self.enter(Phase::Running, now);
        self.wait = run_for;
        Ok(())
    }

    /// The workers have stopped: EXCHANGE_RESULTS.
    pub fn exchange(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::Exchange, "exchange results")?;
        self.out.push_back(vec![State::ExchangeResults.byte()]);
        self.enter(Phase::TheirResults, now);
        Ok(())
    }

    /// This end's results: the JSON, then DISPLAY_RESULTS.
    pub fn send_results(&mut self, results: &Results, now: Instant) -> Result<(), Iperf3Error> {
        self.expect(Phase::OurResults, "send results")?;
        self.out.push_back(encode_json(results));
        self.out.push_back(vec![State::DisplayResults.byte()]);
        self.enter(Phase::Display, now);
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

    fn step(&mut self, now: Instant) -> Result<bool, Iperf3Error> {
        match self.phase {
            Phase::Cookie => {
                let Some(c) = self.reader.take(COOKIE_BYTES) else {
                    return Ok(false);
                };
                let mut cookie = [0u8; COOKIE_BYTES];
                cookie.copy_from_slice(&c);
                self.events.push_back(ServerEvent::Cookie(Cookie(cookie)));
                self.out.push_back(vec![State::ParamExchange.byte()]);
                self.enter(Phase::Params, now);
                Ok(true)
            }
            Phase::Params => {
                let p = match self.reader.json::<Params>("parameters", PARAMS_MAX_BYTES) {
                    Ok(Some(p)) => p,
                    Ok(None) => return Ok(false),
                    Err(e) => return self.fail(e),
                };
                let test = match p.test() {
                    Ok(t) => t,
                    Err(e) => return self.fail(e),
                };
                self.events.push_back(ServerEvent::Params(Box::new(test)));
                self.enter(Phase::Decide, now);
                Ok(true)
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
                    .push_back(ServerEvent::ClientResults(Box::new(r)));
                self.enter(Phase::OurResults, now);
                Ok(true)
            }
            phase => {
                let Some(b) = self.reader.byte() else {
                    return Ok(false);
                };
                match (phase, State::from_byte(b)) {
                    (Phase::Running, Some(State::TestEnd)) => {
                        self.events.push_back(ServerEvent::TestEnd);
                        self.enter(Phase::Exchange, now);
                        self.wait = self.step_wait;
                        Ok(true)
                    }
                    (Phase::Display, Some(State::IperfDone)) => {
                        self.events.push_back(ServerEvent::Done);
                        self.enter(Phase::Done, now);
                        Ok(true)
                    }
                    (_, Some(State::ClientTerminate)) => self.fail(Iperf3Error::ClientTerminated),
                    (Phase::Done, _) => self.fail(Iperf3Error::Trailing),
                    _ => self.fail(Iperf3Error::UnexpectedState {
                        byte: b as i8,
                        doing: phase.doing(),
                    }),
                }
            }
        }
    }

    fn expect(&self, phase: Phase, what: &'static str) -> Result<(), Iperf3Error> {
        match self.phase == phase {
            true => Ok(()),
            false => Err(Iperf3Error::Misuse(what)),
        }
    }

    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.since = now;
    }

    /// What was queued before stays (PARAM_EXCHANGE before a refusal of the parameters).
    fn fail<T>(&mut self, e: Iperf3Error) -> Result<T, Iperf3Error> {
        self.phase = Phase::Failed;
        Err(e)
    }
}

/// The error numbers [`Server::refuse`] sends (iperf_api.h), as its clients name them.
pub mod refusal {
    /// `IERECVPARAMS`: the parameters could not be read or checked.
    pub const BAD_PARAMS: i32 = 114;
    /// `IETOTALRATE`: the rate asked for is over this server's limit.
    pub const RATE: i32 = 27;
    /// `IEMAXSERVERTESTDURATIONEXCEEDED`: longer than this server allows.
    pub const DURATION: i32 = 37;
    /// `IENUMSTREAMS`: more streams than this server allows.
    pub const STREAMS: i32 = 6;
    /// `IEAUTHTEST`: authentication asked for and not done.
    pub const AUTH: i32 = 142;
}
