//! A run named by its configuration, as a person would type it (`stream -P 8`, `ping UDP`,
//! `rpc -C 32`, `pps --engine xdp`): the test and the flags whose values differ from the
//! defaults, read from the spec, so that a report's rows and legends say what was measured
//! rather than a store's row number. Figures the CLI derives from the host (pps sending
//! threads, a flow per thread, CPUs chosen by `auto`) are left out: they differ between
//! hosts, not between configurations.

use sonde_results::spec::{Direction, Execution, PollMode, Transport};
use sonde_results::{Engine, PpsSpec, RrSpec, StampSpec, StreamSpec};

// The name itself (`look::config_name`) reads these through each kind's row (`summary::row`).

/// Adds `flag value` to `out` when `value` differs from `default`.
fn differs<T: PartialEq>(
    out: &mut Vec<String>,
    flag: &str,
    value: T,
    default: T,
    show: impl Fn(T) -> String,
) {
    if value != default {
        out.push(format!("{flag} {}", show(value)));
    }
}

/// Adds `flag value` to `out` when there is a value.
fn given<T>(out: &mut Vec<String>, flag: &str, value: Option<T>, show: impl Fn(T) -> String) {
    if let Some(v) = value {
        out.push(format!("{flag} {}", show(v)));
    }
}

pub(crate) fn stream(s: &StreamSpec) -> Vec<String> {
    let d = StreamSpec::default();
    let mut o = Vec::new();
    differs(&mut o, "-P", s.connections, d.connections, |v| {
        v.to_string()
    });
    match s.direction {
        Direction::Forward => {}
        Direction::Reverse => o.push("-R".into()),
        Direction::Bidir => o.push("--bidir".into()),
    }
    differs(&mut o, "-l", s.buffer_bytes, d.buffer_bytes, size);
    given(&mut o, "-C", s.congestion.as_deref(), str::to_string);
    if s.nodelay {
        o.push("--nodelay".into());
    }
    given(&mut o, "--sndbuf", s.sndbuf_bytes, size);
    given(&mut o, "--rcvbuf", s.rcvbuf_bytes, size);
    given(&mut o, "-b", s.rate_bits_per_s, bits);
    given(&mut o, "--threads", s.client_threads, |v| v.to_string());
    given(&mut o, "--server-threads", s.server_threads, |v| {
        v.to_string()
    });
    o.extend(execution(&s.execution));
    o
}

pub(crate) fn rr(r: &RrSpec, rpc: bool) -> Vec<String> {
    let d = RrSpec::default();
    let mut o = Vec::new();
    if r.transport == Transport::Udp {
        o.push("UDP".into());
    }
    if rpc {
        differs(&mut o, "-C", r.connections, d.connections, |v| {
            v.to_string()
        });
        differs(&mut o, "-W", r.window, d.window, |v| v.to_string());
    }
    if r.request_bytes == r.response_bytes {
        differs(&mut o, "-m", r.request_bytes, d.request_bytes, size);
    } else {
        differs(&mut o, "--req-size", r.request_bytes, d.request_bytes, size);
        differs(
            &mut o,
            "--resp-size",
            r.response_bytes,
            d.response_bytes,
            size,
        );
    }
    given(&mut o, "--rate", r.rate_per_s, |v| format!("{v}"));
    if r.connect_per_request {
        o.push("--crr".into());
    }
    // Stages are sampled by default: only another choice is named (a previous build's
    // `--stages`, no sampling stated, stamped every message).
    if r.stages {
        let default = sonde_results::spec::default_stage_every(
            r.rate_per_s,
            r.timing.duration_ms,
            r.connections.saturating_mul(r.window),
        );
        match r.stage_every.unwrap_or(1) {
            n if n == default => {}
            1 => o.push("--stages all".into()),
            n => o.push(format!("--stages {n}")),
        }
    }
    given(&mut o, "--threads", r.client_threads, |v| v.to_string());
    given(&mut o, "--server-threads", r.server_threads, |v| {
        v.to_string()
    });
    differs(&mut o, "--poll", r.poll, d.poll, |p: PollMode| p.label());
    given(&mut o, "--busy-poll-us", r.busy_poll_us, |v| v.to_string());
    o.extend(execution(&r.execution));
    o
}

pub(crate) fn pps(p: &PpsSpec) -> Vec<String> {
    let d = PpsSpec::default();
    let mut o = Vec::new();
    differs(&mut o, "--size", p.size_bytes, d.size_bytes, |v| {
        v.to_string()
    });
    differs(&mut o, "--rx-threads", p.rx_threads, d.rx_threads, |v| {
        v.to_string()
    });
    // A flow per sending or receiving thread is the CLI's default.
    let flows = p.tx_threads.max(p.rx_threads);
    differs(&mut o, "--flows", p.flows, flows, |v| v.to_string());
    differs(&mut o, "--batch", p.batch, d.batch, |v| v.to_string());
    if p.gso {
        o.push("--gso".into());
    }
    given(&mut o, "--rate", p.rate_pps, |v| format!("{v}"));
    differs(&mut o, "--poll", p.poll, d.poll, |m: PollMode| m.label());
    if p.ipv6 {
        o.push("-6".into());
    }
    o.extend(execution(&p.execution));
    o
}

/// A STAMP run: its reflector, rate and packet size, always.
pub(crate) fn stamp(s: &StampSpec) -> Vec<String> {
    vec![
        format!("{}:{}", s.host, s.port),
        format!("--rate {}", s.rate_per_s),
        format!("--size {}", s.packet_bytes),
    ]
}

/// The engine when it is not the kernel's sockets, and a CPU latency limit. CPUs are
/// left out: `auto` (the default) is stored as the list it chose on that host.
fn execution(e: &Execution) -> Vec<String> {
    let mut o = Vec::new();
    if e.engine != Engine::Kernel {
        o.push(format!("--engine {}", e.engine));
    }
    given(&mut o, "--cpu-latency-us", e.cpu_latency_us, |v| {
        v.to_string()
    });
    o
}

/// The marks a run set, in CLI spelling (`--dscp EF --ecn ect1`): every kind's, added by
/// `summary::flags`, not by each kind's flags.
pub(crate) fn marks(m: &sonde_results::marks::Marks) -> Vec<String> {
    let dscp = |d: sonde_results::marks::Dscp| match d.name() {
        Some(n) => n.to_uppercase(),
        None => d.value().to_string(),
    };
    let mut o = Vec::new();
    given(&mut o, "--dscp", m.dscp, dscp);
    given(&mut o, "--ecn", m.ecn, |e| e.as_str().to_string());
    given(&mut o, "--control-dscp", m.control_dscp, dscp);
    o
}

/// Bits per second as the CLI reads them: `2.5G`, `100M`, or a plain count.
fn bits(b: f64) -> String {
    let (div, unit) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")]
        .into_iter()
        .find(|(d, _)| b >= *d)
        .unwrap_or((1.0, ""));
    format!("{}{unit}", b / div)
}

/// Bytes as the CLI reads them: `128K`, `1M`, or a plain count.
fn size(b: u32) -> String {
    match b {
        0 => "0".into(),
        b if b % (1024 * 1024) == 0 => format!("{}M", b / (1024 * 1024)),
        b if b % 1024 == 0 => format!("{}K", b / 1024),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::look::config_name;
    use sonde_results::LoadSpec;
    use sonde_results::TestSpec;

    #[test]
    fn defaults_are_the_bare_test_name() {
        assert_eq!(
            config_name(&TestSpec::Stream(StreamSpec::default())),
            "stream"
        );
        assert_eq!(config_name(&TestSpec::Ping(RrSpec::default())), "ping");
        assert_eq!(config_name(&TestSpec::Pps(PpsSpec::default())), "pps");
    }

    #[test]
    fn only_what_differs_in_cli_spelling() {
        let s = StreamSpec {
            connections: 8,
            direction: Direction::Bidir,
            buffer_bytes: 1024 * 1024,
            ..Default::default()
        };
        assert_eq!(
            config_name(&TestSpec::Stream(s.clone())),
            "stream -P 8 --bidir -l 1M"
        );
        let ping = RrSpec {
            transport: Transport::Udp,
            stages: true,
            ..Default::default()
        };
        assert_eq!(
            config_name(&TestSpec::Ping(ping.clone())),
            "ping UDP --stages all"
        );
        let sampled = RrSpec {
            stage_every: Some(sonde_results::spec::default_stage_every(None, 10_000, 1)),
            ..ping.clone()
        };
        assert_eq!(config_name(&TestSpec::Ping(sampled)), "ping UDP");
        // The marks, whatever the kind, in one place.
        let marked = sonde_results::marks::Marks {
            dscp: sonde_results::marks::Dscp::new(46),
            ecn: Some(sonde_results::marks::Ecn::Ect1),
            control_dscp: sonde_results::marks::Dscp::new(5),
        };
        let mut ping = ping;
        ping.execution.marks = marked;
        let stamp = StampSpec {
            execution: Execution {
                marks: marked,
                ..Default::default()
            },
            ..crate::fixtures::stamp_spec()
        };
        for (spec, name) in [
            (TestSpec::Ping(ping), "ping UDP --stages all"),
            (TestSpec::Stamp(stamp), "stamp"),
        ] {
            let n = config_name(&spec);
            assert!(n.starts_with(name), "{n}");
            assert!(n.ends_with(" --dscp EF --ecn ect1 --control-dscp 5"), "{n}");
        }
        let rpc = RrSpec {
            connections: 32,
            window: 8,
            ..Default::default()
        };
        assert_eq!(config_name(&TestSpec::Rpc(rpc)), "rpc -C 32 -W 8");
        let mut pps = PpsSpec {
            tx_threads: 4,
            flows: 4,
            ..Default::default()
        };
        pps.execution.engine = Engine::Xdp;
        assert_eq!(config_name(&TestSpec::Pps(pps)), "pps --engine xdp");
        let load = LoadSpec {
            load: Box::new(TestSpec::Stream(StreamSpec {
                connections: 4,
                ..Default::default()
            })),
            ..Default::default()
        };
        assert_eq!(config_name(&TestSpec::Load(load)), "load -P 4");
    }
}
