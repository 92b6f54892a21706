//! The command line: what the user typed, turned into validated specs. One module per
//! test command, the flag groups they share in [`flags`]; no measurement logic, and no
//! probing of the host (`auto` CPUs are chosen when a test starts).

mod flags;
mod iperf3_auth;
mod load;
mod marks;
mod mesh;
mod pps;
pub mod rpm;
mod rr;
mod serve;
mod stamp;
mod stream;
#[cfg(test)]
pub(crate) mod tests_specs;
mod watch;

pub use flags::{parse_duration_ms, OutputArgs, Target};
pub use load::LoadArgs;
pub use pps::PpsArgs;
pub use rr::{PingArgs, RpcArgs};
pub use serve::ServeArgs;
pub use stamp::StampArgs;
pub use stream::StreamArgs;
pub use watch::WatchArgs;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sonde_results::spec::units::parse_percent;
use sonde_results::SpecError;
use sonde_run::fleet;
use sonde_run::measure::Plan;
use sonde_run::stored::ExportFormat;

use sonde_probe::tune::Goal;

#[derive(Parser, Debug)]
#[command(
    name = "sonde",
    version,
    about = "Measures what a Linux host or VM network really does, and explains why"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the agent: the far end of every test (up to --max-tests at once).
    Serve(ServeArgs),
    /// The test commands (stream, ping, rpc, pps, load), flattened: `sonde stream ...`.
    #[command(flatten)]
    Test(TestCommand),
    /// Run a command and sample the host evidence of a test around it (CPU per core,
    /// softirq, the interface's rates, drops and IRQs, TCP retransmits); its exit code is
    /// sonde's.
    Watch(WatchArgs),
    /// STAMP (RFC 8762/8972) to any reflector (routers, other agents' `serve --stamp`):
    /// round trips, each direction's delay ± bound, loss each way, reordering.
    Stamp(StampArgs),
    /// Responsiveness under working conditions (IETF IPPM draft) against any test endpoint
    /// (Apple's, Cloudflare's, `serve --rpm`): RPM, foreign and self probes, each part.
    Rpm(rpm::RpmArgs),
    /// What this host is: CPU layout and NUMA, NICs and queues, settings, recommendations.
    Host(HostArgs),
    /// This host's clock as a one-way delay needs it: the kernel's NTP state, chrony's
    /// view, PTP clocks, VMClock, and one error bound (or "not synchronised").
    Clock(ClockArgs),
    /// Plan, apply and restore the settings tuning guides change, for a goal.
    Tune(TuneArgs),
    /// The result store: list, show, export, import runs.
    Results(ResultsArgs),
    /// Shell completions on stdout: `sonde completions bash > /etc/bash_completion.d/sonde`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The man page (roff) on stdout: `sonde man > /usr/local/share/man/man1/sonde.1`.
    Man,
    /// Compare two labels (or runs): medians, change, 95 % bootstrap interval, verdict.
    Compare(CompareArgs),
    /// A self-contained HTML (or Markdown) report of stored runs.
    Report(ReportArgs),
    /// Run a matrix of tests × parameters × repetitions from a TOML file, storing each run.
    Suite(SuiteArgs),
    /// Measure every pair of a fleet of agents (pairs, mesh, star) in parallel rounds of
    /// disjoint pairs, storing each run with its source, destination and labels.
    Fleet(FleetArgs),
    /// Build a two-namespace lab on this machine and run the standard measurements.
    Lab(LabArgs),
}

/// A test command as the pipeline runs it: what it measures (or what is wrong with its
/// flags), its agent (or agents) and its output flags.
pub type Test<'a> = (Result<Plan, SpecError>, &'a Target, &'a OutputArgs);

/// The test commands, the one list of them: `main`, suites, fleets and the lab run
/// whatever is here through the one pipeline (`watch`, `stamp`, `rpm` have their own).
#[derive(Subcommand, Debug)]
pub enum TestCommand {
    /// TCP bulk throughput over many connections (the ntttcp / iperf3 job).
    Stream(StreamArgs),
    /// Round-trip latency, one message in flight (the sockperf ping-pong job).
    Ping(PingArgs),
    /// Request/response rate and latency, C connections × W in flight (msg_gen, neper tcp_rr).
    Rpc(RpcArgs),
    /// Small-packet UDP rate, many flows, loss accounting, zero-loss search (testpmd txonly/rxonly).
    Pps(PpsArgs),
    /// Latency of a UDP and a TCP ping while a load runs each way: idle, upload, download,
    /// both (flent RRUL, crusader).
    Load(LoadArgs),
}

impl Command {
    /// A test command's plan, agent and output; `None` for every other command.
    pub fn test(&self) -> Option<Test<'_>> {
        match self {
            Command::Test(t) => Some(t.test()),
            _ => None,
        }
    }
}

impl TestCommand {
    /// Its plan, agent and output: every test command runs through the one pipeline.
    pub fn test(&self) -> Test<'_> {
        match self {
            TestCommand::Stream(a) => (a.plan(), &a.target, &a.output),
            TestCommand::Ping(a) => a.common.test(a.specs()),
            TestCommand::Rpc(a) => a.common.test(a.specs()),
            TestCommand::Pps(a) => (a.plan(), &a.target, &a.output),
            TestCommand::Load(a) => (a.spec().map(Plan::Load), &a.target, &a.output),
        }
    }
}

#[derive(Args, Debug)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub action: TuneAction,
}

#[derive(Subcommand, Debug)]
pub enum TuneAction {
    /// Print what `apply` would change, and why.
    Plan {
        #[arg(long = "for", value_parser = flags::goal_parser(), value_name = "GOAL")]
        goal: Goal,
        /// The NIC to tune [default: the one a test would most likely use].
        #[arg(long, value_name = "IF")]
        dev: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Save the current values to the state file, then change them (root only).
    Apply {
        #[arg(long = "for", value_parser = flags::goal_parser(), value_name = "GOAL")]
        goal: Goal,
        #[arg(long, value_name = "IF")]
        dev: Option<String>,
        /// Where the previous values are kept [default: /run/sonde/tune-state.json for root, else $XDG_RUNTIME_DIR/sonde]; its directory must be writable only by you.
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
    },
    /// Put back exactly what `apply` saved, then remove the state file.
    Restore {
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct HostArgs {
    /// Print the inventory as JSON.
    #[arg(long)]
    pub json: bool,
    /// Read a captured tree laid out like / instead of this host (no ethtool queries then).
    #[arg(long, hide = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ClockArgs {
    /// Print the clock state as JSON.
    #[arg(long)]
    pub json: bool,
    /// Read a captured tree (its `captured/adjtimex-p.txt`, `captured/chronyc-c-tracking.csv`
    /// and files laid out like /) instead of this host.
    #[arg(long, hide = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ResultsArgs {
    #[command(subcommand)]
    pub action: ResultsAction,
    #[arg(long, value_name = "PATH", global = true)]
    pub db: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ResultsAction {
    /// Stored runs, newest first.
    List {
        #[arg(long)]
        label: Option<String>,
    },
    /// One run's result document (JSON).
    Show { id: i64 },
    /// Runs as JSON documents (one array), CSV of their intervals, an HdrHistogram
    /// interval log of their latency histograms (hdr-log: one tag per run, one line per
    /// interval, for HdrHistogram's HistogramLogProcessor and plotter), or OpenMetrics
    /// with each sample at its run's end (openmetrics: the series `sonde fleet --metrics`
    /// serves, for `promtool tsdb create-blocks-from openmetrics`). All runs by default.
    Export {
        /// Run ids.
        ids: Vec<i64>,
        /// The runs stored with this label (a fleet's runs carry the fleet's name).
        #[arg(long, conflicts_with = "ids")]
        label: Option<String>,
        #[arg(long, value_parser = flags::named(ExportFormat::ALL, ExportFormat::name), default_value = "json")]
        format: ExportFormat,
    },
    /// Stores result documents written with --output or --json.
    Import {
        files: Vec<PathBuf>,
        #[arg(long)]
        label: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Baseline: a label, or a run id.
    pub a: String,
    /// Candidate: a label, or a run id.
    pub b: String,
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Exit 4 when any metric is significantly worse by more than PCT percent.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub fail_if_worse: Option<f64>,
}

#[derive(Args, Debug)]
pub struct SuiteArgs {
    pub file: PathBuf,
    /// Skip the items a previous, interrupted run of this suite already stored.
    #[arg(long)]
    pub resume: bool,
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct FleetArgs {
    /// The fleet file (TOML: agents, topology, [[test]] tables).
    pub file: PathBuf,
    /// Skip the pairs' runs a previous run of this fleet already stored.
    #[arg(long)]
    pub resume: bool,
    /// How many tests a host may be in at once (1: pairs in a round share no host; more
    /// measures hosts under each other's load, up to the agents' --max-tests).
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub overlap: u16,
    /// Each run's document as one JSON line on stdout, as it ends (progress goes to stderr).
    #[arg(long)]
    pub ndjson: bool,
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// The agents' pre-shared key for every run of the fleet. It wins over the file's
    /// key_file, which wins over SONDE_KEY_FILE.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Measure the matrix again and again, a pass every DURATION (`30s`, `10m`, `1h`),
    /// each started up to a tenth of it later at random, until Ctrl-C or SIGTERM.
    #[arg(long, value_name = "DURATION", value_parser = fleet::parse_every, conflicts_with = "resume")]
    pub every: Option<u64>,
    /// With --every: the most of each host's time its tests may take, in percent; a pass
    /// that took more pushes the next one back until the share holds.
    #[arg(long, value_name = "PCT", default_value = "25", requires = "every", value_parser = fleet::parse_max_load)]
    pub max_load: f64,
    /// With --every: serve the last run of every pair at http://ADDR:PORT/metrics in the
    /// OpenMetrics text format (for Prometheus).
    #[arg(long, value_name = "ADDR:PORT", requires = "every")]
    pub metrics: Option<std::net::SocketAddr>,
    /// With --metrics: answer only scrapes that present this file's token
    /// (`Authorization: Bearer TOKEN`, Prometheus' `authorization.credentials_file`);
    /// others get 401. The file must be ours or root's and mode 0600 (0440 root's).
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token_file: Option<PathBuf>,
    /// With --metrics: serve over TLS with this certificate chain (PEM); needs
    /// --metrics-tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["metrics", "metrics_tls_key"])]
    pub metrics_tls_cert: Option<PathBuf>,
    /// The private key of --metrics-tls-cert (PEM; checked as a key file: 0600).
    #[arg(long, value_name = "FILE", requires = "metrics_tls_cert")]
    pub metrics_tls_key: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Runs: labels or run ids. Two labels also get a comparison.
    #[arg(required = true)]
    pub runs: Vec<String>,
    /// The report file: .html (self-contained, inline SVG charts) or .md.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    #[arg(long, default_value = "Network performance report")]
    pub title: String,
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct LabArgs {
    /// Measured time of each measurement.
    #[arg(short = 't', long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Warm-up before each measurement's measured window [default: each test's own, 1 s].
    #[arg(long, value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: Option<u64>,
    /// Keep each measurement's result document in DIR.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Use loopback even when namespaces could be built.
    #[arg(long)]
    pub loopback: bool,
    /// Only these tests' measurements (all by default).
    #[arg(long, value_delimiter = ',', value_name = "TEST,...",
          value_parser = clap::builder::PossibleValuesParser::new(sonde_run::lab::LAB_TESTS))]
    pub only: Vec<String>,
}
