//! `sonde tune apply | restore`, and `--tune` on tests: a plan (`sonde_probe::tune`, pure)
//! applied only after the previous values are saved, and put back exactly from that
//! record. The state file is what root writes back, so it is guarded (`state`).

mod apply;
pub mod command;
mod state;

pub use apply::{apply, need_root, restore, Tuned};
pub(crate) use state::ensure_private_dir;
pub use state::{default_state_file, private_dir, state_file, State};

/// Why a setting could not be changed, saved or put back: one line naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TuneError(pub String);

/// `format!` into a [`TuneError`].
macro_rules! tune_err {
    ($($t:tt)*) => { $crate::tune::TuneError(format!($($t)*)) };
}
pub(crate) use tune_err;
