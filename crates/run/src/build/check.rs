//! The last check every builder makes.

use sonde_results::{SpecError, TestSpec};

/// The spec's own checks, then whether this build has the engine it names; a spec without
/// `--engine` gets its kind's fastest.
pub fn checked(mut spec: TestSpec) -> Result<TestSpec, SpecError> {
    spec.validate()?;
    crate::kind::check_engine(&spec)?;
    crate::kind::default_engine(&mut spec);
    Ok(spec)
}
