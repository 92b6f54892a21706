//! What a served TCP test and a served UDP test share once their parameters are read:
//! the refusal over the limits, the run from TEST_START to the client's TEST_END, the
//! client's results vouched against ours, and the document.

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use sonde_proto::iperf3::{Results, Server, Test};
use sonde_results::document::Inputs;
use sonde_results::{Document, IntervalSample, SideResult, TestSpec};

use super::config::Iperf3Config;
use super::conn::Control;
use super::serve_one::{exchange, io, run, ServeError};
use super::vouch::{ours_of, vouch};
use super::STEP_WAIT;
use crate::controller::{now_rfc3339, SOFTWARE};
use crate::side::Side;
use crate::signals::Interrupt;

/// Refuses the test with iperf3's error number when the limits found it over them.
pub(super) fn refuse_over(
    ctl: &mut Control,
    srv: &mut Server,
    over: Option<(i32, String)>,
) -> Result<(), ServeError> {
    match over {
        Some((code, why)) => {
            srv.refuse(code);
            let _ = ctl.flush(|| srv.poll_transmit());
            Err(ServeError::Refused(why))
        }
        None => Ok(()),
    }
}

/// TEST_START, then the test until the client's TEST_END, the senders finished: the
/// intervals sampled and how the run ended.
pub(super) fn run_test(
    ctl: &mut Control,
    srv: &mut Server,
    side: &mut dyn Side,
    total_ms: u64,
    listener: &TcpListener,
    stop: &Interrupt,
) -> Result<(Vec<IntervalSample>, Result<(), ServeError>), ServeError> {
    srv.start(Duration::from_millis(total_ms) + STEP_WAIT, Instant::now())?;
    ctl.flush(|| srv.poll_transmit())
        .map_err(io("control connection"))?;
    let mut intervals = Vec::new();
    let ran = run(ctl, srv, side, &mut intervals, listener, stop);
    side.finish_senders();
    Ok((intervals, ran))
}

/// After a run that ended well, the results exchanged: the client's, unless a figure of
/// theirs contradicts `ours` (`packets`: a UDP test's), and otherwise why none.
pub(super) fn their_results(
    ctl: &mut Control,
    srv: &mut Server,
    ran: Result<(), ServeError>,
    mine: &Results,
    ours: &SideResult,
    packets: bool,
) -> (Option<Results>, Option<String>) {
    match ran.and_then(|_| exchange(ctl, srv, mine)) {
        // A figure of theirs that ours contradicts never reaches the document.
        Ok(r) => match vouch(&r, &ours_of(ours), packets) {
            Ok(()) => (Some(r), None),
            Err(why) => (None, Some(format!("the client's results refused: {why}"))),
        },
        Err(e) => (None, Some(e.to_string())),
    }
}

/// The document's name for the client: iperf3's, with the version it told.
pub(super) fn client_name(test: &Test, peer: SocketAddr) -> String {
    format!(
        "iperf3 client{} at {peer}",
        test.client_version
            .as_deref()
            .map_or(String::new(), |v| format!(" (iperf {v})"))
    )
}

/// The served test's document: its client and server sides, and each one's intervals.
pub(super) fn document(
    cfg: &Iperf3Config,
    spec: &TestSpec,
    (command, started_at): (String, String),
    (client, server): (&SideResult, Option<&SideResult>),
    (client_intervals, server_intervals): (&[IntervalSample], &[IntervalSample]),
    error: Option<String>,
) -> Document {
    let inputs = Inputs {
        spec,
        command,
        server_command: Some(cfg.command.clone()),
        server_address: cfg.bind.to_string(),
        started_at,
        software: SOFTWARE.into(),
        client,
        server,
        client_intervals,
        server_intervals,
        error,
        client_agent: None,
        finished_at: Some(now_rfc3339()),
        server_labels: Default::default(),
        fleet: None,
        prelude: None,
    };
    Document::assemble(inputs, sonde_results::limit::judge)
}
