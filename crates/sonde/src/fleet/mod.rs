//! `sonde fleet FILE.toml`: every pair of a topology over many agents, measured the same
//! way. Pairs run in rounds that share no host (`schedule`), a round's pairs at once;
//! each test is a third-party run (`sonde TYPE --from A --to B`) in its own process that
//! stores its document, tagged with the pair and both ends' labels, as soon as it ends.
//! `--resume` skips what is stored; an agent that cannot be reached fails its own pairs
//! and the rest go on.

mod file;
pub mod schedule;

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_results::document::FleetPair;
use sonde_run::signals::Interrupt;

use crate::cli::{FleetArgs, StoreArgs};
use file::{Agent, Fleet};

/// One test of one pair.
struct Item<'a> {
    key: String,
    round: usize,
    from: &'a Agent,
    to: &'a Agent,
    argv: Vec<String>,
}

#[derive(Debug)]
enum Outcome {
    Stored,
    AlreadyStored,
    Failed(String),
}

/// What the rounds share: the agents found unreachable, the outcomes, stdout.
struct Progress {
    dead: Mutex<HashSet<String>>,
    outcomes: Mutex<Vec<(String, Outcome)>>,
}

pub fn run(args: &FleetArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let fleet = file::load(&args.file, &file::system_resolve)?;
    let db = StoreArgs::db_path(args.db.as_deref());
    let store = Mutex::new(sonde_store::Store::open(&db)?);
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let pairs = schedule::pairs(&fleet.topology, fleet.agents.len());
    let rounds = schedule::rounds(&pairs, args.overlap.into());
    let per_pair = fleet.cases.len() * fleet.repetitions;
    errln!(
        "fleet {}: {} agents, {} pairs x {per_pair} run(s) in {} round(s){}",
        fleet.name,
        fleet.agents.len(),
        pairs.len(),
        rounds.len(),
        if args.overlap > 1 {
            format!(", up to {} tests per host at once", args.overlap)
        } else {
            String::new()
        }
    );
    let progress = Progress {
        dead: Mutex::new(HashSet::new()),
        outcomes: Mutex::new(Vec::new()),
    };
    let started = Instant::now();
    let n_rounds = rounds.len();
    for (r, round) in rounds.iter().enumerate() {
        if interrupt.is_set() {
            break;
        }
        std::thread::scope(|s| {
            for &(a, b) in round {
                let items = items(&fleet, r + 1, a, b);
                let (store, exe, db, progress) = (&store, &exe, &db, &progress);
                s.spawn(move || {
                    for item in &items {
                        if interrupt.is_set() {
                            return;
                        }
                        let stored = || store.lock().unwrap().has_suite_item(&item.key);
                        let outcome = if args.resume && stored().unwrap_or(false) {
                            Outcome::AlreadyStored
                        } else {
                            run_item(item, exe, db, args.ndjson, progress)
                        };
                        errln!(
                            "[round {}/{}] {} -> {} {}: {}",
                            item.round,
                            n_rounds,
                            item.from.name,
                            item.to.name,
                            item.argv[0],
                            describe(&outcome)
                        );
                        progress
                            .outcomes
                            .lock()
                            .unwrap()
                            .push((item.key.clone(), outcome));
                    }
                });
            }
        });
        let per_round = started.elapsed() / (r as u32 + 1);
        let left = rounds.len() - r - 1;
        errln!(
            "round {}/{} done; {} elapsed, ETA {}",
            r + 1,
            rounds.len(),
            secs(started.elapsed()),
            secs(per_round * left as u32)
        );
    }
    report(
        &fleet,
        &progress,
        pairs.len() * per_pair,
        &db,
        args,
        interrupt,
    )
}

/// The runs of pair (a, b) in round `round`: each test case, each repetition.
fn items(fleet: &Fleet, round: usize, a: usize, b: usize) -> Vec<Item<'_>> {
    let (from, to) = (&fleet.agents[a], &fleet.agents[b]);
    let pair = FleetPair {
        fleet: fleet.name.clone(),
        source: from.name.clone(),
        destination: to.name.clone(),
        source_labels: from.labels.clone(),
        destination_labels: to.labels.clone(),
        round: round as u32,
    };
    let pair = serde_json::to_string(&pair).expect("a fleet pair serialises");
    let mut items = Vec::new();
    for case in &fleet.cases {
        for rep in 0..fleet.repetitions {
            let key = format!("{}#{}>{}:{}:{rep}", fleet.name, from.name, to.name, case.id);
            let mut argv = vec![case.kind.clone(), "--from".into(), from.address.clone()];
            argv.extend(["--to".into(), to.address.clone()]);
            argv.extend(fleet.common.iter().chain(&case.flags).cloned());
            argv.extend([
                "--label".into(),
                fleet.name.clone(),
                "--suite-key".into(),
                key.clone(),
            ]);
            argv.extend(["--fleet-pair".into(), pair.clone()]);
            items.push(Item {
                key,
                round,
                from,
                to,
                argv,
            });
        }
    }
    items
}

/// Runs one item as its own `sonde` process, unless one of its agents is known gone.
fn run_item(
    item: &Item<'_>,
    exe: &std::path::Path,
    db: &std::path::Path,
    ndjson: bool,
    progress: &Progress,
) -> Outcome {
    let gone: Vec<&str> = {
        let dead = progress.dead.lock().unwrap();
        [item.from, item.to]
            .into_iter()
            .filter(|a| dead.contains(&a.address))
            .map(|a| a.name.as_str())
            .collect()
    };
    if !gone.is_empty() {
        return Outcome::Failed(format!("not run: agent {} unreachable", gone.join(", ")));
    }
    let out = match Command::new(exe)
        .args(&item.argv)
        .arg("--db")
        .arg(db)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("cannot run sonde: {e}")),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    for agent in [item.from, item.to] {
        if stderr.contains(&format!(
            "cannot connect to the agent at {}:",
            agent.address
        )) {
            progress.dead.lock().unwrap().insert(agent.address.clone());
        }
    }
    if ndjson {
        if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{}", sonde_report::safe::json(&doc.to_string()));
        }
    }
    match out.status.code() {
        Some(0) => Outcome::Stored,
        code => {
            let why: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.starts_with("saved as run"))
                .collect();
            let saved = stderr.contains("saved as run");
            Outcome::Failed(format!(
                "exit {}{}: {}",
                code.map_or("by signal".into(), |c| c.to_string()),
                if saved { ", partial run stored" } else { "" },
                why.join(" ")
            ))
        }
    }
}

fn describe(o: &Outcome) -> String {
    match o {
        Outcome::Stored => "stored".into(),
        Outcome::AlreadyStored => "already stored".into(),
        Outcome::Failed(why) => format!("failed: {why}"),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}

/// The closing lines and the exit code: 0 all stored, 1 some failed, 3 interrupted.
fn report(
    fleet: &Fleet,
    progress: &Progress,
    total: usize,
    db: &std::path::Path,
    args: &FleetArgs,
    interrupt: &Interrupt,
) -> anyhow::Result<ExitCode> {
    let outcomes = progress.outcomes.lock().unwrap();
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|(_, o)| f(o)).count();
    let stored = count(|o| matches!(o, Outcome::Stored));
    let skipped = count(|o| matches!(o, Outcome::AlreadyStored));
    let failed = count(|o| matches!(o, Outcome::Failed(_)));
    errln!(
        "fleet {}: {stored} run(s) stored, {skipped} already stored, {failed} failed, {} not run, label '{}' in {}",
        fleet.name,
        total - outcomes.len(),
        fleet.name,
        db.display()
    );
    if interrupt.is_set() {
        errln!(
            "interrupted: `sonde fleet {} --resume` continues where it stopped",
            args.file.display()
        );
        return Ok(ExitCode::from(crate::EXIT_PARTIAL));
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
