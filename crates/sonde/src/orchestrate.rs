//! `sonde suite` and `sonde fleet`: their files are read and run by the run layer
//! (`sonde_run::suite`, `sonde_run::fleet`); here each item's words become a typed request
//! through the CLI's own parser and spec builders, and its documents go to the store.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sonde_run::item::{Item, Outcome, Request};
use sonde_run::keep::{run_item, Keeper};
use sonde_run::matrix::BuildError;
use sonde_run::signals::Interrupt;

use crate::cli::{Cli, FleetArgs, SuiteArgs};

/// `sonde WORDS` as the CLI reads it, into a request; the error names the flag.
pub fn build(words: &[String]) -> Result<Request, BuildError> {
    build_keyed(words, None)
}

/// As [`build`]; with `key` (`sonde fleet --key-file`), the request proves that key and
/// no key file the words name is read.
fn build_keyed(words: &[String], key: Option<&sonde_proto::Key>) -> Result<Request, BuildError> {
    let argv = std::iter::once("sonde".to_string()).chain(words.iter().cloned());
    let cli = Cli::try_parse_from(argv).map_err(|e| {
        let text = e.render().to_string();
        let first = text.lines().next().unwrap_or("invalid");
        BuildError::Words(first.trim_start_matches("error: ").to_string())
    })?;
    if let crate::cli::Command::Stamp(a) = &cli.command {
        return stamp_request(a, key);
    }
    let plan = match cli.command.plan() {
        Some(plan) => plan?,
        None => return Err(BuildError::Words(format!("'{}' is not a test", words[0]))),
    };
    let (target, out) = cli.command.target_output().expect("a test has a target");
    let target = match key {
        Some(key) => target.with_key(Some(key.clone())),
        None => target.target().map_err(words_of)?,
    };
    Ok(Request {
        plan,
        target,
        tune: out.tune,
    })
}

/// A file's STAMP test: from an agent (a fleet's, unauthenticated), or from this host.
fn stamp_request(
    a: &crate::cli::StampArgs,
    key: Option<&sonde_proto::Key>,
) -> Result<Request, BuildError> {
    let plan = a.plan().map_err(words_of)??;
    let target = a.target(key).map_err(words_of)?;
    Ok(Request {
        plan,
        target,
        tune: None,
    })
}

/// A key file or agent at fault, in the words the binary prints for it.
fn words_of(e: anyhow::Error) -> BuildError {
    BuildError::Words(crate::errors::one_line(&e))
}

pub fn suite(args: &SuiteArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let suite = sonde_run::suite::load(&args.file, &build)?;
    let db = sonde_store::default_path(args.db.as_deref());
    let store = sonde_store::Store::open(&db)?;
    let bar = indicatif::ProgressBar::new(suite.items.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, ETA {eta} {msg}")
            .expect("a valid template"),
    );
    let stored = |key: &str| args.resume && store.has_suite_item(key).unwrap_or(false);
    let run = |item: Item<Request>| {
        bar.set_message(sonde_report::safe::line(&item.name()).into_owned());
        let keeper = Keeper {
            db: &db,
            label: &suite.label,
            key: &item.key,
            ndjson: false,
            interrupt,
            record: None,
        };
        run_item(item.built, &keeper, &item.words, interrupt)
    };
    let total = suite.items.len();
    let done = &mut |_: &Outcome| bar.inc(1);
    let t = sonde_run::suite::run(suite.items, &stored, &run, done, interrupt);
    bar.finish_and_clear();
    let not_run = total - t.stored - t.skipped - t.failed.len();
    outln!(
        "suite {}: {} run(s) stored, {} already stored, {} failed, {not_run} not run, label '{}' in {}",
        args.file.display(),
        t.stored,
        t.skipped,
        t.failed.len(),
        suite.label,
        db.display()
    );
    for f in &t.failed {
        outln!("failed: {f}");
    }
    if interrupt.is_set() {
        let file = args.file.display();
        outln!("interrupted: `sonde suite {file} --resume` continues where it stopped");
        return Ok(ExitCode::from(crate::errors::EXIT_PARTIAL));
    }
    Ok(ExitCode::from(u8::from(!t.failed.is_empty())))
}

pub fn fleet(args: &FleetArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    use sonde_run::fleet::{self, file};
    // Read once, before the file: a key file at fault is named whatever the file says.
    let key = crate::cli::load_key(args.key_file.as_deref())?;
    let build = |words: &[String]| build_keyed(words, key.as_ref());
    let fleet = file::load(&args.file, &file::system_resolve, &build)?;
    let db: PathBuf = sonde_store::default_path(args.db.as_deref());
    let store = std::sync::Mutex::new(sonde_store::Store::open(&db)?);
    let metrics = sonde_run::fleet_metrics::start(&sonde_run::fleet_metrics::MetricsArgs {
        metrics: args.metrics,
        metrics_token_file: args.metrics_token_file.clone(),
        metrics_tls_cert: args.metrics_tls_cert.clone(),
        metrics_tls_key: args.metrics_tls_key.clone(),
    })?;
    let record = metrics.as_ref().map(|m| m.recorder());
    let stored =
        |key: &str| args.resume && store.lock().unwrap().has_suite_item(key).unwrap_or(false);
    let run = |item: &fleet::PairItem| {
        let outcome = match build(&item.words) {
            Ok(mut req) => {
                req.target.fleet = Some(item.built.clone());
                let keeper = Keeper {
                    db: &db,
                    label: &fleet.name,
                    key: &item.key,
                    ndjson: args.ndjson,
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
    let say = |line: &str| errln!("{line}");
    let hooks = fleet::Hooks {
        stored: &stored,
        run: &run,
        say: &say,
    };
    let overlap = args.overlap.into();
    let t = match args.every {
        None => fleet::run(&fleet, overlap, &hooks, interrupt),
        Some(ms) => {
            let period = std::time::Duration::from_millis(ms);
            let every = fleet::Every {
                period,
                max_load: args.max_load,
                jitter: fleet::default_jitter(period),
            };
            let after = |p: &fleet::PassEnd<'_>| {
                if let Some(m) = &metrics {
                    m.expire(2 * period.max(p.next_in));
                }
                errln!("{}", fleet::pass_line(p));
            };
            fleet::run_every(&fleet, overlap, &hooks, interrupt, &every, &after)
        }
    };
    errln!(
        "fleet {}: {} run(s) stored, {} already stored, {} failed, {} not run, label '{}' in {}",
        fleet.name,
        t.stored,
        t.skipped,
        t.failed,
        t.not_run,
        fleet.name,
        db.display()
    );
    if let Some(m) = metrics {
        m.stop();
    }
    if args.every.is_some() {
        // A stop signal is how a continuous fleet ends; failed runs are in its metrics.
        return Ok(ExitCode::SUCCESS);
    }
    if interrupt.is_set() {
        let file = args.file.display();
        errln!("interrupted: `sonde fleet {file} --resume` continues where it stopped");
        return Ok(ExitCode::from(crate::errors::EXIT_PARTIAL));
    }
    Ok(ExitCode::from(u8::from(t.failed > 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        shell_words::split(line).unwrap()
    }

    #[test]
    fn an_items_refusal_keeps_its_flag_typed() {
        let e = build(&words("rpc 198.18.0.2 --connections 0"))
            .err()
            .unwrap();
        let BuildError::Spec(spec) = &e else {
            panic!("not a spec's refusal: {e}")
        };
        assert_eq!(spec.flag, "--connections");
        // What the command line itself refuses keeps clap's words, naming the flag.
        let e = build(&words("rpc 198.18.0.2 --duration x")).err().unwrap();
        assert!(
            matches!(&e, BuildError::Words(w) if w.contains("--duration")),
            "{e}"
        );
        let e = build(&words("host")).err().unwrap();
        assert_eq!(e, BuildError::Words("'host' is not a test".into()));
    }
}
