//! One direction's stage: load-generating connections (each one endless GET of the large
//! object, or one endless POST to the upload URL), foreign probes on fresh connections and
//! self probes on a load connection picked at random, interleaved at the rate the method
//! allows; at each interval's end the bytes and probes go to [`DirectionRun`]. Download
//! goodput is the body bytes read; upload goodput the bytes the server's TCP acknowledged
//! (`TCP_INFO`), since what hyper took into its buffers has not yet crossed the network.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::os::fd::{AsFd, AsRawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper::client::conn::http2::SendRequest;
use sonde_engine::tcp_info::tcp_info;
use sonde_engine::tcp_sample;
use sonde_engine::TcpInfo;
use sonde_results::rpm::{RpmDirection, RpmParams};
use sonde_results::tcp::TcpSample;
use sonde_results::Transfer;
use tokio::task::JoinHandle;

use super::conn::{self, Conn, ReqBody, Target};
use super::error::ClientError;
use crate::config::Url;
use crate::lowat;
use crate::method::{DirectionRun, Next, Probes};

/// Probes in flight at most; a tick finding more sends none (a stalled path is not
/// flooded with connections).
const MAX_IN_FLIGHT: usize = 256;

/// The URLs and where they connect.
pub struct Run {
    pub params: RpmParams,
    pub small: Url,
    pub small_target: Target,
    pub large: Url,
    pub large_target: Target,
    pub upload: Url,
    pub upload_target: Target,
}

/// A load-generating connection.
struct Load {
    sender: SendRequest<ReqBody>,
    conn: Conn,
    /// Upload: the bytes acked at the last interval's end.
    acked: u64,
    /// The stage's index of the connection, and its TCP_INFO at the last interval's end
    /// (at its opening, before its first).
    id: u32,
    info: Option<TcpInfo>,
}

/// What the stage's tasks share.
#[derive(Default)]
struct Shared {
    loads: Mutex<Vec<Load>>,
    /// Load-generating connections opened so far.
    opened: AtomicU32,
    downloaded: AtomicU64,
    probes: Mutex<Probes>,
    in_flight: AtomicUsize,
    failure: Mutex<Option<ClientError>>,
    /// The server's readings of each load connection (`crate::far`): the last one by
    /// connection, the samples made of them with their interval's index, and whether the
    /// server said it has none (not `sonde serve --rpm`: then it is not asked again).
    far_last: Mutex<BTreeMap<u32, TcpInfo>>,
    far_samples: Mutex<Vec<(usize, TcpSample)>>,
    far_absent: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn fail(&self, e: ClientError) {
        lock(&self.failure).get_or_insert(e);
    }
}

/// The longest the stage loop sleeps: how soon it sees the stop flag.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// One direction's result, the probes of its final window, and whether `stop` cut it
/// (then it holds the intervals that ended before; the one under way is dropped).
pub struct Ran {
    pub direction: RpmDirection,
    pub window: Probes,
    pub stopped: bool,
}

/// Runs one direction until the method stops it, or `stop()` says so.
pub async fn direction(
    run: &Run,
    upload: bool,
    stop: &dyn Fn() -> bool,
) -> Result<Ran, ClientError> {
    let shared = Arc::new(Shared::default());
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    let mut stage = DirectionRun::new(run.params.clone());
    let start = Instant::now();
    for _ in 0..stage.connections() {
        tasks.push(open_load(run, upload, &shared));
    }
    let interval = Duration::from_millis(run.params.interval_ms);
    let mut next_interval = start + interval;
    let mut last_edge = start;
    let mut interval_no = 0usize;
    let mut next_probe = start;
    let mut seed = start.elapsed().as_nanos() as u64 | 1;
    let outcome = loop {
        let now = Instant::now();
        if let Some(e) = lock(&shared.failure).take() {
            break Err(e);
        }
        if stop() {
            break Ok(true);
        }
        if now >= next_interval {
            let bytes = interval_bytes(&shared, upload);
            let probes = std::mem::take(&mut *lock(&shared.probes));
            let elapsed = now.duration_since(start).as_secs_f64() * 1e3;
            let tcp = interval_tcp(&shared, upload, now.duration_since(last_edge).as_secs_f64());
            last_edge = now;
            let next = stage.end_interval(bytes, probes, elapsed);
            stage.record_tcp(tcp);
            record_far(&shared, &mut stage);
            let index = interval_no;
            interval_no += 1;
            if !shared.far_absent.load(Ordering::Relaxed) {
                tasks.extend(far_fetches(run, upload, &shared, index));
            }
            match next {
                Next::Stop => break Ok(false),
                Next::Add(n) => (0..n).for_each(|_| tasks.push(open_load(run, upload, &shared))),
            }
            next_interval += interval;
            tasks.retain(|t| !t.is_finished());
        } else if now >= next_probe {
            if shared.in_flight.load(Ordering::Relaxed) < MAX_IN_FLIGHT {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                tasks.push(foreign_probe(run, &shared));
                tasks.push(self_probe(run, &shared, seed));
            }
            next_probe += Duration::from_secs_f64(1.0 / stage.probe_rate());
        }
        let wake = next_interval
            .min(next_probe)
            .min(Instant::now() + LOOK_EVERY)
            .max(Instant::now());
        tokio::time::sleep_until(wake.into()).await;
    };
    for t in &tasks {
        t.abort();
    }
    lock(&shared.loads).clear();
    record_far(&shared, &mut stage);
    let stopped = outcome?;
    let window = stage.window_probes();
    Ok(Ran {
        direction: stage.finish(start.elapsed().as_millis() as u64),
        window,
        stopped,
    })
}

/// The bytes this interval moved: download body bytes read, or upload bytes acked.
fn interval_bytes(shared: &Shared, upload: bool) -> u64 {
    if !upload {
        return shared.downloaded.swap(0, Ordering::Relaxed);
    }
    let mut total = 0;
    for l in lock(&shared.loads).iter_mut() {
        if let Some(now) = lowat::tcp_info(l.conn.socket.as_fd()) {
            total += now.acked.saturating_sub(l.acked);
            l.acked = now.acked;
        }
    }
    total
}

/// Each load-generating connection's TCP_INFO over the interval of `secs` that just
/// ended, as the stream kind samples its connections: the client sends the upload's bytes
/// and receives the download's.
fn interval_tcp(shared: &Shared, upload: bool, secs: f64) -> Vec<TcpSample> {
    let transfer = match upload {
        true => Transfer::Send,
        false => Transfer::Receive,
    };
    let mut out = Vec::new();
    for l in lock(&shared.loads).iter_mut() {
        if let Some(now) = tcp_info(l.conn.socket.as_raw_fd()) {
            out.push(tcp_sample::sample(
                l.id,
                transfer,
                l.info.as_ref(),
                &now,
                secs,
            ));
            l.info = Some(now);
        }
    }
    out
}

/// The server's samples that arrived, into their intervals.
fn record_far(shared: &Shared, stage: &mut DirectionRun) {
    for (index, s) in std::mem::take(&mut *lock(&shared.far_samples)) {
        stage.record_server_tcp(index, s);
    }
}

/// Asks the server, over each load connection, for that connection's TCP_INFO
/// ([`crate::far`]) as interval `index` ends; each answer becomes the interval's sample of
/// the connection from the server's previous reading. A server that has none (404: not
/// `sonde serve --rpm`) is not asked again; no answer is ever a failure of the run.
fn far_fetches(run: &Run, upload: bool, shared: &Arc<Shared>, index: usize) -> Vec<JoinHandle<()>> {
    let (mut url, authority) = match upload {
        false => (run.large.clone(), run.large_target.authority.clone()),
        true => (run.upload.clone(), run.upload_target.authority.clone()),
    };
    url.path = crate::far::PATH.into();
    // The server's side of the transfer: it sends the download, receives the upload.
    let transfer = match upload {
        true => Transfer::Receive,
        false => Transfer::Send,
    };
    let senders: Vec<(u32, SendRequest<ReqBody>)> = lock(&shared.loads)
        .iter()
        .map(|l| (l.id, l.sender.clone()))
        .collect();
    let interval = Duration::from_millis(run.params.interval_ms).as_secs_f64();
    senders
        .into_iter()
        .map(|(id, mut sender)| {
            let (shared, url, authority) = (Arc::clone(shared), url.clone(), authority.clone());
            tokio::spawn(async move {
                let req = conn::request(Method::GET, &url, &authority, conn::empty());
                let Ok(resp) = sender.send_request(req).await else {
                    return;
                };
                if resp.status() != http::StatusCode::OK {
                    shared.far_absent.store(true, Ordering::Relaxed);
                    return;
                }
                let Ok(body) = conn::read_to_end(resp.into_body(), 4096).await else {
                    return;
                };
                let Ok(r) = serde_json::from_slice::<crate::far::Reading>(&body) else {
                    shared.far_absent.store(true, Ordering::Relaxed);
                    return;
                };
                let now = r.info();
                let before = lock(&shared.far_last).insert(id, now);
                let s = tcp_sample::sample(id, transfer, before.as_ref(), &now, interval);
                lock(&shared.far_samples).push((index, s));
            })
        })
        .collect()
}

/// Opens one load-generating connection and keeps it loaded until aborted.
fn open_load(run: &Run, upload: bool, shared: &Arc<Shared>) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    let (url, target) = match upload {
        false => (run.large.clone(), run.large_target.clone()),
        true => (run.upload.clone(), run.upload_target.clone()),
    };
    tokio::spawn(async move {
        if let Err(e) = load(&url, &target, upload, &shared).await {
            shared.fail(e);
        }
    })
}

async fn load(url: &Url, t: &Target, upload: bool, shared: &Shared) -> Result<(), ClientError> {
    let c = conn::open(t).await?;
    let mut sender = c.sender.clone();
    let acked = lowat::tcp_info(c.socket.as_fd()).map_or(0, |n| n.acked);
    let gate = lowat::Gate::new(Arc::clone(&c.socket));
    let info = tcp_info(c.socket.as_raw_fd());
    lock(&shared.loads).push(Load {
        sender: c.sender.clone(),
        conn: c,
        acked,
        id: shared.opened.fetch_add(1, Ordering::Relaxed),
        info,
    });
    if upload {
        let req = conn::request(
            Method::POST,
            url,
            &t.authority,
            Endless(gate).boxed_unsync(),
        );
        conn::send(&mut sender, req).await?;
        return Ok(());
    }
    let req = conn::request(Method::GET, url, &t.authority, conn::empty());
    let mut body = conn::send(&mut sender, req).await?.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ClientError::Http)?;
        if let Some(d) = frame.data_ref() {
            shared
                .downloaded
                .fetch_add(d.len() as u64, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// A foreign probe: a fresh connection (TCP, TLS timed), a 1-byte GET on it, closed.
fn foreign_probe(run: &Run, shared: &Arc<Shared>) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    let (url, target) = (run.small.clone(), run.small_target.clone());
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        let probe = async {
            let mut c = conn::open(&target).await?;
            let http = conn::timed_get(&mut c.sender, &url, &target.authority).await?;
            Ok::<_, ClientError>((c.tcp_ms, c.tls_ms, http))
        };
        match probe.await {
            Ok((tcp, tls, http)) => {
                let mut p = lock(&shared.probes);
                p.tcp.push(tcp);
                p.tls.extend(tls);
                p.http.push(http);
            }
            Err(e) => shared.fail(e),
        }
        shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    })
}

/// A self probe: a 1-byte GET on a load connection picked by `pick`.
fn self_probe(run: &Run, shared: &Arc<Shared>, pick: u64) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    let url = run.small.clone();
    let authority = run.small_target.authority.clone();
    let sender = {
        let loads = lock(&shared.loads);
        match loads.len() {
            0 => None,
            n => Some(loads[(pick % n as u64) as usize].sender.clone()),
        }
    };
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        if let Some(mut sender) = sender {
            match conn::timed_get(&mut sender, &url, &authority).await {
                Ok(ms) => lock(&shared.probes).loaded.push(ms),
                Err(e) => shared.fail(e),
            }
        }
        shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    })
}

/// An upload that never ends: zeros, each chunk 5 ms of the connection's rate and only
/// once the socket holds less than that unsent (the draft's advice for clients too), so
/// that a self probe's request is not queued behind seconds of our own upload.
struct Endless(lowat::Gate);

impl Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_ready(cx)
            .map(|n| Some(Ok(Frame::data(lowat::zeros(n)))))
    }
}
