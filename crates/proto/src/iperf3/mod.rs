//! iperf3's control protocol (iperf 3.x, as esnet/iperf's `iperf_api.c`,
//! `iperf_client_api.c` and `iperf_server_api.c` define it), without any I/O: so that any
//! `iperf3 -s` can be a far end of `sonde stream --iperf3`, and any `iperf3 -c` can measure
//! `sonde serve --iperf3`. Bytes in, events and bytes out, time passed in; the sockets and
//! the data plane belong to the run layer.
//!
//! Wire (control connection, TCP): the client sends a 37-byte cookie (36 characters and a
//! NUL). From then on each side sends one signed state byte at a time ([`State`]); the
//! parameters and both results travel as a 4-byte big-endian length and that much JSON.
//!
//! ```text
//! client                       server
//! cookie (37 bytes)   ──▶
//!                     ◀──      PARAM_EXCHANGE
//! params JSON         ──▶
//!                     ◀──      CREATE_STREAMS      (client opens the data connections)
//!                     ◀──      TEST_START, TEST_RUNNING
//! TEST_END            ──▶
//!                     ◀──      EXCHANGE_RESULTS
//! client results JSON ──▶
//!                     ◀──      server results JSON, DISPLAY_RESULTS
//! IPERF_DONE          ──▶
//! ```
//!
//! A TCP data connection opens with the same cookie; a UDP one with a 4-byte datagram
//! answered by a 4-byte datagram ([`udp`]). A busy server answers a new cookie with
//! `ACCESS_DENIED`; a failing one with `SERVER_ERROR` and two 4-byte codes. Every read has
//! a bounded length and every wait a deadline ([`client::Client::deadline`]).

pub mod auth;
pub mod client;
mod error;
mod frame;
mod machine;
mod params;
mod results;
pub mod server;
pub mod udp;

#[cfg(test)]
mod tests;

pub use client::{Client, ClientEvent};
pub use error::Iperf3Error;
pub use frame::Reader;
pub use machine::{Endpoint, Machine};
pub use params::{Params, Protocol, Test};
pub use results::{Results, StreamResults};
pub use server::{Server, ServerEvent};

/// iperf3's well-known port.
pub const DEFAULT_PORT: u16 = 5201;
/// Bytes of the cookie that opens the control and every TCP data connection.
pub const COOKIE_BYTES: usize = 37;
/// Longest parameters JSON a server reads (iperf3's own `MAX_PARAMS_JSON_STRING`).
pub const PARAMS_MAX_BYTES: u32 = 8 * 1024;
/// Longest results JSON read: 256 streams of figures fit in 64 KiB; the rest is room for
/// `--get-server-output`'s text of a long run. iperf3 itself reads results unbounded.
pub const RESULTS_MAX_BYTES: u32 = 1024 * 1024;
/// Most streams a test may ask for (iperf3's `MAX_STREAMS`).
pub const MAX_STREAMS: u32 = 128;
/// Longest test iperf3 allows (`MAX_TIME`, seconds), and its longest omit.
pub const MAX_TIME_S: u32 = 86_400;
pub const MAX_OMIT_S: u32 = 600;
/// Largest TCP block (`MAX_BLOCKSIZE`) and the UDP block bounds (`MIN/MAX_UDP_BLOCKSIZE`).
pub const MAX_TCP_BLOCK_BYTES: u32 = 1024 * 1024;
pub const MIN_UDP_BLOCK_BYTES: u32 = 16;
pub const MAX_UDP_BLOCK_BYTES: u32 = 65_535 - 8 - 20;

/// The state bytes (iperf_api.h). Those iperf3 defines but never sends are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfStart => 15,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        v as u8
    }

    pub fn from_byte(b: u8) -> Option<State> {
        Some(match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            15 => State::IperfStart,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            _ => return None,
        })
    }
}

/// The cookie of one test: 36 characters of iperf3's alphabet and a NUL.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cookie(pub [u8; COOKIE_BYTES]);

impl Cookie {
    /// A cookie from 36 random bytes (the caller's randomness: this crate has no I/O).
    pub fn from_random(random: &[u8; COOKIE_BYTES - 1]) -> Cookie {
        const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
        let mut c = [0u8; COOKIE_BYTES];
        for (o, r) in c.iter_mut().zip(random) {
            *o = ALPHABET[usize::from(*r) % ALPHABET.len()];
        }
        Cookie(c)
    }
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cookie(..)")
    }
}

/// iperf3's stream ids: 1, then 3, 4, 5... (`iperf_add_stream` skips 2, and both ends
/// number their streams in the order the connections were made).
pub fn stream_id(index: u32) -> u32 {
    if index == 0 {
        1
    } else {
        index + 2
    }
}

/// The index of stream `id` (the inverse of [`stream_id`]).
pub fn stream_index(id: u32) -> Option<u32> {
    match id {
        1 => Some(0),
        0 | 2 => None,
        id => Some(id - 2),
    }
}
