//! `sonde`: parse, dispatch, and turn every error into one line and an exit code.
//!
//! Exit codes: 0 success, 1 error, 2 bad usage, 3 partial result (test cut short),
//! 4 `compare --fail-if-worse` found a regression.

/// `println!` for text that may hold a stored or peer-supplied string (a command, a host
/// name, a peer's error): every control but newline and tab is shown as an escape.
macro_rules! outln {
    ($($t:tt)*) => { println!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `print!`, made safe as [`outln`].
macro_rules! out {
    ($($t:tt)*) => { print!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `eprintln!`, made safe as [`outln`].
macro_rules! errln {
    ($($t:tt)*) => { eprintln!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `println!` of JSON: DEL and C1 controls as `\u00XX` (serde_json escapes C0 itself).
macro_rules! jsonln {
    ($($t:tt)*) => { println!("{}", sonde_report::safe::json(&format!($($t)*))) };
}

mod cli;
mod daemon;
mod errors;
mod lab;
mod measure;
mod orchestrate;
mod rpm;
mod stored;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command, PingArgs, TestCommand};
use errors::EXIT_USAGE;
use sonde_run::inspect;
use sonde_run::measure::cstate_sweep;
use sonde_run::signals::Interrupt;
use sonde_run::terminal::usage_line;
use sonde_run::tune::command as tuning;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message (which names the flag), without usage and tips.
            errln!("{}", usage_line(&e.render().to_string()));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", sonde_report::safe::line(&errors::one_line(&e)));
            ExitCode::from(errors::exit_code(&e))
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let interrupt = Interrupt::install();
    match cli.command {
        Command::Serve(a) => daemon::serve(&a, command_line, &interrupt),
        Command::Watch(a) => measure::watch(&a, command_line, &interrupt),
        Command::Stamp(a) => measure::stamp(&a, command_line, &interrupt),
        Command::Rpm(a) => rpm::rpm(&a, command_line, &interrupt),
        Command::Test(TestCommand::Ping(a)) if a.cstate_sweep => {
            cstate_sweep_command(&a, command_line, &interrupt)
        }
        Command::Lab(a) => lab::run(&a, &interrupt),
        Command::Tune(a) => tune_command(a.action),
        Command::Results(a) => stored::results_command(a),
        Command::Completions { shell } => completions(shell),
        Command::Man => man(),
        Command::Compare(a) => stored::compare_command(a),
        Command::Report(a) => stored::report_command(a),
        Command::Suite(a) => orchestrate::suite(&a, &interrupt),
        Command::Fleet(a) => orchestrate::fleet(&a, &interrupt),
        Command::Host(a) => printed(inspect::host_text(a.root.as_deref(), a.json)?),
        Command::Clock(a) => printed(inspect::clock_text(a.root.as_deref(), a.json)?),
        // stream, ping, rpc, pps, load: the plan through the one pipeline.
        Command::Test(t) => measure::test_command(t.test(), command_line, &interrupt),
    }
}

/// `sonde ping --cstate-sweep`: the pings once per idle state of this host.
fn cstate_sweep_command(a: &PingArgs, line: String, interrupt: &Interrupt) -> Result<ExitCode> {
    let quiet = a.common.output.quiet();
    let say = |text: &str| {
        if !quiet {
            outln!("{text}")
        }
    };
    let specs = a.specs().map(|s| cstate_sweep(s, &say));
    measure::test_command(a.common.test(specs), line, interrupt)
}

/// `sonde completions SHELL`: the shell's completion script on stdout.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "sonde", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `sonde man`: the man page (roff) on stdout.
fn man() -> Result<ExitCode> {
    clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
        .render(&mut std::io::stdout())?;
    Ok(ExitCode::SUCCESS)
}

/// A command's text printed ([`stored::print`]).
fn printed(text: sonde_run::stored::Text) -> Result<ExitCode> {
    stored::print(text);
    Ok(ExitCode::SUCCESS)
}

/// `sonde tune`: the action's text (`sonde_run::tune::command`).
fn tune_command(action: cli::TuneAction) -> Result<ExitCode> {
    printed(match action {
        cli::TuneAction::Plan { goal, dev, json } => tuning::plan(goal, dev.as_deref(), json)?,
        cli::TuneAction::Apply { goal, dev, state } => {
            tuning::apply_goal(goal, dev.as_deref(), state)?
        }
        cli::TuneAction::Restore { state } => tuning::restore_saved(state)?,
    })
}
