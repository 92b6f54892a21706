//! The last check every builder makes.

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
