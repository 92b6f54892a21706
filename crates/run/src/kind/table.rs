//! A kind's engine table: each kind lists the engines that implement its engine trait
//! (`ENGINES` in its module), and every choice of engine is a lookup here, so that adding
//! an engine is its modules and one line per table.

use std::io;

use sonde_results::{Engine, Execution, SpecError};

/// What each kind's engine trait starts with: which engine implements it.
pub trait Named {
    fn engine(&self) -> Engine;
    /// Why this host cannot run the engine (a kernel feature it lacks), if it cannot.
    fn unavailable(&self) -> Option<String> {
        None
    }
}

/// The engine of `table` that is `engine`; refused, naming `--engine` and `kind`, when the
/// kind has no such engine (admission checks first, so this is a peer that skipped it).
pub fn find<T: ?Sized + Named>(
    table: &[&'static T],
    kind: &str,
    engine: Engine,
) -> io::Result<&'static T> {
    table
        .iter()
        .copied()
        .find(|e| e.engine() == engine)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("--engine {engine}: {kind} has no such engine"),
            )
        })
}

/// The engines of `table`, in its order (the default first).
pub fn engines<T: ?Sized + Named>(table: &[&'static T]) -> Vec<Engine> {
    table.iter().map(|e| e.engine()).collect()
}

/// The engines of `table` this host can run (io_uring may be missing or disabled).
pub fn runnable<T: ?Sized + Named>(table: &[&'static T]) -> Vec<Engine> {
    table
        .iter()
        .filter(|e| e.unavailable().is_none())
        .map(|e| e.engine())
        .collect()
}

/// Refuses, naming the flag, what engine `engine` of `table` does not run: its own
/// refusals (`refuse`), and an option that another engine owns (`owns`: `--sqpoll` is
/// io_uring's). The one check of each engine's options, made wherever a spec is admitted
/// (`kind::refuse`: the CLI's builders, the controller and the agent).
pub fn refuse<T: ?Sized + Named>(
    table: &[&'static T],
    engine: Engine,
    owns: impl Fn(&T) -> Option<&'static str>,
    refuse: impl Fn(&T) -> Result<(), SpecError>,
) -> Result<(), SpecError> {
    for e in table {
        if e.engine() == engine {
            refuse(e)?;
        } else if let Some(flag) = owns(e) {
            return Err(SpecError {
                flag,
                reason: format!("runs on --engine {} only, not {engine}", e.engine()),
            });
        }
    }
    Ok(())
}

/// The engine of `table` a side runs for `ex`: the one named, or, when it was chosen by
/// default and this host cannot run it, the table's first (the kernel engine). Also the
/// note the side's result carries about a default choice.
pub fn choose<T: ?Sized + Named>(
    table: &[&'static T],
    kind: &str,
    ex: &Execution,
) -> io::Result<(&'static T, Option<String>)> {
    let named = find(table, kind, ex.engine)?;
    if !ex.engine_auto {
        return Ok((named, None));
    }
    if let Some(why) = named.unavailable() {
        let note = format!(
            "engine {}: the default for this test is {}, which this host cannot run ({why})",
            table[0].engine(),
            named.engine()
        );
        return Ok((table[0], Some(note)));
    }
    // A controller that chose a faster engine may have sent the kernel's to an agent
    // that lacks it: the agent says why it could not run the others.
    let missing: Vec<String> = table
        .iter()
        .filter_map(|e| e.unavailable().map(|w| format!("{} ({w})", e.engine())))
        .collect();
    let mut note = format!(
        "engine {}: chosen by default, the fastest for this test on the hosts of BENCHMARKS.md, \
         not measured on this one (--engine to choose and compare)",
        named.engine()
    );
    if !missing.is_empty() {
        note += &format!("; this host cannot run {}", missing.join(", "));
    }
    Ok((named, Some(note)))
}
