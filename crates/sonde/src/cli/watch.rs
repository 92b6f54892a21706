//! `sonde watch -- COMMAND`: the host evidence of a test, around any workload.

use std::net::IpAddr;

use clap::Args;
use sonde_results::SpecError;
use sonde_run::build::watch::WatchOptions;
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
    /// The watch of this host: the interface named, or toward `--peer`, or none.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        self.options().plan()
    }

    /// The flags as the run layer's builder reads them.
    fn options(&self) -> WatchOptions {
        WatchOptions {
            command: self.command.clone(),
            iface: self.iface.clone(),
            peer: self.peer,
            interval_ms: self.interval,
            quiet: self.output.quiet(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use clap::Parser;

    #[test]
    fn the_command_comes_after_the_double_dash() {
        let cli = Cli::try_parse_from([
            "sonde",
            "watch",
            "--peer",
            "198.18.0.2",
            "--",
            "fio",
            "--rw=read",
        ])
        .unwrap();
        let Command::Watch(a) = cli.command else {
            panic!()
        };
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
        let cli = Cli::try_parse_from(["sonde", "watch", "-i", "0.01", "--", "x"]).unwrap();
        let Command::Watch(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.options().interval_ms, 10);
    }
}
