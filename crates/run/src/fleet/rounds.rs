//! A fleet's run: pairs in rounds that share no host (`schedule`), a round's pairs at
//! once, a thread per pair; each test a third-party run (`--from A --to B`) in this
//! process, stored by the caller, tagged with the pair and both ends' labels, as soon as
//! it ends. An agent that cannot be reached fails its own pairs and the rest go on.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sonde_results::document::FleetPair;

use super::file::{Agent, Fleet};
use super::schedule;
use crate::item::{Item, Outcome};
use crate::signals::Interrupt;

/// One test of one pair: its words (`stream --from A --to B ...`) and its pair.
pub type PairItem = Item<FleetPair>;

/// What the caller does for a fleet: whether a run is stored already (`--resume`), one
/// run, and where progress lines go.
pub struct Hooks<'a> {
    pub stored: &'a (dyn Fn(&str) -> bool + Sync),
    pub run: &'a (dyn Fn(&PairItem) -> Outcome + Sync),
    pub say: &'a (dyn Fn(&str) + Sync),
}

/// How a fleet went.
#[derive(Debug, Default)]
pub struct Tally {
    pub stored: usize,
    pub skipped: usize,
    pub failed: usize,
    pub not_run: usize,
    /// Each agent's time in tests (by its name in the file): what `--max-load` budgets.
    pub busy: BTreeMap<String, Duration>,
}

/// What the rounds share: the agents found unreachable, the outcomes, each agent's time
/// in tests.
struct Progress {
    dead: Mutex<HashSet<String>>,
    outcomes: Mutex<Vec<Outcome>>,
    busy: Mutex<BTreeMap<String, Duration>>,
}

/// Runs every pair's tests, `overlap` tests per host at most at once, round after round
/// until Ctrl-C.
pub fn run(fleet: &Fleet, overlap: usize, hooks: &Hooks<'_>, interrupt: &Interrupt) -> Tally {
    run_pass(fleet, overlap, hooks, interrupt, None)
}

/// One pass over every pair (`pass`: its number under `--every`, recorded in each pair).
pub(super) fn run_pass(
    fleet: &Fleet,
    overlap: usize,
    hooks: &Hooks<'_>,
    interrupt: &Interrupt,
    pass: Option<u32>,
) -> Tally {
    let mut pairs = match fleet.cases.is_empty() {
        true => Vec::new(),
        false => schedule::pairs(&fleet.topology, fleet.agents.len()),
    };
    let between = pairs.len();
    // A STAMP target is a host like an agent: its pairs share rounds by the same rule.
    pairs.extend(fleet.stamp_pairs());
    let rounds = schedule::rounds(&pairs, overlap);
    let per_pair = fleet.cases.len() * fleet.repetitions;
    let runs: usize = pairs
        .iter()
        .map(|&(_, b)| fleet.cases_toward(b).len() * fleet.repetitions)
        .sum();
    let at_once = match overlap > 1 {
        true => format!(", up to {overlap} tests per host at once"),
        false => String::new(),
    };
    let toward = pairs.len() - between;
    let parts: Vec<String> = [
        (between > 0).then(|| format!("{between} pairs x {per_pair} run(s)")),
        (toward > 0).then(|| {
            format!(
                "{toward} pairs toward {} STAMP target(s) x {} run(s)",
                fleet.stamp_targets.len(),
                fleet.stamp_cases.len() * fleet.repetitions
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    (hooks.say)(&format!(
        "fleet {}: {} agents, {} in {} round(s){at_once}",
        fleet.name,
        fleet.agents.len(),
        parts.join(" and "),
        rounds.len(),
    ));
    let progress = Progress {
        dead: Mutex::new(HashSet::new()),
        outcomes: Mutex::new(Vec::new()),
        busy: Mutex::new(BTreeMap::new()),
    };
    let started = Instant::now();
    let n_rounds = rounds.len();
    for (r, round) in rounds.iter().enumerate() {
        if interrupt.is_set() {
            break;
        }
        std::thread::scope(|s| {
            for &(a, b) in round {
                let progress = &progress;
                s.spawn(move || {
                    let (from, to) = (fleet.end(a), fleet.end(b));
                    let cases = fleet.cases_toward(b);
                    for item in items(fleet, (r + 1, pass), (from, to), cases) {
                        if interrupt.is_set() {
                            return;
                        }
                        let began = Instant::now();
                        let outcome = match (hooks.stored)(&item.key) {
                            true => Outcome::AlreadyStored,
                            false => run_item(&item, [from, to], hooks, progress),
                        };
                        let mut busy = progress.busy.lock().unwrap();
                        for end in [from, to] {
                            *busy.entry(end.name.clone()).or_default() += began.elapsed();
                        }
                        drop(busy);
                        let kind = &item.words[0];
                        let round = format!("[round {}/{n_rounds}]", r + 1);
                        let line = format!("{round} {} -> {} {kind}", from.name, to.name);
                        (hooks.say)(&format!("{line}: {}", outcome.describe()));
                        progress.outcomes.lock().unwrap().push(outcome);
                    }
                });
            }
        });
        let per_round = started.elapsed() / (r as u32 + 1);
        let left = (rounds.len() - r - 1) as u32;
        (hooks.say)(&format!(
            "round {}/{} done; {} elapsed, ETA {}",
            r + 1,
            rounds.len(),
            secs(started.elapsed()),
            secs(per_round * left)
        ));
    }
    let outcomes = progress.outcomes.into_inner().unwrap();
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
    Tally {
        stored: count(|o| matches!(o, Outcome::Stored)),
        skipped: count(|o| matches!(o, Outcome::AlreadyStored)),
        failed: count(|o| matches!(o, Outcome::Failed(_))),
        not_run: runs - outcomes.len(),
        busy: progress.busy.into_inner().unwrap(),
    }
}

/// The runs of pair (from, to) in round `round` (of pass `pass`): each of `cases`, each
/// repetition. A STAMP case runs from `from` toward the reflector `to`.
fn items(
    fleet: &Fleet,
    (round, pass): (usize, Option<u32>),
    (from, to): (&Agent, &Agent),
    cases: &[crate::matrix::TestCase],
) -> Vec<PairItem> {
    let mut items = Vec::new();
    for case in cases {
        let pair = FleetPair {
            fleet: fleet.name.clone(),
            source: from.name.clone(),
            destination: to.name.clone(),
            source_labels: from.labels.clone(),
            destination_labels: to.labels.clone(),
            round: round as u32,
            test: case_name(case),
            pass,
        };
        for rep in 0..fleet.repetitions {
            let key = format!("{}#{}>{}:{}:{rep}", fleet.name, from.name, to.name, case.id);
            let (a, b) = (from.address.clone(), to.address.clone());
            let ends = match case.kind.as_str() {
                "stamp" => vec![b, "--from".into(), a],
                _ => vec!["--from".into(), a, "--to".into(), b],
            };
            let mut words = vec![case.kind.clone()];
            words.extend(ends);
            words.extend(fleet.common.iter().chain(&case.flags).cloned());
            items.push(Item {
                key,
                words,
                built: pair.clone(),
            });
        }
    }
    items
}

/// A test case as its words say it (`stream -P 8 -t 10`): the `test` label of its metrics.
fn case_name(case: &crate::matrix::TestCase) -> String {
    std::iter::once(&case.kind)
        .chain(&case.flags)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs one item, unless one of its agents is known gone; an agent it could not reach
/// is gone for the items after it.
fn run_item(item: &PairItem, ends: [&Agent; 2], hooks: &Hooks<'_>, progress: &Progress) -> Outcome {
    let gone: Vec<&str> = {
        let dead = progress.dead.lock().unwrap();
        ends.iter()
            .filter(|a| dead.contains(&a.address))
            .map(|a| a.name.as_str())
            .collect()
    };
    if !gone.is_empty() {
        return Outcome::Failed(format!("not run: agent {} unreachable", gone.join(", ")));
    }
    let outcome = (hooks.run)(item);
    if let Outcome::Failed(why) = &outcome {
        for agent in ends {
            if why.contains(&format!(
                "cannot connect to the agent at {}:",
                agent.address
            )) {
                progress.dead.lock().unwrap().insert(agent.address.clone());
            }
        }
    }
    outcome
}

fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
}
