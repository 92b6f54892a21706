//! `sonde watch -- COMMAND`: the host evidence of a test, around any workload.

use std::net::IpAddr;

use clap::Args;
use sonde_results::SpecError;
use sonde_run::build::watch::{self, WatchParams};
use sonde_run::measure::Plan;

use super::flags::{parse_duration_ms, OutputArgs};

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The interface to watch.
    #[arg(long, value_name = "IF", conflicts_with = "peer")]
    pub iface: Option<String>,
    /// Watch the interface that carries traffic to this address.
    #[arg(long, value_name = "ADDR")]
    pub peer: Option<IpAddr>,
    /// Sampling interval.
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    #[command(flatten)]
    pub output: OutputArgs,
    /// The command to run and watch, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl WatchArgs {
    /// The watch's plan ([`watch::plan`]).
    pub fn plan(&self) -> Result<Plan, SpecError> {
        watch::plan(&WatchParams {
            command: self.command.clone(),
            iface: self.iface.clone(),
            peer: self.peer,
            interval_ms: self.interval,
            quiet: self.output.quiet(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn args_of(line: &str) -> WatchArgs {
        let Command::Watch(a) = parsed(line) else {
            panic!("{line} is a watch command")
        };
        a
    }

    #[test]
    fn the_command_comes_after_the_double_dash() {
        let a = args_of("watch --peer 198.18.0.2 -- fio --rw=read");
        assert_eq!(a.command, ["fio", "--rw=read"]);
        assert!(Cli::try_parse_from(["sonde", "watch", "--iface", "eth0"]).is_err());
        assert!(Cli::try_parse_from([
            "sonde",
            "watch",
            "--iface",
            "a",
            "--peer",
            "198.18.0.2",
            "--",
            "x"
        ])
        .is_err());
    }

    #[test]
    fn a_short_interval_or_a_missing_interface_is_refused() {
        let refused = args_of("watch -i 0.01 -- x").plan().err();
        assert_eq!(refused.expect("too short").flag, "--interval");
        let refused = args_of("watch --iface no-such-if0 -- x").plan().err();
        assert_eq!(refused.expect("no such interface").flag, "--iface");
        let Ok(Plan::Watch { spec, .. }) = args_of("watch --iface lo -i 2 -- x").plan() else {
            panic!("a watch of lo")
        };
        assert_eq!(
            (spec.iface.as_deref(), spec.timing.interval_ms),
            (Some("lo"), 2000)
        );
    }
}
