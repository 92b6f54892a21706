//! One control loop for both ends of a running test: wake at the side's or the session's
//! deadline, let the side sample, write what the session queued, feed it what arrived.
//! What differs between the controller and the agent is a [`Party`].

use std::time::Instant;

use sonde_proto::{ProtoError, Session};
use sonde_results::IntervalSample;

use crate::control::Link;
use crate::side::Side;
use crate::signals::Interrupt;

/// Whether the loop goes on after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Go,
    Done,
}

/// Why the loop ended before its end said so.
#[derive(Debug)]
pub enum Cut {
    Interrupted,
    /// Writing to the control connection failed.
    Write(std::io::Error),
    /// The session failed: the peer's error, a timeout, the connection lost.
    Session(ProtoError),
    /// This end gave up, saying why.
    Local(String),
}

/// What one end does at each turn of the loop.
pub trait Party {
    type S: Session;
    fn session(&mut self) -> &mut Self::S;
    /// An interval this side just closed.
    fn on_sample(&mut self, sample: IntervalSample) -> Result<(), Cut>;
    /// Before waiting: the controller decides here when to say stop.
    fn on_turn(&mut self, _side: &mut dyn Side, _now: Instant) -> Result<(), Cut> {
        Ok(())
    }
    /// After the session was fed: takes its events; `Done` ends the loop.
    fn on_events(&mut self) -> Flow;
}

/// Runs `side` under the session of `end` until the end is done or the test is cut.
pub fn drive<E: Party>(
    link: &mut Link,
    end: &mut E,
    side: &mut dyn Side,
    interrupt: &Interrupt,
) -> Result<(), Cut> {
    loop {
        if interrupt.is_set() {
            return Err(Cut::Interrupted);
        }
        let now = Instant::now();
        if let Some(sample) = side.on_time(now) {
            end.on_sample(sample)?;
        }
        end.on_turn(side, now)?;
        link.send(end.session()).map_err(Cut::Write)?;
        let step = link.step(end.session(), side.next_deadline(), side.wake_fd());
        let flow = end.on_events();
        step.map_err(Cut::Session)?;
        if flow == Flow::Done {
            return Ok(());
        }
    }
}
