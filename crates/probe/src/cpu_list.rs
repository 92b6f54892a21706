//! The kernel's CPU list format (`0-3,8,10-11`), read from sysfs files and `--cpus`; below
//! the readers so that the crate's error can name its refusals.

use std::collections::BTreeSet;

/// Why a CPU list (`0-3,8`, from a file or `--cpus`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("'{0}' is not a CPU or range")]
    NotCpu(String),
    #[error("'{0}' is not a valid CPU range")]
    BadRange(String),
    #[error("empty CPU list")]
    Empty,
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, CpuListError> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: usize = a
            .trim()
            .parse()
            .map_err(|_| CpuListError::NotCpu(part.to_string()))?;
        let b: usize = b
            .trim()
            .parse()
            .map_err(|_| CpuListError::NotCpu(part.to_string()))?;
        if a > b || b >= 4096 {
            return Err(CpuListError::BadRange(part.to_string()));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(CpuListError::Empty);
    }
    Ok(out.into_iter().collect())
}
