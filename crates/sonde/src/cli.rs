//! The command line: parse what the user typed, then turn it into a validated `StreamSpec`.
//! No measurement logic lives here.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sonde_probe::topology::parse_cpu_list;
use sonde_results::{
    Direction, PollMode, PpsSpec, RrSpec, SpecError, Stall, StreamSpec, TestSpec, Transport,
};

use crate::agent::DEFAULT_PORT;
use crate::tune::Goal;

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
    /// Run the agent: the far end of every test (one test at a time).
    Serve(ServeArgs),
    /// TCP bulk throughput over many connections (the ntttcp / iperf3 job).
    Stream(StreamArgs),
    /// Round-trip latency, one message in flight (the sockperf ping-pong job).
    Ping(PingArgs),
    /// Request/response rate and latency, C connections × W in flight (msg_gen, neper tcp_rr).
    Rpc(RpcArgs),
    /// Small-packet UDP rate, many flows, loss accounting, zero-loss search (testpmd txonly/rxonly).
    Pps(PpsArgs),
    /// What this host is: CPU layout and NUMA, NICs and queues, settings, recommendations.
    Host(HostArgs),
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
    /// Build a two-namespace lab on this machine and run the standard measurements.
    Lab(LabArgs),
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
        #[arg(long = "for", value_enum, value_name = "GOAL")]
        goal: Goal,
        /// The NIC to tune [default: the one a test would most likely use].
        #[arg(long, value_name = "IF")]
        dev: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Save the current values to the state file, then change them (root only).
    Apply {
        #[arg(long = "for", value_enum, value_name = "GOAL")]
        goal: Goal,
        #[arg(long, value_name = "IF")]
        dev: Option<String>,
        /// Where the previous values are kept [default: $XDG_RUNTIME_DIR or /tmp, sonde-tune-state.json].
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
pub struct PpsArgs {
    /// Host running `sonde serve`.
    pub host: String,
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Bytes per packet on the wire: Ethernet + IPv4 + UDP headers + payload, no FCS (as testpmd).
    #[arg(long, default_value_t = 64, value_name = "BYTES")]
    pub size: u32,
    /// Sending threads here [default: one per usable CPU, at most one per flow asked for;
    /// one with --gso].
    #[arg(long, value_name = "T")]
    pub tx_threads: Option<u32>,
    /// Receiving threads on the agent, one SO_REUSEPORT socket each.
    #[arg(long, default_value_t = 1, value_name = "T")]
    pub rx_threads: u32,
    /// Flows: each its own source port, so RSS and SO_REUSEPORT spread the load
    /// [default: one per sending or receiving thread, whichever are more].
    #[arg(long, value_name = "N")]
    pub flows: Option<u32>,
    /// Packets per sendmmsg/recvmmsg call.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub batch: u32,
    /// UDP GSO on the sender: one send per batch, cut into packets by the kernel late in
    /// the output path (as a NIC's segmentation offload would). Batch at most 64.
    #[arg(long)]
    pub gso: bool,
    /// Offered packets per second over all senders; default: as fast as possible.
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    #[arg(short = 't', long, default_value = "10", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: u64,
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// Receive mode of the agent's receivers: block, busy, hybrid[=SPIN]. block sleeps: in
    /// the socket when packets are few, a 100 us nap between batches when they come fast.
    #[arg(long, default_value = "block", value_parser = parse_poll, value_name = "MODE")]
    pub poll: PollChoice,
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub cpus: Option<CpuList>,
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub server_cpus: Option<CpuList>,
    /// RFC 2544 throughput search: the highest rate whose loss is at most --max-loss.
    #[arg(long)]
    pub search: bool,
    /// Length of each search trial.
    #[arg(long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub trial: u64,
    /// Largest loss a search trial may have and pass, percent.
    #[arg(long, default_value_t = 0.0, value_name = "PERCENT")]
    pub max_loss: f64,
    /// Search precision: stop when the bounds are this close, percent of the upper one.
    #[arg(long, default_value_t = 1.0, value_name = "PERCENT")]
    pub resolution: f64,
    /// Search: trials at each rate; the rate passes only if every one does.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub trials_per_step: u32,
    #[arg(long)]
    pub json: bool,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The agent's pre-shared key, when it requires one.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Tune this host for the goal before the test and restore it after, whatever happens.
    #[arg(long, value_enum, value_name = "GOAL")]
    pub tune: Option<Goal>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// NDJSON on stdout: one line per interval as it happens, then the end document.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
}

impl PpsArgs {
    pub fn spec(&self) -> Result<PpsSpec, SpecError> {
        let poll = match &self.poll {
            PollChoice::One(m) => *m,
            PollChoice::All => {
                return Err(SpecError {
                    flag: "--poll",
                    reason: "'all' is for ping and rpc; pick one mode".into(),
                })
            }
        };
        if !(0.0..100.0).contains(&self.max_loss) {
            return Err(SpecError {
                flag: "--max-loss",
                reason: format!("{} is not a percentage in [0, 100)", self.max_loss),
            });
        }
        if !(self.resolution > 0.0 && self.resolution < 50.0) {
            return Err(SpecError {
                flag: "--resolution",
                reason: format!("{} is not a percentage in (0, 50)", self.resolution),
            });
        }
        let (tx_threads, flows) =
            sonde_engine::pps_threads(self.tx_threads, self.rx_threads, self.flows, self.gso);
        let spec = PpsSpec {
            size_bytes: self.size,
            tx_threads,
            rx_threads: self.rx_threads,
            flows,
            batch: self.batch,
            gso: self.gso,
            rate_pps: self.rate,
            duration_ms: if self.search {
                self.trial
            } else {
                self.duration
            },
            warmup_ms: self.warmup,
            interval_ms: self.interval,
            poll,
            client_cpus: client_cpus(&self.cpus, tx_threads as usize),
            server_cpus: server_cpus(&self.server_cpus).0,
            server_cpus_auto: server_cpus(&self.server_cpus).1,
            ipv6: self.host.contains(':'),
        };
        spec.validate()?;
        if spec.tx_threads > spec.flows {
            return Err(SpecError {
                flag: "--tx-threads",
                reason: format!(
                    "{} threads for {} flows: each thread needs a flow",
                    spec.tx_threads, spec.flows
                ),
            });
        }
        Ok(spec)
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
    /// Set by `sonde suite`: the suite item this run is, for --resume.
    #[arg(long, hide = true, value_name = "KEY")]
    pub suite_key: Option<String>,
}

impl StoreArgs {
    pub fn db_path(db: Option<&std::path::Path>) -> PathBuf {
        if let Some(p) = db {
            return p.to_path_buf();
        }
        if let Some(p) = std::env::var_os("SONDE_DB") {
            return PathBuf::from(p);
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(std::env::temp_dir);
        data.join("netsonde/results.db")
    }
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
    /// Runs as JSON documents (one array) or CSV of their intervals.
    Export {
        ids: Vec<i64>,
        #[arg(long, value_enum, default_value = "json")]
        format: ExportFormat,
    },
    /// Stores result documents written with --output or --json.
    Import {
        files: Vec<PathBuf>,
        #[arg(long)]
        label: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    Json,
    Csv,
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

fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(format!("'{s}' is not a percentage"));
    }
    Ok(v)
}

/// Flags shared by ping and rpc.
#[derive(Args, Debug)]
pub struct RrCommon {
    /// Host running `sonde serve`.
    pub host: String,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Measured time, seconds (suffix ms allowed).
    #[arg(short = 't', long, default_value = "10", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Time before the measured window, excluded from figures.
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: u64,
    /// Report interval.
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// Receive mode on both sides: block, busy, hybrid[=SPIN] (spin after the last message,
    /// then block; default 50us), or all (each in turn, then a comparison table).
    #[arg(long, default_value = "block", value_parser = parse_poll, value_name = "MODE")]
    pub poll: PollChoice,
    /// SO_BUSY_POLL (and SO_PREFER_BUSY_POLL) on the data sockets, microseconds.
    #[arg(long, value_name = "US")]
    pub busy_poll_us: Option<u32>,
    /// Where this side's workers run: auto (see stream --help), a CPU list, or none.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub cpus: Option<CpuList>,
    /// Where the agent's workers run: auto (chosen on its host), a CPU list, or none.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub server_cpus: Option<CpuList>,
    /// Print the result document (JSON) on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write the result document to FILE.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The agent's pre-shared key, when it requires one.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Tune this host for the goal before the test and restore it after, whatever happens.
    #[arg(long, value_enum, value_name = "GOAL")]
    pub tune: Option<Goal>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// NDJSON on stdout: one line per interval as it happens, then the end document.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
    /// Test only: the agent stalls once, AFTER_MS into the test, for STALL_MS.
    #[arg(long, hide = true, value_parser = parse_stall, value_name = "AFTER_MS:STALL_MS")]
    pub server_stall: Option<Stall>,
}

#[derive(Args, Debug)]
pub struct PingArgs {
    #[command(flatten)]
    pub common: RrCommon,
    /// Use UDP instead of TCP.
    #[arg(long)]
    pub udp: bool,
    /// Message size in bytes, both ways.
    #[arg(short = 'm', long = "msg-size", default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub msg_size: u32,
    /// Messages per second (each timed from its actual send); default: as fast as possible.
    #[arg(long, value_name = "N")]
    pub rate: Option<f64>,
}

#[derive(Args, Debug)]
pub struct RpcArgs {
    #[command(flatten)]
    pub common: RrCommon,
    /// TCP connections.
    #[arg(
        short = 'C',
        long = "connections",
        default_value_t = 1,
        value_name = "N"
    )]
    pub connections: u32,
    /// Requests in flight per connection (msg_gen's msg_window).
    #[arg(short = 'W', long, default_value_t = 1, value_name = "N")]
    pub window: u32,
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub req_size: u32,
    #[arg(long, default_value = "64", value_parser = parse_size, value_name = "BYTES")]
    pub resp_size: u32,
    /// Worker threads here, each multiplexing its connections with epoll [default: one per
    /// two usable CPUs, at most one per connection].
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Worker threads on the agent [default: one per two of its usable CPUs, at most one per
    /// connection].
    #[arg(long, value_name = "T")]
    pub server_threads: Option<u32>,
    /// Open loop: R requests per second in total on a fixed schedule, latency measured from
    /// each request's intended send time. Default: closed loop.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// A new connection per request (neper tcp_crr).
    #[arg(long)]
    pub crr: bool,
}

/// `--poll`: one mode, or all of them in turn.
#[derive(Debug, Clone, PartialEq)]
pub enum PollChoice {
    One(PollMode),
    All,
}

impl PollChoice {
    pub fn modes(&self) -> Vec<PollMode> {
        match self {
            PollChoice::One(m) => vec![*m],
            PollChoice::All => vec![
                PollMode::Block,
                PollMode::Busy,
                PollMode::Hybrid { spin_us: 50 },
            ],
        }
    }
}

fn parse_poll(s: &str) -> Result<PollChoice, String> {
    let bad = || format!("'{s}' is not a receive mode (block, busy, hybrid[=50us], all)");
    Ok(match s {
        "block" => PollChoice::One(PollMode::Block),
        "busy" => PollChoice::One(PollMode::Busy),
        "hybrid" => PollChoice::One(PollMode::Hybrid { spin_us: 50 }),
        "all" => PollChoice::All,
        _ => {
            let spin = s.strip_prefix("hybrid=").ok_or_else(bad)?;
            let us = if let Some(v) = spin.strip_suffix("us") {
                v.parse::<u64>().map_err(|_| bad())?
            } else if let Some(v) = spin.strip_suffix("ms") {
                v.parse::<u64>().map_err(|_| bad())? * 1000
            } else {
                spin.parse::<u64>().map_err(|_| bad())?
            };
            PollChoice::One(PollMode::Hybrid {
                spin_us: u32::try_from(us).map_err(|_| bad())?,
            })
        }
    })
}

fn parse_stall(s: &str) -> Result<Stall, String> {
    let (a, b) = s.split_once(':').ok_or("expected AFTER_MS:STALL_MS")?;
    Ok(Stall {
        after_ms: a.parse().map_err(|_| "AFTER_MS is not a number")?,
        stall_ms: b.parse().map_err(|_| "STALL_MS is not a number")?,
    })
}

impl RrCommon {
    fn base(&self, poll: PollMode, workers: usize) -> RrSpec {
        RrSpec {
            duration_ms: self.duration,
            warmup_ms: self.warmup,
            interval_ms: self.interval,
            poll,
            busy_poll_us: self.busy_poll_us,
            client_cpus: client_cpus(&self.cpus, workers),
            server_cpus: server_cpus(&self.server_cpus).0,
            server_cpus_auto: server_cpus(&self.server_cpus).1,
            server_stall: self.server_stall,
            ..Default::default()
        }
    }
}

impl PingArgs {
    pub fn spec(&self, poll: PollMode) -> Result<TestSpec, SpecError> {
        let spec = RrSpec {
            transport: if self.udp {
                Transport::Udp
            } else {
                Transport::Tcp
            },
            request_bytes: self.msg_size,
            response_bytes: self.msg_size,
            rate_per_s: self.rate,
            ..self.common.base(poll, 1)
        };
        // Both sizes come from -m here, so that is the flag to name.
        spec.validate().map_err(|mut e| {
            if e.flag == "--req-size" || e.flag == "--resp-size" {
                e.flag = "--msg-size";
            }
            e
        })?;
        Ok(TestSpec::Ping(spec))
    }
}

impl RpcArgs {
    pub fn spec(&self, poll: PollMode) -> Result<TestSpec, SpecError> {
        let spec = RrSpec {
            connections: self.connections,
            window: self.window,
            request_bytes: self.req_size,
            response_bytes: self.resp_size,
            client_threads: self.threads,
            server_threads: self.server_threads,
            rate_per_s: self.rate,
            open_loop: self.rate.is_some(),
            connect_per_request: self.crr,
            ..self.common.base(
                poll,
                sonde_engine::worker_threads(
                    sonde_engine::Work::RequestResponse,
                    self.threads,
                    self.connections as usize,
                ),
            )
        };
        spec.validate()?;
        Ok(TestSpec::Rpc(spec))
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default: pass 0.0.0.0 (or the test NIC's address)
    /// to accept controllers from other hosts.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Control port (0 picks a free one, printed at start).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Require controllers to prove they know this pre-shared key (HMAC-SHA256
    /// challenge-response); at least 16 bytes, surrounding whitespace ignored.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
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
}

#[derive(Args, Debug)]
pub struct StreamArgs {
    /// Host running `sonde serve`.
    pub host: String,
    /// The agent's control port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// TCP connections (per direction with --bidir).
    #[arg(
        short = 'P',
        long = "connections",
        default_value_t = 1,
        value_name = "N"
    )]
    pub connections: u32,
    /// Worker threads here [default: one per connection, up to 128].
    #[arg(long, value_name = "T")]
    pub threads: Option<u32>,
    /// Worker threads on the agent [default: one per connection, up to 128].
    #[arg(long, value_name = "T")]
    pub server_threads: Option<u32>,
    /// Measured time, seconds (suffix ms allowed).
    #[arg(short = 't', long, default_value = "10", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Time before the measured window, excluded from figures.
    #[arg(long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub warmup: u64,
    /// Time after the measured window, excluded from figures.
    #[arg(long, default_value = "0.5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub cooldown: u64,
    /// Report interval.
    #[arg(short = 'i', long, default_value = "1", value_parser = parse_duration_ms, value_name = "SECS")]
    pub interval: u64,
    /// Bytes per send()/recv() (suffix K, M: 128K = 131072).
    #[arg(short = 'l', long = "buffer", default_value = "128K", value_parser = parse_size, value_name = "SIZE")]
    pub buffer: u32,
    /// The agent sends, this side receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once, N connections each.
    #[arg(long)]
    pub bidir: bool,
    /// TCP congestion control algorithm on both sides (cubic, bbr, reno, ...).
    #[arg(short = 'C', long, value_name = "ALG")]
    pub congestion: Option<String>,
    /// Set TCP_NODELAY on the data connections.
    #[arg(long)]
    pub nodelay: bool,
    /// SO_SNDBUF of the data connections, both sides.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub sndbuf: Option<u32>,
    /// SO_RCVBUF of the data connections, both sides.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub rcvbuf: Option<u32>,
    /// Where this side's workers run: `auto` (distinct physical cores of the NIC's NUMA node,
    /// away from its IRQs, within the inherited CPU mask), a list pinned round robin
    /// (e.g. 0-3,8), or `none`.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub cpus: Option<CpuList>,
    /// Where the agent's workers run: `auto` (chosen by the agent on its host), a list, or `none`.
    #[arg(long, default_value = "auto", value_parser = parse_cpus, value_name = "LIST")]
    pub server_cpus: Option<CpuList>,
    /// Print the result document (JSON) on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write the result document to FILE (written even when the test is cut short).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The agent's pre-shared key, when it requires one.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Tune this host for the goal before the test and restore it after, whatever happens.
    #[arg(long, value_enum, value_name = "GOAL")]
    pub tune: Option<Goal>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// NDJSON on stdout: one line per interval as it happens, then the end document.
    #[arg(long, conflicts_with = "json")]
    pub json_stream: bool,
}

#[derive(Args, Debug)]
pub struct LabArgs {
    /// Measured time of each measurement.
    #[arg(short = 't', long, default_value = "5", value_parser = parse_duration_ms, value_name = "SECS")]
    pub duration: u64,
    /// Keep each measurement's result document in DIR.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Use loopback even when namespaces could be built.
    #[arg(long)]
    pub loopback: bool,
}

/// Seconds as a decimal number, or with an `ms` / `s` suffix; returns milliseconds.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(v) = t.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (t, 1000.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (e.g. 10, 2.5, 500ms)"))?;
    if !v.is_finite() || v < 0.0 || v * scale > 1e12 {
        return Err(format!("'{s}' is out of range"));
    }
    Ok((v * scale).round() as u64)
}

/// Bytes, with an optional K/M/G suffix in powers of 1024 (as iperf3 and ntttcp read -l).
pub fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 65536, 128K, 4M)"))?;
    v.checked_mul(mult)
        .and_then(|b| u32::try_from(b).ok())
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// `--cpus` / `--server-cpus`: a CPU list as one value (clap would read a bare `Vec` as a
/// repeated flag), or `auto`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuList {
    /// `none`: left to the scheduler.
    Unpinned,
    List(Vec<usize>),
    /// Distinct physical cores of the NIC's NUMA node, away from its IRQs, within the
    /// inherited CPU mask (sonde_probe::placement).
    Auto,
}

fn parse_cpus(s: &str) -> Result<CpuList, String> {
    match s {
        "auto" => return Ok(CpuList::Auto),
        "none" => return Ok(CpuList::Unpinned),
        _ => {}
    }
    parse_cpu_list(s).map(CpuList::List)
}

/// This side's CPUs for `workers` workers: a list as given, or chosen from this host.
fn client_cpus(c: &Option<CpuList>, workers: usize) -> Option<Vec<usize>> {
    match c.as_ref()? {
        CpuList::Unpinned => None,
        CpuList::List(l) => Some(l.clone()),
        CpuList::Auto => {
            let inv = sonde_probe::inventory::collect_live();
            let allowed = sonde_probe::topology::allowed_cpus();
            sonde_probe::placement::choose(
                &inv,
                &allowed,
                workers,
                sonde_probe::placement::End::First,
            )
        }
    }
}

/// The agent's CPUs as sent in the spec: a list, or `auto` for the agent to choose.
fn server_cpus(c: &Option<CpuList>) -> (Option<Vec<usize>>, bool) {
    match c {
        Some(CpuList::List(l)) => (Some(l.clone()), false),
        Some(CpuList::Auto) => (None, true),
        Some(CpuList::Unpinned) | None => (None, false),
    }
}

impl StreamArgs {
    pub fn spec(&self) -> Result<StreamSpec, SpecError> {
        let spec = StreamSpec {
            connections: self.connections,
            client_threads: self.threads,
            server_threads: self.server_threads,
            duration_ms: self.duration,
            warmup_ms: self.warmup,
            cooldown_ms: self.cooldown,
            interval_ms: self.interval,
            buffer_bytes: self.buffer,
            direction: if self.bidir {
                Direction::Bidir
            } else if self.reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            congestion: self.congestion.clone(),
            nodelay: self.nodelay,
            sndbuf_bytes: self.sndbuf,
            rcvbuf_bytes: self.rcvbuf,
            client_cpus: client_cpus(
                &self.cpus,
                sonde_engine::worker_threads(
                    sonde_engine::Work::Stream,
                    self.threads,
                    self.connections as usize * if self.bidir { 2 } else { 1 },
                ),
            ),
            server_cpus: server_cpus(&self.server_cpus).0,
            server_cpus_auto: server_cpus(&self.server_cpus).1,
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// Reads a key file, naming it in any error.
pub fn load_key(path: Option<&std::path::Path>) -> anyhow::Result<Option<sonde_proto::Key>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read --key-file {}: {e}", path.display()))?;
    sonde_proto::Key::from_file_bytes(&bytes)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("--key-file {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration_ms("10"), Ok(10_000));
        assert_eq!(parse_duration_ms("2.5"), Ok(2_500));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("3s"), Ok(3_000));
        assert!(parse_duration_ms("-1").is_err());
        assert!(parse_duration_ms("abc").is_err());
        assert_eq!(parse_size("128K"), Ok(131_072));
        assert_eq!(parse_size("4m"), Ok(4 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("5G").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn ping_and_rpc_flags() {
        let cli = Cli::try_parse_from([
            "sonde",
            "rpc",
            "h",
            "-C",
            "8",
            "-W",
            "32",
            "--rate",
            "1000",
            "--poll",
            "hybrid=100us",
        ])
        .unwrap();
        let Command::Rpc(a) = cli.command else {
            panic!()
        };
        let PollChoice::One(mode) = a.common.poll.clone() else {
            panic!()
        };
        assert_eq!(mode, PollMode::Hybrid { spin_us: 100 });
        let TestSpec::Rpc(r) = a.spec(mode).unwrap() else {
            panic!()
        };
        assert_eq!((r.connections, r.window, r.open_loop), (8, 32, true));
        let cli = Cli::try_parse_from(["sonde", "ping", "h", "--udp", "--poll", "all", "-m", "32"])
            .unwrap();
        let Command::Ping(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.common.poll.modes().len(), 3);
        let TestSpec::Ping(p) = a.spec(PollMode::Busy).unwrap() else {
            panic!()
        };
        assert_eq!((p.transport, p.request_bytes), (Transport::Udp, 32));
        assert!(parse_poll("hybrid=2ms").is_ok());
        assert!(parse_poll("sometimes").is_err());
        let cli = Cli::try_parse_from(["sonde", "rpc", "h", "-W", "0"]).unwrap();
        let Command::Rpc(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.spec(PollMode::Block).unwrap_err().flag, "--window");
    }

    #[test]
    fn flags_become_a_spec() {
        let cli = Cli::try_parse_from([
            "sonde",
            "stream",
            "h",
            "-P",
            "8",
            "--bidir",
            "-l",
            "64K",
            "--server-cpus",
            "1",
            "--cpus",
            "0-1",
        ])
        .unwrap();
        let Command::Stream(a) = cli.command else {
            panic!()
        };
        let s = a.spec().unwrap();
        assert_eq!(s.connections, 8);
        assert_eq!(s.direction, Direction::Bidir);
        assert_eq!(s.buffer_bytes, 65536);
        assert_eq!(s.server_cpus, Some(vec![1]));
        assert_eq!(s.client_cpus, Some(vec![0, 1]));
        assert!(Cli::try_parse_from(["sonde", "stream", "h", "-R", "--bidir"]).is_err());
        let cli = Cli::try_parse_from(["sonde", "stream", "h", "-P", "0"]).unwrap();
        let Command::Stream(a) = cli.command else {
            panic!()
        };
        assert_eq!(a.spec().unwrap_err().flag, "--connections");
    }
}
