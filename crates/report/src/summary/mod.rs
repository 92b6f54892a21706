//! Human summaries of result documents: each test kind's table in its module; the lab's,
//! the store's and the comparison's, which span kinds, in theirs.

mod common;
mod lab;
pub(crate) mod load;
pub(crate) mod pps;
pub(crate) mod rpm;
pub(crate) mod rr;
mod stages;
pub(crate) mod stamp;
mod store;
pub(crate) mod stream;
pub(crate) mod watch;

pub use lab::lab;
pub use load::{load, load_heading};
pub use pps::{pps, pps_heading, trial_line};
pub use rpm::{rpm, rpm_heading};
pub use rr::{cstate_comparison, poll_comparison, rr, rr_heading};
pub use stamp::{loss_words, stamp, stamp_heading};
pub use store::{comparison, runs, LIST_WIDTH};
pub use stream::{stream, stream_heading};
pub use watch::watch;
