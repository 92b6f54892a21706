//! A kind's engine table: each kind lists the engines that implement its engine trait
//! (`ENGINES` in its module), and every choice of engine is a lookup here, so that adding
//! an engine is its modules and one line per table.

use std::io;

use sonde_results::{Engine, Execution, Role, SpecError};

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

/// What the default-engine note says after the engine's name: the same words on every
/// test, so that a run of several tests (`sonde lab`) can say them once.
pub const CHOSEN_BY_DEFAULT: &str = "chosen by default, the fastest for this test on the hosts \
     of BENCHMARKS.md, not measured on this one (--engine to choose and compare)";

/// The engine of `table` a side runs for `ex`: the one named, or, when it was chosen by
/// default and this host cannot run it, the table's first (the kernel engine). Also the
/// note the side's result carries about a default choice, where the choice mattered:
/// a side that could not run the default says so; otherwise only the controller's side
/// (`role` client) says the engine was chosen by default, and only when this host runs
/// more than one of the kind's engines. The agent names the engines it lacks, since a
/// controller that chose a faster one sends the kernel's to an agent without it.
pub fn choose<T: ?Sized + Named>(
    table: &[&'static T],
    kind: &str,
    ex: &Execution,
    role: Role,
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
    let missing: Vec<String> = table
        .iter()
        .filter_map(|e| e.unavailable().map(|w| format!("{} ({w})", e.engine())))
        .collect();
    let choice = table.len() - missing.len() > 1;
    let note = match role {
        Role::Client if choice => format!("engine {}: {CHOSEN_BY_DEFAULT}", named.engine()),
        Role::Server if !missing.is_empty() => {
            format!("engine {}: chosen by default", named.engine())
        }
        _ => return Ok((named, None)),
    };
    if missing.is_empty() {
        return Ok((named, Some(note)));
    }
    Ok((
        named,
        Some(format!(
            "{note}; this host cannot run {}",
            missing.join(", ")
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table entry: an engine, and why this host cannot run it, if it cannot.
    struct Entry(Engine, Option<&'static str>);

    impl Named for Entry {
        fn engine(&self) -> Engine {
            self.0
        }
        fn unavailable(&self) -> Option<String> {
            self.1.map(String::from)
        }
    }

    static KERNEL: Entry = Entry(Engine::Kernel, None);
    static URING: Entry = Entry(Engine::Uring, None);
    static NO_URING: Entry = Entry(Engine::Uring, Some("io_uring_disabled is 2"));

    fn auto(engine: Engine) -> Execution {
        Execution {
            engine,
            engine_auto: true,
            ..Execution::default()
        }
    }

    fn note(table: &[&'static Entry], ex: &Execution, role: Role) -> Option<String> {
        choose(table, "rpc", ex, role).unwrap().1
    }

    #[test]
    fn the_default_is_said_once_by_the_controller_where_there_was_a_choice() {
        let both = [&KERNEL, &URING];
        let said = format!("engine uring: {CHOSEN_BY_DEFAULT}");
        assert_eq!(note(&both, &auto(Engine::Uring), Role::Client), Some(said));
        assert_eq!(note(&both, &auto(Engine::Uring), Role::Server), None);
        // One engine this host runs: no choice, nothing to say.
        assert_eq!(note(&[&KERNEL], &auto(Engine::Kernel), Role::Client), None);
        let one = [&KERNEL, &NO_URING];
        assert_eq!(note(&one, &auto(Engine::Kernel), Role::Client), None);
        // Named on the command line: nothing either.
        let named = Execution {
            engine_auto: false,
            ..auto(Engine::Uring)
        };
        assert_eq!(note(&both, &named, Role::Client), None);
    }

    #[test]
    fn a_side_that_cannot_run_the_default_says_why_whichever_it_is() {
        let table = [&KERNEL, &NO_URING];
        for role in [Role::Client, Role::Server] {
            let (e, n) = choose(&table, "rpc", &auto(Engine::Uring), role).unwrap();
            assert_eq!(e.engine(), Engine::Kernel);
            assert_eq!(
                n.as_deref(),
                Some("engine kernel: the default for this test is uring, which this host cannot run (io_uring_disabled is 2)")
            );
        }
        // The agent sent the kernel's because it lacks uring: it names what it lacks.
        assert_eq!(
            note(&table, &auto(Engine::Kernel), Role::Server).as_deref(),
            Some("engine kernel: chosen by default; this host cannot run uring (io_uring_disabled is 2)")
        );
    }
}
