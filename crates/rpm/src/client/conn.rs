//! One HTTP/2 connection of the client, its handshakes timed: TCP connect (`tcp_f`), the
//! TLS handshake per round trip (`tls_f`: TLS 1.3 takes one, 1.2 two), and requests that
//! are checked as the draft needs them answered: 200, no redirect, identity encoded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

use super::ClientError;
use crate::config::Url;

pub type ReqBody = UnsyncBoxBody<Bytes, Infallible>;

/// Windows the client offers: a stream's 8 MiB, the connection's 16 MiB (h2's 64 KiB
/// default would cap a download at 64 KiB a round trip).
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// What an upload stream may hold in h2's buffer (a self probe's request waits behind it).
const SEND_BUF_BYTES: usize = 16 << 10;
/// Connect, handshake or a probe's answer: longer is a failure.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where connections go and how.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The URL's host: SNI and `:authority` (also with a `test_endpoint`).
    pub host: String,
    pub authority: String,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// An open connection.
pub struct Conn {
    pub sender: http2::SendRequest<ReqBody>,
    pub socket: Arc<OwnedFd>,
    pub task: JoinHandle<()>,
    pub tcp_ms: f64,
    /// The TLS handshake per round trip; `None` in the clear.
    pub tls_ms: Option<f64>,
    pub tls_version: Option<String>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

async fn within<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(STEP_TIMEOUT, f)
        .await
        .map_err(|_| ClientError::Timeout(what.to_string()))?
}

/// Opens a connection to `t`: TCP, TLS, the HTTP/2 preface.
pub async fn open(t: &Target) -> Result<Conn, ClientError> {
    let start = Instant::now();
    let tcp = within("TCP connect", async {
        tokio::net::TcpStream::connect(t.addr)
            .await
            .map_err(|e| ClientError::Connect(t.addr, e))
    })
    .await?;
    let tcp_ms = ms(start);
    let _ = tcp.set_nodelay(true);
    let socket = Arc::new(
        tcp.as_fd()
            .try_clone_to_owned()
            .map_err(|e| ClientError::Connect(t.addr, e))?,
    );
    let Some(config) = &t.tls else {
        let (sender, task) = handshake(tcp).await?;
        return Ok(Conn {
            sender,
            socket,
            task,
            tcp_ms,
            tls_ms: None,
            tls_version: None,
        });
    };
    let name = ServerName::try_from(t.host.clone())
        .map_err(|_| ClientError::Tls(t.host.clone(), "not a server name".into()))?;
    let start = Instant::now();
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    let tls = within("TLS handshake", async {
        connector
            .connect(name, tcp)
            .await
            .map_err(|e| tls_error(&t.host, e))
    })
    .await?;
    let handshake_ms = ms(start);
    let session = tls.get_ref().1;
    if session.alpn_protocol() != Some(b"h2") {
        return Err(ClientError::NotHttp2(t.authority.clone()));
    }
    let version = session.protocol_version();
    let round_trips = match version {
        Some(rustls::ProtocolVersion::TLSv1_3) => 1.0,
        _ => 2.0,
    };
    let mut tls = tls;
    tls.get_mut().1.set_buffer_limit(Some(SEND_BUF_BYTES));
    let (sender, task) = handshake(tls).await?;
    Ok(Conn {
        sender,
        socket,
        task,
        tcp_ms,
        tls_ms: Some(handshake_ms / round_trips),
        tls_version: version.map(|v| format!("{v:?}")),
    })
}

fn tls_error(host: &str, e: std::io::Error) -> ClientError {
    let text = e.to_string();
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => {
            ClientError::Certificate(host.to_string(), format!("{c:?}"))
        }
        _ => ClientError::Tls(host.to_string(), text),
    }
}

async fn handshake<IO>(io: IO) -> Result<(http2::SendRequest<ReqBody>, JoinHandle<()>), ClientError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buf_size(SEND_BUF_BYTES)
        .handshake(TokioIo::new(io))
        .await
        .map_err(ClientError::Http)?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, task))
}

/// A request of the test: `Accept-Encoding: identity`, as the draft requires.
pub fn request(method: Method, url: &Url, authority: &str, body: ReqBody) -> Request<ReqBody> {
    let scheme = if url.tls { "https" } else { "http" };
    Request::builder()
        .method(method)
        .uri(format!("{scheme}://{authority}{}", url.path))
        .header(header::ACCEPT_ENCODING, "identity")
        .header(
            header::USER_AGENT,
            concat!("sonde/", env!("CARGO_PKG_VERSION")),
        )
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(body)
        .expect("a request from a checked URL")
}

pub fn empty() -> ReqBody {
    Empty::new().boxed_unsync()
}

/// Sends `req` and checks the answer's head: a redirect, a compressed body or another
/// status than 200 is an error naming the URL (a refusal's own words kept).
pub async fn send(
    sender: &mut http2::SendRequest<ReqBody>,
    req: Request<ReqBody>,
) -> Result<Response<Incoming>, ClientError> {
    let url = req.uri().to_string();
    sender.ready().await.map_err(ClientError::Http)?;
    let resp = sender.send_request(req).await.map_err(ClientError::Http)?;
    check(&url, resp).await
}

async fn check(url: &str, resp: Response<Incoming>) -> Result<Response<Incoming>, ClientError> {
    let status = resp.status();
    if status.is_redirection() {
        let to = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .unwrap_or("nowhere named")
            .to_string();
        return Err(ClientError::Redirect(url.into(), status.as_u16(), to));
    }
    if let Some(enc) = resp.headers().get(header::CONTENT_ENCODING) {
        let enc = enc.to_str().unwrap_or("?").to_string();
        if !enc.eq_ignore_ascii_case("identity") {
            return Err(ClientError::Compressed(url.into(), enc));
        }
    }
    if status != StatusCode::OK {
        let body = read_to_end(resp.into_body(), 512).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&body).trim().to_string();
        return Err(ClientError::Status(url.into(), status.as_u16(), text));
    }
    Ok(resp)
}

/// A body's bytes, at most `max` of them kept (the rest read and dropped, up to 1 MiB).
pub async fn read_to_end(mut body: Incoming, max: usize) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ClientError::Http)?;
        if let Some(d) = frame.data_ref() {
            total += d.len();
            let room = max.saturating_sub(out.len());
            out.extend_from_slice(&d[..d.len().min(room)]);
            if total > max.max(1 << 20) {
                break;
            }
        }
    }
    Ok(out)
}

/// A GET of a small object on `sender`, timed from the request to the body's end (ms).
pub async fn timed_get(
    sender: &mut http2::SendRequest<ReqBody>,
    url: &Url,
    authority: &str,
) -> Result<f64, ClientError> {
    within("a probe's answer", async {
        let start = Instant::now();
        let resp = send(sender, request(Method::GET, url, authority, empty())).await?;
        read_to_end(resp.into_body(), 64).await?;
        Ok(ms(start))
    })
    .await
}
