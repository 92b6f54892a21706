//! The flag groups every test command shares, written once and flattened into each, and
//! the parsers of values (durations, sizes, CPU lists) the commands read.

use std::path::PathBuf;

use clap::Args;
pub use sonde_results::spec::units::{parse_bits, parse_bytes, parse_duration_ms, parse_size};
use sonde_results::{Engine, Execution, Timing};
pub use sonde_run::build::values::{parse_cpus, parse_poll, CpuList, PollChoice};

use sonde_probe::tune::Goal;
use sonde_run::agent::DEFAULT_PORT;

/// Which agent, and how to prove who we are to it.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// Host running `sonde serve`.
    #[arg(required_unless_present = "to", conflicts_with = "to")]
    host: Option<String>,
    /// Run the test between two agents: this one runs the client side (it sends, as the
    /// controller would), against HOST or `--to`; this host sends no test traffic.
    #[arg(long, value_name = "AGENT")]
    pub from: Option<String>,
    /// The serving agent (HOST), spelled as in `--from A --to B`.
    #[arg(long, value_name = "AGENT")]
    to: Option<String>,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// The agents' pre-shared key. With it, an agent must prove the key too, and one that
    /// asks for none is refused.
    #[arg(long, value_name = "FILE", env = "SONDE_KEY_FILE")]
    pub key_file: Option<PathBuf>,
}

impl Target {
    /// The agent serving the test (HOST or `--to`).
    pub fn host(&self) -> &str {
        self.host
            .as_deref()
            .or(self.to.as_deref())
            .expect("clap requires HOST or --to")
    }

    /// The run layer's target, with the key read from `--key-file`.
    pub fn target(&self) -> anyhow::Result<sonde_run::measure::Target> {
        Ok(self.with_key(sonde_run::key::load_key(self.key_file.as_deref())?))
    }

    /// The run layer's target with `key`, whatever `--key-file` says (`sonde fleet
    /// --key-file` wins over the words its file gives each test).
    pub fn with_key(&self, key: Option<sonde_proto::Key>) -> sonde_run::measure::Target {
        sonde_run::measure::Target::new(self.host().into(), self.from.clone(), self.port, key)
    }
}

/// The test's timeline.
#[derive(Args, Debug, Clone)]
pub struct TimingArgs {
    /// Measured time, seconds (suffix ms allowed).
    #[arg(short = 't', long, default_value = "10", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Time before the measured window, excluded from figures.
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: u64,
    /// Report interval.
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
}

impl TimingArgs {
    pub fn timing(&self, cooldown_ms: u64) -> Timing {
        Timing {
            duration_ms: self.duration,
            warmup_ms: self.warmup,
            cooldown_ms,
            interval_ms: self.interval,
        }
    }
}

/// Which engine runs the data plane, and where each side's workers run.
#[derive(Args, Debug, Clone)]
pub struct ExecutionArgs {
    /// Data-plane engine on both sides: kernel (sockets), uring (the same sockets through
    /// io_uring; stream, ping, rpc), xdp (AF_XDP sockets on the path's interface; pps,
    /// ping and rpc over UDP; needs root and IPv4), or dpdk (pps only: dpdk-testpmd on each
    /// side; needs root, testpmd, hugepages) [default: the fastest measured for the test
    /// that the side's host runs; the result names it].
    #[arg(long, value_parser = named(Engine::ALL, Engine::name), value_name = "NAME")]
    pub engine: Option<Engine>,
    /// Where this side's workers run: `auto` (distinct physical cores of the NIC's NUMA
    /// node, away from its IRQs, within the inherited CPU mask; chosen when the test
    /// starts), a list pinned round robin (e.g. 0-3,8), or `none`.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub cpus: CpuList,
    /// Where the agent's workers run: `auto` (chosen by the agent on its host), a list, or `none`.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub server_cpus: CpuList,
    /// Hold the CPU latency limit (PM QoS, /dev/cpu_dma_latency) at US microseconds on both
    /// sides for the test: no idle state slower to leave is entered, as limiting C-states
    /// at boot would do; lifted when the test ends. 0 keeps CPUs out of every sleep state.
    /// Needs root on each side.
    #[arg(long, value_name = "US")]
    pub cpu_latency_us: Option<u32>,
    #[command(flatten)]
    pub marks: super::marks::MarksArgs,
}

impl ExecutionArgs {
    pub fn execution(&self) -> Execution {
        let (client_cpus, client_cpus_auto) = self.cpus.split();
        let (server_cpus, server_cpus_auto) = self.server_cpus.split();
        Execution {
            engine: self.engine.unwrap_or_default(),
            engine_auto: self.engine.is_none(),
            client_cpus,
            client_cpus_auto,
            server_cpus,
            server_cpus_auto,
            cpu_latency_us: self.cpu_latency_us,
            marks: self.marks.marks(),
        }
    }
}

/// What becomes of the result: printed, written, streamed, stored; and the host's tuning
/// around the test.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Print the result document (JSON) on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// NDJSON on stdout: one line per interval as it happens, then the end document.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// Also write the result document to FILE (written even when the test is cut short).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Tune this host for the goal before the test and restore it after, whatever happens.
    #[arg(long, value_parser = goal_parser(), value_name = "GOAL")]
    pub tune: Option<Goal>,
    #[command(flatten)]
    pub store: StoreArgs,
}

impl OutputArgs {
    /// No human text on stdout: JSON or NDJSON goes there.
    pub fn quiet(&self) -> bool {
        self.json || self.json_stream
    }
}

/// Where runs are kept; shared by every test command.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The result store [default: $SONDE_DB, else $XDG_DATA_HOME or ~/.local/share, netsonde/results.db].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Do not save this run in the store.
    #[arg(long)]
    pub no_save: bool,
    /// Name the configuration this run measured (for `sonde compare`).
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,
}

/// One of `all`, by its `name` (clap lists the names in help and errors).
pub fn named<T: Copy + Send + Sync + 'static, const N: usize>(
    all: [T; N],
    name: fn(T) -> &'static str,
) -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(all.map(name)).map(move |word| {
        let named = all.into_iter().find(|&t| name(t) == word);
        named.expect("a listed word")
    })
}

/// `--for` / `--tune`: a goal, its names offered as clap's possible values.
pub fn goal_parser() -> impl clap::builder::TypedValueParser<Value = Goal> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Goal::NAMES).map(|s| s.parse::<Goal>().expect("a listed goal"))
}
