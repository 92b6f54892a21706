//! `sonde stream`: its spec checked into a test against an agent, or against `iperf3 -s`.

use sonde_results::{Direction, SpecError, StreamSpec, TestSpec};

use super::checked;
use crate::measure::Plan;

/// The direction `--bidir` and `--reverse` ask for (clap refuses both at once).
pub fn direction(bidir: bool, reverse: bool) -> Direction {
    match (bidir, reverse) {
        (true, _) => Direction::Bidir,
        (false, true) => Direction::Reverse,
        (false, false) => Direction::Forward,
    }
}

/// One test against an agent, or with `iperf3` against `iperf3 -s`, which runs no
/// cool-down (the spec is checked with the cool-down asked for first).
pub fn plan(spec: StreamSpec, iperf3: bool) -> Result<Plan, SpecError> {
    let mut spec = checked(TestSpec::Stream(spec))?;
    if !iperf3 {
        return Ok(Plan::Tests(vec![spec]));
    }
    if let TestSpec::Stream(s) = &mut spec {
        s.timing.cooldown_ms = 0;
    }
    Ok(Plan::Iperf3(spec, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_runs_no_cooldown_and_an_agent_the_one_asked() {
        let mut spec = StreamSpec::default();
        spec.timing.cooldown_ms = 500;
        let Ok(Plan::Tests(specs)) = plan(spec.clone(), false) else {
            panic!("a test against an agent")
        };
        assert_eq!(specs[0].timing().cooldown_ms, 500);
        let Ok(Plan::Iperf3(spec, None)) = plan(spec, true) else {
            panic!("a test against iperf3 -s")
        };
        assert_eq!(spec.timing().cooldown_ms, 0);
        assert_eq!(direction(true, true), Direction::Bidir);
        assert_eq!(direction(false, true), Direction::Reverse);
        assert_eq!(direction(false, false), Direction::Forward);
    }
}
