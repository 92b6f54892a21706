//! Values the test commands' flags take that become a spec's fields: `--poll`'s receive
//! modes and `--cpus`'s CPU lists, parsed here so a refusal says what is wrong.

use sonde_probe::topology::{parse_cpu_list, CpuListError};
use sonde_results::PollMode;

/// A CPU list as one value (clap would read a bare `Vec` as a repeated flag), or `auto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuList {
    /// `none`: left to the scheduler.
    Unpinned,
    List(Vec<usize>),
    /// Chosen on the side's own host when the test starts (sonde_probe::placement).
    Auto,
}

impl CpuList {
    /// As a spec holds it: the list, and whether the side chooses it itself.
    pub fn split(&self) -> (Option<Vec<usize>>, bool) {
        match self {
            CpuList::List(l) => (Some(l.clone()), false),
            CpuList::Auto => (None, true),
            CpuList::Unpinned => (None, false),
        }
    }
}

/// `auto`, `none`, or a CPU list (`0-3,8`).
pub fn parse_cpus(s: &str) -> Result<CpuList, CpuListError> {
    match s {
        "auto" => Ok(CpuList::Auto),
        "none" => Ok(CpuList::Unpinned),
        _ => parse_cpu_list(s).map(CpuList::List),
    }
}

/// One mode, or all of them in turn.
#[derive(Debug, Clone, PartialEq)]
pub enum PollChoice {
    One(PollMode),
    All,
}

impl PollChoice {
    pub fn modes(&self) -> Vec<PollMode> {
        match self {
            PollChoice::One(m) => vec![*m],
            PollChoice::All => vec![
                PollMode::Block,
                PollMode::Busy,
                PollMode::Hybrid { spin_us: 50 },
            ],
        }
    }

    /// The one mode asked for; `None` for `all`.
    pub fn one(&self) -> Option<PollMode> {
        match self {
            PollChoice::One(mode) => Some(*mode),
            PollChoice::All => None,
        }
    }
}

/// A `--poll` value that is not a receive mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a receive mode (block, busy, hybrid[=50us], all)")]
pub struct NotAMode(pub String);

/// block, busy, hybrid[=SPIN] (microseconds, or with a `us` / `ms` suffix), or all.
pub fn parse_poll(s: &str) -> Result<PollChoice, NotAMode> {
    let bad = || NotAMode(s.to_string());
    Ok(match s {
        "block" => PollChoice::One(PollMode::Block),
        "busy" => PollChoice::One(PollMode::Busy),
        "hybrid" => PollChoice::One(PollMode::Hybrid { spin_us: 50 }),
        "all" => PollChoice::All,
        _ => {
            let spin = s.strip_prefix("hybrid=").ok_or_else(bad)?;
            let us = if let Some(v) = spin.strip_suffix("us") {
                v.parse::<u64>().map_err(|_| bad())?
            } else if let Some(v) = spin.strip_suffix("ms") {
                v.parse::<u64>().map_err(|_| bad())? * 1000
            } else {
                spin.parse::<u64>().map_err(|_| bad())?
            };
            PollChoice::One(PollMode::Hybrid {
                spin_us: u32::try_from(us).map_err(|_| bad())?,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_become_the_spec_fields() {
        assert_eq!(parse_cpus("auto").unwrap().split(), (None, true));
        assert_eq!(parse_cpus("none").unwrap().split(), (None, false));
        assert_eq!(
            parse_cpus("0-2").unwrap().split(),
            (Some(vec![0, 1, 2]), false)
        );
        assert!(parse_cpus("x").is_err());
    }

    #[test]
    fn receive_modes_parse_and_a_bad_one_is_said() {
        assert_eq!(
            parse_poll("hybrid=100us").unwrap(),
            PollChoice::One(PollMode::Hybrid { spin_us: 100 })
        );
        assert_eq!(
            parse_poll("hybrid=2ms").unwrap(),
            PollChoice::One(PollMode::Hybrid { spin_us: 2000 })
        );
        assert_eq!(parse_poll("all").unwrap().modes().len(), 3);
        assert_eq!(parse_poll("all").unwrap().one(), None);
        assert_eq!(
            parse_poll("sometimes").unwrap_err().to_string(),
            "'sometimes' is not a receive mode (block, busy, hybrid[=50us], all)"
        );
    }
}
