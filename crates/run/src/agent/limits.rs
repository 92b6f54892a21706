//! What an agent will run for a controller: a limit refuses a test, it never trims one.

use sonde_results::{TestSpec, Transport};

use crate::kind::{Demand, Kind};

/// What the agent will run for a controller.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_duration_ms: u64,
    pub max_connections: u32,
    /// Packets or requests per second a test may ask for; unpaced tests are refused too.
    pub max_rate: Option<f64>,
    pub max_message_bytes: u32,
    /// A UDP echo's answer may be at most this many times its request: above 1 the agent
    /// multiplies whatever reaches it (a reflector), so that is the operator's choice.
    pub max_udp_reply_ratio: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration_ms: 3_600_000,
            max_connections: sonde_results::spec::MAX_CONNECTIONS,
            max_rate: None,
            max_message_bytes: sonde_results::spec::MAX_MESSAGE_BYTES,
            max_udp_reply_ratio: 1.0,
        }
    }
}

impl Limits {
    /// The first limit `spec` exceeds, in words naming the agent's flag.
    pub fn check(&self, spec: &TestSpec, kind: &dyn Kind) -> Option<String> {
        let total_ms = spec.timing().total_ms();
        let Demand {
            connections: conns,
            rate,
            message_bytes: msg,
        } = kind.demand(spec);
        if total_ms > self.max_duration_ms {
            return Some(format!(
                "the test lasts {:.1} s, over this agent's --max-duration of {:.1} s",
                total_ms as f64 / 1e3,
                self.max_duration_ms as f64 / 1e3
            ));
        }
        if conns > self.max_connections {
            return Some(format!(
                "{conns} connections or flows, over this agent's --max-connections of {}",
                self.max_connections
            ));
        }
        if msg > self.max_message_bytes {
            return Some(format!(
                "{msg}-byte messages, over this agent's --max-message of {}",
                self.max_message_bytes
            ));
        }
        if let Some(why) = self.check_udp_reply(spec) {
            return Some(why);
        }
        if let (Some(max), Some(rate)) = (self.max_rate, rate) {
            match rate {
                Some(r) if r <= max => {}
                Some(r) => {
                    return Some(format!(
                        "{r} per second, over this agent's --max-rate of {max}"
                    ))
                }
                None => {
                    return Some(format!(
                        "an unpaced test; this agent's --max-rate of {max} needs --rate"
                    ))
                }
            }
        }
        None
    }

    /// A UDP request/response spec whose answer is over `max_udp_reply_ratio` times its
    /// request, in words naming the flag.
    fn check_udp_reply(&self, spec: &TestSpec) -> Option<String> {
        let (TestSpec::Ping(r) | TestSpec::Rpc(r)) = spec else {
            return None;
        };
        if r.transport != Transport::Udp {
            return None;
        }
        let (req, resp) = (r.request_bytes as f64, r.response_bytes as f64);
        if resp <= req * self.max_udp_reply_ratio {
            return None;
        }
        Some(format!(
            "{}-byte UDP answers to {}-byte requests ({:.1}x) would amplify whatever \
             reaches the echo, over this agent's --max-udp-reply-ratio of {} (start the agent \
             with --max-udp-reply-ratio {} to allow it)",
            r.response_bytes,
            r.request_bytes,
            resp / req.max(1.0),
            self.max_udp_reply_ratio,
            (resp / req.max(1.0)).ceil()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind;
    use sonde_results::RrSpec;

    fn udp_rpc(request_bytes: u32, response_bytes: u32) -> TestSpec {
        TestSpec::Rpc(RrSpec {
            transport: Transport::Udp,
            request_bytes,
            response_bytes,
            ..Default::default()
        })
    }

    fn check(limits: &Limits, spec: &TestSpec) -> Option<String> {
        limits.check(spec, kind::of(spec).expect("a kind"))
    }

    #[test]
    fn udp_answers_larger_than_their_request_need_the_agents_ratio() {
        let d = Limits::default();
        assert_eq!(check(&d, &udp_rpc(64, 64)), None);
        assert_eq!(check(&d, &udp_rpc(1024, 64)), None);
        let why = check(&d, &udp_rpc(16, 65_000)).expect("refused");
        assert!(why.contains("--max-udp-reply-ratio 4063"), "{why}");
        // TCP answers go only to a connection that proved the cookie: not a reflector.
        let tcp = TestSpec::Rpc(RrSpec {
            response_bytes: 65_000,
            ..Default::default()
        });
        assert_eq!(check(&d, &tcp), None);
        let ratio = Limits {
            max_udp_reply_ratio: 16.0,
            ..Default::default()
        };
        assert_eq!(check(&ratio, &udp_rpc(64, 1024)), None);
        assert!(check(&ratio, &udp_rpc(64, 1025)).is_some());
    }
}
