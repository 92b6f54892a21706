//! The test commands from flags to exit code: tune around the test, then the run layer's
//! terminal (`sonde_run::terminal`) runs its plan through the one pipeline and shows the
//! documents; here the flags become its [`Shown`] and the result an exit code.

use std::process::ExitCode;

use sonde_results::SpecError;
use sonde_run::measure::Plan;
use sonde_run::signals::Interrupt;
use sonde_run::terminal::{self, Ended, Shown};

use anyhow::Result;

use crate::cli::{OutputArgs, StampArgs, Test, WatchArgs};
use crate::errors::{Usage, EXIT_ERROR, EXIT_PARTIAL};

/// The output flags, as the run layer's terminal takes them.
pub fn shown(out: &OutputArgs) -> Shown {
    Shown {
        json: out.json,
        json_stream: out.json_stream,
        output: out.output.clone(),
        db: out.store.db.clone(),
        no_save: out.store.no_save,
        label: out.store.label.clone(),
    }
}

/// A plan, or its flag's refusal as a usage error (exit 2, said as every error is).
fn planned(plan: Result<Plan, SpecError>) -> Result<Plan, Usage> {
    plan.map_err(|e| Usage::from(anyhow::Error::new(e)))
}

/// Exit 3 for a partial result.
pub fn partial_code(partial: bool) -> ExitCode {
    ExitCode::from(if partial { EXIT_PARTIAL } else { 0 })
}

/// A test command (stream, ping, rpc, pps, load) from its plan to its exit code.
pub fn test_command(test: Test<'_>, command: String, interrupt: &Interrupt) -> Result<ExitCode> {
    let (plan, target, out) = test;
    let plan = planned(plan)?;
    let _tuned = terminal::tuned(out.tune, out.json)?;
    let partial = terminal::test(plan, &target.target()?, &shown(out), &command, interrupt)?;
    Ok(partial_code(partial))
}

/// Runs the command with the host watched; exits with the command's code (a partial
/// watch, cut by Ctrl-C, with EXIT_PARTIAL when the command gave none).
pub fn watch(a: &WatchArgs, command: String, interrupt: &Interrupt) -> Result<ExitCode> {
    let plan = planned(a.plan())?;
    let code = terminal::watch(plan, &shown(&a.output), &command, interrupt, EXIT_PARTIAL)?;
    Ok(ExitCode::from(code))
}

/// `sonde stamp`: its run, printed and stored like any test's; exit 1 when nothing
/// answered.
pub fn stamp(a: &StampArgs, command: String, interrupt: &Interrupt) -> Result<ExitCode> {
    let plan = planned(a.plan()?)?;
    let (shown, target) = (shown(&a.output), a.target(None)?);
    Ok(
        match terminal::stamp(plan, &target, &shown, &command, interrupt)? {
            Ended::Unanswered => ExitCode::from(EXIT_ERROR),
            ended => partial_code(ended == Ended::Partial),
        },
    )
}
