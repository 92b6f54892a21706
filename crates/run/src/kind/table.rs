//! A kind's engine table: each kind lists the engines that implement its engine trait
//! (`ENGINES` in its module), and every choice of engine is a lookup here, so that adding
//! an engine is its modules and one line per table.

use std::io;

use sonde_results::Engine;

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
