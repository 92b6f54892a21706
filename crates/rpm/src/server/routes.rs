//! The draft's four URLs: `/.well-known/nq` (the configuration, its URLs on the host the
//! client named), `/large` (8 GiB of zeros, streamed from one shared buffer: never held),
//! `/small` (1 byte), `/upload` (a sink: read and dropped); and sonde's own
//! `/sonde/tcp_info` (the asking connection's TCP_INFO: [`crate::far`]). Every answer is
//! identity encoded (nothing here compresses), none redirects; anything else is 404 or 405.

use std::convert::Infallible;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::limits::Bucket;
use crate::lowat;

/// The large object's size: the draft asks for at least 8 GB.
pub const LARGE_BYTES: u64 = 8 << 30;

pub type Answer = Response<UnsyncBoxBody<Bytes, Infallible>>;

/// What one connection's requests share: the socket (for its send-buffer mark), the
/// service's bucket and counters.
pub struct Shared {
    pub tls: bool,
    pub socket: Arc<OwnedFd>,
    pub bucket: Option<Arc<Mutex<Bucket>>>,
    pub sent: Arc<AtomicU64>,
    pub received: Arc<AtomicU64>,
}

fn full(status: StatusCode, kind: &'static str, body: impl Into<Bytes>) -> Answer {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, kind)
        .body(Full::new(body.into()).boxed_unsync())
        .expect("a static response")
}

/// 503 for a connection beyond the limit: the body names it.
pub fn refused(limit: usize) -> Answer {
    full(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain",
        format!("refused: connection limit {limit} reached (sonde serve --rpm-max-connections)\n"),
    )
}

/// Answers one request.
pub async fn answer(req: Request<Incoming>, shared: Arc<Shared>) -> Answer {
    let path = req.uri().path();
    let method = req.method().clone();
    match (path, method) {
        ("/.well-known/nq", Method::GET) => {
            let scheme = if shared.tls { "https" } else { "http" };
            match authority(&req) {
                Some(a) => full(
                    StatusCode::OK,
                    "application/json",
                    crate::config::render(&format!("{scheme}://{a}")),
                ),
                None => full(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    "no usable :authority\n",
                ),
            }
        }
        ("/small", Method::GET) => full(StatusCode::OK, "application/octet-stream", "x"),
        ("/large", Method::GET) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Large::new(shared).boxed_unsync())
            .expect("a static response"),
        ("/upload", Method::POST) => sink(req.into_body(), &shared).await,
        (crate::far::PATH, Method::GET) => far(&shared),
        ("/.well-known/nq" | "/small" | "/large" | "/upload", _) => full(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        ),
        _ => full(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// The asking connection's own TCP_INFO (only its socket is read: no other client's).
fn far(shared: &Shared) -> Answer {
    use std::os::fd::AsRawFd;
    match sonde_engine::tcp_info::tcp_info(shared.socket.as_raw_fd()) {
        Some(t) => full(
            StatusCode::OK,
            "application/json",
            serde_json::to_vec(&crate::far::Reading::from(&t)).unwrap_or_default(),
        ),
        None => full(StatusCode::NOT_FOUND, "text/plain", "no tcp_info\n"),
    }
}

/// The request's authority, when it is a plain `host[:port]` (it goes into JSON).
fn authority(req: &Request<Incoming>) -> Option<String> {
    let a = match req.uri().authority() {
        Some(a) => a.as_str().to_string(),
        None => req.headers().get(header::HOST)?.to_str().ok()?.to_string(),
    };
    let plain = a
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
    (plain && !a.is_empty() && a.len() <= 260).then_some(a)
}

/// Reads and drops an upload's body, under the bucket; 200 once it ends.
async fn sink(mut body: Incoming, shared: &Shared) -> Answer {
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(data) = frame.data_ref() {
            shared
                .received
                .fetch_add(data.len() as u64, Ordering::Relaxed);
            if let Some(wait) = take(&shared.bucket, data.len()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    full(StatusCode::OK, "text/plain", "")
}

fn take(bucket: &Option<Arc<Mutex<Bucket>>>, bytes: usize) -> Option<std::time::Duration> {
    let b = bucket.as_ref()?;
    let mut b = b.lock().unwrap_or_else(|p| p.into_inner());
    b.take(bytes, Instant::now())
}

/// The large object, made as it is sent: each chunk 5 ms of the connection's rate, and
/// only once the socket holds less than that unsent (the draft's send-buffer advice), so
/// that a probe's answer on the same connection waits behind little of it.
struct Large {
    shared: Arc<Shared>,
    left: u64,
    gate: lowat::Gate,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Large {
    fn new(shared: Arc<Shared>) -> Large {
        let gate = lowat::Gate::new(Arc::clone(&shared.socket));
        Large {
            shared,
            left: LARGE_BYTES,
            gate,
            wait: None,
        }
    }
}

impl Body for Large {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(w) = self.wait.as_mut() {
            if w.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
        }
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let chunk = match self.gate.poll_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(c) => c,
        };
        let n = (chunk as u64).min(self.left) as usize;
        if let Some(wait) = take(&self.shared.bucket, n) {
            // Sent now; the next waits until the bucket's debt is paid.
            self.wait = Some(Box::pin(tokio::time::sleep(wait)));
        }
        self.left -= n as u64;
        self.shared.sent.fetch_add(n as u64, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(lowat::zeros(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
