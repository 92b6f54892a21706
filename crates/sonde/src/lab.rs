//! `sonde lab` (`sonde_run::lab`): each of its measurements run here by the one measure
//! pipeline as its test command would run it.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sonde_run::lab::{Lab, LabParams};
use sonde_run::signals::Interrupt;

use crate::cli::{Cli, LabArgs};

pub fn run(args: &LabArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let params = LabParams {
        duration_ms: args.duration,
        warmup_ms: args.warmup,
        output_dir: args.output_dir.as_deref(),
        loopback: args.loopback,
        only: &args.only,
    };
    let measure = |lab: &Lab, words: &[String], file: &Path| measure(lab, words, file, interrupt);
    let (out, warn) = (|text: &str| out!("{text}"), |line: &str| errln!("{line}"));
    let partial = sonde_run::lab::run(&params, &exe, &measure, &out, &warn, interrupt)?;
    Ok(crate::measure::partial_code(partial))
}

/// One measurement, `sonde WORDS` against the lab's agent with its document in `file`, as
/// the test command would run it (heading, live lines, summary, stored).
fn measure(
    lab: &Lab,
    words: &[String],
    file: &Path,
    interrupt: &Interrupt,
) -> Result<(), sonde_run::lab::MeasureFailed> {
    let key = &lab.key.file;
    let (shown, tail) = sonde_run::lab::command_line(&lab.host, lab.port(), key, words, file);
    let command = shown.join(" ");
    let cli = Cli::try_parse_from(shown.into_iter().chain(tail))?;
    let test = cli.command.test().expect("a lab measurement is a test");
    crate::measure::test_command(test, command, interrupt)
        .map(drop)
        .map_err(|e| crate::errors::one_line(&e).into())
}
