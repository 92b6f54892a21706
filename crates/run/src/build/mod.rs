//! The last check every spec passes once built: the CLI's flag structs (`sonde`'s `cli/`,
//! which suites, fleets and the lab parse too) build specs and end with it.

use sonde_results::{SpecError, TestSpec};

/// The spec's own checks, then whether this build has the engine it names; a spec without
/// `--engine` gets its kind's fastest.
pub fn checked(mut spec: TestSpec) -> Result<TestSpec, SpecError> {
    // First: the default's engine is what the checks see (`--zerocopy` implies io_uring).
    crate::kind::default_engine(&mut spec);
    spec.validate()?;
    crate::kind::check_engine(&spec)?;
    Ok(spec)
}

pub mod load;
pub mod pps;
pub mod rr;
pub mod stamp;
pub mod stream;
pub mod values;
pub mod watch;
