//! `sonde ping` and `sonde rpc`: their flags' values into one validated spec per receive
//! mode, with the stages as asked; each refusal names its flag.

use sonde_results::spec::default_stage_every;
use sonde_results::Transport;
use sonde_results::{Engine, Execution, PollMode, RrSpec, SpecError, Stall, TestSpec, Timing};

use super::checked;

/// Which messages `--stages` splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagesChoice {
    /// One in the default N ([`default_stage_every`]).
    Sampled,
    All,
    Off,
    /// One message in N.
    Every(u32),
}

/// A `--stages` value that names no choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not sampled, all, off or a number N >= 1 (one message in N)")]
pub struct NotStages(pub String);

/// A `--server-stall` value that is not AFTER_MS:STALL_MS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StallError {
    #[error("expected AFTER_MS:STALL_MS")]
    Shape,
    #[error("AFTER_MS is not a number")]
    After,
    #[error("STALL_MS is not a number")]
    Stall,
}

/// `--stages`' value.
pub fn parse_stages(s: &str) -> Result<StagesChoice, NotStages> {
    match s {
        "sampled" | "on" => Ok(StagesChoice::Sampled),
        "all" => Ok(StagesChoice::All),
        "off" => Ok(StagesChoice::Off),
        n => match n.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(StagesChoice::Every(n)),
            _ => Err(NotStages(n.to_string())),
        },
    }
}

/// `--server-stall`'s value, AFTER_MS:STALL_MS.
pub fn parse_stall(s: &str) -> Result<Stall, StallError> {
    let (a, b) = s.split_once(':').ok_or(StallError::Shape)?;
    Ok(Stall {
        after_ms: a.parse().map_err(|_| StallError::After)?,
        stall_ms: b.parse().map_err(|_| StallError::Stall)?,
    })
}

impl StagesChoice {
    /// Sets `spec`'s stages as chosen (`None`: the default, sampled).
    pub fn apply(choice: Option<StagesChoice>, spec: &mut RrSpec) {
        let every = match choice.unwrap_or(StagesChoice::Sampled) {
            StagesChoice::Off => None,
            StagesChoice::All => Some(1),
            StagesChoice::Every(n) => Some(n),
            StagesChoice::Sampled => Some(default_stage_every(
                spec.rate_per_s,
                spec.timing.duration_ms,
                spec.connections.saturating_mul(spec.window),
            )),
        };
        spec.stages = every.is_some();
        spec.stage_every = every;
    }
}

/// `make`'s spec with the stages chosen; by default (no `--stages`), without them when
/// this spec cannot take them (an answer with no room for the echo's figures, a new
/// connection per request, AF_XDP), as before stages were on by default.
fn staged(
    choice: Option<StagesChoice>,
    make: impl Fn(Option<StagesChoice>) -> Result<TestSpec, SpecError>,
) -> Result<TestSpec, SpecError> {
    match (choice, make(choice)) {
        (None, Err(e)) if e.flag == "--stages" => make(Some(StagesChoice::Off)),
        (_, r) => r,
    }
}

/// The flags ping and rpc share, as typed values.
#[derive(Debug, Clone)]
pub struct RrParams {
    /// `--udp`.
    pub udp: bool,
    pub timing: Timing,
    /// `--poll`: each receive mode asked for, a spec each.
    pub modes: Vec<PollMode>,
    pub busy_poll_us: Option<u32>,
    pub sqpoll: bool,
    pub execution: Execution,
    pub self_noise_ms: Option<u64>,
    pub stages: Option<StagesChoice>,
    /// `--stamps`: which stamps the stages ask for.
    pub stamps: sonde_results::stamps::StampSource,
    pub server_stall: Option<Stall>,
    pub server_clock_shift_ns: Option<i64>,
}

/// `sonde ping`'s own flags.
#[derive(Debug, Clone)]
pub struct PingParams {
    /// `--msg-size`: both ways.
    pub msg_size: u32,
    pub rate: Option<f64>,
}

/// `sonde rpc`'s own flags.
#[derive(Debug, Clone)]
pub struct RpcParams {
    pub connections: u32,
    pub window: u32,
    /// `--msg-size`: both ways, instead of `--req-size` and `--resp-size`.
    pub msg_size: Option<u32>,
    pub req_size: u32,
    pub resp_size: u32,
    pub threads: Option<u32>,
    pub server_threads: Option<u32>,
    /// `--rate`: open loop.
    pub rate: Option<f64>,
    pub crr: bool,
}

impl RrParams {
    /// One spec per receive mode asked for, each made by `make` from the shared part; UDP
    /// when `udp` asks for it or the engine carries nothing else.
    fn specs(
        &self,
        make: impl Fn(RrSpec) -> Result<TestSpec, SpecError>,
    ) -> Result<Vec<TestSpec>, SpecError> {
        let transport = match self.udp || self.execution.engine == Engine::Xdp {
            true => Transport::Udp,
            false => Transport::Tcp,
        };
        self.modes
            .iter()
            .map(|&poll| {
                make(RrSpec {
                    transport,
                    timing: self.timing.clone(),
                    poll,
                    busy_poll_us: self.busy_poll_us,
                    sqpoll: self.sqpoll,
                    execution: self.execution.clone(),
                    server_stall: self.server_stall,
                    server_clock_shift_ns: self.server_clock_shift_ns,
                    self_noise_ms: self.self_noise_ms,
                    stamps: self.stamps,
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// `sonde ping`'s specs.
pub fn ping(common: &RrParams, p: &PingParams) -> Result<Vec<TestSpec>, SpecError> {
    common.specs(|base| {
        staged(common.stages, |choice| {
            let mut spec = RrSpec {
                request_bytes: p.msg_size,
                response_bytes: p.msg_size,
                rate_per_s: p.rate,
                ..base.clone()
            };
            StagesChoice::apply(choice, &mut spec);
            // Both sizes come from -m here, so that is the flag to name.
            checked(TestSpec::Ping(spec)).map_err(|mut e| {
                if e.flag == "--req-size" || e.flag == "--resp-size" {
                    e.flag = "--msg-size";
                }
                e
            })
        })
    })
}

/// `sonde rpc`'s specs.
pub fn rpc(common: &RrParams, p: &RpcParams) -> Result<Vec<TestSpec>, SpecError> {
    common.specs(|base| {
        staged(common.stages, |choice| {
            let mut spec = RrSpec {
                connections: p.connections,
                window: p.window,
                request_bytes: p.msg_size.unwrap_or(p.req_size),
                response_bytes: p.msg_size.unwrap_or(p.resp_size),
                client_threads: p.threads,
                server_threads: p.server_threads,
                rate_per_s: p.rate,
                open_loop: p.rate.is_some(),
                connect_per_request: p.crr,
                ..base.clone()
            };
            StagesChoice::apply(choice, &mut spec);
            checked(TestSpec::Rpc(spec))
        })
    })
}
