//! The test commands from flags to exit code: tune around the test, run it against the
//! agent, show intervals as they come, store the run, print and write the document.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use sonde_results::{Document, IntervalSample, TestSpec};
use sonde_run::{controller, search, signals::Interrupt};

use crate::cli::{self, LoadArgs, OutputArgs, PpsArgs, RrCommon, StreamArgs, Target, WatchArgs};
use crate::{EXIT_PARTIAL, EXIT_USAGE};
use sonde_probe::tune::Goal;
use sonde_run::tune::Tuned;

/// How a command shows one interval in text.
type LiveLine<'a> = &'a dyn Fn(Option<&IntervalSample>, Option<&IntervalSample>) -> String;

/// One test command's invariant part: where, what becomes of the output, the key, the
/// exact command line.
struct Invocation<'a> {
    target: &'a Target,
    out: &'a OutputArgs,
    key: Option<sonde_proto::Key>,
    command: String,
    interrupt: &'a Interrupt,
}

impl<'a> Invocation<'a> {
    fn new(
        target: &'a Target,
        out: &'a OutputArgs,
        command: String,
        interrupt: &'a Interrupt,
    ) -> anyhow::Result<Invocation<'a>> {
        Ok(Invocation {
            key: cli::load_key(target.key_file.as_deref())?,
            target,
            out,
            command,
            interrupt,
        })
    }

    /// Runs `spec` once; `live` shows its intervals (none when `None`, as in search trials).
    fn run(
        &self,
        spec: &TestSpec,
        live: Option<LiveLine<'_>>,
    ) -> Result<Document, controller::ControllerError> {
        let req = controller::TestRequest {
            host: self.target.host().to_string(),
            from: self.target.from.clone(),
            port: self.target.port,
            spec: spec.clone(),
            command: self.command.clone(),
            key: self.key.clone(),
        };
        let mut show = |l: controller::LiveInterval<'_>| match live {
            Some(_) if self.out.json_stream => {
                let line = serde_json::json!({ "event": "interval", "client": l.client, "server": l.server });
                jsonln!("{line}");
            }
            Some(text) if !self.out.quiet() => outln!("{}", text(l.client, l.server)),
            _ => {}
        };
        controller::run_test(&req, self.interrupt, &mut show)
    }

    /// Stores the run (with its fleet pair, when a fleet runs it) and, with
    /// `--json-stream`, ends the stream with its document.
    fn keep(&self, doc: &mut Document) {
        if let Some(pair) = &self.out.store.fleet_pair {
            doc.start.fleet = Some(pair.clone());
        }
        save_run(&self.out.store, doc);
        if self.out.json_stream {
            jsonln!("{}", serde_json::json!({ "event": "end", "document": doc }));
        }
    }

    fn say(&self, line: impl FnOnce() -> String) {
        if !self.out.quiet() {
            outln!("{}", line());
        }
    }
}

/// The specs of a command, or the exit code of a usage error (the message names the flag).
fn specs_or_usage<T>(specs: Result<T, sonde_results::SpecError>) -> Result<T, ExitCode> {
    specs.map_err(|e| {
        errln!("error: {e}");
        ExitCode::from(EXIT_USAGE)
    })
}

pub fn stream(a: &StreamArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let spec = match specs_or_usage(a.spec()) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let TestSpec::Stream(s) = &spec else {
        unreachable!("a stream command makes a stream spec")
    };
    let _tuned = tuned(a.output.tune, a.output.json)?;
    let inv = Invocation::new(&a.target, &a.output, command, interrupt)?;
    inv.say(|| sonde_report::summary::stream_heading(s, &a.target.path()));
    let direction = s.direction;
    let line = |c: Option<&IntervalSample>, sv: Option<&IntervalSample>| {
        sonde_report::live::line(direction, c, sv)
    };
    let mut doc = inv.run(&spec, Some(&line))?;
    inv.keep(&mut doc);
    let human = (!a.output.quiet()).then(|| sonde_report::summary::stream(&doc));
    emit(&sonde_report::json(&doc), human, &a.output, doc.end.partial)
}

/// Runs ping or rpc once per receive mode asked for; with several, ends with a comparison.
pub fn request_response(
    common: &RrCommon,
    specs: Result<Vec<TestSpec>, sonde_results::SpecError>,
    command: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let specs = match specs_or_usage(specs) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let out = &common.output;
    let _tuned = tuned(out.tune, out.json)?;
    let inv = Invocation::new(&common.target, out, command, interrupt)?;
    let asked = specs.len();
    let mut docs: Vec<Document> = Vec::new();
    for spec in specs {
        if interrupt.is_set() || docs.last().is_some_and(|d| d.end.partial) {
            break;
        }
        let t = &common.target;
        inv.say(|| sonde_report::summary::rr_heading(&spec, &t.path()));
        let mut doc = inv.run(&spec, Some(&sonde_report::live::rr_line))?;
        inv.keep(&mut doc);
        if !out.quiet() {
            out!("{}", sonde_report::summary::rr(&doc));
        }
        docs.push(doc);
    }
    // One document per test; several receive modes make an array of them.
    let text = if docs.len() == 1 {
        sonde_report::json(&docs[0])
    } else {
        format!("{}\n", serde_json::to_string_pretty(&docs)?)
    };
    let swept = docs
        .iter()
        .any(|d| d.start.spec.execution().cpu_latency_us.is_some());
    let human = (!out.json && docs.len() > 1).then(|| {
        if swept {
            sonde_report::summary::cstate_comparison(&docs)
        } else {
            sonde_report::summary::poll_comparison(&docs)
        }
    });
    let partial = docs.iter().any(|d| d.end.partial) || docs.len() < asked;
    emit(&text, human, out, partial)
}

/// `ping --cstate-sweep`: each spec once per idle state of this host, with the CPU latency
/// limit at that state's exit latency, then the table by deepest allowed state.
pub fn cstate_sweep(
    common: &RrCommon,
    specs: Result<Vec<TestSpec>, sonde_results::SpecError>,
    command: String,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let states = sonde_probe::inventory::idle_states(Path::new("/"));
    let mut limits: Vec<u64> = states.iter().map(|s| s.exit_latency_us).collect();
    limits.sort_unstable();
    limits.dedup();
    if limits.is_empty() {
        if !common.output.quiet() {
            outln!("--cstate-sweep: this host exposes no CPU idle states (no cpuidle driver): one run, without a limit");
        }
        return request_response(common, specs, command, interrupt);
    }
    let swept = specs.map(|specs| {
        specs
            .iter()
            .flat_map(|spec| {
                limits.iter().map(|&us| {
                    let mut s = spec.clone();
                    s.execution_mut().cpu_latency_us = Some(us.min(i32::MAX as u64) as u32);
                    s
                })
            })
            .collect()
    });
    request_response(common, swept, command, interrupt)
}

/// A packet-rate test, or with `--search` the zero-loss rate search made of such tests.
pub fn pps(a: &PpsArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let spec = match specs_or_usage(a.spec()) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let out = &a.output;
    let _tuned = tuned(out.tune, out.json)?;
    let inv = Invocation::new(&a.target, out, command, interrupt)?;
    let target = a.target.path();
    inv.say(|| sonde_report::summary::pps_heading(&spec, &target, a.search.search));
    let mut doc = if a.search.search {
        let params = search::SearchParams {
            max_loss_percent: a.search.max_loss,
            resolution_percent: a.search.resolution,
            trials_per_step: a.search.trials_per_step,
        };
        let mut n = 0;
        let mut on_trial = |t: &sonde_results::document::Trial| {
            n += 1;
            inv.say(|| sonde_report::summary::trial_line(n, t));
        };
        let mut trial = |s: &TestSpec| {
            if interrupt.is_set() {
                return Err("interrupted".into());
            }
            Ok(inv.run(s, None)?)
        };
        let (found, mut doc) = search::search(&spec, &params, &mut trial, &mut on_trial)?;
        if let Some(p) = doc.end.pps_mut() {
            p.search = Some(found);
        }
        doc
    } else {
        inv.run(&TestSpec::Pps(spec), Some(&sonde_report::live::pps_line))?
    };
    inv.keep(&mut doc);
    let human = (!out.quiet()).then(|| sonde_report::summary::pps(&doc));
    emit(&sonde_report::json(&doc), human, out, doc.end.partial)
}

/// Phases of pings beside a load, each phase's tests at once; one document for them all.
pub fn load(a: &LoadArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let spec = match specs_or_usage(a.spec()) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let TestSpec::Load(l) = &spec else {
        unreachable!("a load command makes a load spec")
    };
    let out = &a.output;
    let _tuned = tuned(out.tune, out.json)?;
    let inv = Invocation::new(&a.target, out, command, interrupt)?;
    inv.say(|| sonde_report::summary::load_heading(l, &a.target.path()));
    let run = |s: &TestSpec| inv.run(s, None);
    let mut done = |r: &sonde_results::document::load::PhaseRun| {
        inv.say(|| sonde_report::live::load_phase_line(r));
    };
    let mut doc = sonde_run::load::run_load(l, &inv.command, &run, interrupt, &mut done)?;
    inv.keep(&mut doc);
    let human = (!out.quiet()).then(|| sonde_report::summary::load(&doc));
    emit(&sonde_report::json(&doc), human, out, doc.end.partial)
}

/// Runs the command with the host watched; exits with the command's code (a partial
/// watch, cut by Ctrl-C, with EXIT_PARTIAL when the command gave none).
pub fn watch(a: &WatchArgs, command: String, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let spec = match specs_or_usage(a.spec()) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let TestSpec::Watch(w) = &spec else {
        unreachable!("a watch command makes a watch spec")
    };
    let probe = match (&a.iface, a.peer) {
        (Some(i), _) => {
            if !Path::new("/sys/class/net").join(i).exists() {
                errln!("error: invalid --iface: no interface '{i}' on this host");
                return Ok(ExitCode::from(EXIT_USAGE));
            }
            sonde_probe::hostwatch::HostProbe::for_iface(Some(i.clone()))
        }
        (None, Some(p)) => sonde_probe::hostwatch::HostProbe::for_peer(p),
        (None, None) => sonde_probe::hostwatch::HostProbe::for_iface(None),
    };
    let out = &a.output;
    let mut w = w.clone();
    w.iface = probe.iface().map(String::from);
    if !out.quiet() {
        outln!(
            "sonde watch: {} (interface {}, every {:.1} s)",
            w.command.join(" "),
            w.iface.as_deref().unwrap_or("none"),
            w.timing.interval_ms as f64 / 1e3
        );
    }
    let mut live = |i: &sonde_results::document::IntervalFigures| {
        if out.json_stream {
            jsonln!(
                "{}",
                serde_json::json!({ "event": "interval", "interval": i })
            );
        } else if !out.quiet() {
            outln!("{}", sonde_report::live::watch_line(i));
        }
    };
    let (doc, status) = sonde_run::watch::watch(&w, &probe, &command, interrupt, &mut live)?;
    save_run(&out.store, &doc);
    if out.json_stream {
        jsonln!("{}", serde_json::json!({ "event": "end", "document": doc }));
    }
    let human = (!out.quiet()).then(|| sonde_report::summary::watch(&doc));
    let partial = doc.end.partial;
    emit(&sonde_report::json(&doc), human, out, false)?;
    Ok(match status.code() {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None if partial => ExitCode::from(EXIT_PARTIAL),
        None => ExitCode::from(128u8.saturating_add(
            std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0) as u8,
        )),
    })
}

/// Keeps a run in the store (unless --no-save). A store that cannot be written is reported
/// but does not fail the test: the document is still printed and written with --output.
fn save_run(args: &cli::StoreArgs, doc: &Document) {
    if args.no_save {
        return;
    }
    let path = cli::StoreArgs::db_path(args.db.as_deref());
    match sonde_store::Store::open(&path)
        .and_then(|s| s.save_for_suite(doc, args.label.as_deref(), args.suite_key.as_deref()))
    {
        Ok(id) => errln!("saved as run {id} in {}", path.display()),
        Err(e) => errln!("warning: run not saved: {e}"),
    }
}

/// Applies `--tune` for the length of a test; the guard restores on every exit path.
fn tuned(goal: Option<Goal>, quiet: bool) -> anyhow::Result<Option<Tuned>> {
    let Some(goal) = goal else { return Ok(None) };
    let (guard, changes) = Tuned::apply(goal)?;
    if !quiet {
        for c in &changes {
            outln!("--tune: changed {}", c.describe());
        }
    }
    Ok(Some(guard))
}

/// Writes the JSON to `--output`, prints JSON or the human text; the exit code says
/// whether the result is partial.
fn emit(
    json_text: &str,
    human: Option<String>,
    out: &OutputArgs,
    partial: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = &out.output {
        write_atomically(path, json_text.as_bytes())?;
    }
    if out.json {
        print!("{}", sonde_report::safe::json(json_text));
    } else if let Some(h) = human {
        out!("{h}");
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
