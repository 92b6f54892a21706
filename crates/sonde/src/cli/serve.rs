//! `sonde serve`'s opt-ins and its own DPDK configuration, turned into the agent's types.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use sonde_proto::labels::Labels;
use sonde_proto::stamp::StampKey;
use sonde_run::agent::{self, Allow, Allowed, DEFAULT_PORT};
use sonde_run::kind::dpdk_source::AgentDpdk;
use sonde_run::serve::{self, parse_allowed_dscp, parse_label, parse_stamp_bind};
use sonde_run::stamp::load_key;

use super::flags::{named, parse_bits, parse_bytes, parse_duration_ms, parse_size};
use sonde_results::spec::units::parse_ratio;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default: pass 0.0.0.0 (or the test NIC's address)
    /// to accept controllers from other hosts.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Control port (0 picks a free one, printed at start).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Require controllers to prove they know this pre-shared key (and prove it to them:
    /// HMAC-SHA256 over both sides' nonces; every control message after it is MACed); at
    /// least 16 bytes, surrounding whitespace ignored.
    #[arg(long, value_name = "FILE", env = "SONDE_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Listen on a non-loopback address without a key: anyone who reaches the port can
    /// then make this host send test traffic. Only for an isolated network.
    #[arg(long)]
    pub insecure_no_key: bool,
    /// Refuse tests longer than this (warm-up and cool-down included).
    #[arg(long, default_value = "3600", value_parser = parse_duration_ms, value_name = "SECS")]
    pub max_duration: u64,
    /// Refuse tests with more connections (or pps flows) than this.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_connections: u32,
    /// Refuse tests asking more packets or requests per second than this, and unpaced ones.
    #[arg(long, value_name = "PER_S")]
    pub max_rate: Option<f64>,
    /// Refuse messages, buffers or packets larger than this.
    #[arg(long, default_value = "1M", value_parser = parse_size, value_name = "BYTES")]
    pub max_message: u32,
    /// Refuse UDP ping/rpc tests whose answer is more than R times the request (1: never
    /// more bytes out than came in, so the echo cannot amplify).
    #[arg(long, default_value_t = 1.0, value_parser = parse_ratio, value_name = "R")]
    pub max_udp_reply_ratio: f64,
    /// Tests served at once; beyond it a controller is told "busy". The default, 4, fits
    /// a `sonde load` (three tests at once); more would mostly measure each other.
    #[arg(long, default_value_t = sonde_run::agent::DEFAULT_MAX_TESTS as u32, value_parser = clap::value_parser!(u32).range(1..=64), value_name = "N")]
    pub max_tests: u32,
    /// What this agent runs besides kernel-socket tests (comma list, repeatable): dpdk
    /// (testpmd as root on a device of this host), xdp (an XDP program on an interface),
    /// third-party (either part of a test between two agents: this host sends to another),
    /// hwstamps (switch the test device's hardware timestamping on for a test asking
    /// --stamps hardware or auto, the previous setting put back after it). Nothing by
    /// default.
    #[arg(long, value_parser = named(Allow::ALL, Allow::name), value_delimiter = ',', value_name = "WHAT")]
    pub allow: Vec<Allow>,
    /// --allow dpdk: testpmd's arguments on this host, EAL ones first, then after a `--`
    /// testpmd's own, as a controller's --dpdk-args. From a controller (its
    /// --server-dpdk-args) the agent takes only a few harmless switches (--no-huge, -m,
    /// --socket-mem, --mbcache, --rxd, --txd, --burst).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub dpdk_args: Option<String>,
    /// --allow dpdk: this host's device for testpmd, as a controller's --dpdk-dev
    /// [default: the device behind the interface carrying the test]. A controller may name
    /// only this one or a PCI network device of this host.
    #[arg(long, value_name = "DEV", allow_hyphen_values = true)]
    pub dpdk_dev: Option<String>,
    /// Refuse tests carrying more bits per second each way than this (k/M/G: 10G), every
    /// kind and part, and unpaced ones (they need --rate).
    #[arg(long, value_parser = parse_bits, value_name = "BITS")]
    pub max_bitrate: Option<f64>,
    /// Most bits per second this agent's client parts (sending to another agent on a
    /// controller's word) may send, all running ones together; an unpaced one is paced at
    /// it, and one beyond what the running ones leave is refused. The default, 1G, is the
    /// slowest link common in a fleet; `none` lifts the cap.
    #[arg(long, default_value = "1G", value_parser = parse_bits, value_name = "BITS")]
    pub max_client_bitrate: f64,
    /// Worker threads of all running tests together.
    #[arg(long, default_value_t = sonde_run::agent::DEFAULT_MAX_THREADS, value_name = "N")]
    pub max_threads: usize,
    /// Memory of all running tests together, estimated from each spec (socket buffers,
    /// stacks, UMEM) [default: a quarter of MemTotal].
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub max_memory: Option<u64>,
    /// A label of this agent, KEY=VALUE (repeatable, at most 32): announced to controllers
    /// once they are accepted (never before the key is proven), stored with each run and
    /// merged under a fleet file's. KEY is a Prometheus label name, not starting with __
    /// and not one the metrics set themselves; VALUE is 1 to 128 bytes, no control
    /// characters.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// An address controllers reach this agent at besides its own (repeatable): a NAT's,
    /// a load balancer's or a relay's that forwards to it. A controller names the address
    /// it dialled and the agent serves only one dialled at an address of the connection
    /// or one of these, so that a session cannot be handed to another agent of the fleet.
    #[arg(long = "reached-at", value_name = "ADDR")]
    pub reached_at: Vec<std::net::IpAddr>,
    /// Networks this agent sends STAMP to when a controller asks (a fleet's agent-less
    /// endpoint, a router's reflector), CIDR (comma list, repeatable). None by default:
    /// a controller's word alone never aims this host's packets anywhere.
    #[arg(long, value_delimiter = ',', value_name = "CIDR")]
    pub stamp_targets: Vec<sonde_run::stamp::Cidr>,
    /// This operator's STAMP key for the --stamp-targets' reflectors (same format as
    /// --stamp-key-file): a controller may then ask for authenticated STAMP from this
    /// agent; its own key never crosses the control connection.
    #[arg(long, value_name = "FILE", requires = "stamp_targets")]
    pub stamp_sender_key_file: Option<PathBuf>,
    /// Also reflect STAMP (RFC 8762/8972) on UDP [ADDR:]PORT (862 is STAMP's; a bare port
    /// listens on every IPv4 address). It answers only --stamp-allow's networks.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_stamp_bind)]
    pub stamp: Option<std::net::SocketAddr>,
    /// Networks the STAMP reflector answers, CIDR (comma list, repeatable). None by
    /// default: without it the reflector answers nobody.
    #[arg(long, value_delimiter = ',', value_name = "CIDR", requires = "stamp")]
    pub stamp_allow: Vec<sonde_run::stamp::Cidr>,
    /// Most STAMP answers a second to one source address (a second's worth in a burst).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000), value_name = "PER_S")]
    pub stamp_max_pps: u32,
    /// Number each STAMP session's answers (RFC 8762 §4.3.1 stateful), so a sender can
    /// tell loss on the way there from loss on the way back; stateless by default.
    #[arg(long, requires = "stamp")]
    pub stamp_stateful: bool,
    /// Reflect in authenticated mode (HMAC-SHA256) under this key only: hex text, or
    /// else the file's bytes, at least 16; owner-only, as --key-file.
    #[arg(long, value_name = "FILE", requires = "stamp")]
    pub stamp_key_file: Option<PathBuf>,
    /// DSCPs a request's Class of Service TLV may have its answer sent with, besides the
    /// one the request arrived with and CS0: classes or numbers (comma list, repeatable),
    /// or `any`. None by default, so a sender cannot make this host emit EF or network
    /// control (CS6, CS7) it did not send; a refused class is told in the answer (RPD 1).
    #[arg(long, value_delimiter = ',', value_name = "CLASS|NUMBER|any", value_parser = parse_allowed_dscp, requires = "stamp")]
    pub stamp_allow_dscp: Vec<Option<sonde_results::marks::Dscp>>,
    /// DSCPs a controller's test may have this agent send besides every class but
    /// network control (CS6, CS7, refused by default): classes or numbers, or `any`.
    #[arg(long, value_delimiter = ',', value_name = "CLASS|NUMBER|any", value_parser = parse_allowed_dscp)]
    pub allow_dscp: Vec<Option<sonde_results::marks::Dscp>>,
    /// Also answer `iperf3 -c` on TCP [ADDR:]PORT (5201 is iperf3's; a bare port listens
    /// on every IPv4 address), one test at a time, within this agent's limits.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_stamp_bind)]
    pub iperf3: Option<std::net::SocketAddr>,
    /// Networks whose iperf3 clients are served besides loopback, CIDR (comma list,
    /// repeatable). None by default: loopback only.
    #[arg(long, value_delimiter = ',', value_name = "CIDR", requires = "iperf3")]
    pub iperf3_allow: Vec<sonde_run::stamp::Cidr>,
    /// Honour test hooks in a spec (--server-stall): for sonde's own tests only.
    #[arg(long, hide = true)]
    pub test_hooks: bool,
    /// This agent's private state directory (0700, its own): --allow hwstamps keeps a
    /// device's previous setting there while a test changes it, and a restarted agent
    /// puts back what it finds [default: /run/sonde for root, else $XDG_RUNTIME_DIR/sonde].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// Test-only: /sys read under DIR and, when DIR/nic exists, each device's hardware
    /// timestamping setting kept in DIR/nic/DEV instead of the NIC's (no NIC here stamps
    /// in hardware).
    #[arg(long, hide = true, value_name = "DIR")]
    pub hwstamps_fake: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub mesh: super::mesh::MeshArgs,
    #[command(flatten)]
    pub rpm: Box<super::rpm::RpmServeArgs>,
}

impl ServeArgs {
    /// The agent these flags describe, `command` its command line for its log; `labels`
    /// are `serve::labels` of `--label` (checked first: a bad one is a usage error). The key file
    /// is read here, and refused as the key file rules say.
    pub fn config(&self, labels: Labels, command: String) -> anyhow::Result<agent::ServeConfig> {
        let limits = agent::Limits {
            max_duration_ms: self.max_duration,
            max_connections: self.max_connections,
            max_rate: self.max_rate,
            max_bitrate: self.max_bitrate,
            max_client_bitrate: Some(self.max_client_bitrate).filter(|b| b.is_finite()),
            max_message_bytes: self.max_message,
            max_threads: self.max_threads,
            max_memory_bytes: self.max_memory.unwrap_or_else(agent::default_memory_bytes),
            test_hooks: self.test_hooks,
            max_udp_reply_ratio: self.max_udp_reply_ratio,
            allowed_dscps: serve::test_dscps(&self.allow_dscp),
        };
        Ok(agent::ServeConfig {
            key: sonde_run::key::load_key(self.key_file.as_deref())?,
            insecure_no_key: self.insecure_no_key,
            limits,
            max_tests: self.max_tests as usize,
            bind: self.bind,
            port: self.port,
            command,
            allow: self.allowed(),
            dpdk: AgentDpdk::from_flags(
                self.dpdk_args.as_deref(),
                self.dpdk_dev.as_deref(),
                self.allow.contains(&Allow::Dpdk),
            )?,
            labels,
            reached_at: self.reached_at.clone(),
            stamp_targets: self.stamp_targets.clone(),
            stamp_sender_key: stamp_key(
                "--stamp-sender-key-file",
                self.stamp_sender_key_file.as_deref(),
            )?,
            account: Default::default(),
            stamping: sonde_run::hwstamps::Stamping {
                allowed: self.allow.contains(&Allow::Hwstamps),
                state_dir: self.state_dir.clone(),
                fake: self.hwstamps_fake.clone(),
            },
        })
    }

    /// The STAMP reflector these flags ask for, its key read here.
    pub fn stamp(&self) -> anyhow::Result<Option<sonde_run::stamp::ReflectorConfig>> {
        let Some(bind) = self.stamp else {
            return Ok(None);
        };
        Ok(Some(sonde_run::stamp::ReflectorConfig {
            bind,
            allow: self.stamp_allow.clone(),
            max_pps: self.stamp_max_pps,
            key: stamp_key("--stamp-key-file", self.stamp_key_file.as_deref())?,
            stateful: self.stamp_stateful,
            dscp_policy: serve::reflector_dscps(&self.stamp_allow_dscp),
        }))
    }

    pub fn allowed(&self) -> Allowed {
        self.allow.iter().copied().collect()
    }
}

/// A STAMP key file's key, read as `flag`'s, when one is given.
fn stamp_key(flag: &'static str, path: Option<&Path>) -> anyhow::Result<Option<StampKey>> {
    Ok(path.map(|p| load_key(flag, p)).transpose()?)
}

#[cfg(test)]
mod tests {
    use super::super::tests_specs::parsed;
    use super::super::{Cli, Command};
    use super::*;
    use clap::Parser;

    #[test]
    fn allow_words_become_the_agents_opt_ins() {
        let Command::Serve(a) = parsed("serve --allow xdp,third-party,hwstamps --allow dpdk")
        else {
            panic!("a serve command")
        };
        let all: Allowed = Allow::ALL.into_iter().collect();
        assert_eq!(a.allowed(), all);
        let Command::Serve(none) = parsed("serve") else {
            panic!("a serve command")
        };
        assert_eq!(none.allowed(), Allowed::default());
        let e = Cli::try_parse_from(["sonde", "serve", "--allow", "xdp,warp"]).unwrap_err();
        assert!(e.to_string().contains("third-party"), "{e}");
    }

    #[test]
    fn stamp_flags_build_the_reflector() {
        let Command::Serve(a) =
            parsed("serve --stamp 8620 --stamp-allow 198.18.0.0/15,198.19.0.1 --stamp-stateful")
        else {
            panic!("a serve command")
        };
        let cfg = a.stamp().unwrap().unwrap();
        assert_eq!(cfg.bind.to_string(), "0.0.0.0:8620");
        assert_eq!(cfg.allow.len(), 2);
        assert!(cfg.stateful && cfg.key.is_none() && cfg.max_pps == 100);
        let Command::Serve(none) = parsed("serve --stamp 198.18.0.1:862") else {
            panic!("a serve command")
        };
        let cfg = none.stamp().unwrap().unwrap();
        assert!(cfg.allow.is_empty());
        use sonde_proto::stamp::DscpPolicy;
        assert_eq!(cfg.dscp_policy, DscpPolicy::default());
        let Command::Serve(some) = parsed("serve --stamp 862 --stamp-allow-dscp af41,10") else {
            panic!("a serve command")
        };
        let policy = some.stamp().unwrap().unwrap().dscp_policy;
        assert_eq!(policy, DscpPolicy::allowing([34, 10]));
        let Command::Serve(any) = parsed("serve --stamp 862 --stamp-allow-dscp EF,any") else {
            panic!("a serve command")
        };
        assert_eq!(any.stamp().unwrap().unwrap().dscp_policy, DscpPolicy::ANY);
        let e = Cli::try_parse_from([
            "sonde",
            "serve",
            "--stamp",
            "862",
            "--stamp-allow-dscp",
            "64",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("--stamp-allow-dscp"), "{e}");
        let e = Cli::try_parse_from(["sonde", "serve", "--stamp", "x:y"]).unwrap_err();
        assert!(e.to_string().contains("--stamp"), "{e}");
        let e = Cli::try_parse_from([
            "sonde",
            "serve",
            "--stamp",
            "862",
            "--stamp-allow",
            "10.0.0.0/40",
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("--stamp-allow") && e.to_string().contains("0 to 32"),
            "{e}"
        );
        let e = Cli::try_parse_from(["sonde", "serve", "--stamp-stateful"]).unwrap_err();
        assert!(e.to_string().contains("--stamp"), "{e}");
    }
}
