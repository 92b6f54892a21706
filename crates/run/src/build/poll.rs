//! `--poll`: the receive mode of a test, or all of them in turn.

use sonde_results::PollMode;

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
}

/// block, busy, hybrid[=SPIN] (microseconds, or with a `us` / `ms` suffix), or all.
pub fn parse_poll(s: &str) -> Result<PollChoice, String> {
    let bad = || format!("'{s}' is not a receive mode (block, busy, hybrid[=50us], all)");
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
    fn receive_modes_parse() {
        assert_eq!(
            parse_poll("hybrid=100us").unwrap(),
            PollChoice::One(PollMode::Hybrid { spin_us: 100 })
        );
        assert_eq!(
            parse_poll("hybrid=2ms").unwrap(),
            PollChoice::One(PollMode::Hybrid { spin_us: 2000 })
        );
        assert_eq!(parse_poll("all").unwrap().modes().len(), 3);
        assert!(parse_poll("sometimes").is_err());
    }
}
