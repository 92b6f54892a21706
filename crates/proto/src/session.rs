//! What both ends' sessions have in common: the frames waiting to go out, the events
//! waiting to be taken, the deadline, the decoder, and what follows from them (timeouts,
//! end of stream, reading frames). Each session supplies only its state machine, so one
//! loop can carry bytes and time between a socket and either of them.

use std::collections::VecDeque;
use std::time::Instant;

use crate::frame::{encode_sealed, parse};
use crate::seal::{Opener, Sealer};
use crate::{FrameDecoder, Message, ProtoError};

pub(crate) use machine::{Machine, Wire};

/// A sans-IO session: feed it bytes, time and end of stream; take frames and events.
pub trait Session: Machine {
    /// The next frame to write, if any.
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.wire().out.pop_front()
    }

    /// The next event for the caller, if any.
    fn poll_event(&mut self) -> Option<Self::Event> {
        self.wire().events.pop_front()
    }

    /// When `handle_timeout` must be called at the latest.
    fn poll_timeout(&self) -> Option<Instant> {
        self.wire_ref().deadline
    }

    fn handle_timeout(&mut self, now: Instant) -> Result<(), ProtoError> {
        match self.wire_ref().deadline {
            Some(d) if now >= d => {
                let what = self.doing();
                self.fail(ProtoError::Timeout(what))
            }
            _ => Ok(()),
        }
    }

    /// End of stream from the peer.
    fn handle_eof(&mut self) -> Result<(), ProtoError> {
        if let Err(e) = self.wire().decoder.finish() {
            return self.fail(e);
        }
        if self.settled() {
            return Ok(());
        }
        let what = self.doing();
        self.fail(ProtoError::Closed(what))
    }

    /// Bytes from the peer: each whole frame goes to the state machine.
    fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), ProtoError> {
        self.allow(self.reading(), "read")?;
        self.wire().decoder.push(bytes);
        while self.reading() {
            let msg = match self.wire().next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return self.fail(e),
            };
            self.handle_message(msg, now)?;
        }
        Ok(())
    }
}

impl<T: Machine> Session for T {}

/// Sealed: nameable only inside this crate, so the state machines stay private.
mod machine {
    use super::*;

    /// The wire state of a session.
    pub struct Wire<E> {
        pub decoder: FrameDecoder,
        pub out: VecDeque<Vec<u8>>,
        pub events: VecDeque<E>,
        pub deadline: Option<Instant>,
        /// After the handshake: seals what this side sends, checks what it receives.
        seal: Option<(Sealer, Opener)>,
    }

    impl<E> Wire<E> {
        pub fn new(deadline: Option<Instant>) -> Wire<E> {
            Wire {
                decoder: FrameDecoder::default(),
                out: VecDeque::new(),
                events: VecDeque::new(),
                deadline,
                seal: None,
            }
        }

        /// From now on every frame each way is sealed.
        pub fn seal(&mut self, sealer: Sealer, opener: Opener) {
            self.seal = Some((sealer, opener));
        }

        /// Queues `msg`, sealed once the handshake has keyed the session.
        pub fn send(&mut self, msg: &Message) -> Result<(), ProtoError> {
            let frame = encode_sealed(msg, self.seal.as_mut().map(|(s, _)| s))?;
            self.out.push_back(frame);
            Ok(())
        }

        /// The next whole message, its tag checked once the session is keyed.
        pub fn next_message(&mut self) -> Result<Option<Message>, ProtoError> {
            let Some(frame) = self.decoder.next_frame()? else {
                return Ok(None);
            };
            match &mut self.seal {
                Some((_, opener)) => parse(opener.open(&frame)?).map(Some),
                None => parse(&frame).map(Some),
            }
        }
    }

    /// A session's state machine, as the shared code needs it.
    pub trait Machine {
        type Event;
        fn wire(&mut self) -> &mut Wire<Self::Event>;
        fn wire_ref(&self) -> &Wire<Self::Event>;
        /// What the session is doing, for errors.
        fn doing(&self) -> &'static str;
        /// Done or failed: the peer may close now.
        fn settled(&self) -> bool;
        /// Whether frames from the peer are still read.
        fn reading(&self) -> bool;
        /// Moves to the failed state; returns the error.
        fn fail(&mut self, e: ProtoError) -> Result<(), ProtoError>;
        fn handle_message(&mut self, msg: Message, now: Instant) -> Result<(), ProtoError>;

        /// Refuses the caller's `action` unless the session's state allows it (`ok`).
        fn allow(&self, ok: bool, action: &'static str) -> Result<(), ProtoError> {
            if ok {
                return Ok(());
            }
            Err(ProtoError::InvalidCall {
                action,
                state: self.doing(),
            })
        }
    }
}
