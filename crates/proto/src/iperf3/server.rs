//! The server's end of an iperf3 control connection: cookie, parameters, and each state
//! answered in order. The caller decides on [`ServerEvent::Params`] ([`Server::accept`]
//! or [`Server::refuse`]), accepts the data connections, says [`Server::start`], and on
//! [`ServerEvent::TestEnd`] stops its workers and says [`Server::exchange`]. Every wait
//! for the client has a deadline, the test's own included (its duration and a margin):
//! a silent or slow client costs a bounded time, and lengths are checked before any
//! buffering.

use std::time::{Duration, Instant};

use super::frame::encode_json;
use super::machine::{Machine, Rules};
use super::{Cookie, Iperf3Error, Params, Results, State, Test, COOKIE_BYTES, PARAMS_MAX_BYTES};

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

/// How far the exchange got (the machine's own; public only as its rules' type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
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

/// The server's end: [`Machine`] under [`ServerRules`].
pub type Server = Machine<ServerRules>;

/// What the server's rules read: its waits.
pub struct ServerRules {
    /// How long the current wait may last.
    wait: Duration,
    /// The bound of every wait but the test's.
    step_wait: Duration,
}

impl Rules for ServerRules {
    type Event = ServerEvent;
    type Phase = Phase;
    const DONE: Phase = Phase::Done;
    const FAILED: Phase = Phase::Failed;
    const FAILURE_DROPS_QUEUED: bool = false;

    fn doing(phase: Phase) -> &'static str {
        phase.doing()
    }

    /// When the client has been silent too long (in the test: the test is overdue).
    fn deadline(&self, phase: Phase, since: Instant) -> Option<Instant> {
        match phase {
            Phase::Decide | Phase::Exchange | Phase::OurResults | Phase::Done | Phase::Failed => {
                None
            }
            _ => Some(since + self.wait),
        }
    }

    fn wait(&self) -> Duration {
        self.wait
    }

    /// A client may close right after IPERF_DONE, or after DISPLAY_RESULTS.
    fn may_close(phase: Phase) -> bool {
        matches!(phase, Phase::Done | Phase::Display)
    }

    fn step(m: &mut Server, now: Instant) -> Result<bool, Iperf3Error> {
        m.step(now)
    }
}

impl Server {
    pub fn new(now: Instant, wait: Duration) -> Server {
        let rules = ServerRules {
            wait,
            step_wait: wait,
        };
        Machine::with(rules, Phase::Cookie, Vec::new(), now)
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
        self.rules.wait = run_for;
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
                let Some(r) = self.results()? else {
                    return Ok(false);
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
                        self.rules.wait = self.rules.step_wait;
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
    /// `IEBLOCKSIZE`: a TCP block (`-l`) larger than this server allows.
    pub const BLOCK_SIZE: i32 = 7;
    /// `IEUDPBLOCKSIZE`: a UDP block (`-l`) larger than this server allows.
    pub const UDP_BLOCK_SIZE: i32 = 20;
    /// `IEAUTHTEST`: authentication asked for and not done.
    pub const AUTH: i32 = 142;
}
