//! `sonde lab`: the standard measurements of `sonde_run::lab` between its two hosts (two
//! namespaces over veth, or loopback), each run here by the one measure pipeline as its
//! test command would run it, then the lab's table.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sonde_run::lab::Lab;
use sonde_run::signals::Interrupt;

use crate::cli::{Cli, LabArgs};

pub fn run(args: &LabArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let tag = format!("lab{}", std::process::id());
    let out_dir = sonde_run::lab::out_dir(args.output_dir.as_deref(), &tag)?;
    let say = |line: &str| outln!("{line}");
    let netns = sonde_run::lab::namespaces(args.loopback, &tag, &say);
    let lab = Lab::start(&exe, &tag, netns)?;
    let veth = lab.netns.is_some();
    let measure = |lab: &Lab, words: &[String], file: &Path| measure(lab, words, file, interrupt);
    let warn = |line: &str| errln!("{line}");
    let measurements = sonde_run::lab::measurements(args.duration, args.warmup, veth, &args.only);
    let results = sonde_run::lab::run_all(
        &lab,
        measurements,
        &out_dir,
        &measure,
        &say,
        &warn,
        interrupt,
    )?;
    drop(lab);
    let over = if veth {
        "two namespaces over veth"
    } else {
        "loopback"
    };
    outln!("\n== lab summary ({over}) ==");
    out!("{}", sonde_report::summary::lab(&results.docs));
    if args.output_dir.is_some() {
        outln!("result documents in {}", out_dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    if interrupt.is_set() {
        outln!("lab: interrupted; namespaces removed");
    }
    Ok(ExitCode::from(if results.failed || interrupt.is_set() {
        3
    } else {
        0
    }))
}

/// One measurement, `sonde WORDS` against the lab's agent with its document in `file`, as
/// the test command would run it (heading, live lines, summary, stored).
fn measure(lab: &Lab, words: &[String], file: &Path, interrupt: &Interrupt) -> Result<(), String> {
    let key = &lab.key.file;
    let (shown, tail) = sonde_run::lab::command_line(&lab.host, lab.port(), key, words, file);
    let command = shown.join(" ");
    let cli = Cli::try_parse_from(shown.into_iter().chain(tail)).map_err(|e| e.to_string())?;
    let (plan, target, out) = cli.command.test().expect("a lab measurement is a test");
    crate::measure::test_command(plan, target, out, command, interrupt)
        .map(drop)
        .map_err(|e| crate::errors::one_line(&e))
}
