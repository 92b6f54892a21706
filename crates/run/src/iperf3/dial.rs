//! One test against an iperf3 server, by the spec's kind: a stream over TCP, packets over
//! UDP.

use sonde_results::{Document, TestSpec};

use super::{client, udp_client, Iperf3Auth, Iperf3RunError};
use crate::controller::{LiveInterval, TestRequest};
use crate::signals::Interrupt;

/// One test against the iperf3 server at `req.host:req.port`: a stream test over TCP, a
/// packet-rate test over UDP; proving `auth` to a server that requires authentication.
pub fn run(
    req: &TestRequest,
    auth: Option<&Iperf3Auth>,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, Iperf3RunError> {
    match &req.spec {
        TestSpec::Stream(spec) => client::run_stream(req, spec, auth, interrupt, live),
        TestSpec::Pps(spec) => udp_client::run(req, spec, auth, interrupt, live),
        _ => Err(Iperf3RunError::Spec {
            flag: "--iperf3",
            reason: "only stream (TCP) and pps (UDP) tests speak iperf3".into(),
        }),
    }
}
