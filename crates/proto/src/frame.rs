//! Length-prefixed frames. "Need more bytes" is `Ok(None)`; a frame longer than the cap,
//! a partial frame at end of stream and a payload that is not a message are typed errors.
//! After the handshake a frame's payload is the message followed by its tag (`seal`).

use crate::error::ProtoError;
use crate::message::{Message, MAGIC};
use crate::seal::Sealer;
use crate::ticket::Ticket;

/// Largest frame accepted or sent. Results of 1024 connections fit with room to spare.
pub const MAX_FRAME_BYTES: usize = 4 << 20;
/// Largest frame an agent reads before the controller has proven the key (a `Hello` or an
/// `Auth` is about 150 bytes): an unauthenticated peer cannot make it buffer megabytes.
pub const PRE_AUTH_FRAME_BYTES: usize = 4 << 10;
/// Largest frame an agent reads from an accepted controller: a `Setup` is a few kB; only
/// results, which agents send, need the full cap.
pub const CONTROLLER_FRAME_BYTES: usize = 256 << 10;
const HEADER: usize = 4;

/// A frame holding `msg`, unsealed (the handshake's frames).
pub fn encode(msg: &Message) -> Result<Vec<u8>, ProtoError> {
    encode_sealed(msg, None)
}

/// A frame holding `msg`, followed by its tag when `seal` is given.
pub fn encode_sealed(msg: &Message, seal: Option<&mut Sealer>) -> Result<Vec<u8>, ProtoError> {
    let mut out = vec![0u8; HEADER];
    serde_json::to_writer(&mut out, msg).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    if let Some(s) = seal {
        let tag = s.tag(&out[HEADER..]);
        out.extend_from_slice(&tag);
    }
    let len = out.len() - HEADER;
    if len > MAX_FRAME_BYTES {
        return Err(ProtoError::Oversized {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    out[..HEADER].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// The message in a frame's (opened) payload.
pub fn parse(payload: &[u8]) -> Result<Message, ProtoError> {
    serde_json::from_slice::<Message>(payload).map_err(|e| ProtoError::Malformed(e.to_string()))
}

/// Accumulates bytes and yields whole frames of at most `max` bytes.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder {
            buf: Vec::new(),
            max: MAX_FRAME_BYTES,
        }
    }
}

impl FrameDecoder {
    /// Frames longer than `max` (at most [`MAX_FRAME_BYTES`]) are refused from now on.
    pub fn set_max(&mut self, max: usize) {
        self.max = max.min(MAX_FRAME_BYTES);
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame's payload, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max {
            return Err(ProtoError::Oversized { len, max: self.max });
        }
        if len == 0 {
            return Err(ProtoError::Malformed("empty frame".into()));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some(payload))
    }

    /// The next whole unsealed message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, ProtoError> {
        match self.next_frame()? {
            Some(p) => parse(&p).map(Some),
            None => Ok(None),
        }
    }

    /// Called at end of stream: leftover bytes are a truncated frame.
    pub fn finish(&self) -> Result<(), ProtoError> {
        match self.buf.len() {
            0 => Ok(()),
            have if have < HEADER => Err(ProtoError::Truncated { have, need: HEADER }),
            have => {
                let need = HEADER
                    + u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                        as usize;
                Err(ProtoError::Truncated { have, need })
            }
        }
    }
}

/// What a connection's first bytes are, as far as placing it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstFrame {
    /// Not a whole frame yet.
    NeedMore,
    /// A `Hello`: its nonce (hex), the agent it names and its ticket, if any.
    Hello {
        nonce: String,
        agent: String,
        ticket: Option<Ticket>,
    },
    /// Anything else: a frame too long, not a message, not a sonde `Hello`.
    Other,
}

/// Reads the first frame of `bytes` (what a connection sent so far), at most a
/// pre-authentication frame's length.
pub fn first_frame(bytes: &[u8]) -> FirstFrame {
    let mut d = FrameDecoder::default();
    d.set_max(PRE_AUTH_FRAME_BYTES);
    d.push(bytes);
    match d.next_message() {
        Ok(None) => FirstFrame::NeedMore,
        Ok(Some(Message::Hello {
            magic,
            nonce,
            agent,
            ticket,
            ..
        })) if magic == MAGIC => FirstFrame::Hello {
            nonce,
            agent,
            ticket,
        },
        _ => FirstFrame::Other,
    }
}
