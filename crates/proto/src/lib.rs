//! The control protocol between controller and agent, without any I/O. Bytes go in through
//! `handle_bytes`, events and bytes to send come out through `poll_event` and
//! `poll_transmit`, time is passed in, and deadlines come out of `poll_timeout`: the
//! caller owns the socket and the clock (the quinn-proto shape). That keeps every state
//! and error testable in memory with simulated time.
//!
//! Wire: each frame is a 4-byte big-endian length, then that many bytes of JSON holding
//! one [`Message`], followed after the handshake by its 32-byte tag (`seal`). Frames above
//! [`MAX_FRAME_BYTES`] are refused before they are buffered.
//!
//! With a key: `Hello` (controller nonce, the agent address it dialled) → `Welcome` (agent nonce, agent's proof) →
//! `Auth` (controller's proof) → sealed from here on: `Accepted` (capabilities, labels) →
//! `Setup`…
//! Without one: `Hello` → `Welcome` → `Accepted` → `Setup`…, nothing sealed.
//! A STAMP run from an agent to an agent-less reflector: `Accepted` → `Stamp` → `StampDone`.

pub mod agent;
pub mod auth;
pub mod bounds;
pub mod client;
pub mod data_header;
pub mod error;
pub mod frame;
pub mod grant;
pub mod iperf3;
pub mod labels;
pub mod mesh;
pub mod message;
pub mod seal;
pub mod session;
pub mod stamp;
pub mod target;
pub mod ticket;

pub use agent::{AgentEvent, AgentSession};
pub use auth::{Key, KeyTooShort, Nonces, Prover, CHALLENGE_BYTES};
pub use client::{ClientEvent, ClientSession};
pub use data_header::{DataHeader, DataHeaderError, DATA_HEADER_BYTES};
pub use error::{PeerError, ProtoError};
pub use frame::{
    encode, encode_sealed, FrameDecoder, CONTROLLER_FRAME_BYTES, MAX_FRAME_BYTES,
    PRE_AUTH_FRAME_BYTES,
};
pub use grant::{Grant, GrantError};
pub use labels::{LabelError, Labels};
pub use message::{
    Message, ThirdParty, Timeouts, MAGIC, PROTOCOL_VERSION, STAMP_SENDER, STAMP_SENDER_KEY,
    THIRD_PARTY,
};
pub use session::Session;
pub use target::{
    TargetChallenge, TargetTest, TARGET_ANSWER_BYTES, TARGET_CHALLENGE_BYTES, TARGET_NONCE_BYTES,
};
pub use ticket::{Ticket, TicketGate, TicketRefused, TICKET_WINDOW};
