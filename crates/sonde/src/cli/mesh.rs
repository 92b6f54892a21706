//! `sonde serve --mesh SOURCE`'s flags: the peer list, the probe rate and budget, and the
//! agent's own `/metrics`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::Args;
use sonde_run::mesh::{self, MeshAgent, MeshConfig, MeshFlagError, MeshFlags};

use sonde_results::marks::{Dscp, Ecn};
use sonde_results::spec::units::{parse_period_above_zero, parse_positive};

#[derive(Args, Debug)]
pub struct MeshArgs {
    /// Probe peers continuously with STAMP (keyed with --key-file) and answer theirs: a
    /// file of peers, one a line (`ADDR[:PORT] [open] [KEY=VALUE]...`; `open` for an
    /// agent-less STAMP reflector such as a router, the labels are the peer's), or
    /// dns:NAME (the agents' headless Service: every A/AAAA answer is a peer). Read again
    /// every --mesh-refresh.
    #[arg(long, value_name = "SOURCE")]
    pub mesh: Option<String>,
    /// UDP port of this agent's STAMP reflector, and the peers' where the list does not
    /// say.
    #[arg(long, default_value_t = mesh::DEFAULT_PORT, value_name = "PORT", requires = "mesh")]
    pub mesh_port: u16,
    /// Probes per second to each peer.
    #[arg(long, default_value_t = mesh::DEFAULT_RATE, value_parser = parse_positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_rate: f64,
    /// Probes per second at most, all peers together: with more peers than it allows at
    /// --mesh-rate, each peer gets an equal share.
    #[arg(long, default_value_t = mesh::DEFAULT_BUDGET, value_parser = parse_positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_budget: f64,
    /// How often the peer list is read (resolved) again: seconds, or with a unit (500ms,
    /// 30s, 10m, 1h); at least once a second.
    #[arg(long, default_value = "30s", value_parser = parse_period_above_zero, value_name = "DURATION", requires = "mesh")]
    pub mesh_refresh: Duration,
    /// This agent's `source` label in the metrics: the address its peers probe [default:
    /// --bind].
    #[arg(long, value_name = "NAME", requires = "mesh")]
    pub mesh_name: Option<String>,
    /// A probe unanswered this long is lost (seconds, or with a unit: 300ms); a lost probe
    /// no later answer places on a direction is lost either way five of these later.
    #[arg(long, default_value = "2s", value_parser = parse_period_above_zero, value_name = "DURATION", requires = "mesh")]
    pub mesh_timeout: Duration,
    /// The window of each peer's HDR histogram (its percentiles in
    /// sonde_mesh_rtt_window_seconds): seconds, or with a unit (1m).
    #[arg(long, default_value = "60s", value_parser = parse_period_above_zero, value_name = "DURATION", requires = "mesh")]
    pub mesh_window: Duration,
    /// Answers per second this agent's reflector sends at most, all peers together.
    #[arg(long, default_value_t = 10_000.0, value_parser = parse_positive, value_name = "PER_S", requires = "mesh")]
    pub mesh_reflect_max: f64,
    /// Send every probe with this DSCP (a class or a number): each then asks its peer, in
    /// STAMP's Class of Service TLV, what arrived and marks its answer so, and the metrics
    /// count each direction's marks (sonde_mesh_marks_packets_total). Network control (CS6,
    /// CS7) only where `--allow-dscp` lists it. The reflector answers with this class too.
    #[arg(long, value_parser = Dscp::parse, value_name = "CLASS|NUMBER", requires = "mesh")]
    pub mesh_dscp: Option<Dscp>,
    /// Send every probe with this ECN codepoint (not-ect, ect0, ect1): CE marks on the way
    /// are counted each way (sonde_mesh_ce_packets_total).
    #[arg(long, value_parser = Ecn::parse, value_name = "CODEPOINT", requires = "mesh")]
    pub mesh_ecn: Option<Ecn>,
    /// Ask each peer's reflector when its answers really left (its kernel's transmit
    /// stamp, told in the next answer: RFC 8972's Follow-Up Telemetry TLV), so that a wait
    /// in its host's qdisc or a late send is not counted as the network's; each answer is
    /// then booked one answer later. On by default; `off` books each answer at once by
    /// the reflector's clock read, saving the stamps' cost (0.03-0.07 % of a core per
    /// agent at 98 probes a second each way here: BENCHMARKS.md).
    #[arg(long, num_args = 0..=1, default_value = "on", default_missing_value = "on", value_parser = BoolishValueParser::new(), hide_possible_values = true, value_name = "on|off", requires = "mesh")]
    pub mesh_follow_up: bool,
    /// Serve the mesh's figures at http://ADDR:PORT/metrics (OpenMetrics, for Prometheus).
    #[arg(long, value_name = "ADDR:PORT", requires = "mesh")]
    pub metrics: Option<SocketAddr>,
    /// With --metrics: answer only scrapes that present this file's token
    /// (`Authorization: Bearer TOKEN`); others get 401. Mode 0600, ours or root's.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token_file: Option<PathBuf>,
}

impl MeshArgs {
    /// The mesh these flags describe on `agent` ([`MeshFlags::config`]), or none without
    /// --mesh.
    pub fn config(&self, agent: MeshAgent) -> Result<Option<MeshConfig>, MeshFlagError> {
        let Some(source) = &self.mesh else {
            return Ok(None);
        };
        let flags = MeshFlags {
            source: source.clone(),
            port: self.mesh_port,
            name: self.mesh_name.clone(),
            rate: self.mesh_rate,
            budget: self.mesh_budget,
            refresh: self.mesh_refresh,
            timeout: self.mesh_timeout,
            window: self.mesh_window,
            reflect_max: self.mesh_reflect_max,
            dscp: self.mesh_dscp,
            ecn: self.mesh_ecn,
            follow_up: self.mesh_follow_up,
        };
        flags.config(agent).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        mesh: MeshArgs,
    }

    fn parse(args: &[&str]) -> Result<MeshArgs, String> {
        let all = ["serve", "--mesh", "peers.txt"].iter().chain(args);
        Serve::try_parse_from(all)
            .map(|s| s.mesh)
            .map_err(|e| e.to_string())
    }

    /// The flags users type keep working (bare seconds, fractions), and each duration
    /// takes its unit; zero and nonsense are refused naming the flag.
    #[test]
    fn mesh_durations_are_seconds_or_carry_their_unit_and_are_above_zero() {
        let m = parse(&[
            "--mesh-timeout",
            "0.3",
            "--mesh-refresh",
            "1",
            "--mesh-window",
            "1m",
        ])
        .unwrap();
        assert_eq!(m.mesh_timeout, Duration::from_millis(300));
        assert_eq!(m.mesh_refresh, Duration::from_secs(1));
        assert_eq!(m.mesh_window, Duration::from_secs(60));
        let m = parse(&["--mesh-timeout", "500ms", "--mesh-refresh", "2m"]).unwrap();
        assert_eq!(m.mesh_timeout, Duration::from_millis(500));
        assert_eq!(m.mesh_refresh, Duration::from_secs(120));
        let d = parse(&[]).unwrap();
        assert_eq!(
            (d.mesh_timeout, d.mesh_refresh, d.mesh_window),
            (
                Duration::from_secs(2),
                Duration::from_secs(30),
                Duration::from_secs(60)
            )
        );
        for (flag, bad) in [
            ("--mesh-timeout", "0"),
            ("--mesh-window", "0ms"),
            ("--mesh-refresh", "soon"),
        ] {
            let e = parse(&[flag, bad]).unwrap_err();
            assert!(e.contains(flag) && e.contains(bad), "{e}");
        }
    }

    /// Follow-ups are asked by default; `off` (or `false`, `no`) stops asking, a bare
    /// `--mesh-follow-up` still asks, and anything else is refused naming the flag.
    #[test]
    fn follow_ups_are_on_by_default_and_off_is_the_opt_out() {
        assert!(parse(&[]).unwrap().mesh_follow_up);
        assert!(parse(&["--mesh-follow-up"]).unwrap().mesh_follow_up);
        assert!(parse(&["--mesh-follow-up", "on"]).unwrap().mesh_follow_up);
        for off in ["off", "false", "no"] {
            assert!(!parse(&["--mesh-follow-up", off]).unwrap().mesh_follow_up);
        }
        assert!(!parse(&["--mesh-follow-up=off"]).unwrap().mesh_follow_up);
        let e = parse(&["--mesh-follow-up", "sometimes"]).unwrap_err();
        assert!(
            e.contains("--mesh-follow-up") && e.contains("sometimes"),
            "{e}"
        );
    }

    /// `--mesh-dscp`/`--mesh-ecn` make the probes' TOS byte; network control is refused
    /// naming the flag unless `--allow-dscp` widened the mask; CE is never a sender's.
    #[test]
    fn mesh_marks_make_the_probes_tos_and_network_control_is_refused() {
        let cfg = |args: &[&str], allowed| {
            let m = parse(args).unwrap();
            let agent = MeshAgent {
                bind: "198.18.0.1".parse().unwrap(),
                insecure_no_key: true,
                key: None,
                labels: Default::default(),
                allowed_dscps: allowed,
            };
            m.config(agent)
                .map(|c| c.unwrap().tos)
                .map_err(|e| e.to_string())
        };
        let default = sonde_run::agent::DEFAULT_TEST_DSCPS;
        assert_eq!(cfg(&[], default), Ok(None));
        assert_eq!(cfg(&["--mesh-dscp", "ef"], default), Ok(Some(0xb8)));
        assert_eq!(
            cfg(&["--mesh-dscp", "EF", "--mesh-ecn", "ect0"], default),
            Ok(Some(0xba))
        );
        assert_eq!(cfg(&["--mesh-ecn", "ect1"], default), Ok(Some(1)));
        for class in ["cs6", "cs7", "56"] {
            let e = cfg(&["--mesh-dscp", class], default).unwrap_err();
            assert!(
                e.contains("--mesh-dscp") && e.contains("--allow-dscp"),
                "{e}"
            );
        }
        assert_eq!(cfg(&["--mesh-dscp", "cs6"], u64::MAX), Ok(Some(48 << 2)));
        let e = parse(&["--mesh-ecn", "ce"]).unwrap_err();
        assert!(e.contains("--mesh-ecn"), "{e}");
    }
}
