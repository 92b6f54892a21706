//! `sonde fleet FILE.toml`: every pair of a topology over many agents, measured the same
//! way: the file (`file`), the pairs and their rounds (`schedule`), and the run
//! (`rounds`). `--resume` skips what is stored; `--every` runs the matrix again and again
//! (`every`).

mod command;
mod every;
pub mod file;
mod rounds;
pub mod schedule;

pub use command::{parse_every, parse_max_load, run_file, FleetParams, KeyedBuild};
pub use every::{default_jitter, pass_line, run_every, Every, PassEnd};
pub use rounds::{run, Hooks, PairItem, Tally};
