//! `sonde rpm URL` (`sonde_run::rpm`): its document stored, written and printed like
//! every test's; cut by Ctrl-C, what was measured is kept, marked partial (exit
//! `EXIT_PARTIAL`).

use std::process::ExitCode;

use anyhow::anyhow;
use sonde_run::signals::Interrupt;
use sonde_run::terminal::emit;

use crate::cli::rpm::RpmArgs;
use crate::errors::Usage;

pub fn rpm(a: &RpmArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let test = a.flags().test().map_err(|e| Usage::from(anyhow!(e)))?;
    let doc = test.run(command, &|| interrupt.is_set())?;
    let shown = crate::measure::shown(&a.output);
    shown.save_run(&doc);
    let human = sonde_report::summary::rpm(&doc);
    emit(&sonde_report::json(&doc), Some(human), &shown)?;
    Ok(crate::measure::partial_code(doc.end.partial))
}
