//! `sonde load`: its flags' values into a validated load spec (the pings' stages as asked,
//! the load's kind and its phases); each refusal names its flag.

use sonde_results::{Execution, LoadSpec, Phase, PpsSpec, RrSpec, SpecError, StreamSpec};
use sonde_results::{TestSpec, Timing};

use super::checked;
use super::rr::StagesChoice;

/// `--load`: what runs under the pings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOf {
    Stream,
    Pps,
    Rpc,
}

/// A parsed `--phases` list (one value; clap would read a bare `Vec` as a repeated flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phases(pub Vec<Phase>);

/// A `--phases` entry that names no phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a phase (idle, upload, download, both)")]
pub struct UnknownPhase(pub String);

/// `--phases`: a comma list of phases, in order.
pub fn parse_phases(s: &str) -> Result<Phases, UnknownPhase> {
    s.split(',')
        .map(|p| Phase::parse(p.trim()).ok_or_else(|| UnknownPhase(p.to_string())))
        .collect::<Result<_, _>>()
        .map(Phases)
}

/// `sonde load`'s flags, as typed values.
#[derive(Debug, Clone)]
pub struct LoadParams {
    pub timing: Timing,
    /// `--phases`, in order.
    pub phases: Vec<Phase>,
    pub ping_rate: f64,
    pub ping_size: u32,
    pub stages: Option<StagesChoice>,
    pub load: LoadOf,
    /// `--connections` of a stream or rpc load.
    pub connections: u32,
    pub execution: Execution,
}

/// The load's spec, validated.
pub fn spec(p: &LoadParams) -> Result<LoadSpec, SpecError> {
    let (timing, execution) = (p.timing.clone(), p.execution.clone());
    let load = match p.load {
        LoadOf::Stream => TestSpec::Stream(StreamSpec {
            connections: p.connections,
            timing,
            execution,
            ..StreamSpec::default()
        }),
        LoadOf::Pps => TestSpec::Pps(PpsSpec {
            timing,
            execution,
            ..Default::default()
        }),
        LoadOf::Rpc => TestSpec::Rpc(RrSpec {
            connections: p.connections,
            window: 16,
            timing,
            execution,
            ..RrSpec::default()
        }),
    };
    let mut spec = LoadSpec {
        phases: phases(p),
        ping_rate_per_s: p.ping_rate,
        ping_bytes: p.ping_size,
        ping_stages: p.stages != Some(StagesChoice::Off),
        ping_stage_every: match p.stages {
            Some(StagesChoice::All) => Some(1),
            Some(StagesChoice::Every(n)) => Some(n),
            _ => None,
        },
        load: Box::new(checked(load)?),
    };
    // By default, without stages when the pings have no room for the echo's figures.
    match spec.validate() {
        Err(e) if e.flag == "--stages" && p.stages.is_none() => {
            spec.ping_stages = false;
            spec.validate()?;
        }
        r => r?,
    }
    Ok(spec)
}

/// The phases asked; by default, those the load's kind has (pps: upload; rpc: both).
fn phases(p: &LoadParams) -> Vec<Phase> {
    let asked = &p.phases;
    match p.load {
        LoadOf::Pps if *asked == Phase::ALL => vec![Phase::Idle, Phase::Upload],
        LoadOf::Rpc if *asked == Phase::ALL => vec![Phase::Idle, Phase::Both],
        _ => asked.clone(),
    }
}
