//! `load`: its options into a load spec: the load test's own spec (stream, pps or rpc) and
//! the phases, with those a load that is not a stream cannot run left out of the default.

use sonde_results::{
    Execution, LoadSpec, Phase, PpsSpec, RrSpec, SpecError, StreamSpec, TestSpec, Timing,
};

use super::check::checked;

/// What loads the path in the loaded phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// TCP bulk transfer, `connections` each way.
    Stream,
    /// Small UDP packets from this side (idle and upload only).
    Pps,
    /// Request/response on `connections`, 16 in flight each (idle and both only).
    Rpc,
}

/// What a load test was asked for.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Each phase's timeline.
    pub timing: Timing,
    pub phases: Vec<Phase>,
    pub ping_rate: f64,
    pub ping_size: u32,
    pub kind: LoadKind,
    /// Connections of the load (per direction for a stream).
    pub connections: u32,
    pub execution: Execution,
}

/// `--phases`: a comma list of phases, in order.
pub fn parse_phases(s: &str) -> Result<Vec<Phase>, String> {
    s.split(',')
        .map(|p| {
            Phase::parse(p.trim())
                .ok_or_else(|| format!("'{p}' is not a phase (idle, upload, download, both)"))
        })
        .collect()
}

impl LoadOptions {
    pub fn spec(&self) -> Result<LoadSpec, SpecError> {
        let (timing, execution) = (self.timing.clone(), self.execution.clone());
        let load = match self.kind {
            LoadKind::Stream => TestSpec::Stream(StreamSpec {
                connections: self.connections,
                timing,
                execution,
                ..StreamSpec::default()
            }),
            LoadKind::Pps => TestSpec::Pps(PpsSpec {
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
        let spec = LoadSpec {
            phases: self.phases(),
            ping_rate_per_s: self.ping_rate,
            ping_bytes: self.ping_size,
            load: Box::new(checked(load)?),
        };
        spec.validate()?;
        Ok(spec)
    }

    /// The phases asked for; for a load that is not a stream, the default list is cut to
    /// the phases it can run rather than refused.
    fn phases(&self) -> Vec<Phase> {
        match self.kind {
            LoadKind::Stream => self.phases.clone(),
            _ if self.phases == Phase::ALL => {
                let loaded = if self.kind == LoadKind::Pps {
                    Phase::Upload
                } else {
                    Phase::Both
                };
                vec![Phase::Idle, loaded]
            }
            _ => self.phases.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options of `sonde load HOST` with no flags.
    fn options() -> LoadOptions {
        LoadOptions {
            timing: Timing {
                duration_ms: 5000,
                warmup_ms: 1000,
                cooldown_ms: 0,
                interval_ms: 500,
            },
            phases: Phase::ALL.to_vec(),
            ping_rate: 100.0,
            ping_size: 64,
            kind: LoadKind::Stream,
            connections: 4,
            execution: Execution::default(),
        }
    }

    #[test]
    fn options_become_a_spec() {
        let s = options().spec().unwrap();
        assert_eq!(s.phases, Phase::ALL);
        assert_eq!(s.ping_rate_per_s, 100.0);
        let TestSpec::Stream(st) = s.load.as_ref() else {
            panic!()
        };
        assert_eq!(st.connections, 4);
        assert_eq!(st.timing.duration_ms, 5000);
        assert_eq!(st.timing.cooldown_ms, 0);
        let mut o = options();
        o.kind = LoadKind::Pps;
        assert_eq!(o.spec().unwrap().phases, [Phase::Idle, Phase::Upload]);
        let mut o = options();
        o.phases = parse_phases("idle,both").unwrap();
        assert_eq!(o.spec().unwrap().phases, [Phase::Idle, Phase::Both]);
    }

    #[test]
    fn bad_options_are_named() {
        assert!(parse_phases("idle,sideways").is_err());
        let mut o = options();
        o.ping_rate = 0.0;
        assert_eq!(o.spec().unwrap_err().flag, "--ping-rate");
        let mut o = options();
        (o.kind, o.phases) = (LoadKind::Rpc, vec![Phase::Idle, Phase::Upload]);
        assert_eq!(o.spec().unwrap_err().flag, "--phases");
        let mut o = options();
        o.connections = 0;
        assert_eq!(o.spec().unwrap_err().flag, "--connections");
        let mut o = options();
        // An engine the load's kind lacks.
        o.execution.engine = sonde_results::Engine::Dpdk;
        assert_eq!(o.spec().unwrap_err().flag, "--engine");
    }
}
