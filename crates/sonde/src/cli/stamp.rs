//! `sonde stamp HOST[:PORT]`: STAMP (RFC 8762/8972) to any reflector, a router's or
//! another agent's `serve --stamp`; no agent needed at the far end.

use std::path::PathBuf;

use clap::Args;
use sonde_results::SpecError;
use sonde_run::build::stamp::{self, StampParams};
use sonde_run::key::KeyError;
use sonde_run::measure::{Plan, Target};

use super::flags::{parse_duration_ms, OutputArgs};

#[derive(Args, Debug)]
pub struct StampArgs {
    /// The reflector: HOST, HOST:PORT or [V6]:PORT (port 862 by default).
    #[arg(value_name = "HOST[:PORT]")]
    pub target: String,
    /// Test packets a second.
    #[arg(short, long, default_value_t = 10.0, value_name = "PER_S")]
    pub rate: f64,
    /// Stop after this many packets (sooner than --duration would).
    #[arg(short = 'n', long, value_name = "N")]
    pub count: Option<u64>,
    /// How long to send.
    #[arg(short = 't', long, default_value = "10", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Bytes of each test packet's UDP payload, and of each answer (symmetric size): 44 (112
    /// authenticated) or 4 more and up, to 9000 [default: the base packet with a Timestamp
    /// Information TLV and a Boot ID TLV, 72 (160 authenticated)].
    #[arg(short, long, value_name = "BYTES")]
    pub size: Option<u32>,
    /// Authenticated mode (HMAC-SHA256) under this key: hex text, or else the file's bytes,
    /// at least 16; owner-only, as --key-file.
    #[arg(long, value_name = "FILE")]
    pub stamp_key_file: Option<PathBuf>,
    /// The reflector is stateful (numbers its answers per session): split loss by
    /// direction even when its numbers never differ from ours.
    #[arg(long)]
    pub stateful: bool,
    /// Session-sender identifier (RFC 8972).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub ssid: u16,
    /// How long to wait for answers after the last packet.
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub wait: u64,
    /// Interval of the document's per-interval figures.
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// Send from this agent, not this host: it sends only within its own
    /// --stamp-targets; this host sends no test packet.
    #[arg(long, value_name = "AGENT", conflicts_with = "stamp_key_file")]
    pub from: Option<String>,
    /// With --from: authenticated mode under the agent's own key for the reflectors
    /// (its `serve --stamp-sender-key-file`); no key crosses the control connection.
    #[arg(long, requires = "from")]
    pub authenticated: bool,
    /// The --from agent's control port.
    #[arg(long, default_value_t = sonde_run::agent::DEFAULT_PORT)]
    pub port: u16,
    /// The --from agent's pre-shared key (the agents' --key-file).
    #[arg(long, value_name = "FILE", env = "SONDE_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    #[command(flatten)]
    pub marks: super::marks::MarksArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl StampArgs {
    /// Where the run is sent from ([`stamp::target`]); `key` the agents' key when the
    /// caller has one (`sonde fleet --key-file`).
    pub fn target(&self, key: Option<&sonde_proto::Key>) -> Result<Target, KeyError> {
        let (from, key_file) = (self.from.as_deref(), self.key_file.as_deref());
        stamp::target(&self.target, from, self.port, key, key_file)
    }

    /// The run these flags ask for, the key read here ([`stamp::plan`]).
    pub fn plan(&self) -> Result<Result<Plan, SpecError>, KeyError> {
        stamp::plan(&self.params(), self.stamp_key_file.as_deref())
    }

    fn params(&self) -> StampParams {
        StampParams {
            target: self.target.clone(),
            rate: self.rate,
            count: self.count,
            duration_ms: self.duration,
            size: self.size,
            authenticated: self.stamp_key_file.is_some() || self.authenticated,
            stateful: self.stateful,
            ssid: self.ssid,
            wait_ms: self.wait,
            interval_ms: self.interval,
            marks: self.marks.marks(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::Command;
    use super::*;
    use sonde_run::build::stamp::split_target;

    impl StampArgs {
        fn spec(&self) -> Result<sonde_results::StampSpec, SpecError> {
            stamp::spec(&self.params())
        }
    }

    fn args_of(line: &str) -> StampArgs {
        let Command::Stamp(a) = parsed(line) else {
            panic!("{line} is a stamp command")
        };
        a
    }

    #[test]
    fn targets_take_port_862_unless_told() {
        assert_eq!(
            split_target("198.18.0.2").unwrap(),
            ("198.18.0.2".into(), 862)
        );
        assert_eq!(
            split_target("198.18.0.2:8620").unwrap(),
            ("198.18.0.2".into(), 8620)
        );
        assert_eq!(split_target("[::1]:9").unwrap(), ("::1".into(), 9));
        assert_eq!(split_target("::1").unwrap(), ("::1".into(), 862));
        assert_eq!(
            split_target("router.example").unwrap(),
            ("router.example".into(), 862)
        );
        assert_eq!(split_target("h:x").unwrap_err().flag, "HOST[:PORT]");
    }

    #[test]
    fn from_an_agent_the_run_is_unauthenticated_and_aimed_at_it() {
        let a = args_of("stamp 198.18.0.3:8620 --from 198.18.0.1 --port 5400");
        let t = a.target(None).unwrap();
        assert_eq!(
            (t.host.as_str(), t.from.as_deref(), t.port),
            ("198.18.0.3:8620", Some("198.18.0.1"), 5400)
        );
        use clap::Parser;
        let e = super::super::Cli::try_parse_from([
            "sonde",
            "stamp",
            "198.18.0.3",
            "--from",
            "198.18.0.1",
            "--stamp-key-file",
            "/k",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--stamp-key-file") && e.contains("--from"),
            "{e}"
        );
    }

    #[test]
    fn from_an_agent_authenticated_is_a_boolean_the_agents_key_serves() {
        let a = args_of("stamp 198.18.0.3 --from 198.18.0.1 --authenticated");
        let s = a.spec().unwrap();
        assert_eq!((s.authenticated, s.packet_bytes), (true, 160));
        use clap::Parser;
        let e =
            super::super::Cli::try_parse_from(["sonde", "stamp", "198.18.0.3", "--authenticated"])
                .unwrap_err()
                .to_string();
        assert!(e.contains("--from"), "{e}");
    }

    #[test]
    fn specs_and_their_refusals_name_the_flag() {
        let s = args_of("stamp 198.18.0.2 -r 100 -n 50").spec().unwrap();
        assert_eq!(
            (s.port, s.packet_bytes, s.count, s.authenticated),
            (862, 72, Some(50), false)
        );
        assert_eq!(s.packets(), 50);
        assert_eq!(
            args_of("stamp 198.18.0.2 -s 46").spec().unwrap_err().flag,
            "--size"
        );
        assert_eq!(
            args_of("stamp 198.18.0.2 -s 9001").spec().unwrap_err().flag,
            "--size"
        );
        assert_eq!(
            args_of("stamp 198.18.0.2 -r 0").spec().unwrap_err().flag,
            "--rate"
        );
        assert_eq!(
            args_of("stamp 198.18.0.2 -r 1000000 -t 3600")
                .spec()
                .unwrap_err()
                .flag,
            "--count"
        );
        assert_eq!(
            args_of("stamp 198.18.0.2 -n 0").spec().unwrap_err().flag,
            "--count"
        );
        let s = args_of("stamp 198.18.0.2 -s 44 -t 2 -r 10").spec().unwrap();
        assert_eq!((s.packet_bytes, s.packets()), (44, 20));
    }
}
