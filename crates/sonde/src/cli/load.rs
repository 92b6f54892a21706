//! `sonde load`: the latency of a UDP and a TCP ping through phases of load (flent's RRUL,
//! crusader).

use clap::{Args, ValueEnum};
use sonde_results::{LoadSpec, Phase, RrSpec, SpecError, StreamSpec, TestSpec, Timing};

use super::flags::{checked, parse_duration_ms, ExecutionArgs, OutputArgs, Target};

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

/// A parsed `--phases` list.
#[derive(Debug, Clone)]
pub struct Phases(pub Vec<Phase>);

fn parse_phases(s: &str) -> Result<Phases, String> {
    s.split(',')
        .map(|p| {
            Phase::parse(p.trim())
                .ok_or_else(|| format!("'{p}' is not a phase (idle, upload, download, both)"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Phases)
}

impl LoadArgs {
    pub fn spec(&self) -> Result<TestSpec, SpecError> {
        let timing = Timing {
            duration_ms: self.duration,
            warmup_ms: self.warmup,
            cooldown_ms: 0,
            interval_ms: self.interval,
        };
        let execution = self.execution.execution();
        let load = match self.kind {
            LoadKind::Stream => TestSpec::Stream(StreamSpec {
                connections: self.connections,
                timing,
                execution,
                ..StreamSpec::default()
            }),
            LoadKind::Pps => TestSpec::Pps(sonde_results::PpsSpec {
                timing,
                execution,
                ..Default::default()
            }),
            LoadKind::Rpc => TestSpec::Rpc(RrSpec {
                connections: self.connections,
                window: 16,
                timing,
                execution,
                ..RrSpec::default()
            }),
        };
        let phases = match self.kind {
            // The phases a load that is not a stream cannot run are left out of the
            // default list rather than refused.
            LoadKind::Stream => self.phases.0.clone(),
            _ if self.phases.0 == Phase::ALL => {
                let loaded = if self.kind == LoadKind::Pps {
                    Phase::Upload
                } else {
                    Phase::Both
                };
                vec![Phase::Idle, loaded]
            }
            _ => self.phases.0.clone(),
        };
        let spec = LoadSpec {
            phases,
            ping_rate_per_s: self.ping_rate,
            ping_bytes: self.ping_size,
            load: Box::new(checked(load)?),
        };
        spec.validate()?;
        Ok(TestSpec::Load(spec))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    fn spec_of(args: &[&str]) -> Result<LoadSpec, SpecError> {
        let cli = Cli::try_parse_from(args).unwrap();
        let Command::Load(a) = cli.command else {
            panic!("{args:?} is a load command")
        };
        a.spec().map(|s| match s {
            TestSpec::Load(l) => l,
            _ => unreachable!(),
        })
    }

    #[test]
    fn flags_become_a_spec() {
        let s = spec_of(&["sonde", "load", "h"]).unwrap();
        assert_eq!(s.phases, Phase::ALL);
        assert_eq!(s.ping_rate_per_s, 100.0);
        let TestSpec::Stream(st) = s.load.as_ref() else {
            panic!()
        };
        assert_eq!(st.connections, 4);
        assert_eq!(st.timing.duration_ms, 5000);
        assert_eq!(st.timing.cooldown_ms, 0);
        let s = spec_of(&["sonde", "load", "h", "--load", "pps", "-t", "2"]).unwrap();
        assert_eq!(s.phases, [Phase::Idle, Phase::Upload]);
        let s = spec_of(&["sonde", "load", "h", "--phases", "idle,both"]).unwrap();
        assert_eq!(s.phases, [Phase::Idle, Phase::Both]);
    }

    #[test]
    fn bad_flags_are_named() {
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--phases", "idle,sideways"]).is_err());
        let e = spec_of(&["sonde", "load", "h", "--ping-rate", "0"]).unwrap_err();
        assert_eq!(e.flag, "--ping-rate");
        let e = spec_of(&[
            "sonde",
            "load",
            "h",
            "--load",
            "rpc",
            "--phases",
            "idle,upload",
        ])
        .unwrap_err();
        assert_eq!(e.flag, "--phases");
        let e = spec_of(&["sonde", "load", "h", "-P", "0"]).unwrap_err();
        assert_eq!(e.flag, "--connections");
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--engine", "warp"]).is_err());
        let e = spec_of(&["sonde", "load", "h", "--engine", "dpdk"]).unwrap_err();
        assert_eq!(e.flag, "--engine");
    }
}
