//! `sonde load`: the latency of a UDP and a TCP ping through phases of load (flent's RRUL,
//! crusader).

use clap::{Args, ValueEnum};
use sonde_results::{LoadSpec, Phase, SpecError, Timing};
use sonde_run::build::load::{self as build, LoadOptions};

use super::flags::{parse_duration_ms, ExecutionArgs, OutputArgs, Target};

/// What loads the path in the loaded phases.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// TCP bulk transfer, -P connections each way (upload, download, both).
    Stream,
    /// Small UDP packets from this side, as fast as it sends (idle and upload only).
    Pps,
    /// Request/response on -P connections, 16 in flight each (idle and both only).
    Rpc,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub target: Target,
    /// Measured time of each phase, seconds.
    #[arg(short = 't', long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Time before each phase's measured window (the load ramps up), excluded from figures.
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: u64,
    /// Report interval: the time series of latency against throughput.
    #[arg(short = 'i', long, default_value = "0.5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// The phases, in order: idle, upload (this side sends), download (the agent sends),
    /// both.
    #[arg(long, default_value = "idle,upload,download,both", value_parser = parse_phases, value_name = "LIST")]
    pub phases: Phases,
    /// Pings per second of each ping (UDP and TCP), timed from the intended send.
    #[arg(long, default_value_t = 100.0, value_name = "PER_S")]
    pub ping_rate: f64,
    /// Bytes of each ping request and response.
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub ping_size: u32,
    /// What loads the path.
    #[arg(
        long = "load",
        value_enum,
        default_value = "stream",
        value_name = "KIND"
    )]
    pub kind: LoadKind,
    /// Connections of the load (per direction for a stream).
    #[arg(
        short = 'P',
        long = "connections",
        default_value_t = 4,
        value_name = "N"
    )]
    pub connections: u32,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// A parsed `--phases` list (one value; clap would read a bare `Vec` as a repeated flag).
#[derive(Debug, Clone)]
pub struct Phases(pub Vec<Phase>);

fn parse_phases(s: &str) -> Result<Phases, String> {
    build::parse_phases(s).map(Phases)
}

impl From<LoadKind> for build::LoadKind {
    fn from(k: LoadKind) -> build::LoadKind {
        match k {
            LoadKind::Stream => build::LoadKind::Stream,
            LoadKind::Pps => build::LoadKind::Pps,
            LoadKind::Rpc => build::LoadKind::Rpc,
        }
    }
}

impl LoadArgs {
    pub fn spec(&self) -> Result<LoadSpec, SpecError> {
        self.options().spec()
    }

    /// The flags as the run layer's builder reads them.
    fn options(&self) -> LoadOptions {
        LoadOptions {
            timing: Timing {
                duration_ms: self.duration,
                warmup_ms: self.warmup,
                cooldown_ms: 0,
                interval_ms: self.interval,
            },
            phases: self.phases.0.clone(),
            ping_rate: self.ping_rate,
            ping_size: self.ping_size,
            kind: self.kind.into(),
            connections: self.connections,
            execution: self.execution.execution(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn options_of(args: &[&str]) -> LoadOptions {
        let Command::Load(a) = Cli::try_parse_from(args).unwrap().command else {
            panic!("{args:?} is a load command")
        };
        a.options()
    }

    #[test]
    fn flags_become_the_builders_options() {
        let o = options_of(&["sonde", "load", "h"]);
        assert_eq!((o.phases, o.connections), (Phase::ALL.to_vec(), 4));
        assert_eq!((o.timing.duration_ms, o.timing.interval_ms), (5000, 500));
        let o = options_of(&["sonde", "load", "h", "--load", "pps", "-t", "2"]);
        assert_eq!((o.kind, o.timing.duration_ms), (build::LoadKind::Pps, 2000));
        let o = options_of(&["sonde", "load", "h", "--phases", "idle,both"]);
        assert_eq!(o.phases, [Phase::Idle, Phase::Both]);
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--phases", "idle,sideways"]).is_err());
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--engine", "warp"]).is_err());
    }
}
