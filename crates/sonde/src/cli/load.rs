//! `sonde load`: the latency of a UDP and a TCP ping through phases of load (flent's RRUL,
//! crusader).

use clap::{Args, ValueEnum};
use sonde_results::{LoadSpec, SpecError, Timing};
use sonde_run::build::load::{self, parse_phases, LoadOf, LoadParams, Phases};

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
    /// Split the pings' round trips into stages from both ends' kernel timestamps: says
    /// which stage the load's added latency is in. On by default (every ping at the
    /// default rate; a faster ping keeps 2,000 split); `off`, `all` or `N` (one in N).
    #[arg(long, num_args = 0..=1, default_missing_value = "sampled", value_parser = super::rr::parse_stages, value_name = "WHICH")]
    pub stages: Option<super::rr::StagesChoice>,
    /// What loads the path.
    #[arg(long, value_enum, default_value = "stream", value_name = "KIND")]
    pub load: LoadKind,
    /// Connections of the load (per direction for a stream).
    #[arg(short = 'P', long, default_value_t = 4, value_name = "N")]
    pub connections: u32,
    #[command(flatten)]
    pub execution: ExecutionArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl LoadArgs {
    /// The flags as a load spec ([`load::spec`]).
    pub fn spec(&self) -> Result<LoadSpec, SpecError> {
        load::spec(&LoadParams {
            timing: Timing {
                duration_ms: self.duration,
                warmup_ms: self.warmup,
                cooldown_ms: 0,
                interval_ms: self.interval,
            },
            phases: self.phases.0.clone(),
            ping_rate: self.ping_rate,
            ping_size: self.ping_size,
            stages: self.stages,
            load: match self.load {
                LoadKind::Stream => LoadOf::Stream,
                LoadKind::Pps => LoadOf::Pps,
                LoadKind::Rpc => LoadOf::Rpc,
            },
            connections: self.connections,
            execution: self.execution.execution(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command, TestCommand};
    use super::*;
    use clap::Parser;
    use sonde_results::{Engine, Phase, TestSpec};

    fn spec_of(line: &str) -> Result<LoadSpec, SpecError> {
        let Command::Test(TestCommand::Load(a)) = parsed(line) else {
            panic!("{line} is a load command")
        };
        a.spec()
    }

    #[test]
    fn flags_become_a_spec() {
        let s = spec_of("load h").unwrap();
        assert_eq!(
            (s.phases.as_slice(), s.ping_rate_per_s),
            (&Phase::ALL[..], 100.0)
        );
        let TestSpec::Stream(st) = s.load.as_ref() else {
            panic!("a stream load")
        };
        assert_eq!(st.connections, 4);
        assert_eq!((st.timing.duration_ms, st.timing.interval_ms), (5000, 500));
        assert_eq!(st.timing.cooldown_ms, 0);
        let s = spec_of("load h --load pps -t 2").unwrap();
        assert_eq!(s.phases, [Phase::Idle, Phase::Upload]);
        assert!(matches!(s.load.as_ref(), TestSpec::Pps(p) if p.timing.duration_ms == 2000));
        let s = spec_of("load h --load rpc").unwrap();
        assert_eq!(s.phases, [Phase::Idle, Phase::Both]);
        let s = spec_of("load h --phases idle,both").unwrap();
        assert_eq!(s.phases, [Phase::Idle, Phase::Both]);
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--phases", "idle,sideways"]).is_err());
        assert!(Cli::try_parse_from(["sonde", "load", "h", "--engine", "warp"]).is_err());
    }

    #[test]
    fn bad_flags_are_named() {
        assert!(parse_phases("idle,sideways").is_err());
        let refused = [
            ("load h --ping-rate 0", "--ping-rate"),
            ("load h --load rpc --phases idle,upload", "--phases"),
            ("load h -P 0", "--connections"),
            // An engine the load's kind lacks.
            ("load h --engine dpdk", "--engine"),
        ];
        for (line, flag) in refused {
            assert_eq!(spec_of(line).unwrap_err().flag, flag, "{line}");
        }
        let s = spec_of("load h --engine uring").unwrap();
        assert_eq!(s.load.execution().engine, Engine::Uring);
    }
}
