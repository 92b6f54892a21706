//! `sonde suite` and `sonde fleet`: their files are read and run by the run layer
//! (`sonde_run::suite`, `sonde_run::fleet`); here each item's words become a typed request
//! through the CLI's own parser and spec builders, and its documents go to the store.

use std::process::ExitCode;

use clap::Parser;
use sonde_run::fleet::{self, FleetParams};
use sonde_run::fleet_metrics::MetricsArgs;
use sonde_run::item::Request;
use sonde_run::matrix::BuildError;
use sonde_run::signals::Interrupt;
use sonde_run::suite::{self, Ending, SuiteParams};
use sonde_run::terminal::SuiteBar;

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
        // From an agent (a fleet's, unauthenticated), or from this host.
        let plan = a.plan().map_err(words_of)??;
        let target = a.target(key).map_err(words_of)?;
        return Ok(Request {
            plan,
            target,
            tune: None,
        });
    }
    let (plan, target, out) = match cli.command.test() {
        Some((plan, target, out)) => (plan?, target, out),
        None => return Err(BuildError::Words(format!("'{}' is not a test", words[0]))),
    };
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

/// A key file or agent at fault, in the words the binary prints for it.
fn words_of(e: impl Into<anyhow::Error>) -> BuildError {
    BuildError::Words(crate::errors::one_line(&e.into()))
}

/// The exit code of a suite or fleet that ran.
fn exit(ending: Ending) -> ExitCode {
    ExitCode::from(match ending {
        Ending::Done => 0,
        Ending::Failed => crate::errors::EXIT_ERROR,
        Ending::Interrupted => crate::errors::EXIT_PARTIAL,
    })
}

pub fn suite(args: &SuiteArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let params = SuiteParams {
        file: &args.file,
        resume: args.resume,
        db: args.db.as_deref(),
    };
    let say = |line: &str| outln!("{line}");
    let ending = suite::run_file(&params, &build, &SuiteBar::default(), &say, interrupt)?;
    Ok(exit(ending))
}

pub fn fleet(args: &FleetArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let params = FleetParams {
        file: &args.file,
        resume: args.resume,
        overlap: args.overlap,
        ndjson: args.ndjson,
        db: args.db.as_deref(),
        key_file: args.key_file.as_deref(),
        every: args.every.map(std::time::Duration::from_millis),
        max_load: args.max_load,
        metrics: MetricsArgs {
            metrics: args.metrics,
            metrics_token_file: args.metrics_token_file.clone(),
            metrics_tls_cert: args.metrics_tls_cert.clone(),
            metrics_tls_key: args.metrics_tls_key.clone(),
        },
    };
    let say = |line: &str| errln!("{line}");
    let ending = fleet::run_file(&params, &build_keyed, &say, interrupt)?;
    Ok(exit(ending))
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
