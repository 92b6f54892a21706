//! iperf3 as a far end and as a near end: `sonde stream --iperf3` measures any `iperf3 -s`
//! ([`client`]), and `sonde serve --iperf3` answers any `iperf3 -c` ([`server`]). The
//! protocol is `sonde_proto::iperf3` (sans-IO); here are only the sockets around it
//! ([`conn`]), the translation between iperf3's results and a side's result ([`figures`]),
//! and the data plane, which is the stream kind's own workers over connections opened the
//! iperf3 way; over UDP (`sonde pps --iperf3`, `iperf3 -c -u`) the packet-rate kind's
//! workers over iperf3's UDP streams ([`udp_plane`], [`udp_figures`]). Either way the document is a normal stream document: our side's evidence as
//! for any run, the iperf3 end's figures as it reported them, absent where it reports none.

pub mod auth;
pub mod client;
mod config;
mod conn;
mod dial;
pub mod figures;
pub mod queue;
mod serve_one;
mod served;
pub mod server;
mod udp_bidir;
mod udp_client;
pub mod udp_figures;
mod udp_guard;
mod udp_plane;
mod udp_serve;
mod vouch;

pub use auth::Iperf3Auth;
pub use client::Iperf3RunError;
pub use config::Iperf3Config;
pub use dial::run;
pub use server::Iperf3Server;

use std::time::Duration;

use sonde_results::document::{FleetPair, Inputs};
use sonde_results::{Document, IntervalSample, SideResult, TestSpec};

use crate::controller::{now_rfc3339, SOFTWARE};

/// The longest wait for one step of the iperf3 protocol (a state, parameters, results).
pub const STEP_WAIT: Duration = Duration::from_secs(10);
/// The server's wait for a client's cookie, parameters and data connections: short, as a
/// silent client holds the one test slot meanwhile (iperf3's own server waits forever).
pub const SERVE_WAIT: Duration = Duration::from_secs(3);

/// Between a UDP sender's last datagram and TEST_END (its receiver stops counting at
/// TEST_END): the datagrams still queued on the way are read meanwhile, not lost.
pub const UDP_DRAIN: Duration = Duration::from_millis(100);

/// A cookie of fresh randomness.
pub(crate) fn cookie() -> sonde_proto::iperf3::Cookie {
    let mut r = [0u8; sonde_proto::iperf3::COOKIE_BYTES - 1];
    crate::random::fill(&mut r);
    sonde_proto::iperf3::Cookie::from_random(&r)
}

/// An iperf3 test's document, at either end: its `command` and start, the far end as the
/// document names it (`server_command`, `server_address`), the client's and the server's
/// sides and intervals, and how the run ended.
pub(crate) fn document(
    spec: &TestSpec,
    (command, started_at): (String, String),
    (server_command, server_address): (String, String),
    (client, server): (&SideResult, Option<&SideResult>),
    (client_intervals, server_intervals): (&[IntervalSample], &[IntervalSample]),
    error: Option<String>,
    fleet: Option<FleetPair>,
) -> Document {
    let inputs = Inputs {
        server_command: Some(server_command),
        server_address,
        started_at,
        software: SOFTWARE.into(),
        server,
        client_intervals,
        server_intervals,
        error,
        finished_at: Some(now_rfc3339()),
        fleet,
        ..Inputs::new(spec, command, client)
    };
    Document::assemble(inputs, sonde_results::limit::judge)
}
