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
//! [[test]]
//! type = "stream"
//! connections = [1, 8, 64] # an array is a dimension of the matrix
//! duration = 5
//! ```

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};
use clap::Parser;

use crate::cli::{Cli, Command as CliCommand, StoreArgs, SuiteArgs};
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

/// The line of the first `key = ...` in the file, for error messages.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads and expands a suite file; every item is validated by the CLI parser.
pub fn load(path: &Path) -> anyhow::Result<Suite> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {file}"))?;
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map_or(0, |s| text[..s.start].lines().count().max(1));
        anyhow::anyhow!("{file}:{line}: {}", e.message())
    })?;
    let at = |key: &str, msg: String| {
        anyhow::anyhow!("{file}:{}: key '{key}': {msg}", line_of(&text, key))
    };
    let label = match doc.get("label") {
        Some(toml::Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => return Err(at("label", "must be a non-empty string".into())),
        None => {
            return Err(at(
                "label",
                "missing: name the configuration this suite measures".into(),
            ))
        }
    };
    let agents: Vec<String> = match doc.get("agents") {
        Some(toml::Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| at("agents", "must be a list of host names".into()))?,
        _ => {
            return Err(at(
                "agents",
                "missing or empty: the hosts running `sonde serve`".into(),
            ))
        }
    };
    let repetitions = match doc.get("repetitions") {
        None => 1,
        Some(toml::Value::Integer(n)) if (1..=1000).contains(n) => *n as usize,
        Some(_) => return Err(at("repetitions", "must be an integer in 1..=1000".into())),
    };
    let common: Vec<String> = ["port", "key_file", "db"]
        .iter()
        .filter_map(|k| doc.get(*k).and_then(scalar).map(|v| (k, v)))
        .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v])
        .collect();
    let tests = match doc.get("test") {
        Some(toml::Value::Array(t)) if !t.is_empty() => t,
        _ => return Err(at("test", "no [[test]] tables".into())),
    };
    let mut items = Vec::new();
    for (ti, t) in tests.iter().enumerate() {
        let Some(t) = t.as_table() else {
            bail!("{file}: [[test]] {} is not a table", ti + 1)
        };
        let tests = sonde_run::kind::test_names();
        let kind = t
            .get("type")
            .and_then(|v| v.as_str())
            .filter(|k| tests.contains(k))
            .ok_or_else(|| {
                at(
                    "type",
                    format!("test {} needs type = one of {}", ti + 1, tests.join(", ")),
                )
            })?;
        // Each key is a dimension: an array gives its values, a scalar one value.
        let mut combos: Vec<Vec<String>> = vec![Vec::new()];
        for (k, v) in t.iter().filter(|(k, _)| k.as_str() != "type") {
            let values: Vec<&toml::Value> = match v {
                toml::Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let flag = format!("--{}", k.replace('_', "-"));
            let mut next = Vec::new();
            for c in &combos {
                for val in &values {
                    let mut c = c.clone();
                    match val {
                        toml::Value::Boolean(true) => c.push(flag.clone()),
                        toml::Value::Boolean(false) => {}
                        other => {
                            let s = scalar(other).ok_or_else(|| {
                                at(k, "values must be strings, numbers or booleans".into())
                            })?;
                            c.extend([flag.clone(), s]);
                        }
                    }
                    next.push(c);
                }
            }
            combos = next;
        }
        for (ci, combo) in combos.iter().enumerate() {
            for agent in &agents {
                let mut argv = vec![kind.to_string(), agent.clone()];
                argv.extend(common.iter().cloned());
                argv.extend(combo.iter().cloned());
                let key_of = |msg: &str| {
                    t.keys()
                        .find(|k| msg.contains(&format!("--{}", k.replace('_', "-"))))
                        .cloned()
                        .unwrap_or_else(|| "type".into())
                };
                match Cli::try_parse_from(
                    std::iter::once("sonde".to_string()).chain(argv.iter().cloned()),
                ) {
                    Err(e) => {
                        let msg = e.render().to_string();
                        let first = msg
                            .lines()
                            .next()
                            .unwrap_or("invalid")
                            .trim_start_matches("error: ")
                            .to_string();
                        return Err(at(&key_of(&first), first));
                    }
                    // The values must also make a valid test, as the run would check.
                    Ok(cli) => {
                        if let Some(e) = spec_error(cli.command) {
                            return Err(at(&key_of(e.flag), e.to_string()));
                        }
                    }
                }
                for rep in 0..repetitions {
                    items.push(Item {
                        key: format!("{label}#{ti}:{ci}:{agent}:{rep}"),
                        argv: argv.clone(),
                    });
                }
            }
        }
    }
    Ok(Suite { label, items })
}

/// What `sonde TEST` would refuse about its flags' values.
fn spec_error(cmd: CliCommand) -> Option<sonde_results::SpecError> {
    cmd.test_specs()?.err()
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
        bar.set_message(item.argv[..2].join(" "));
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
    println!(
        "suite {}: {done} run(s) stored, {skipped} already stored, {} failed, {} not run, label '{}' in {}",
        args.file.display(),
        failed.len(),
        suite.items.len() - done - skipped - failed.len(),
        suite.label,
        db.display()
    );
    for f in &failed {
        println!("failed: {f}");
    }
    if interrupt.is_set() {
        println!(
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
