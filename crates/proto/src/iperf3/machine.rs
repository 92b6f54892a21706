//! What both ends of a control connection do alike: queue what to send and what to tell
//! the caller, take the peer's bytes a message at a time, time a wait out, fail. Each end
//! ([`super::client`], [`super::server`]) brings its [`Rules`]: its phases, how it reads
//! one message in each, when its waits end, and what it sends when its caller says so.

use std::collections::VecDeque;
use std::time::Instant;

use super::frame::Reader;
use super::{Iperf3Error, Results, RESULTS_MAX_BYTES};

pub(super) use sealed::Rules;

/// The client's or the server's rules: what a caller driving either [`Machine`] (a socket
/// loop) names. Only this module's two ends have them.
pub trait Endpoint: Rules {}

impl<R: Rules> Endpoint for R {}

/// One end of an iperf3 control connection, sans I/O: bytes in
/// ([`Machine::handle_bytes`]), bytes and events out ([`Machine::poll_transmit`],
/// [`Machine::poll_event`]), a deadline ([`Machine::deadline`]), time passed in.
pub struct Machine<R: Rules> {
    pub(super) reader: Reader,
    pub(super) out: VecDeque<Vec<u8>>,
    pub(super) events: VecDeque<R::Event>,
    pub(super) phase: R::Phase,
    /// When the current wait began.
    pub(super) since: Instant,
    /// The end's own state: what its rules read.
    pub(super) rules: R,
}

mod sealed {
    use std::time::{Duration, Instant};

    use super::{Iperf3Error, Machine};

    /// An end's own part of the protocol; only this module's two ends have one.
    pub trait Rules: Sized {
        type Event;
        type Phase: Copy + Eq;
        /// The phase after the last message, and the one after a failure.
        const DONE: Self::Phase;
        const FAILED: Self::Phase;
        /// A failure drops what was queued (the client), or lets it go first (the server:
        /// PARAM_EXCHANGE before a refusal of the parameters).
        const FAILURE_DROPS_QUEUED: bool;
        /// What the end is doing in `phase`, for an error.
        fn doing(phase: Self::Phase) -> &'static str;
        /// When the wait of `phase`, begun at `since`, ends; none: the caller's.
        fn deadline(&self, phase: Self::Phase, since: Instant) -> Option<Instant>;
        /// How long the current wait may last, as its timeout error says.
        fn wait(&self) -> Duration;
        /// Whether the peer may close in `phase`: the test is over.
        fn may_close(phase: Self::Phase) -> bool;
        /// One message taken from `m`'s reader, if a whole one is there.
        fn step(m: &mut Machine<Self>, now: Instant) -> Result<bool, Iperf3Error>;
        /// What the peer's close means before the end, if more than that it closed (what
        /// it said before closing, read short).
        fn closed(_m: &mut Machine<Self>) -> Option<Iperf3Error> {
            None
        }
    }
}

impl<R: Rules> Machine<R> {
    pub(super) fn with(rules: R, phase: R::Phase, out: Vec<Vec<u8>>, now: Instant) -> Self {
        Machine {
            reader: Reader::default(),
            out: out.into(),
            events: VecDeque::new(),
            phase,
            since: now,
            rules,
        }
    }

    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<R::Event> {
        self.events.pop_front()
    }

    pub fn is_done(&self) -> bool {
        self.phase == R::DONE
    }

    /// When the peer has been silent too long; none while the caller's own wait runs.
    pub fn deadline(&self) -> Option<Instant> {
        self.rules.deadline(self.phase, self.since)
    }

    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Iperf3Error> {
        match self.deadline() {
            Some(d) if now >= d => self.fail(Iperf3Error::Timeout {
                doing: R::doing(self.phase),
                secs: self.rules.wait().as_secs(),
            }),
            _ => Ok(()),
        }
    }

    pub fn handle_eof(&mut self) -> Result<(), Iperf3Error> {
        match R::may_close(self.phase) {
            true => {
                self.phase = R::DONE;
                Ok(())
            }
            false => {
                let e = R::closed(self).unwrap_or(Iperf3Error::Closed(R::doing(self.phase)));
                self.fail(e)
            }
        }
    }

    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), Iperf3Error> {
        if self.phase == R::FAILED {
            return Err(Iperf3Error::Misuse("read after a failure"));
        }
        self.reader.push(bytes);
        while R::step(self, now)? {}
        Ok(())
    }

    /// The peer's results, whole and checked; `None`: more bytes are needed. An error
    /// fails the machine.
    pub(super) fn results(&mut self) -> Result<Option<Results>, Iperf3Error> {
        let read = self.reader.json::<Results>("results", RESULTS_MAX_BYTES);
        match read.and_then(|r| r.map(Results::checked).transpose()) {
            Ok(r) => Ok(r),
            Err(e) => self.fail(e),
        }
    }

    /// Refuses the caller's `what` unless the machine is in `phase`.
    pub(super) fn expect(&self, phase: R::Phase, what: &'static str) -> Result<(), Iperf3Error> {
        match self.phase == phase {
            true => Ok(()),
            false => Err(Iperf3Error::Misuse(what)),
        }
    }

    pub(super) fn enter(&mut self, phase: R::Phase, now: Instant) {
        self.phase = phase;
        self.since = now;
    }

    pub(super) fn fail<T>(&mut self, e: Iperf3Error) -> Result<T, Iperf3Error> {
        self.phase = R::FAILED;
        if R::FAILURE_DROPS_QUEUED {
            self.out.clear();
        }
        Err(e)
    }
}
