//! `sonde stream HOST --iperf3`: one stream test against an `iperf3 -s`. The control
//! connection speaks iperf3 (`sonde_proto::iperf3::Client`); the data connections are
//! opened the iperf3 way (each starts with the cookie) and then run by the stream kind's
//! own workers, so this side's evidence (TCP_INFO per interval, CPU, host counters, the
//! verdict) is what any stream test has. The iperf3 server's figures come from the
//! results it sends at the end. Errors before the test starts are errors naming the
//! server; after it, the document holds what was measured, partial if cut.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sonde_engine::sockopt::SocketOptions;
use sonde_probe::hostwatch::HostProbe;
use sonde_proto::iperf3::{
    Client, ClientEvent, Cookie, Iperf3Error, Params, Protocol, Results, Test,
};
use sonde_results::{Direction, Document, IntervalSample, Role, SideResult, StreamSpec, TestSpec};

use super::conn::{Control, Turn};
use super::{figures, STEP_WAIT};
use crate::controller::{now_rfc3339, LiveInterval, TestRequest, SOFTWARE};
use crate::kind::CONNECT_TIMEOUT;
use crate::side::Side;
use crate::signals::Interrupt;

/// After the planned end, how long receivers may take to see every stream's end.
const DRAIN: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum Iperf3RunError {
    #[error("iperf3 server at {addr}: {source}")]
    Protocol {
        addr: SocketAddr,
        source: Iperf3Error,
    },
    #[error("iperf3 server at {addr}: {what}: {source}")]
    Io {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve { host: String, reason: String },
    #[error("{flag}: {reason}")]
    Spec { flag: &'static str, reason: String },
    #[error("interrupted before the test started")]
    Interrupted,
    /// The server broke what the test agreed (a rate, a size, its ports).
    #[error("iperf3 server at {addr}: {why}")]
    Broke { addr: SocketAddr, why: String },
    #[error("{flag}: {0}", flag = .0.flag())]
    Auth(#[from] super::auth::AuthError),
    /// IEAUTHTEST from a server asked without credentials.
    #[error("iperf3 server at {addr}: it requires iperf3 authentication (iperf3 error 142): give --iperf3-username and --iperf3-rsa-public-key (its public key), the password in {}", super::auth::PASSWORD_ENV)]
    AuthRequired { addr: SocketAddr },
    /// IEAUTHTEST from a server given credentials.
    #[error("iperf3 server at {addr}: it requires iperf3 authentication and refused {user}'s (iperf3 error 142): a wrong username or password, clocks further apart than its skew threshold (10 s unless set), or another RSA padding than its own ({} here; iperf3 before 3.17, or started with --use-pkcs1-padding, needs --iperf3-use-pkcs1-padding)", padding.name())]
    AuthRefused {
        addr: SocketAddr,
        user: String,
        padding: super::auth::Padding,
    },
}

impl Iperf3RunError {
    /// IEAUTHTEST named for what this client did: asked without credentials, or with
    /// `auth`'s.
    fn named_auth(self, auth: Option<&super::Iperf3Auth>) -> Iperf3RunError {
        match self {
            Iperf3RunError::Protocol {
                addr,
                source: Iperf3Error::ServerError { code: 142, .. },
            } => match auth {
                None => Iperf3RunError::AuthRequired { addr },
                Some(a) => Iperf3RunError::AuthRefused {
                    addr,
                    user: a.username.clone(),
                    padding: a.padding,
                },
            },
            e => e,
        }
    }
}

/// A check of what the server sends against what it agreed, called as the test runs
/// (at most [`GUARD_EVERY`] apart): why it broke the agreement, if it did.
pub(super) type Guard = Box<dyn FnMut(Instant) -> Option<String>>;

/// Longest time between two calls of a [`Guard`]: how long a server may break the
/// agreement before the test is cut.
pub(super) const GUARD_EVERY: Duration = Duration::from_millis(50);

/// The iperf3 test `spec` asks for, or the flag iperf3 cannot carry.
pub fn test_of(spec: &StreamSpec) -> Result<Test, Iperf3RunError> {
    let whole = |ms: u64, flag| match ms % 1000 {
        0 => Ok((ms / 1000) as f64),
        _ => Err(Iperf3RunError::Spec {
            flag,
            reason: format!("iperf3 counts whole seconds: {ms} ms is not one"),
        }),
    };
    let params = Params {
        tcp: Some(true),
        time: Some(whole(spec.timing.duration_ms, "--duration")?),
        omit: Some(whole(spec.timing.warmup_ms, "--warmup")?),
        parallel: Some(f64::from(spec.connections)),
        reverse: (spec.direction == Direction::Reverse).then_some(true),
        bidirectional: (spec.direction == Direction::Bidir).then_some(true),
        len: Some(f64::from(spec.buffer_bytes)),
        // iperf3's -b is per stream; --rate is each direction's connections together.
        bandwidth: spec
            .rate_bits_per_s
            .map(|r| (r / f64::from(spec.connections.max(1))).round()),
        window: spec.sndbuf_bytes.or(spec.rcvbuf_bytes).map(f64::from),
        congestion: spec.congestion.clone(),
        get_server_output: Some(1.0),
        client_version: Some(SOFTWARE.into()),
        ..Params::default()
    };
    let mut t = params.test().map_err(|e| Iperf3RunError::Spec {
        flag: "--iperf3",
        reason: e.to_string(),
    })?;
    t.protocol = Protocol::Tcp;
    Ok(t)
}

/// A stream test over TCP against the iperf3 server at `req.host:req.port`.
pub(super) fn run_stream(
    req: &TestRequest,
    spec: &StreamSpec,
    auth: Option<&super::Iperf3Auth>,
    interrupt: &Interrupt,
    live: &mut dyn FnMut(LiveInterval<'_>),
) -> Result<Document, Iperf3RunError> {
    let test = test_of(spec)?;
    let mut s = Session::open(req, test.clone(), auth, interrupt)?;
    let (addr, cookie) = (s.addr, s.cookie);
    let io = |what| move |source| Iperf3RunError::Io { addr, what, source };
    let opts = SocketOptions {
        congestion: spec.congestion.clone(),
        nodelay: spec.nodelay,
        sndbuf_bytes: spec.sndbuf_bytes,
        rcvbuf_bytes: spec.rcvbuf_bytes,
        tos: spec.execution.marks.data_tos(),
    };
    let mut conns = Vec::new();
    let mut notes = Vec::new();
    for _ in 0..test.connections() {
        // Within the setup's one wait: a server that lets each connection hang cannot
        // hold us a connect timeout a stream.
        let left = s.setup_until().saturating_duration_since(Instant::now());
        let wait = CONNECT_TIMEOUT.min(left).max(Duration::from_millis(1));
        let (mut c, n) =
            sonde_engine::sockopt::connect(addr, &opts, wait).map_err(io("data connection"))?;
        c.write_all(&cookie.0).map_err(io("data connection"))?;
        notes = n;
        conns.push(c);
    }
    s.until_running(interrupt)?;
    let probe = s.probe.take().expect("probed once");
    let side = crate::kind::stream::start_connected(spec, Role::Client, conns, notes, probe)
        .map_err(io("starting the workers"))?;
    Ok(s.finish(
        side,
        Duration::ZERO,
        interrupt,
        live,
        |ours| figures::our_results(ours, &test),
        |theirs, who| figures::far_side(spec, Role::Server, theirs, who),
    ))
}

/// A test's control connection to an iperf3 server, from the cookie to its end.
pub(super) struct Session<'r> {
    req: &'r TestRequest,
    pub addr: SocketAddr,
    pub cookie: Cookie,
    /// Taken before the test: probing the host takes a while, and the server starts its
    /// clock (and, reversed, its sending) at TEST_RUNNING.
    pub probe: Option<HostProbe>,
    started_at: String,
    ctl: Control,
    client: Client,
    /// What the server sends, held to what it agreed while the test runs.
    pub guard: Option<Guard>,
    /// Our side's place in the document: the client (sender), or the server (receiver)
    /// of a reversed test.
    pub ours: Role,
}

impl<'r> Session<'r> {
    /// Connected, parameters sent (with `auth`'s token), and CREATE_STREAMS come: the
    /// data connections are next.
    pub fn open(
        req: &'r TestRequest,
        test: Test,
        auth: Option<&super::Iperf3Auth>,
        interrupt: &Interrupt,
    ) -> Result<Session<'r>, Iperf3RunError> {
        // Sealed before connecting: credentials the key cannot carry fail here.
        let token = auth.map(|a| a.token(unix_now())).transpose()?;
        let addr = crate::controller::resolve(&req.host, req.port).map_err(|e| {
            Iperf3RunError::Resolve {
                host: req.host.clone(),
                reason: e.to_string(),
            }
        })?;
        let io = |what| move |source| Iperf3RunError::Io { addr, what, source };
        let started_at = now_rfc3339();
        let probe = HostProbe::for_peer(addr.ip());
        let stream =
            TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(io("cannot connect"))?;
        let ctl = Control::new(stream).map_err(io("control connection"))?;
        let cookie = super::cookie();
        let client = Client::new(cookie, test, Instant::now(), STEP_WAIT).with_authtoken(token);
        let mut s = Session {
            req,
            addr,
            cookie,
            probe: Some(probe),
            started_at,
            ctl,
            client,
            guard: None,
            ours: Role::Client,
        };
        s.until(interrupt, ClientEvent::CreateStreams)
            .map_err(|e| e.named_auth(auth))?;
        Ok(s)
    }

    /// When the setup's one wait (cookie to TEST_RUNNING) ends.
    pub fn setup_until(&self) -> Instant {
        self.client.deadline().unwrap_or_else(Instant::now)
    }

    /// The data connections are made: waits for TEST_RUNNING.
    pub fn until_running(&mut self, interrupt: &Interrupt) -> Result<(), Iperf3RunError> {
        self.until(interrupt, ClientEvent::Running)
    }

    fn until(&mut self, interrupt: &Interrupt, want: ClientEvent) -> Result<(), Iperf3RunError> {
        let mut step = Stepper {
            ctl: &mut self.ctl,
            addr: self.addr,
        };
        step.until(&mut self.client, interrupt, |e| *e == want)
    }

    /// Runs the test on `side` to its end (TEST_END `end_after` our senders stopped),
    /// exchanges the results (ours as `ours` puts them, the far side as `far` reads
    /// theirs) and assembles the document.
    pub fn finish(
        self,
        side: Box<dyn Side>,
        end_after: Duration,
        interrupt: &Interrupt,
        live: &mut dyn FnMut(LiveInterval<'_>),
        ours: impl FnOnce(&SideResult) -> Results,
        far: impl FnOnce(&Results, &str) -> SideResult,
    ) -> Document {
        let Session {
            req,
            addr,
            started_at,
            mut ctl,
            client,
            guard,
            ours: our_role,
            ..
        } = self;
        let step = Stepper {
            ctl: &mut ctl,
            addr,
        };
        let mut run = Running {
            step,
            end_after,
            client,
            side,
            intervals: Vec::new(),
            live,
            guard,
            ours: our_role,
        };
        let cut = run.until_exchange(interrupt);
        let Running {
            mut step,
            mut client,
            side,
            intervals,
            ..
        } = run;
        let mut error = match cut {
            Ok(()) => None,
            Err(Iperf3RunError::Interrupted) => {
                // As iperf3's own client on Ctrl-C: CLIENT_TERMINATE.
                let _ = step.ctl.stream.write_all(&[12]);
                Some("interrupted (Ctrl-C)".to_string())
            }
            Err(e @ Iperf3RunError::Broke { .. }) => {
                let _ = step.ctl.stream.write_all(&[12]);
                Some(e.to_string())
            }
            Err(e) => Some(e.to_string()),
        };
        if error.is_none() && !side.all_done() {
            error = Some("receivers did not see the end of every stream in time".into());
        }
        let mine = side.into_result(error.is_some());
        let mut theirs = None;
        if error.is_none() {
            match step.exchange(&mut client, &ours(&mine)) {
                Ok(r) => theirs = Some(r),
                Err(e) => error = Some(e.to_string()),
            }
        }
        // A figure of theirs that ours contradicts never reaches the document.
        let packets = matches!(req.spec, TestSpec::Pps(_));
        if let Some(r) = &theirs {
            if let Err(why) = super::vouch::vouch(r, &super::vouch::ours_of(&mine), packets) {
                error = Some(format!(
                    "iperf3 server at {addr}: its results refused: {why}"
                ));
                theirs = None;
            }
        }
        let version = theirs.as_ref().and_then(Results::server_version);
        let who = figures::measured_by(version.as_deref());
        let far = theirs.as_ref().map(|r| far(r, &who));
        // The document's client is the sender: ours, or the server's under -R (our side
        // then in the server's place even when the server's results are missing).
        let (client, server, client_intervals, server_intervals) = match (our_role, &far) {
            (Role::Server, Some(f)) => (f, Some(&mine), &[][..], &intervals[..]),
            _ => (&mine, far.as_ref(), &intervals[..], &[][..]),
        };
        super::document(
            &req.spec,
            (req.command.clone(), started_at),
            (who, addr.to_string()),
            (client, server),
            (client_intervals, server_intervals),
            error,
            req.fleet.clone(),
        )
    }
}

/// This host's clock in Unix seconds, as iperf3's token carries it.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The control connection and the machine on it, before the test.
struct Stepper<'c> {
    ctl: &'c mut Control,
    addr: SocketAddr,
}

impl Stepper<'_> {
    fn perr(&self, source: Iperf3Error) -> Iperf3RunError {
        Iperf3RunError::Protocol {
            addr: self.addr,
            source,
        }
    }

    /// Writes what `c` queued.
    fn flush(&mut self, c: &mut Client) -> Result<(), Iperf3RunError> {
        let addr = self.addr;
        self.ctl
            .flush(|| c.poll_transmit())
            .map_err(|source| Iperf3RunError::Io {
                addr,
                what: "control connection",
                source,
            })
    }

    /// Writes what `c` queued, then reads once (at most a slice) and feeds it.
    fn turn(&mut self, c: &mut Client, deadline: Option<Instant>) -> Result<(), Iperf3RunError> {
        let addr = self.addr;
        self.ctl.turn(c, deadline).map_err(|e| match e {
            Turn::Io(source) => Iperf3RunError::Io {
                addr,
                what: "control connection",
                source,
            },
            Turn::Protocol(source) => Iperf3RunError::Protocol { addr, source },
        })
    }

    /// Turns until an event `done` says is the one.
    fn until(
        &mut self,
        c: &mut Client,
        interrupt: &Interrupt,
        done: impl Fn(&ClientEvent) -> bool,
    ) -> Result<(), Iperf3RunError> {
        loop {
            if interrupt.is_set() {
                return Err(Iperf3RunError::Interrupted);
            }
            self.turn(c, None)?;
            while let Some(e) = c.poll_event() {
                if done(&e) {
                    return Ok(());
                }
            }
        }
    }
}

/// The test running: our side sampled on its schedule, the control connection read
/// between samples.
struct Running<'c, 'l> {
    step: Stepper<'c>,
    /// How long after our senders stop TEST_END is said.
    end_after: Duration,
    client: Client,
    side: Box<dyn Side>,
    intervals: Vec<IntervalSample>,
    live: &'l mut dyn FnMut(LiveInterval<'_>),
    guard: Option<Guard>,
    ours: Role,
}

impl Running<'_, '_> {
    /// Samples our side until the planned end, says TEST_END, and waits for the server's
    /// EXCHANGE_RESULTS and for our receivers to see every stream end (or for the drain
    /// to be overdue).
    fn until_exchange(&mut self, interrupt: &Interrupt) -> Result<(), Iperf3RunError> {
        let mut ended = false;
        let mut stopped: Option<Instant> = None;
        let mut exchange = false;
        loop {
            if interrupt.is_set() {
                return Err(Iperf3RunError::Interrupted);
            }
            let now = Instant::now();
            if let Some(why) = self.guard.as_mut().and_then(|g| g(now)) {
                let addr = self.step.addr;
                return Err(Iperf3RunError::Broke { addr, why });
            }
            if let Some(s) = self.side.on_time(now) {
                let ours = Some(&s);
                let (client, server) = match self.ours {
                    Role::Server => (None, ours),
                    _ => (ours, None),
                };
                (self.live)(LiveInterval { client, server });
                self.intervals.push(s);
            }
            if stopped.is_none() && self.side.is_draining() {
                self.side.finish_senders();
                stopped = Some(now);
            }
            // TEST_END once our last datagrams had time to arrive: a UDP server stops
            // counting at TEST_END, and what it never read would read as lost.
            if !ended && stopped.is_some_and(|t| now >= t + self.end_after) {
                self.client.end(now).map_err(|e| self.step.perr(e))?;
                ended = true;
            }
            let overdue = now > self.side.planned_end() + DRAIN;
            if exchange && (self.side.all_done() || overdue) {
                return Ok(());
            }
            let guarded = self.guard.as_ref().map(|_| now + GUARD_EVERY);
            let wake = [self.side.next_deadline(), guarded]
                .into_iter()
                .flatten()
                .min();
            self.step.turn(&mut self.client, wake)?;
            while let Some(e) = self.client.poll_event() {
                exchange |= e == ClientEvent::ExchangeResults;
            }
        }
    }
}

impl Stepper<'_> {
    /// Sends our results and reads the server's, to IPERF_DONE.
    fn exchange(&mut self, c: &mut Client, ours: &Results) -> Result<Results, Iperf3RunError> {
        c.send_results(ours, Instant::now())
            .map_err(|e| self.perr(e))?;
        let mut theirs = None;
        while !c.is_done() {
            self.turn(c, None)?;
            while let Some(e) = c.poll_event() {
                if let ClientEvent::ServerResults(r) = e {
                    theirs = Some(*r);
                }
            }
        }
        self.flush(c)?;
        theirs.ok_or_else(|| self.perr(Iperf3Error::Misuse("finish without results")))
    }
}
