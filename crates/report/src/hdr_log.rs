//! Runs' per-interval latency histograms as an HdrHistogram interval log, the file
//! HdrHistogram's own tools read (HistogramLogProcessor, its plotter, HdrHistogram_py's log
//! reader). One tag per run (`run-7`), or per ping of a load test (`run-7-udp`); each line
//! is one interval, timed from the earliest run's start. Values are nanoseconds; the
//! human-readable max column is in milliseconds, HdrHistogram's own convention.

use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use sonde_results::document::IntervalFigures;
use sonde_results::{Document, LatencySummary};

#[derive(Debug, thiserror::Error)]
pub enum HdrLogError {
    #[error("none of the runs has a latency histogram (stream and pps runs measure none; runs stored before sonde kept histograms have only percentiles)")]
    Nothing,
    #[error("run {id}: {reason}")]
    Run { id: i64, reason: String },
}

/// One histogram series of a run: its tag and how to read it off an interval.
type Series = (String, fn(&IntervalFigures) -> Option<&LatencySummary>);

fn series(id: i64, doc: &Document) -> Vec<Series> {
    if doc.end.load().is_some() {
        vec![
            (format!("run-{id}-udp"), |i| i.load()?.udp_rtt_ns.as_ref()),
            (format!("run-{id}-tcp"), |i| i.load()?.tcp_rtt_ns.as_ref()),
        ]
    } else {
        vec![(format!("run-{id}"), |i| i.rr()?.latency_ns.as_ref())]
    }
}

fn started(id: i64, doc: &Document) -> Result<SystemTime, HdrLogError> {
    let t = time::OffsetDateTime::parse(
        &doc.start.started_at,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|e| HdrLogError::Run {
        id,
        reason: format!("start time '{}': {e}", doc.start.started_at),
    })?;
    Ok(SystemTime::from(t))
}

/// The interval log of `runs` (id, document).
pub fn interval_log(runs: &[(i64, &Document)]) -> Result<String, HdrLogError> {
    let mut lines = Vec::new();
    for &(id, doc) in runs {
        let start = started(id, doc)?;
        for (tag, of) in series(id, doc) {
            for i in &doc.intervals {
                let Some(h) = of(i).and_then(|l| l.distribution()) else {
                    continue;
                };
                let h = h.map_err(|e| HdrLogError::Run {
                    id,
                    reason: e.to_string(),
                })?;
                let at = start + Duration::from_secs_f64(i.start_s.max(0.0));
                let length = Duration::from_secs_f64((i.end_s - i.start_s).max(0.0));
                lines.push((at, length, tag.clone(), h));
            }
        }
    }
    let base = lines
        .iter()
        .map(|l| l.0)
        .min()
        .ok_or(HdrLogError::Nothing)?;
    lines.sort_by_key(|l| l.0);
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("sonde latency histograms: round-trip time in nanoseconds, per interval")
        .with_start_time(base)
        .with_base_time(base)
        .with_max_value_divisor(1e6);
    let mut log = builder
        .begin_log_with(&mut out, &mut serializer)
        .expect("writing into memory");
    for (at, length, tag, h) in &lines {
        let since = at.duration_since(base).unwrap_or_default();
        log.write_histogram(h, since, *length, Tag::new(tag))
            .expect("a histogram serialises into memory");
    }
    Ok(String::from_utf8(out).expect("the log is text"))
}
