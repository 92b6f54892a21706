//! The commands over stored runs (`sonde_run::stored`): their text printed, their exit code.

use std::process::ExitCode;

use sonde_run::stored::{self, CompareParams, ReportParams, Text};

use crate::cli::{self, ResultsAction};
use crate::errors::EXIT_WORSE;

/// Prints a command's text, JSON as JSON.
pub fn print(text: Text) {
    match text {
        Text::Terminal(t) => out!("{t}"),
        Text::Json(j) => jsonln!("{j}"),
    }
}

pub fn results_command(a: cli::ResultsArgs) -> anyhow::Result<ExitCode> {
    let db = a.db.as_deref();
    match a.action {
        ResultsAction::List { label } => out!("{}", stored::list(db, label.as_deref())?),
        ResultsAction::Show { id } => print!("{}", stored::show(db, id)?),
        ResultsAction::Export { ids, label, format } => {
            print(stored::export(db, &ids, label.as_deref(), format)?)
        }
        ResultsAction::Import { files, label } => {
            let said = |f: &std::path::Path, id| outln!("imported {} as run {id}", f.display());
            stored::import(db, &files, label.as_deref(), &said)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn compare_command(a: cli::CompareArgs) -> anyhow::Result<ExitCode> {
    let (text, worse) = stored::compare(&CompareParams {
        db: a.db.as_deref(),
        a: &a.a,
        b: &a.b,
        json: a.json,
        fail_if_worse: a.fail_if_worse,
    })?;
    print(text);
    Ok(ExitCode::from(if worse { EXIT_WORSE } else { 0 }))
}

pub fn report_command(a: cli::ReportArgs) -> anyhow::Result<ExitCode> {
    let runs = stored::report(&ReportParams {
        db: a.db.as_deref(),
        runs: &a.runs,
        output: &a.output,
        title: &a.title,
    })?;
    outln!("wrote {} ({runs} runs)", a.output.display());
    Ok(ExitCode::SUCCESS)
}
