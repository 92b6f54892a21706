//! `sonde`: parse, dispatch, and turn every error into one line and an exit code.
//!
//! Exit codes: 0 success, 1 error, 2 bad usage, 3 partial result (test cut short),
//! 4 `compare --fail-if-worse` found a regression.

mod cli;
mod lab;
mod suite;
mod tune;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use cli::{Cli, Command, PpsArgs, RrCommon, StreamArgs};
use sonde_results::{Document, PollMode, SpecError, TestSpec};
use sonde_run::{agent, controller, search, signals};

const EXIT_ERROR: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_PARTIAL: u8 = 3;
/// `sonde compare --fail-if-worse`: a metric got significantly worse beyond the limit.
const EXIT_WORSE: u8 = 4;

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
            eprintln!("{}", msg.join(" "));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    let interrupt = signals::Interrupt::install();
    match cli.command {
        Command::Serve(a) => {
            init_logging();
            let key = cli::load_key(a.key_file.as_deref())?;
            let limits = agent::Limits {
                max_duration_ms: a.max_duration,
                max_connections: a.max_connections,
                max_rate: a.max_rate,
                max_message_bytes: a.max_message,
            };
            let cfg = agent::ServeConfig {
                key,
                limits,
                bind: a.bind,
                port: a.port,
                command: command_line,
            };
            agent::serve(cfg, &interrupt)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stream(a) => stream(&a, command_line, &interrupt),
        Command::Ping(a) => request_response(&a.common, &|m| a.spec(m), command_line, &interrupt),
        Command::Rpc(a) => request_response(&a.common, &|m| a.spec(m), command_line, &interrupt),
        Command::Pps(a) => pps(&a, command_line, &interrupt),
        Command::Lab(a) => lab::run(&a, &interrupt),
        Command::Tune(a) => tune_command(a.action),
        Command::Results(a) => results_command(a),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "sonde",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command())
                .render(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Compare(a) => compare_command(a),
        Command::Report(a) => report_command(a),
        Command::Suite(a) => suite::run(&a, &interrupt),
        Command::Host(a) => {
            let inv = match &a.root {
                Some(root) => {
                    anyhow::ensure!(root.is_dir(), "--root {}: not a directory", root.display());
                    let mut inv = sonde_probe::inventory::collect(root);
                    inv.recommendations = sonde_probe::advice::recommend(&inv);
                    inv
                }
                None => sonde_probe::inventory::collect_live(),
            };
            if a.json {
                println!("{}", serde_json::to_string_pretty(&inv)?);
            } else {
                print!("{}", sonde_report::host::render(&inv));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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

fn stream(
    a: &StreamArgs,
    command: String,
    interrupt: &signals::Interrupt,
) -> anyhow::Result<ExitCode> {
    let spec = match a.spec() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let _tuned = tuned(a.tune, a.json)?;
    let direction = spec.direction;
    if !a.json && !a.json_stream {
        println!(
            "sonde stream to {}:{}: {}, {} connection(s), {:.1} s measured (+{:.1} s warm-up, {:.1} s cool-down)",
            a.host,
            a.port,
            direction.as_str(),
            spec.connections,
            spec.duration_ms as f64 / 1e3,
            spec.warmup_ms as f64 / 1e3,
            spec.cooldown_ms as f64 / 1e3
        );
    }
    let key = cli::load_key(a.key_file.as_deref())?;
    let req = controller::TestRequest {
        host: a.host.clone(),
        port: a.port,
        spec: TestSpec::Stream(spec),
        command,
        key: key.clone(),
    };
    let quiet = a.json || a.json_stream;
    let ndjson = a.json_stream;
    let mut live = |l: controller::LiveInterval<'_>| {
        if ndjson {
            ndjson_interval(&l);
        } else if !quiet {
            println!(
                "{}",
                sonde_report::live::line(direction, l.client, l.server)
            );
        }
    };
    let doc = controller::run_test(&req, interrupt, &mut live)?;
    save_run(&a.store, &doc);
    let text = sonde_report::json(&doc);
    ndjson_end(ndjson, &doc);
    let human = (!quiet).then(|| sonde_report::summary::stream(&doc));
    emit(&text, human, a.json, a.output.as_deref(), doc.end.partial)
}

/// Runs ping or rpc once per receive mode asked for; with several, ends with a comparison.
fn request_response(
    common: &RrCommon,
    make: &dyn Fn(PollMode) -> Result<TestSpec, SpecError>,
    command: String,
    interrupt: &signals::Interrupt,
) -> anyhow::Result<ExitCode> {
    let modes = common.poll.modes();
    let mut specs = Vec::new();
    for m in &modes {
        match make(*m) {
            Ok(s) => specs.push(s),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(EXIT_USAGE));
            }
        }
    }
    let _tuned = tuned(common.tune, common.json)?;
    let key = cli::load_key(common.key_file.as_deref())?;
    let mut docs: Vec<Document> = Vec::new();
    for spec in specs {
        if interrupt.is_set() || docs.last().is_some_and(|d| d.end.partial) {
            break;
        }
        if !common.json && !common.json_stream {
            println!(
                "{}",
                sonde_report::summary::rr_heading(&spec, &common.host, common.port)
            );
        }
        let req = controller::TestRequest {
            host: common.host.clone(),
            port: common.port,
            spec,
            command: command.clone(),
            key: key.clone(),
        };
        let quiet = common.json || common.json_stream;
        let ndjson = common.json_stream;
        let mut live = |l: controller::LiveInterval<'_>| {
            if ndjson {
                ndjson_interval(&l);
            } else if !quiet {
                println!("{}", sonde_report::live::rr_line(l.client, l.server));
            }
        };
        let doc = controller::run_test(&req, interrupt, &mut live)?;
        save_run(&common.store, &doc);
        ndjson_end(ndjson, &doc);
        if !quiet {
            print!("{}", sonde_report::summary::rr(&doc));
        }
        docs.push(doc);
    }
    // One document per test; several receive modes make an array of them.
    let text = if docs.len() == 1 {
        sonde_report::json(&docs[0])
    } else {
        format!("{}\n", serde_json::to_string_pretty(&docs)?)
    };
    let human =
        (!common.json && docs.len() > 1).then(|| sonde_report::summary::poll_comparison(&docs));
    let partial = docs.iter().any(|d| d.end.partial) || docs.len() < modes.len();
    emit(&text, human, common.json, common.output.as_deref(), partial)
}

/// A packet-rate test, or with `--search` the zero-loss rate search made of such tests.
fn pps(a: &PpsArgs, command: String, interrupt: &signals::Interrupt) -> anyhow::Result<ExitCode> {
    let spec = match a.spec() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let _tuned = tuned(a.tune, a.json)?;
    let key = cli::load_key(a.key_file.as_deref())?;
    let quiet = a.json || a.json_stream;
    if !quiet {
        println!(
            "{}",
            sonde_report::summary::pps_heading(&spec, &a.host, a.port, a.search)
        );
    }
    let run = |spec: &TestSpec, show_intervals: bool| {
        let req = controller::TestRequest {
            host: a.host.clone(),
            port: a.port,
            spec: spec.clone(),
            command: command.clone(),
            key: key.clone(),
        };
        let mut live = |l: controller::LiveInterval<'_>| {
            if a.json_stream && show_intervals {
                ndjson_interval(&l);
            } else if !quiet && show_intervals {
                println!("{}", sonde_report::live::pps_line(l.client, l.server));
            }
        };
        controller::run_test(&req, interrupt, &mut live)
    };
    let doc = if a.search {
        let params = search::SearchParams {
            max_loss_percent: a.max_loss,
            resolution_percent: a.resolution,
            trials_per_step: a.trials_per_step,
        };
        let mut n = 0;
        let mut on_trial = |t: &sonde_results::document::Trial| {
            n += 1;
            if !quiet {
                println!("{}", sonde_report::summary::trial_line(n, t));
            }
        };
        let (found, mut doc) = search::search(
            &spec,
            &params,
            &mut |s| {
                if interrupt.is_set() {
                    return Err("interrupted".into());
                }
                Ok(run(s, false)?)
            },
            &mut on_trial,
        )?;
        doc.end.search = Some(found);
        doc
    } else {
        run(&TestSpec::Pps(spec), true)?
    };
    save_run(&a.store, &doc);
    ndjson_end(a.json_stream, &doc);
    let human = (!quiet).then(|| sonde_report::summary::pps(&doc));
    emit(
        &sonde_report::json(&doc),
        human,
        a.json,
        a.output.as_deref(),
        doc.end.partial,
    )
}

fn tune_command(action: cli::TuneAction) -> anyhow::Result<ExitCode> {
    let root = Path::new("/");
    match action {
        cli::TuneAction::Plan { goal, dev, json } => {
            let plan = tune::plan(
                root,
                &sonde_probe::inventory::collect_live(),
                goal,
                dev.as_deref(),
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else if plan.is_empty() {
                println!("nothing to change for {goal:?}");
            } else {
                for c in &plan {
                    println!("{}", c.describe());
                }
            }
        }
        cli::TuneAction::Apply { goal, dev, state } => {
            let state = state.unwrap_or_else(tune::default_state_file);
            let plan = tune::plan(
                root,
                &sonde_probe::inventory::collect_live(),
                goal,
                dev.as_deref(),
            );
            tune::apply(root, goal, &plan, &state)?;
            for c in &plan {
                println!("changed {}", c.describe());
            }
            println!(
                "previous values saved in {}; `sonde tune restore --state {}` puts them back",
                state.display(),
                state.display()
            );
        }
        cli::TuneAction::Restore { state } => {
            let state = state.unwrap_or_else(tune::default_state_file);
            for c in tune::restore(root, &state)? {
                println!(
                    "restored {}",
                    c.describe().replacen(
                        &format!("{} -> {}", c.from, c.to),
                        &format!("{} (was {})", c.from, c.to),
                        1
                    )
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--json-stream`: one NDJSON line per interval, as both sides measured it.
fn ndjson_interval(l: &controller::LiveInterval<'_>) {
    let line = serde_json::json!({ "event": "interval", "client": l.client, "server": l.server });
    println!("{line}");
}

/// `--json-stream`: the end document as the last line.
fn ndjson_end(enabled: bool, doc: &sonde_results::Document) {
    if enabled {
        println!("{}", serde_json::json!({ "event": "end", "document": doc }));
    }
}

/// Keeps a run in the store (unless --no-save). A store that cannot be written is reported
/// but does not fail the test: the document is still printed and written with --output.
fn save_run(args: &cli::StoreArgs, doc: &sonde_results::Document) {
    if args.no_save {
        return;
    }
    let path = cli::StoreArgs::db_path(args.db.as_deref());
    match sonde_store::Store::open(&path)
        .and_then(|s| s.save_for_suite(doc, args.label.as_deref(), args.suite_key.as_deref()))
    {
        Ok(id) => eprintln!("saved as run {id} in {}", path.display()),
        Err(e) => eprintln!("warning: run not saved: {e}"),
    }
}

fn results_command(a: cli::ResultsArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&cli::StoreArgs::db_path(a.db.as_deref()))?;
    match a.action {
        cli::ResultsAction::List { label } => {
            let runs = store.list(label.as_deref())?;
            print!(
                "{}",
                sonde_report::summary::runs(
                    &runs
                        .iter()
                        .map(|r| (r.id, r.label.clone(), &r.document))
                        .collect::<Vec<_>>()
                )
            );
        }
        cli::ResultsAction::Show { id } => {
            print!("{}", sonde_report::json(&store.get(id)?.document))
        }
        cli::ResultsAction::Export { ids, format } => {
            let runs: Vec<sonde_store::Run> = if ids.is_empty() {
                store.list(None)?
            } else {
                ids.iter()
                    .map(|&i| store.get(i))
                    .collect::<Result<_, _>>()?
            };
            match format {
                cli::ExportFormat::Json => {
                    let docs: Vec<&sonde_results::Document> =
                        runs.iter().map(|r| &r.document).collect();
                    println!("{}", serde_json::to_string_pretty(&docs)?);
                }
                cli::ExportFormat::Csv => print!(
                    "{}",
                    sonde_report::csv::intervals(
                        &runs.iter().map(|r| (r.id, &r.document)).collect::<Vec<_>>()
                    )
                ),
            }
        }
        cli::ResultsAction::Import { files, label } => {
            for f in files {
                let bytes =
                    std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?;
                let doc: sonde_results::Document = serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not a sonde result document", f.display()))?;
                let id = store.save(&doc, label.as_deref())?;
                println!("imported {} as run {id}", f.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs named by a label, or the one run with that id.
fn runs_for(store: &sonde_store::Store, which: &str) -> anyhow::Result<Vec<sonde_store::Run>> {
    let by_label = store.list(Some(which))?;
    if !by_label.is_empty() {
        return Ok(by_label);
    }
    match which.parse::<i64>() {
        Ok(id) => Ok(vec![store.get(id)?]),
        Err(_) => anyhow::bail!("no runs labelled '{which}' (and it is not a run id)"),
    }
}

fn compare_command(a: cli::CompareArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&cli::StoreArgs::db_path(a.db.as_deref()))?;
    let (ra, rb) = (runs_for(&store, &a.a)?, runs_for(&store, &a.b)?);
    anyhow::ensure!(
        ra[0].test == rb[0].test,
        "'{}' holds {} runs and '{}' holds {} runs: compare like with like",
        a.a,
        ra[0].test,
        a.b,
        rb[0].test
    );
    let da: Vec<&sonde_results::Document> = ra.iter().map(|r| &r.document).collect();
    let db: Vec<&sonde_results::Document> = rb.iter().map(|r| &r.document).collect();
    let cmp = sonde_results::compare::compare_runs(&da, &db);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&cmp)?);
    } else {
        print!("{}", sonde_report::summary::comparison(&a.a, &a.b, &cmp));
    }
    let worse = a.fail_if_worse.is_some_and(|limit| {
        cmp.iter().any(|c| {
            c.verdict == sonde_results::compare::Verdict::Worse && {
                let loss = if c.higher_is_better {
                    -c.change_percent
                } else {
                    c.change_percent
                };
                loss > limit
            }
        })
    });
    Ok(if worse {
        ExitCode::from(EXIT_WORSE)
    } else {
        ExitCode::SUCCESS
    })
}

fn report_command(a: cli::ReportArgs) -> anyhow::Result<ExitCode> {
    let store = sonde_store::Store::open(&cli::StoreArgs::db_path(a.db.as_deref()))?;
    let mut groups: Vec<(String, Vec<sonde_store::Run>)> = Vec::new();
    for sel in &a.runs {
        groups.push((sel.clone(), runs_for(&store, sel)?));
    }
    let runs: Vec<sonde_report::html::ReportRun<'_>> = groups
        .iter()
        .flat_map(|(_, rs)| {
            rs.iter().map(|r| sonde_report::html::ReportRun {
                id: r.id,
                label: r.label.clone(),
                doc: &r.document,
            })
        })
        .collect();
    let cmp = match &groups[..] {
        [(a_name, ra), (b_name, rb)] if ra[0].test == rb[0].test => {
            let da: Vec<&sonde_results::Document> = ra.iter().map(|r| &r.document).collect();
            let db: Vec<&sonde_results::Document> = rb.iter().map(|r| &r.document).collect();
            Some((
                a_name.as_str(),
                b_name.as_str(),
                sonde_results::compare::compare_runs(&da, &db),
            ))
        }
        _ => None,
    };
    let when = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let cmp_ref = cmp.as_ref().map(|(x, y, c)| (*x, *y, c.as_slice()));
    let text = match a.output.extension().and_then(|e| e.to_str()) {
        Some("md") => sonde_report::html::markdown(&a.title, &when, &runs, cmp_ref),
        Some("html") | Some("htm") => sonde_report::html::render(&a.title, &when, &runs, cmp_ref),
        _ => anyhow::bail!("-o {}: the report is .html or .md", a.output.display()),
    };
    write_atomically(&a.output, text.as_bytes())?;
    println!("wrote {} ({} runs)", a.output.display(), runs.len());
    Ok(ExitCode::SUCCESS)
}

/// Applies `--tune` for the length of a test; the guard restores on every exit path.
fn tuned(goal: Option<tune::Goal>, quiet: bool) -> anyhow::Result<Option<tune::Tuned>> {
    let Some(goal) = goal else { return Ok(None) };
    let (guard, changes) = tune::Tuned::apply(goal)?;
    if !quiet {
        for c in &changes {
            println!("--tune: changed {}", c.describe());
        }
    }
    Ok(Some(guard))
}

/// Writes the JSON to `output`, prints JSON or the human text; the exit code says whether
/// the result is partial.
fn emit(
    json_text: &str,
    human: Option<String>,
    json: bool,
    output: Option<&Path>,
    partial: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = output {
        write_atomically(path, json_text.as_bytes())?;
    }
    if json {
        print!("{json_text}");
    } else if let Some(h) = human {
        print!("{h}");
    }
    std::io::stdout().flush()?;
    Ok(if partial {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes to a temporary file beside `path`, then renames: a reader never sees half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
