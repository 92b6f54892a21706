//! `sonde suite FILE.toml`: a matrix of tests × parameters × agents × repetitions for one
//! labelled configuration. Every item is built by the CLI's own parser and spec builders
//! before anything runs (errors name the file's line and key), then run in this process,
//! one after another, each stored as soon as it ends; a failing item is recorded and the
//! suite goes on; an interrupted suite keeps what it finished, and `--resume` skips the
//! items already stored.
//!
//! ```toml
//! label = "an-on"          # the configuration under test
//! agents = ["198.18.0.2"]
//! repetitions = 3
//! [[test]]                 # as in every matrix file (`matrix`)
//! type = "stream"
//! connections = [1, 8, 64] # an array is a dimension of the matrix
//! duration = 5
//! ```

use std::path::Path;

use crate::item::{Item, Outcome, Request};
use crate::keep::{run_item, Keeper};
use crate::matrix::{Build, BuildError, FileError, TomlFile};
use crate::signals::Interrupt;

pub struct Suite<T> {
    pub label: String,
    pub items: Vec<Item<T>>,
}

/// Reads and expands a suite file; every item is built by `build`.
pub fn load<T>(path: &Path, build: &Build<'_, T>) -> Result<Suite<T>, FileError> {
    let f = TomlFile::read(path)?;
    let label = f.name("label", "name the configuration this suite measures")?;
    let agents: Vec<String> = match f.doc.get("agents") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| f.err("agents", "must be a list of host names"))?,
        _ => {
            return Err(f.err(
                "agents",
                "missing or empty: the hosts running `sonde serve`",
            ))
        }
    };
    let repetitions = f.repetitions()?;
    let common = f.common_flags(&["port", "key_file", "db"]);
    let cases = f.tests(&agents[..1], &common, build)?;
    let mut items = Vec::new();
    for case in &cases {
        for agent in &agents {
            let mut words = vec![case.kind.clone(), agent.clone()];
            words.extend(common.iter().chain(&case.flags).cloned());
            for rep in 0..repetitions {
                let key = format!("{label}#{}:{agent}:{rep}", case.id);
                let blame = |e: BuildError| f.err("agents", format!("{agent}: {e}"));
                items.push(Item {
                    built: build(&words).map_err(blame)?,
                    words: words.clone(),
                    key,
                });
            }
        }
    }
    Ok(Suite { label, items })
}

/// How a suite went.
#[derive(Debug, Default)]
pub struct Tally {
    pub stored: usize,
    pub skipped: usize,
    /// Each failed item's words and why.
    pub failed: Vec<String>,
}

/// Runs every item in turn until Ctrl-C: `stored` says whether an item's key is already
/// in the store (`--resume`), `run` runs one, `done` sees each outcome.
pub fn run<T>(
    items: Vec<Item<T>>,
    stored: &dyn Fn(&str) -> bool,
    run: &dyn Fn(Item<T>) -> Outcome,
    done: &mut dyn FnMut(&Outcome),
    interrupt: &Interrupt,
) -> Tally {
    let mut tally = Tally::default();
    for item in items {
        if interrupt.is_set() {
            break;
        }
        let words = item.words.join(" ");
        let outcome = if stored(&item.key) {
            Outcome::AlreadyStored
        } else {
            run(item)
        };
        match &outcome {
            Outcome::Stored => tally.stored += 1,
            Outcome::AlreadyStored => tally.skipped += 1,
            Outcome::Failed(why) => tally.failed.push(format!("{words}: {why}")),
        }
        done(&outcome);
    }
    tally
}

/// What `sonde suite` asks: the file, `--resume`, `--db`.
pub struct SuiteParams<'a> {
    pub file: &'a Path,
    pub resume: bool,
    pub db: Option<&'a Path>,
}

/// What hears of a suite's progress (the binary's progress bar).
pub trait Progress {
    /// The suite holds `items` runs.
    fn begin(&self, items: usize);
    /// An item starts.
    fn item(&self, name: &str);
    /// An item ended.
    fn done(&self);
    /// Every item ran, or the suite was interrupted.
    fn end(&self);
}

/// How a suite or fleet command ended: its exit code is the binary's to choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every run stored (or already stored).
    Done,
    /// A run failed; the rest ran.
    Failed,
    /// Ctrl-C or SIGTERM: `--resume` continues.
    Interrupted,
}

/// Why a suite or fleet could not start: its file, its key, its store, its `/metrics`.
#[derive(Debug, thiserror::Error)]
pub enum OrchestrateError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Store(#[from] sonde_store::StoreError),
    #[error(transparent)]
    Key(#[from] crate::key::KeyError),
    #[error(transparent)]
    Metrics(#[from] crate::metrics_http::MetricsError),
}

/// `sonde suite FILE`: its items built by `build`, run in this process one after another,
/// each kept in the store under the suite's label; the summary lines go to `say`.
pub fn run_file(
    p: &SuiteParams<'_>,
    build: &Build<'_, Request>,
    progress: &dyn Progress,
    say: &dyn Fn(&str),
    interrupt: &Interrupt,
) -> Result<Ending, OrchestrateError> {
    let suite = load(p.file, build)?;
    let db = sonde_store::default_path(p.db);
    let store = sonde_store::Store::open(&db)?;
    progress.begin(suite.items.len());
    let stored = |key: &str| p.resume && store.has_suite_item(key).unwrap_or(false);
    let run = |item: Item<Request>| {
        progress.item(&item.name());
        let keeper = Keeper {
            db: &db,
            label: &suite.label,
            key: &item.key,
            ndjson: false,
            interrupt,
            record: None,
        };
        run_item(item.built, &keeper, &item.words, interrupt)
    };
    let total = suite.items.len();
    let done = &mut |_: &Outcome| progress.done();
    let t = self::run(suite.items, &stored, &run, done, interrupt);
    progress.end();
    let not_run = total - t.stored - t.skipped - t.failed.len();
    say(&format!(
        "suite {}: {} run(s) stored, {} already stored, {} failed, {not_run} not run, label '{}' in {}",
        p.file.display(),
        t.stored,
        t.skipped,
        t.failed.len(),
        suite.label,
        db.display()
    ));
    for f in &t.failed {
        say(&format!("failed: {f}"));
    }
    if interrupt.is_set() {
        let file = p.file.display();
        say(&format!(
            "interrupted: `sonde suite {file} --resume` continues where it stopped"
        ));
        return Ok(Ending::Interrupted);
    }
    Ok(match t.failed.is_empty() {
        true => Ending::Done,
        false => Ending::Failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::tests::build;

    fn write(text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!(
            "sonde-suite-{}-{}.toml",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_matrix_expands_and_keys_are_stable() {
        let p = write("label = \"an-on\"\nagents = [\"198.18.0.2\"]\nrepetitions = 2\n[[test]]\ntype = \"stream\"\nconnections = [1, 8]\nduration = 5\nreverse = [false, true]\n[[test]]\ntype = \"ping\"\nudp = true\n");
        let s = load(&p, &build).unwrap();
        assert_eq!(s.label, "an-on");
        // stream: 2 × 2 combinations × 2 repetitions; ping: 1 × 2.
        assert_eq!(s.items.len(), 10);
        assert!(s
            .items
            .iter()
            .any(|i| i.built.contains(&"--reverse".to_string())
                && i.built.contains(&"8".to_string())));
        assert_eq!(s.items[0].key, "an-on#0:0:198.18.0.2:0");
        assert_eq!(load(&p, &build).unwrap().items, s.items);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let p = write(
            "label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"stream\"\nconnections = [1, 0]\n",
        );
        let e = format!("{:#}", load(&p, &build).err().unwrap());
        assert!(
            e.contains(":5: key 'connections'") && e.contains("1..=1024"),
            "{e}"
        );
        let _ = std::fs::remove_file(p);
        let p = write(
            "label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"stream\"\nduration = \"soon\"\n",
        );
        let e = format!("{:#}", load(&p, &build).err().unwrap());
        assert!(e.contains(":5: key 'duration'"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"warp\"\n");
        let e = format!("{:#}", load(&p, &build).err().unwrap());
        assert!(e.contains(":4: key 'type'"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("label = \"x\"\nagents = [\"h\"\n");
        let e = format!("{:#}", load(&p, &build).err().unwrap());
        assert!(e.contains(":2") || e.contains(":3"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("agents = [\"h\"]\n[[test]]\ntype = \"ping\"\n");
        assert!(format!("{:#}", load(&p, &build).err().unwrap()).contains("key 'label'"));
        let _ = std::fs::remove_file(p);
    }
}
