//! What a served TCP test and a served UDP test share: the control connection's turns
//! while the data connections or streams are set up, the refusal over the limits, the
//! run from TEST_START to the client's TEST_END, the results exchanged and the client's
//! vouched against ours, and the document.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use sonde_proto::iperf3::{Iperf3Error, Results, Server, ServerEvent, Test};
use sonde_results::{Document, IntervalSample, SideResult, TestSpec};

use super::client::{Guard, GUARD_EVERY};
use super::config::Iperf3Config;
use super::conn::{Control, Turn};
use super::vouch::{ours_of, vouch};
use super::{SERVE_WAIT, STEP_WAIT};
use crate::side::Side;
use crate::signals::Interrupt;

/// How far ahead of a client's TEST_END an edge of our schedule may be and still close:
/// the two clocks start a round trip and a thread start apart.
const END_SLACK: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Protocol(#[from] Iperf3Error),
    #[error("refused: {0}")]
    Refused(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("stopped")]
    Stopped,
    /// The client broke what the test agreed (its rate, its datagrams' size): cut.
    #[error("the iperf3 client broke what it agreed: {0}")]
    Broke(String),
}

pub(super) fn io(what: &'static str) -> impl Fn(std::io::Error) -> ServeError {
    move |source| ServeError::Io { what, source }
}

/// One pass of a wait of the setup (for the data connections, the UDP streams) until
/// `until`: an error when stopped or out of time, else the control connection turned
/// once (only a failure can come on it now).
pub(super) fn setup_pass(
    ctl: &mut Control,
    srv: &mut Server,
    until: Instant,
    doing: &'static str,
    stop: &Interrupt,
) -> Result<(), ServeError> {
    if stop.is_set() {
        return Err(ServeError::Stopped);
    }
    if Instant::now() > until {
        return Err(ServeError::Protocol(Iperf3Error::Timeout {
            doing,
            secs: SERVE_WAIT.as_secs(),
        }));
    }
    turn(ctl, srv, Some(Instant::now() + Duration::from_millis(1)))
}

/// Writes what `s` queued, reads once (to `deadline` at most) and feeds it.
pub(super) fn turn(
    ctl: &mut Control,
    s: &mut Server,
    deadline: Option<Instant>,
) -> Result<(), ServeError> {
    ctl.turn(s, deadline).map_err(|e| match e {
        Turn::Io(source) => io("control connection")(source),
        Turn::Protocol(e) => ServeError::Protocol(e),
    })
}

/// The test running until the client's TEST_END: our side sampled, what the client sends
/// held to what it agreed (`guard`, at most [`GUARD_EVERY`] apart), any other connection
/// told ACCESS_DENIED.
pub(super) fn run(
    ctl: &mut Control,
    srv: &mut Server,
    side: &mut dyn Side,
    intervals: &mut Vec<sonde_results::IntervalSample>,
    (listener, mut guard): (&TcpListener, Option<Guard>),
    stop: &Interrupt,
) -> Result<(), ServeError> {
    loop {
        if stop.is_set() {
            return Err(ServeError::Stopped);
        }
        let now = Instant::now();
        if let Some(why) = guard.as_mut().and_then(|g| g(now)) {
            // As iperf3's server over its limit: SERVER_ERROR, the rate's error number.
            srv.refuse(sonde_proto::iperf3::server::refusal::RATE);
            let _ = ctl.flush(|| srv.poll_transmit());
            return Err(ServeError::Broke(why));
        }
        if let Some(s) = side.on_time(now) {
            intervals.push(s);
        }
        let guarded = guard.as_ref().map(|_| now + GUARD_EVERY);
        let wake = [side.next_deadline(), guarded].into_iter().flatten().min();
        turn(ctl, srv, wake)?;
        while let Some(e) = srv.poll_event() {
            if e == ServerEvent::TestEnd {
                // The client's clock ended the test: an edge of ours due within a hair
                // of it closes now, not never.
                while let Some(due) = side
                    .next_deadline()
                    .filter(|d| *d <= Instant::now() + END_SLACK)
                {
                    intervals.extend(side.on_time(due));
                }
                return Ok(());
            }
        }
        refuse_pending(listener);
    }
}

/// Tells whoever is waiting in the listener's queue that this server is busy, without
/// reading from them (as iperf3 does).
fn refuse_pending(listener: &TcpListener) {
    while let Ok((mut s, _)) = listener.accept() {
        let _ = s.write_all(&[sonde_proto::iperf3::State::AccessDenied.byte()]);
    }
}

/// EXCHANGE_RESULTS to IPERF_DONE: the client's results, ours for it.
pub(super) fn exchange(
    ctl: &mut Control,
    srv: &mut Server,
    ours: &Results,
) -> Result<Results, ServeError> {
    srv.exchange(Instant::now())?;
    let mut theirs = None;
    loop {
        turn(ctl, srv, None)?;
        while let Some(e) = srv.poll_event() {
            match e {
                ServerEvent::ClientResults(r) => {
                    srv.send_results(ours, Instant::now())?;
                    theirs = Some(*r);
                }
                ServerEvent::Done => {
                    return theirs.ok_or(ServeError::Refused("no results".into()));
                }
                _ => {}
            }
        }
        if srv.is_done() {
            return theirs.ok_or(ServeError::Refused("no results".into()));
        }
    }
}

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

/// TEST_START, then the test until the client's TEST_END (what it sends held to `listener`'s
/// guard, if any), the senders finished: the intervals sampled and how the run ended.
pub(super) fn run_test(
    ctl: &mut Control,
    srv: &mut Server,
    side: &mut dyn Side,
    total_ms: u64,
    listener: (&TcpListener, Option<Guard>),
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

/// What the agent's own limits say of `spec` as the serving side (`Limits::check`: memory
/// with the socket buffers, worker threads, message size, rate...), refused with
/// iperf3's IERECVPARAMS: its client has no number for most of them, and the agent's log
/// names the flag.
pub(super) fn agent_limits(
    spec: &TestSpec,
    limits: &crate::agent::Limits,
) -> Option<(i32, String)> {
    let kind = crate::kind::of(spec)?;
    let why = limits.check(spec, kind, sonde_results::Role::Server)?;
    Some((sonde_proto::iperf3::server::refusal::BAD_PARAMS, why))
}

/// Books the serving side of `spec` in the agent's account, beside the tests the agent
/// and this service run, or refuses the test naming the flag and what they hold (iperf3's
/// IENUMSTREAMS for threads, IERECVPARAMS for memory). Released when the share drops.
pub(super) fn book(
    ctl: &mut Control,
    srv: &mut Server,
    cfg: &Iperf3Config,
    spec: &TestSpec,
) -> Result<Option<crate::agent::HeldShare>, ServeError> {
    use crate::agent::OverShare;
    let Some(kind) = crate::kind::of(spec) else {
        return Ok(None);
    };
    let d = kind.demand(spec, sonde_results::Role::Server);
    match cfg
        .account
        .book_serving(&d, cfg.limits.max_threads, cfg.limits.max_memory_bytes)
    {
        Ok(held) => Ok(Some(held)),
        Err(over) => {
            let code = match over {
                OverShare::Threads { .. } => sonde_proto::iperf3::server::refusal::STREAMS,
                _ => sonde_proto::iperf3::server::refusal::BAD_PARAMS,
            };
            refuse_over(ctl, srv, Some((code, over.to_string())))?;
            Ok(None)
        }
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
    run: (String, String),
    sides: (&SideResult, Option<&SideResult>),
    intervals: (&[IntervalSample], &[IntervalSample]),
    error: Option<String>,
) -> Document {
    let far = (cfg.command.clone(), cfg.bind.to_string());
    super::document(spec, run, far, sides, intervals, error, None)
}
