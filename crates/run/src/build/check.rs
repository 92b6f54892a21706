//! The last check every builder makes.

use sonde_results::{SpecError, TestSpec};

/// The spec's own checks, then whether this build has the engine it names.
pub fn checked(spec: TestSpec) -> Result<TestSpec, SpecError> {
    spec.validate()?;
    crate::kind::check_engine(&spec)?;
    Ok(spec)
}
