//! `sonde serve --rpm`: the draft's test endpoint over HTTP/2 (hyper) and TLS 1.3 (rustls),
//! or h2c when asked. One thread runs a current-thread tokio runtime with the accept loop
//! and every connection. Who may connect and how much is decided in [`limits`]; each
//! connection is watched by its own deadlines, so that a slow or silent client holds a
//! place for seconds, not for ever: the TLS handshake and the first request's headers
//! within [`FIRST_REQUEST`] of the accept, no progress (no request, no byte either way)
//! for [`STALLED`] closes it, and nothing lives past the operator's `max_duration`. A TLS
//! client that asks for HTTP/1.1 by ALPN (Cloudflare's mach times its idle round trips so)
//! is served HTTP/1.1 under the same deadlines and budget.

pub mod limits;
mod routes;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

pub use limits::{Admit, Limits, MAX_REQUESTS_PER_S};
pub use routes::LARGE_BYTES;

use crate::lowat;
use limits::{Bucket, Counts, RequestBudget, SEND_BUF_BYTES};
use routes::Shared;

/// From accept to the first request's headers, TLS handshake included.
pub const FIRST_REQUEST: Duration = Duration::from_secs(3);
/// A connection on which nothing moved for this long is closed.
pub const STALLED: Duration = Duration::from_secs(5);
/// A refused connection's whole life (its 503 written).
pub const REFUSE_DEADLINE: Duration = Duration::from_secs(2);
/// How often the accept loop looks at its stop flag, and connections at their deadlines.
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// Connections the kernel completes before we accept them.
const LISTEN_BACKLOG: i32 = 1024;
/// Largest header block a request may carry (ours are a few hundred bytes).
const MAX_HEADER_BYTES: u32 = 16 << 10;
/// Streams one connection may have open: a load and its probes.
pub const MAX_STREAMS: u32 = 128;
/// Streams a client may reset before the server accepted them, on one connection, before
/// h2 closes it (GOAWAY ENHANCE_YOUR_CALM): the rapid reset of CVE-2023-44487. h2's own
/// default, stated here so that a change of it is ours to see.
const MAX_PENDING_RESETS: usize = 20;

/// Who may connect: loopback and the networks the operator named.
pub type Allow = Arc<dyn Fn(IpAddr) -> bool + Send + Sync>;

pub struct ServerConfig {
    pub bind: SocketAddr,
    /// TLS 1.3 (the draft's); `None` serves h2c (HTTP/2 in the clear, prior knowledge).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub allow: Allow,
    pub limits: Limits,
    /// The congestion control of its connections (one the kernel lists); `None`: the
    /// system's default.
    pub congestion: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("--rpm {0}: cannot listen: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("--rpm-max-memory: {0}")]
    Memory(String),
    #[error("--rpm-congestion {0}: not one this kernel has loaded ({1})")]
    Congestion(String, String),
    #[error("cannot start the RPM service's thread: {0}")]
    Thread(std::io::Error),
}

/// What the service did, for its log and its tests.
#[derive(Debug, Default)]
pub struct Tally {
    pub served: AtomicU64,
    pub refused: AtomicU64,
    pub dropped: AtomicU64,
    /// Connections closed by a deadline (first request, stall, duration).
    pub timed_out: AtomicU64,
    /// Connections closed for going over [`MAX_REQUESTS_PER_S`].
    pub over_budget: AtomicU64,
}

/// A running service: where it listens, what it did, its thread.
pub struct Running {
    pub local: SocketAddr,
    pub tally: Arc<Tally>,
    pub thread: JoinHandle<()>,
}

/// Listens on the configured address and serves until `stop()` says so.
pub fn start(
    cfg: ServerConfig,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<Running, ServerError> {
    let window = cfg.limits.window_bytes().map_err(ServerError::Memory)?;
    if let Some(cc) = &cfg.congestion {
        let known = lowat::available_congestion();
        if !known.contains(cc) {
            return Err(ServerError::Congestion(cc.clone(), known.join(", ")));
        }
    }
    let listener = listen(cfg.bind).map_err(|e| ServerError::Listen(cfg.bind, e))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServerError::Listen(cfg.bind, e))?;
    let tally = Arc::new(Tally::default());
    let t = Arc::clone(&tally);
    let thread = std::thread::Builder::new()
        .name("rpm".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime");
            rt.block_on(accept_loop(listener, cfg, window, t, stop));
        })
        .map_err(ServerError::Thread)?;
    Ok(Running {
        local,
        tally,
        thread,
    })
}

fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(LISTEN_BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// What every connection of the service shares.
struct Ctx {
    cfg: ServerConfig,
    window: u32,
    counts: Mutex<Counts>,
    bucket: Option<Arc<Mutex<Bucket>>>,
    tally: Arc<Tally>,
}

async fn accept_loop(
    listener: std::net::TcpListener,
    cfg: ServerConfig,
    window: u32,
    tally: Arc<Tally>,
    stop: impl Fn() -> bool,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("inside the runtime");
    let bucket = cfg
        .limits
        .max_bitrate
        .map(|b| Arc::new(Mutex::new(Bucket::new(b, Instant::now()))));
    let ctx = Arc::new(Ctx {
        cfg,
        window,
        counts: Mutex::new(Counts::default()),
        bucket,
        tally,
    });
    while !stop() {
        let accepted = match tokio::time::timeout(LOOK_EVERY, listener.accept()).await {
            Err(_) => continue,
            Ok(Err(e)) => {
                // Out of descriptors and the like: a breath, not a spin.
                tracing::debug!("rpm: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Ok(Ok(a)) => a,
        };
        let (stream, peer) = accepted;
        let allowed = (ctx.cfg.allow)(peer.ip());
        let how = lock(&ctx.counts).admit(allowed, &ctx.cfg.limits);
        match how {
            Admit::Drop => {
                ctx.tally.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Admit::Refuse => {
                ctx.tally.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "rpm: refused {peer}: connection limit {} reached (--rpm-max-connections)",
                    ctx.cfg.limits.max_connections
                );
            }
            Admit::Serve => {
                ctx.tally.served.fetch_add(1, Ordering::Relaxed);
            }
        }
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            connection(stream, peer, how, &ctx).await;
            lock(&ctx.counts).done(how);
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connection from accept to close: TLS, then HTTP/2 under the deadlines.
async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, how: Admit, ctx: &Arc<Ctx>) {
    let accepted = Instant::now();
    let _ = stream.set_nodelay(true);
    let Ok(socket) = stream.as_fd().try_clone_to_owned() else {
        return;
    };
    lowat::set_lowat(socket.as_fd(), lowat::MIN_LOWAT_BYTES);
    if let Some(cc) = &ctx.cfg.congestion {
        lowat::set_congestion(socket.as_fd(), cc);
    }
    let life = match how {
        Admit::Refuse => REFUSE_DEADLINE,
        _ => ctx.cfg.limits.max_duration,
    };
    let shared = Arc::new(Shared {
        tls: ctx.cfg.tls.is_some(),
        socket: Arc::new(socket),
        bucket: ctx.bucket.clone(),
        sent: Arc::new(AtomicU64::new(0)),
        received: Arc::new(AtomicU64::new(0)),
    });
    let until = (accepted + FIRST_REQUEST).into();
    let ended = match &ctx.cfg.tls {
        None => drive(stream, false, how, ctx, shared, accepted, life).await,
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(tls));
            match tokio::time::timeout_at(until, acceptor.accept(stream)).await {
                Ok(Ok(mut s)) => {
                    s.get_mut().1.set_buffer_limit(Some(SEND_BUF_BYTES));
                    let h1 = s.get_ref().1.alpn_protocol() == Some(b"http/1.1");
                    drive(s, h1, how, ctx, shared, accepted, life).await
                }
                Ok(Err(_)) => Ended::Closed,
                Err(_) => Ended::Deadline,
            }
        }
    };
    match ended {
        Ended::Closed => {}
        Ended::Deadline => {
            ctx.tally.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        Ended::OverBudget => {
            ctx.tally.over_budget.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "rpm: closed {peer}: over {MAX_REQUESTS_PER_S} requests a second on one connection (streams opened and reset on a loop?)"
            );
        }
    }
}

/// Why a connection ended.
enum Ended {
    /// The client closed it, or an HTTP/2 or TLS error did.
    Closed,
    /// A deadline: first request, stall, duration.
    Deadline,
    /// More requests than [`MAX_REQUESTS_PER_S`] allows.
    OverBudget,
}

/// Serves HTTP/2 (HTTP/1.1 when `h1`) on `io` until the client closes, a deadline passes
/// or the client goes over its request budget.
#[allow(clippy::too_many_arguments)]
async fn drive<IO>(
    io: IO,
    h1: bool,
    how: Admit,
    ctx: &Arc<Ctx>,
    shared: Arc<Shared>,
    accepted: Instant,
    life: Duration,
) -> Ended
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requests = Arc::new(AtomicU64::new(0));
    let limit = ctx.cfg.limits.max_connections;
    let (counted, sh) = (Arc::clone(&requests), Arc::clone(&shared));
    let service = service_fn(move |req| {
        counted.fetch_add(1, Ordering::Relaxed);
        let sh = Arc::clone(&sh);
        async move {
            Ok::<_, Infallible>(match how {
                Admit::Refuse => routes::refused(limit),
                _ => routes::answer(req, sh).await,
            })
        }
    });
    let mut conn: Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>> = match h1 {
        true => Box::pin(
            http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(FIRST_REQUEST)
                .max_buf_size(MAX_HEADER_BYTES as usize)
                .serve_connection(TokioIo::new(io), service),
        ),
        false => Box::pin(
            http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .initial_stream_window_size(ctx.window)
                .initial_connection_window_size(ctx.window)
                .max_send_buf_size(SEND_BUF_BYTES)
                .max_concurrent_streams(MAX_STREAMS)
                .max_header_list_size(MAX_HEADER_BYTES)
                .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
                .serve_connection(TokioIo::new(io), service),
        ),
    };
    let mut look = tokio::time::interval(LOOK_EVERY);
    let progress = || {
        requests.load(Ordering::Relaxed)
            + shared.sent.load(Ordering::Relaxed)
            + shared.received.load(Ordering::Relaxed)
    };
    let (mut seen, mut moved_at) = (progress(), Instant::now());
    let (mut budget, mut counted) = (RequestBudget::new(moved_at), 0);
    loop {
        let ended = std::future::poll_fn(|cx| match conn.as_mut().poll(cx) {
            Poll::Ready(_) => Poll::Ready(true),
            Poll::Pending => look.poll_tick(cx).map(|_| false),
        })
        .await;
        if ended {
            return Ended::Closed;
        }
        let now = Instant::now();
        let asked = requests.load(Ordering::Relaxed);
        if !budget.spend(asked - counted, now) {
            return Ended::OverBudget;
        }
        counted = asked;
        let p = progress();
        if p != seen {
            (seen, moved_at) = (p, now);
        }
        let silent = requests.load(Ordering::Relaxed) == 0 && now > accepted + FIRST_REQUEST;
        if silent || now > moved_at + STALLED || now > accepted + life {
            return Ended::Deadline;
        }
    }
}
