//! A fleet's runs as OpenMetrics for Prometheus: [`Exporter`] keeps the last run of each
//! (source, destination, test) for `/metrics`, [`export`] writes stored runs with their
//! timestamps for a backfill (`promtool tsdb create-blocks-from openmetrics`).
//!
//! Gauges and counters are encoded by prometheus-client (label escaping, `# EOF`, counter
//! naming); the RTT summary and the backfill's timestamps are written by hand in `text`,
//! as that crate has neither.
//!
//! `sonde_retransmits_total` is a counter: the sender's retransmits summed over the
//! pair's stored stream runs for the exporter's life (or over the stored runs, in a
//! backfill), so `increase()` over a window gives the window's retransmits and a run's
//! length cannot make a gauge of one run's count look better or worse than another's.

pub(crate) mod figures;
mod gauges;
mod mesh;
mod mesh_marks;
#[cfg(test)]
mod tests;
mod text;

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::SystemTime;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use sonde_results::document::FleetPair;
use sonde_results::Document;

pub use figures::{sanitize, FIXED_LABELS, MAX_AGENT_LABELS, MAX_LABEL_VALUE};
use figures::{Kind, Labels, Metric, Sample, Status};
pub use mesh::{encode_mesh, MeshAgent, MeshPeer};

/// The content type of [`Exporter::encode`]'s text, for `GET /metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How one run of a fleet pair ended.
pub enum RunOutcome<'a> {
    Stored(&'a Document),
    /// Nothing stored; why.
    Failed(&'a str),
}

/// The latest run of each (fleet, source, destination, test), and its runs by status.
#[derive(Debug, Default)]
pub struct Exporter {
    pairs: BTreeMap<PairKey, PairState>,
}

/// fleet, source, destination, test.
type PairKey = (String, String, String, String);

#[derive(Debug)]
struct PairState {
    labels: Labels,
    recorded: SystemTime,
    /// When the last run ended, Unix seconds.
    ended: f64,
    runs: [u64; 3],
    retransmits: BTreeMap<&'static str, u64>,
    /// The last stored run's figures; none after a failed run.
    figures: Vec<Sample>,
}

impl Exporter {
    pub fn new() -> Exporter {
        Exporter::default()
    }

    /// One finished run of a fleet pair: `test` is its test case (`pair.test`, as a
    /// backfill labels it); a `Stored` document's figures become the pair's current
    /// values; a `Failed` run counts in `sonde_runs_total{status="failed"}` and removes
    /// the pair's figures (a dead agent's pairs show failed runs, not stale values). A failed run keeps the labels the
    /// pair's last stored run had, so its counter stays one series.
    pub fn record(
        &mut self,
        pair: &FleetPair,
        test: &str,
        outcome: RunOutcome<'_>,
        at: SystemTime,
    ) {
        let key = (
            pair.fleet.clone(),
            pair.source.clone(),
            pair.destination.clone(),
            test.to_string(),
        );
        let at_s = unix_seconds(at);
        let state = self.pairs.entry(key).or_insert_with(|| PairState {
            labels: figures::label_set(pair, test),
            recorded: at,
            ended: at_s,
            runs: [0; 3],
            retransmits: BTreeMap::new(),
            figures: Vec::new(),
        });
        state.recorded = at;
        let status = match outcome {
            RunOutcome::Stored(doc) => {
                state.labels = figures::label_set(pair, test);
                state.ended = figures::ended_at(doc).unwrap_or(at_s);
                state.figures = gauges::samples(doc);
                for (direction, n) in figures::retransmits(doc) {
                    *state.retransmits.entry(direction).or_default() += n;
                }
                figures::status(doc)
            }
            RunOutcome::Failed(_) => {
                state.ended = at_s;
                state.figures.clear();
                Status::Failed
            }
        };
        state.runs[status as usize] += 1;
    }

    /// Drops every pair not recorded since `cutoff` (the caller passes now - 2 periods).
    pub fn expire(&mut self, cutoff: SystemTime) {
        self.pairs.retain(|_, s| s.recorded >= cutoff);
    }

    /// The OpenMetrics text exposition (ends with `# EOF`), for GET /metrics with content
    /// type [`CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut registry = Registry::default();
        let mut gauges = BTreeMap::new();
        let mut counters = BTreeMap::new();
        for metric in Metric::ALL {
            let m = metric.meta();
            let unit = m.unit.map(|u| Unit::Other(u.to_string()));
            match m.kind {
                Kind::Gauge => {
                    let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                    register(&mut registry, m.stem, m.help, unit, f.clone());
                    gauges.insert(metric, f);
                }
                Kind::Counter => {
                    let f = Family::<Labels, Counter<u64>>::default();
                    register(&mut registry, m.stem, m.help, unit, f.clone());
                    counters.insert(metric, f);
                }
                Kind::Summary => {}
            }
        }
        for s in self.pairs.values() {
            let with = |k: &str, v: &str| {
                let mut l = s.labels.clone();
                l.push((k.to_string(), v.to_string()));
                l
            };
            for f in s.figures.iter().filter(|f| f.metric != Metric::Rtt) {
                let mut l = s.labels.clone();
                l.extend(f.extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
                gauges[&f.metric].get_or_create(&l).set(f.value);
            }
            gauges[&Metric::RunTimestamp]
                .get_or_create(&s.labels)
                .set(s.ended);
            for (status, n) in Status::ALL.iter().zip(s.runs) {
                counters[&Metric::Runs]
                    .get_or_create(&with("status", status.as_str()))
                    .inc_by(n);
            }
            for (direction, &n) in &s.retransmits {
                counters[&Metric::Retransmits]
                    .get_or_create(&with("direction", direction))
                    .inc_by(n);
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &registry)
            .expect("writing to a String cannot fail");
        self.encode_rtt(&mut out);
        prometheus_client::encoding::text::encode_eof(&mut out)
            .expect("writing to a String cannot fail");
        out
    }

    /// The RTT summary: each pair's quantiles, one after the other.
    fn encode_rtt(&self, out: &mut String) {
        text::header(out, Metric::Rtt);
        for s in self.pairs.values() {
            for f in s.figures.iter().filter(|f| f.metric == Metric::Rtt) {
                let extra = f.extra.first().map(|(k, v)| (*k, v.as_str()));
                text::sample(out, Metric::Rtt, &s.labels, extra, f.value, None);
            }
        }
    }
}

fn register(
    registry: &mut Registry,
    stem: &str,
    help: &str,
    unit: Option<Unit>,
    metric: impl prometheus_client::registry::Metric,
) {
    match unit {
        Some(u) => registry.register_with_unit(stem, help, u, metric),
        None => registry.register(stem, help, metric),
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Stored runs as OpenMetrics with each sample's timestamp (the run's finished_at or
/// started_at), for backfill (`promtool tsdb create-blocks-from openmetrics`). A fleet
/// run's `test` label is its pair's test case (`start.fleet.test`), as `sonde fleet
/// --metrics` labels it; another run's is its test's name (`stream`, `ping`, ...).
pub fn export<D: Borrow<Document>>(docs: &[D]) -> String {
    text::backfill(docs.iter().map(Borrow::borrow))
}
