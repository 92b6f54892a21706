//! `ping` and `rpc`: their options into one spec per receive mode asked for, the
//! transport the engine implies, and the flag to name when a size is refused.

use sonde_results::{Engine, Execution, RrSpec, SpecError, Stall, TestSpec, Timing, Transport};

use super::check::checked;
use super::poll::PollChoice;

/// What ping and rpc share.
#[derive(Debug, Clone)]
pub struct RrOptions {
    pub timing: Timing,
    pub poll: PollChoice,
    pub busy_poll_us: Option<u32>,
    pub sqpoll: bool,
    pub execution: Execution,
    pub server_stall: Option<Stall>,
    /// UDP asked for (an engine that carries nothing else implies it).
    pub udp: bool,
    /// `--self-noise`: the tool's floor measured this long before the test.
    pub self_noise_ms: Option<u64>,
    /// `--stages`: each round trip split by both ends' kernel timestamps.
    pub stages: bool,
}

/// `ping`: one message in flight.
#[derive(Debug, Clone)]
pub struct PingOptions {
    pub common: RrOptions,
    pub msg_size: u32,
    pub rate: Option<f64>,
}

/// `rpc`: C connections × W in flight.
#[derive(Debug, Clone)]
pub struct RpcOptions {
    pub common: RrOptions,
    pub connections: u32,
    pub window: u32,
    /// Both sizes at once; it wins over `req_size` and `resp_size`.
    pub msg_size: Option<u32>,
    pub req_size: u32,
    pub resp_size: u32,
    pub threads: Option<u32>,
    pub server_threads: Option<u32>,
    /// Open loop at this many requests per second; `None`: closed loop.
    pub rate: Option<f64>,
    pub crr: bool,
}

impl RrOptions {
    /// One spec per receive mode asked for, each made by `make` from the shared part.
    fn specs(
        &self,
        make: impl Fn(RrSpec) -> Result<TestSpec, SpecError>,
    ) -> Result<Vec<TestSpec>, SpecError> {
        self.poll
            .modes()
            .into_iter()
            .map(|poll| {
                make(RrSpec {
                    transport: self.transport(),
                    timing: self.timing.clone(),
                    poll,
                    busy_poll_us: self.busy_poll_us,
                    sqpoll: self.sqpoll,
                    execution: self.execution.clone(),
                    server_stall: self.server_stall,
                    self_noise_ms: self.self_noise_ms,
                    stages: self.stages,
                    ..Default::default()
                })
            })
            .collect()
    }

    /// UDP when asked, or when the engine carries nothing else.
    fn transport(&self) -> Transport {
        if self.udp || self.execution.engine == Engine::Xdp {
            Transport::Udp
        } else {
            Transport::Tcp
        }
    }
}

impl PingOptions {
    pub fn specs(&self) -> Result<Vec<TestSpec>, SpecError> {
        self.common.specs(|base| {
            let spec = RrSpec {
                request_bytes: self.msg_size,
                response_bytes: self.msg_size,
                rate_per_s: self.rate,
                ..base
            };
            // Both sizes come from -m here, so that is the flag to name.
            checked(TestSpec::Ping(spec)).map_err(|mut e| {
                if e.flag == "--req-size" || e.flag == "--resp-size" {
                    e.flag = "--msg-size";
                }
                e
            })
        })
    }
}

impl RpcOptions {
    pub fn specs(&self) -> Result<Vec<TestSpec>, SpecError> {
        self.common.specs(|base| {
            checked(TestSpec::Rpc(RrSpec {
                connections: self.connections,
                window: self.window,
                request_bytes: self.msg_size.unwrap_or(self.req_size),
                response_bytes: self.msg_size.unwrap_or(self.resp_size),
                client_threads: self.threads,
                server_threads: self.server_threads,
                rate_per_s: self.rate,
                open_loop: self.rate.is_some(),
                connect_per_request: self.crr,
                ..base
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_results::PollMode;

    /// The options `sonde ping HOST` / `sonde rpc HOST` share with no flags.
    fn common() -> RrOptions {
        RrOptions {
            timing: Timing {
                duration_ms: 10_000,
                warmup_ms: 1000,
                cooldown_ms: 0,
                interval_ms: 1000,
            },
            poll: PollChoice::One(PollMode::Block),
            busy_poll_us: None,
            sqpoll: false,
            execution: Execution::default(),
            server_stall: None,
            udp: false,
            self_noise_ms: None,
            stages: false,
        }
    }

    fn rpc() -> RpcOptions {
        RpcOptions {
            common: common(),
            connections: 1,
            window: 1,
            msg_size: None,
            req_size: 64,
            resp_size: 64,
            threads: None,
            server_threads: None,
            rate: None,
            crr: false,
        }
    }

    fn ping() -> PingOptions {
        PingOptions {
            common: common(),
            msg_size: 64,
            rate: None,
        }
    }

    fn rr(specs: Vec<TestSpec>) -> Vec<RrSpec> {
        let rr = |s| match s {
            TestSpec::Ping(r) | TestSpec::Rpc(r) => r,
            _ => unreachable!(),
        };
        specs.into_iter().map(rr).collect()
    }

    #[test]
    fn ping_and_rpc_options() {
        let mut o = rpc();
        (o.connections, o.window, o.rate) = (8, 32, Some(1000.0));
        o.common.poll = PollChoice::One(PollMode::Hybrid { spin_us: 100 });
        let r = &rr(o.specs().unwrap())[0];
        assert_eq!(r.poll, PollMode::Hybrid { spin_us: 100 });
        assert_eq!((r.connections, r.window, r.open_loop), (8, 32, true));
        let mut p = ping();
        (p.common.udp, p.common.poll, p.msg_size) = (true, PollChoice::All, 32);
        let p = rr(p.specs().unwrap());
        assert_eq!(p.len(), 3);
        assert_eq!((p[1].transport, p[1].request_bytes), (Transport::Udp, 32));
        assert_eq!(p[1].poll, PollMode::Busy);
        let mut o = rpc();
        o.window = 0;
        assert_eq!(o.specs().unwrap_err().flag, "--window");
        let mut p = ping();
        (p.common.udp, p.msg_size) = (true, 4);
        assert_eq!(p.specs().unwrap_err().flag, "--msg-size");
    }

    #[test]
    fn xdp_implies_udp() {
        // msg_gen's job: 1 KiB both ways, over AF_XDP (UDP implied).
        let mut o = rpc();
        o.common.execution.engine = Engine::Xdp;
        (o.connections, o.window, o.msg_size) = (4, 32, Some(1024));
        let x = &rr(o.specs().unwrap())[0];
        assert_eq!(x.transport, Transport::Udp);
        assert_eq!(
            (x.request_bytes, x.response_bytes, x.window),
            (1024, 1024, 32)
        );
        o.crr = true;
        assert_eq!(o.specs().unwrap_err().flag, "--crr");
    }

    #[test]
    fn self_noise_is_the_kernel_loops_and_reaches_every_spec() {
        let mut p = ping();
        (p.common.self_noise_ms, p.common.poll) = (Some(500), PollChoice::All);
        assert!(rr(p.specs().unwrap())
            .iter()
            .all(|s| s.self_noise_ms == Some(500)));
        p.common.execution.engine = Engine::Xdp;
        let e = p.specs().unwrap_err();
        assert_eq!(e.flag, "--self-noise");
        assert!(e.to_string().contains("--engine xdp"), "{e}");
    }
}
