//! `sonde fleet --every --metrics ADDR:PORT`: every run of every pair, as it ends, goes to
//! the exporter; the HTTP thread serves its text; a pair not heard of for two periods
//! leaves the metrics.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use std::net::SocketAddr;
use std::path::PathBuf;

use sonde_report::openmetrics::{Exporter, RunOutcome};
use sonde_results::document::FleetPair;
use sonde_results::Document;

use crate::metrics_http::{tls_config, Access, MetricsError, Token};
use crate::signals::Interrupt;

/// `sonde fleet`'s `--metrics`, `--metrics-token-file`, `--metrics-tls-cert` and
/// `--metrics-tls-key`.
pub struct MetricsArgs {
    pub metrics: Option<SocketAddr>,
    pub metrics_token_file: Option<PathBuf>,
    pub metrics_tls_cert: Option<PathBuf>,
    pub metrics_tls_key: Option<PathBuf>,
}

/// The exporter and the thread that serves it.
pub struct FleetMetrics {
    exporter: Arc<Mutex<Exporter>>,
    server: JoinHandle<()>,
    stop: Interrupt,
}

/// What the fleet calls with each run's document or failure.
pub type Recorder = Box<dyn Fn(&FleetPair, Result<&Document, &str>) + Sync>;

/// Listening on `--metrics`, when it was given; the error names the address.
pub fn start(args: &MetricsArgs) -> Result<Option<FleetMetrics>, MetricsError> {
    let Some(addr) = args.metrics else {
        return Ok(None);
    };
    let exporter = Arc::new(Mutex::new(Exporter::new()));
    let text = Arc::clone(&exporter);
    // Its own flag: the server outlives a stop signal until the fleet's last run is in.
    let stop = Interrupt::none();
    let body = move || text.lock().unwrap().encode();
    let access = Access {
        token: args
            .metrics_token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?,
        tls: match (&args.metrics_tls_cert, &args.metrics_tls_key) {
            (Some(cert), Some(key)) => Some(tls_config(cert, key)?),
            _ => None,
        },
    };
    let scheme = if access.tls.is_some() {
        "https"
    } else {
        "http"
    };
    // Rendered at each scrape (a run just recorded is in the next one); a copy per
    // connection is still within the server's write budget.
    let every = Duration::ZERO;
    let (local, server) = crate::metrics_http::serve(addr, body, every, access, stop.clone())?;
    let said = format!("metrics: {scheme}://{local}/metrics");
    eprintln!("{}", sonde_report::safe::terminal(&said));
    Ok(Some(FleetMetrics {
        exporter,
        server,
        stop,
    }))
}

impl FleetMetrics {
    /// Records each run as it ends: its pair, its test case, its document or failure.
    pub fn recorder(&self) -> Recorder {
        let exporter = Arc::clone(&self.exporter);
        Box::new(move |pair: &FleetPair, run: Result<&Document, &str>| {
            let outcome = match run {
                Ok(doc) => RunOutcome::Stored(doc),
                Err(why) => RunOutcome::Failed(why),
            };
            let test = pair.test.as_str();
            let mut e = exporter.lock().unwrap();
            e.record(pair, test, outcome, SystemTime::now());
        })
    }

    /// Drops the pairs not heard of within `window`.
    pub fn expire(&self, window: Duration) {
        let cutoff = SystemTime::now()
            .checked_sub(window)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.exporter.lock().unwrap().expire(cutoff);
    }

    pub fn stop(self) {
        self.stop.set();
        let _ = self.server.join();
    }
}
