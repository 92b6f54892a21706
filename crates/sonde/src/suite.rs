//! `sonde suite FILE.toml`: a matrix of tests × parameters × agents × repetitions for one
//! labelled configuration. Every item is checked against the CLI before anything runs
//! (errors name the file's line and key), then run as its own `sonde` process that stores
//! its result as soon as it ends; an interrupted suite keeps what it finished, and
//! `--resume` skips the items already stored.
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
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;

use crate::cli::{StoreArgs, SuiteArgs};
use crate::matrix::TomlFile;
use sonde_run::signals::Interrupt;

/// One run of the suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Stable across runs of the same file: what --resume matches.
    pub key: String,
    /// Arguments after `sonde`.
    pub argv: Vec<String>,
}

pub struct Suite {
    pub label: String,
    pub items: Vec<Item>,
}

/// Reads and expands a suite file; every item is validated by the CLI parser.
pub fn load(path: &Path) -> anyhow::Result<Suite> {
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
    let cases = f.tests(&agents[..1], &common)?;
    let mut items = Vec::new();
    for case in &cases {
        for agent in &agents {
            let mut argv = vec![case.kind.clone(), agent.clone()];
            argv.extend(common.iter().chain(&case.flags).cloned());
            for rep in 0..repetitions {
                items.push(Item {
                    key: format!("{label}#{}:{agent}:{rep}", case.id),
                    argv: argv.clone(),
                });
            }
        }
    }
    Ok(Suite { label, items })
}

pub fn run(args: &SuiteArgs, interrupt: &Interrupt) -> anyhow::Result<ExitCode> {
    let suite = load(&args.file)?;
    let db = StoreArgs::db_path(args.db.as_deref());
    let store = sonde_store::Store::open(&db)?;
    let exe = std::env::current_exe().context("cannot find the sonde executable")?;
    let bar = indicatif::ProgressBar::new(suite.items.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, ETA {eta} {msg}")
            .expect("a valid template"),
    );
    let (mut done, mut skipped, mut failed) = (0, 0, Vec::new());
    for item in &suite.items {
        if interrupt.is_set() {
            break;
        }
        if args.resume && store.has_suite_item(&item.key)? {
            skipped += 1;
            bar.inc(1);
            continue;
        }
        bar.set_message(sonde_report::safe::line(&item.argv[..2].join(" ")).into_owned());
        let out = Command::new(&exe)
            .args(&item.argv)
            .args(["--label", &suite.label, "--suite-key", &item.key, "--db"])
            .arg(&db)
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .context("cannot run a suite item")?;
        match out.status.code() {
            Some(0) => done += 1,
            code => {
                let why = String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| !l.starts_with("saved as run"))
                    .collect::<Vec<_>>()
                    .join(" ");
                failed.push(format!("{} (exit {code:?}): {why}", item.argv.join(" ")));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    outln!(
        "suite {}: {done} run(s) stored, {skipped} already stored, {} failed, {} not run, label '{}' in {}",
        args.file.display(),
        failed.len(),
        suite.items.len() - done - skipped - failed.len(),
        suite.label,
        db.display()
    );
    for f in &failed {
        outln!("failed: {f}");
    }
    if interrupt.is_set() {
        outln!(
            "interrupted: `sonde suite {} --resume` continues where it stopped",
            args.file.display()
        );
        return Ok(ExitCode::from(3));
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = load(&p).unwrap();
        assert_eq!(s.label, "an-on");
        // stream: 2 × 2 combinations × 2 repetitions; ping: 1 × 2.
        assert_eq!(s.items.len(), 10);
        assert!(s.items.iter().any(
            |i| i.argv.contains(&"--reverse".to_string()) && i.argv.contains(&"8".to_string())
        ));
        assert_eq!(s.items[0].key, "an-on#0:0:198.18.0.2:0");
        assert_eq!(load(&p).unwrap().items, s.items);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let p = write(
            "label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"stream\"\nconnections = [1, 0]\n",
        );
        let e = format!("{:#}", load(&p).err().unwrap());
        assert!(
            e.contains(":5: key 'connections'") && e.contains("1..=1024"),
            "{e}"
        );
        let _ = std::fs::remove_file(p);
        let p = write(
            "label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"stream\"\nduration = \"soon\"\n",
        );
        let e = format!("{:#}", load(&p).err().unwrap());
        assert!(e.contains(":5: key 'duration'"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("label = \"x\"\nagents = [\"h\"]\n[[test]]\ntype = \"warp\"\n");
        let e = format!("{:#}", load(&p).err().unwrap());
        assert!(e.contains(":4: key 'type'"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("label = \"x\"\nagents = [\"h\"\n");
        let e = format!("{:#}", load(&p).err().unwrap());
        assert!(e.contains(":2") || e.contains(":3"), "{e}");
        let _ = std::fs::remove_file(p);
        let p = write("agents = [\"h\"]\n[[test]]\ntype = \"ping\"\n");
        assert!(format!("{:#}", load(&p).err().unwrap()).contains("key 'label'"));
        let _ = std::fs::remove_file(p);
    }
}
