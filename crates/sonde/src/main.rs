//! `sonde`: parse, dispatch, and turn every error into one line and an exit code.
//!
//! Exit codes: 0 success, 1 error, 2 bad usage, 3 partial result (test cut short),
//! 4 `compare --fail-if-worse` found a regression.

/// `println!` for text that may hold a stored or peer-supplied string (a command, a host
/// name, a peer's error): every control but newline and tab is shown as an escape.
macro_rules! outln {
    ($($t:tt)*) => { println!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `print!`, made safe as [`outln`].
macro_rules! out {
    ($($t:tt)*) => { print!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `eprintln!`, made safe as [`outln`].
macro_rules! errln {
    ($($t:tt)*) => { eprintln!("{}", sonde_report::safe::terminal(&format!($($t)*))) };
}
/// `println!` of JSON: DEL and C1 controls as `\u00XX` (serde_json escapes C0 itself).
macro_rules! jsonln {
    ($($t:tt)*) => { println!("{}", sonde_report::safe::json(&format!($($t)*))) };
}

mod cli;
mod errors;
mod fleet_metrics;
mod lab;
mod measure;
mod mesh_metrics;
mod metrics_http;
mod orchestrate;
mod stored;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};
use errors::{EXIT_ERROR, EXIT_USAGE};
use sonde_probe::tune;
use sonde_run::measure::{cstate_sweep, Plan};
use sonde_run::signals::Interrupt;
use sonde_run::{agent, tune as tuning};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message (which names the flag), without usage and tips.
            let text = e.render().to_string();
            let msg: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("tip:"))
                .collect();
            errln!("{}", msg.join(" "));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", sonde_report::safe::line(&errors::one_line(&e)));
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let interrupt = Interrupt::install();
    match cli.command {
        Command::Serve(a) => serve(&a, command_line, &interrupt),
        Command::Watch(a) => measure::watch(&a, command_line, &interrupt),
        Command::Stamp(a) => measure::stamp(&a, command_line, &interrupt),
        Command::Ping(a) if a.cstate_sweep => cstate_sweep_command(&a, command_line, &interrupt),
        cmd @ (Command::Stream(_)
        | Command::Ping(_)
        | Command::Rpc(_)
        | Command::Pps(_)
        | Command::Load(_)) => test_command(&cmd, command_line, &interrupt),
        Command::Lab(a) => lab::run(&a, &interrupt),
        Command::Tune(a) => tune_command(a.action),
        Command::Results(a) => stored::results_command(a),
        Command::Completions { shell } => completions(shell),
        Command::Man => man(),
        Command::Compare(a) => stored::compare_command(a),
        Command::Report(a) => stored::report_command(a),
        Command::Suite(a) => orchestrate::suite(&a, &interrupt),
        Command::Fleet(a) => orchestrate::fleet(&a, &interrupt),
        Command::Host(a) => host_command(&a),
        Command::Clock(a) => clock_command(&a),
    }
}

/// `sonde serve`: the agent, until interrupted.
fn serve(
    a: &cli::ServeArgs,
    command_line: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    // A label given twice or too many: a usage error, as clap's for a bad one.
    let labels = match a.labels() {
        Ok(labels) => labels,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    init_logging();
    let config = a.config(labels.clone(), command_line)?;
    let reflector = match a.stamp()? {
        Some(cfg) => Some(start_reflector(cfg, interrupt)?),
        None => None,
    };
    let mesh = match a
        .mesh
        .config(a.bind, a.insecure_no_key, config.key.clone(), &labels)?
    {
        Some(cfg) => Some(start_mesh(a, cfg, interrupt)?),
        None => None,
    };
    let served = agent::serve(config, interrupt);
    if let Some(r) = reflector {
        interrupt.set();
        tracing::info!("stamp reflector: {}", r.counts.line());
        r.join();
    }
    if let Some((mesh, stop, metrics)) = mesh {
        interrupt.set();
        stop.set();
        mesh.join();
        if let Some(m) = metrics {
            let _ = m.join();
        }
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The mesh (`serve --mesh`) and its `/metrics`, started before the agent says it listens.
fn start_mesh(
    a: &cli::ServeArgs,
    cfg: sonde_run::mesh::MeshConfig,
    interrupt: &Interrupt,
) -> anyhow::Result<(
    sonde_run::mesh::Mesh,
    Interrupt,
    Option<std::thread::JoinHandle<()>>,
)> {
    let mesh = sonde_run::mesh::start(cfg, interrupt)?;
    errln!("sonde mesh reflecting on {}", mesh.reflector);
    let stop = Interrupt::none();
    let metrics = match a.mesh.metrics {
        Some(addr) => {
            let token = a.mesh.metrics_token_file.as_deref();
            let token = token.map(fleet_metrics::token).transpose()?;
            let state = std::sync::Arc::clone(&mesh.state);
            Some(mesh_metrics::start(addr, token, state, stop.clone())?)
        }
        None => None,
    };
    Ok((mesh, stop, metrics))
}

/// `serve --stamp`: the reflector, bound before the agent says it listens.
fn start_reflector(
    cfg: sonde_run::stamp::ReflectorConfig,
    interrupt: &Interrupt,
) -> anyhow::Result<sonde_run::stamp::Reflector> {
    let bind = cfg.bind;
    let words = format!(
        "{}, {}, allow {}, at most {}/s per source",
        if cfg.stateful {
            "stateful"
        } else {
            "stateless"
        },
        if cfg.key.is_some() {
            "authenticated"
        } else {
            "unauthenticated"
        },
        match cfg.allow.len() {
            0 => "nobody (no --stamp-allow)".to_string(),
            _ => cfg
                .allow
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
        },
        cfg.max_pps
    );
    let r = sonde_run::stamp::Reflector::start(cfg, interrupt.clone())
        .map_err(|e| anyhow::anyhow!("--stamp {bind}: {e}"))?;
    // On stderr: stdout's first line is the agent's, which scripts read for its port.
    errln!("sonde stamp reflector listening on {} ({words})", r.local);
    Ok(r)
}

/// A test command (stream, ping, rpc, pps, load): its plan through the one pipeline.
fn test_command(
    cmd: &Command,
    command_line: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let plan = cmd.plan().expect("a test command has a plan");
    let (t, o) = cmd.target_output().expect("a test command has a target");
    measure::test_command(plan, t, o, command_line, interrupt)
}

/// `sonde ping --cstate-sweep`: the pings once per idle state of this host.
fn cstate_sweep_command(
    a: &cli::PingArgs,
    command_line: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let (t, o) = (&a.common.target, &a.common.output);
    let say = |line: &str| {
        if !o.quiet() {
            outln!("{line}")
        }
    };
    let plan = a.specs().map(|s| Plan::Tests(cstate_sweep(s, &say)));
    measure::test_command(plan, t, o, command_line, interrupt)
}

/// `sonde completions SHELL`: the shell's completion script on stdout.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut command = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut command, "sonde", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `sonde man`: the man page (roff) on stdout.
fn man() -> anyhow::Result<ExitCode> {
    clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
        .render(&mut std::io::stdout())?;
    Ok(ExitCode::SUCCESS)
}

/// `sonde host`: this host's (or `--root`'s fixture tree's) inventory and advice.
fn host_command(a: &cli::HostArgs) -> anyhow::Result<ExitCode> {
    let inv = match &a.root {
        Some(root) => {
            anyhow::ensure!(root.is_dir(), "--root {}: not a directory", root.display());
            sonde_probe::inventory::collect_advised(root)
        }
        None => sonde_results::inventory::Inventory {
            clock: Some(sonde_probe::clock::live()),
            ..sonde_probe::inventory::collect_live()
        },
    };
    if a.json {
        jsonln!("{}", serde_json::to_string_pretty(&inv)?);
    } else {
        out!("{}", sonde_report::host::render(&inv));
    }
    Ok(ExitCode::SUCCESS)
}

/// `sonde clock`: this host's (or `--root`'s captured tree's) clock and its error bound.
fn clock_command(a: &cli::ClockArgs) -> anyhow::Result<ExitCode> {
    let clock = match &a.root {
        Some(root) => {
            anyhow::ensure!(root.is_dir(), "--root {}: not a directory", root.display());
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
            sonde_probe::clock::captured(root, now.as_secs_f64())
        }
        None => sonde_probe::clock::live(),
    };
    if a.json {
        jsonln!("{}", serde_json::to_string_pretty(&clock)?);
    } else {
        out!("{}", sonde_report::clock::render(&clock));
    }
    Ok(ExitCode::SUCCESS)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SONDE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn tune_command(action: cli::TuneAction) -> anyhow::Result<ExitCode> {
    let root = Path::new("/");
    match action {
        cli::TuneAction::Plan { goal, dev, json } => {
            let plan = tune::plan_live(goal, dev.as_deref());
            if json {
                jsonln!("{}", serde_json::to_string_pretty(&plan)?);
            } else if plan.is_empty() {
                outln!("nothing to change for {goal:?}");
            } else {
                plan.iter().for_each(|c| outln!("{}", c.describe()));
            }
        }
        cli::TuneAction::Apply { goal, dev, state } => {
            tuning::need_root()?;
            let state = tuning::state_file(state)?;
            let plan = tune::plan_live(goal, dev.as_deref());
            tuning::apply(root, goal, &plan, &state)?;
            plan.iter().for_each(|c| outln!("changed {}", c.describe()));
            let s = state.display();
            outln!("previous values saved in {s}; `sonde tune restore --state {s}` puts them back");
        }
        cli::TuneAction::Restore { state } => {
            for c in tuning::restore(root, &tuning::state_file(state)?)? {
                outln!("restored {}", c.describe_restored());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
