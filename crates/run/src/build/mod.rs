//! What every spec builder shares: the last check a built spec passes (its own checks and
//! its kind's engine) and the values of `--poll` and `--cpus`. The builders themselves are
//! the CLI's flag structs (`sonde`'s `cli/`), which suites, fleets and the lab parse too.

pub mod check;
pub mod cpus;
pub mod poll;
