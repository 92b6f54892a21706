//! What an agent will run for a controller: a limit refuses a test, it never trims one,
//! and every refusal names the `sonde serve` flag that would allow it. Every kind and both
//! parts (serving, and a client part that sends to another agent) are under every limit.

use sonde_results::{Role, StampSpec, TestSpec, Transport};

use super::account::{OverShare, Share};
use super::amounts::si;
use crate::kind::{Demand, Kind};

/// What the agent will run for a controller.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_duration_ms: u64,
    pub max_connections: u32,
    /// Packets or requests per second a test may ask for; unpaced tests are refused too.
    pub max_rate: Option<f64>,
    /// Bits per second a test may carry each way, every kind; unpaced tests are refused.
    pub max_bitrate: Option<f64>,
    /// Bits per second a client part may send to another agent; unpaced ones are paced at
    /// it. `None`: no cap.
    pub max_client_bitrate: Option<f64>,
    pub max_message_bytes: u32,
    /// Worker threads of all live tests together.
    pub max_threads: usize,
    /// Memory of all live tests together, as the spec's estimate (`kind::budget`).
    pub max_memory_bytes: u64,
    /// Honour test hooks in a spec (`server_stall`); refused otherwise.
    pub test_hooks: bool,
    /// A UDP echo's answer may be at most this many times its request: above 1 the agent
    /// multiplies whatever reaches it (a reflector), so that is the operator's choice.
    pub max_udp_reply_ratio: f64,
    /// DSCPs a test may have this agent send (`--dscp`, `--control-dscp`), bit `d` for
    /// DSCP `d`: [`DEFAULT_TEST_DSCPS`] unless the operator widens it.
    pub allowed_dscps: u64,
}

/// Every DSCP but network control (CS6 48, CS7 56; RFC 4594): the classes routers give
/// their own routing protocols, which a controller's test at `--max-bitrate` must not
/// have this host send unless the operator says so (`serve --allow-dscp cs6,cs7`).
pub const DEFAULT_TEST_DSCPS: u64 = !(1 << 48 | 1 << 56);

/// Intervals a STAMP run from an agent reports at most: an hour of 1 s intervals, whose
/// document fits one frame back to the controller.
pub const MAX_STAMP_INTERVALS: u64 = 3_600;

/// What a STAMP run asks of an agent: one socket at the spec's rate, packets of its size
/// (each answer as long), and the ledger's memory: a send time per packet and a latency
/// histogram per interval.
pub fn stamp_demand(spec: &StampSpec) -> Demand {
    let bytes = spec.packet_bytes;
    let histograms = spec.timing.intervals().saturating_add(2);
    Demand {
        connections: 1,
        rate: Some(Some(spec.rate_per_s)),
        bits_per_s: Some(spec.rate_per_s * f64::from(bytes) * 8.0),
        message_bytes: bytes,
        threads: 1,
        memory_bytes: spec
            .packets()
            .saturating_mul(16)
            .saturating_add(histograms.saturating_mul(crate::kind::budget::HISTOGRAM_BYTES / 3)),
    }
}

/// The default cap of a client part, 1 Gbit/s: a client part sends to another host on a
/// controller's word, so by default it sends no more than the slowest link common in a
/// fleet carries (a 1 GbE port), and an agent that is talked into aiming it at the wrong
/// host cannot fill a faster link. An operator who measures capacity between agents
/// raises it (`--max-client-bitrate 100G`).
pub const DEFAULT_CLIENT_BITS_PER_S: f64 = 1e9;
/// Worker threads of all live tests by default: the default `--max-tests` (4) of a
/// stream's default 128 workers would be 512 threads and about 1 GB of stacks; half that
/// still lets two tests of 128 connections run at once.
pub const DEFAULT_MAX_THREADS: usize = 256;
/// The share of MemTotal live tests may take by default: the agent is a guest on a host
/// that runs other work.
pub const DEFAULT_MEMORY_SHARE: u64 = 4;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration_ms: 3_600_000,
            max_connections: sonde_results::spec::MAX_CONNECTIONS,
            max_rate: None,
            max_bitrate: None,
            max_client_bitrate: Some(DEFAULT_CLIENT_BITS_PER_S),
            max_message_bytes: sonde_results::spec::MAX_MESSAGE_BYTES,
            max_threads: DEFAULT_MAX_THREADS,
            max_memory_bytes: default_memory_bytes(),
            test_hooks: false,
            max_udp_reply_ratio: 1.0,
            allowed_dscps: DEFAULT_TEST_DSCPS,
        }
    }
}

/// A quarter of this host's MemTotal (1 GiB when it cannot be read).
pub fn default_memory_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    });
    total.map_or(1 << 30, |t| t / DEFAULT_MEMORY_SHARE)
}

impl Limits {
    /// Fits a client part to `--max-client-bitrate`: an unpaced stream or pps is paced at
    /// the cap (at most `--max-rate` too), so that it still runs, and the note saying so is
    /// returned for the result; a faster one is then refused. A closed-loop ping or rpc is
    /// left alone, since pacing would turn it into an open-loop test that measures
    /// something else: over TCP it cannot outrun the listener's answers, and over UDP what
    /// it sends unanswered is bounded by `check_unanswered`.
    pub fn pace_client_part(&self, spec: &mut TestSpec) -> Option<String> {
        let cap = self.max_client_bitrate?;
        let max_rate = self.max_rate.unwrap_or(f64::INFINITY);
        let paced = match spec {
            TestSpec::Stream(s) if s.rate_bits_per_s.is_none() => {
                s.rate_bits_per_s = Some(cap);
                true
            }
            TestSpec::Pps(p) if p.rate_pps.is_none() => {
                let bits = 8.0 * f64::from(p.size_bytes.max(1));
                p.rate_pps = Some((cap / bits).min(max_rate).min(1e9));
                true
            }
            _ => false,
        };
        paced.then(|| {
            format!(
                "client part paced at {} bit/s by this agent's --max-client-bitrate (raise it to measure more)",
                si(cap)
            )
        })
    }

    /// What a client part of `spec` (paced by `pace_client_part`) books of the agent-wide
    /// `--max-client-bitrate`: its rate, or, closed-loop over UDP, what it sends when
    /// nothing answers. A closed-loop one over TCP books nothing: it sends only as fast as
    /// a listener that takes the test's data answers.
    pub fn client_bits(&self, spec: &TestSpec, d: &Demand) -> f64 {
        if self_clocked(spec) {
            return 0.0;
        }
        unanswered_bits_per_s(spec)
            .or(d.bits_per_s)
            .unwrap_or(f64::INFINITY)
    }

    /// The first limit `spec` exceeds for `role`'s side, in words naming the agent's flag.
    pub fn check(&self, spec: &TestSpec, kind: &dyn Kind, role: Role) -> Option<String> {
        let d = kind.demand(spec, role);
        self.check_hooks(spec)
            .or_else(|| self.check_marks(spec.execution().marks))
            .or_else(|| self.check_size(spec, &d))
            .or_else(|| self.check_udp_reply(spec))
            .or_else(|| self.check_rate(&d))
            .or_else(|| self.check_bits(&d, role, closed_loop(spec)))
            .or_else(|| self.check_unanswered(spec, role))
            .or_else(|| self.check_one_test(&d))
    }

    fn check_hooks(&self, spec: &TestSpec) -> Option<String> {
        let hook = match spec {
            TestSpec::Ping(r) | TestSpec::Rpc(r) => {
                let stall = r.server_stall.map(|_| "server_stall");
                stall.or(r.server_clock_shift_ns.map(|_| "server_clock_shift_ns"))
            }
            _ => None,
        };
        hook.filter(|_| !self.test_hooks).map(|h| {
            format!(
                "a test hook ({h}) is for sonde's own tests (start the agent with --test-hooks)"
            )
        })
    }

    /// A STAMP run to an agent-less reflector (`Stamp`): a client part like any, under
    /// every limit a client part is (its length with the wait for answers, its packets'
    /// size, rate and bits), and its document small enough to send back.
    pub fn check_stamp(&self, spec: &StampSpec, d: &Demand) -> Option<String> {
        let intervals = spec.timing.intervals();
        if intervals > MAX_STAMP_INTERVALS {
            return Some(format!(
                "{intervals} intervals, over the {MAX_STAMP_INTERVALS} a STAMP run from an agent reports (a longer --interval)"
            ));
        }
        self.check_marks(spec.execution.marks)
            .or_else(|| self.check_length(spec.timing.total_ms().saturating_add(spec.timeout_ms)))
            .or_else(|| self.check_message(d))
            .or_else(|| self.check_rate(d))
            .or_else(|| self.check_bits(d, Role::Client, false))
            .or_else(|| self.check_one_test(d))
    }

    /// A DSCP the operator did not allow, on the data packets or the control connection.
    fn check_marks(&self, marks: sonde_results::marks::Marks) -> Option<String> {
        [("--dscp", marks.dscp), ("--control-dscp", marks.control_dscp)]
            .into_iter()
            .find_map(|(flag, d)| {
                let d = d?;
                (self.allowed_dscps >> d.value() & 1 == 0).then(|| {
                    format!(
                        "{flag} {}: this agent does not send that class (network control, CS6 and CS7, unless `sonde serve --allow-dscp` lists it)",
                        d.words()
                    )
                })
            })
    }

    fn check_length(&self, total_ms: u64) -> Option<String> {
        (total_ms > self.max_duration_ms).then(|| {
            format!(
                "the test lasts {:.1} s, over this agent's --max-duration of {:.1} s (start the agent with a higher --max-duration)",
                total_ms as f64 / 1e3,
                self.max_duration_ms as f64 / 1e3
            )
        })
    }

    fn check_size(&self, spec: &TestSpec, d: &Demand) -> Option<String> {
        if let Some(why) = self.check_length(spec.timing().total_ms()) {
            return Some(why);
        }
        if d.connections > self.max_connections {
            return Some(format!(
                "{} connections or flows, over this agent's --max-connections of {} (start the agent with a higher --max-connections)",
                d.connections, self.max_connections
            ));
        }
        self.check_message(d)
    }

    fn check_message(&self, d: &Demand) -> Option<String> {
        (d.message_bytes > self.max_message_bytes).then(|| {
            format!(
                "{}-byte messages, over this agent's --max-message of {} (start the agent with a higher --max-message)",
                d.message_bytes, self.max_message_bytes
            )
        })
    }

    fn check_rate(&self, d: &Demand) -> Option<String> {
        let (Some(max), Some(rate)) = (self.max_rate, d.rate) else {
            return None;
        };
        match rate {
            Some(r) if r <= max => None,
            Some(r) => Some(format!(
                "{r} per second, over this agent's --max-rate of {max} (lower --rate, or start the agent with a higher --max-rate)"
            )),
            None => Some(format!(
                "an unpaced test; this agent's --max-rate of {max} needs --rate (or start the agent without --max-rate)"
            )),
        }
    }

    /// `--max-bitrate` for every test, `--max-client-bitrate` for a client part too (but a
    /// closed-loop one, see `pace_client_part` and `check_unanswered`).
    fn check_bits(&self, d: &Demand, role: Role, closed_loop: bool) -> Option<String> {
        let client = self
            .max_client_bitrate
            .filter(|_| role == Role::Client && !closed_loop);
        for (flag, max) in [
            ("--max-bitrate", self.max_bitrate),
            ("--max-client-bitrate", client),
        ] {
            let Some(max) = max else { continue };
            match d.bits_per_s {
                Some(b) if b <= max => {}
                Some(b) => {
                    return Some(format!(
                        "{} bit/s, over this agent's {flag} of {} bit/s (lower --rate, or start the agent with a higher {flag})",
                        si(b),
                        si(max)
                    ))
                }
                None => {
                    return Some(format!(
                        "an unpaced test; this agent's {flag} of {} bit/s needs --rate (or start the agent with a higher {flag})",
                        si(max)
                    ))
                }
            }
        }
        None
    }

    /// A closed-loop UDP client part whose window, re-sent unanswered, would exceed
    /// `--max-client-bitrate`: it cannot be paced without becoming open-loop, so it is
    /// refused (a red team aimed 256 x 4096 requests at a silent port: 3-4 Gbit/s).
    fn check_unanswered(&self, spec: &TestSpec, role: Role) -> Option<String> {
        let cap = self.max_client_bitrate.filter(|_| role == Role::Client)?;
        let bits = unanswered_bits_per_s(spec)?;
        (bits > cap).then(|| {
            format!(
                "a closed-loop UDP client part sends its whole window again every {} s when nothing answers: up to {} bit/s, over this agent's --max-client-bitrate of {} bit/s (fewer connections, a smaller window or --rate, or start the agent with a higher --max-client-bitrate)",
                crate::kind::rr::UDP_LOSS_TIMEOUT.as_secs(),
                si(bits),
                si(cap)
            )
        })
    }

    /// All that these limits allow the live tests together, a client part's bits at most
    /// `client_bits`.
    pub(super) fn allowed(&self, client_bits: f64) -> Share {
        Share::allowed(self.max_threads, self.max_memory_bytes, client_bits)
    }

    /// A test that alone exceeds the agent's totals (the shared account checks them with
    /// the live tests).
    fn check_one_test(&self, d: &Demand) -> Option<String> {
        let (ask, max) = (Share::asked(d, 0.0), self.allowed(f64::INFINITY));
        OverShare::first(ask, Share::default(), max).map(|e| e.to_string())
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

/// A closed-loop ping or rpc: not paced, and under the client cap by what it can send (see
/// `self_clocked`, `check_unanswered`).
fn closed_loop(spec: &TestSpec) -> bool {
    self_clocked(spec) || unanswered_bits_per_s(spec).is_some()
}

/// A closed-loop ping or rpc over TCP: each request waits for the last answer, which only
/// a listener that takes the test's data can give.
fn self_clocked(spec: &TestSpec) -> bool {
    matches!(spec, TestSpec::Ping(r) | TestSpec::Rpc(r)
        if r.rate_per_s.is_none() && r.transport == Transport::Tcp)
}

/// What a closed-loop UDP ping or rpc sends when nothing answers: its whole window again
/// every loss timeout, on every connection.
fn unanswered_bits_per_s(spec: &TestSpec) -> Option<f64> {
    let (TestSpec::Ping(r) | TestSpec::Rpc(r)) = spec else {
        return None;
    };
    (r.rate_per_s.is_none() && r.transport == Transport::Udp).then(|| {
        let timeout = crate::kind::rr::UDP_LOSS_TIMEOUT.as_secs_f64();
        f64::from(r.connections) * f64::from(r.window) * f64::from(r.request_bytes) * 8.0 / timeout
    })
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
