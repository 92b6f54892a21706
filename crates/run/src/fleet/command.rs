//! `sonde fleet FILE`: the file read with the caller's builder, every pair's runs built
//! again proving the fleet's key, run in this process and kept in the store under the
//! fleet's name, once or every period (`--every`, with its `/metrics`).

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use sonde_proto::Key;

use super::{file, run, run_every, Every, Hooks, PairItem, PassEnd};
use crate::fleet_metrics::{self, MetricsArgs};
use crate::item::{Outcome, Request};
use crate::keep::{run_item, Keeper};
use crate::matrix::BuildError;
use crate::signals::Interrupt;
use crate::suite::{Ending, OrchestrateError};

/// What `sonde fleet` asks.
pub struct FleetParams<'a> {
    pub file: &'a Path,
    /// `--resume`: skip the runs already stored.
    pub resume: bool,
    /// `--overlap`: tests a host may be in at once.
    pub overlap: u16,
    /// `--ndjson`: each run's document as a line on stdout.
    pub ndjson: bool,
    pub db: Option<&'a Path>,
    /// `--key-file`: wins over the file's key_file and SONDE_KEY_FILE.
    pub key_file: Option<&'a Path>,
    /// `--every`: a pass every period, until Ctrl-C or SIGTERM.
    pub every: Option<Duration>,
    /// `--max-load`: the share of each host's time its tests may take.
    pub max_load: f64,
    pub metrics: MetricsArgs,
}

/// An item's words into a request, proving `key` when given (and then reading no key
/// file the words name).
pub type KeyedBuild<'a> =
    dyn Fn(&[String], Option<&Key>) -> Result<Request, BuildError> + Sync + 'a;

/// Runs the fleet; progress and the summary go to `say`.
pub fn run_file(
    p: &FleetParams<'_>,
    build: &KeyedBuild<'_>,
    say: &(dyn Fn(&str) + Sync),
    interrupt: &Interrupt,
) -> Result<Ending, OrchestrateError> {
    // Read once, before the file: a key file at fault is named whatever the file says.
    let key = crate::key::load_key(p.key_file)?;
    let build = |words: &[String]| build(words, key.as_ref());
    let fleet = file::load(p.file, &file::system_resolve, &build)?;
    let db = sonde_store::default_path(p.db);
    let store = Mutex::new(sonde_store::Store::open(&db)?);
    let metrics = fleet_metrics::start(&p.metrics)?;
    let record = metrics.as_ref().map(|m| m.recorder());
    let stored = |key: &str| {
        p.resume && {
            let store = store.lock().unwrap_or_else(PoisonError::into_inner);
            store.has_suite_item(key).unwrap_or(false)
        }
    };
    let run_one = |item: &PairItem| {
        let outcome = match build(&item.words) {
            Ok(mut req) => {
                req.target.fleet = Some(item.built.clone());
                let keeper = Keeper {
                    db: &db,
                    label: &fleet.name,
                    key: &item.key,
                    ndjson: p.ndjson,
                    interrupt,
                    record: record.as_deref(),
                };
                run_item(req, &keeper, &item.words, interrupt)
            }
            Err(e) => Outcome::Failed(e.to_string()),
        };
        if let (Outcome::Failed(why), Some(record)) = (&outcome, &record) {
            record(&item.built, Err(why));
        }
        outcome
    };
    let hooks = Hooks {
        stored: &stored,
        run: &run_one,
        say,
    };
    let overlap = p.overlap.into();
    let t = match p.every {
        None => run(&fleet, overlap, &hooks, interrupt),
        Some(period) => {
            let every = Every {
                period,
                max_load: p.max_load,
                jitter: super::default_jitter(period),
            };
            let after = |end: &PassEnd<'_>| {
                if let Some(m) = &metrics {
                    m.expire(2 * period.max(end.next_in));
                }
                say(&super::pass_line(end));
            };
            run_every(&fleet, overlap, &hooks, interrupt, &every, &after)
        }
    };
    say(&format!(
        "fleet {}: {} run(s) stored, {} already stored, {} failed, {} not run, label '{}' in {}",
        fleet.name,
        t.stored,
        t.skipped,
        t.failed,
        t.not_run,
        fleet.name,
        db.display()
    ));
    if let Some(m) = metrics {
        m.stop();
    }
    if p.every.is_some() {
        // A stop signal is how a continuous fleet ends; failed runs are in its metrics.
        return Ok(Ending::Done);
    }
    if interrupt.is_set() {
        let file = p.file.display();
        say(&format!(
            "interrupted: `sonde fleet {file} --resume` continues where it stopped"
        ));
        return Ok(Ending::Interrupted);
    }
    Ok(match t.failed {
        0 => Ending::Done,
        _ => Ending::Failed,
    })
}

/// `--every`: a period of one second or more.
pub fn parse_every(s: &str) -> Result<u64, String> {
    let ms = sonde_results::spec::units::parse_period_ms(s)?;
    if ms < 1000 {
        return Err(format!("'{s}' is shorter than a second"));
    }
    Ok(ms)
}

/// `--max-load`: a percentage above 0 and at most 100, as a share.
pub fn parse_max_load(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage (e.g. 25)"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!("'{s}' is not above 0 and at most 100"));
    }
    Ok(v / 100.0)
}
