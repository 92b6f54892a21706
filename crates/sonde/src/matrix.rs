//! What `sonde suite` and `sonde fleet` files share: a TOML file whose errors name the
//! line and key, and `[[test]]` tables expanded into a matrix of test commands, each
//! checked by the CLI's own parser and spec validation before anything runs.
//!
//! ```toml
//! [[test]]
//! type = "stream"
//! connections = [1, 8, 64] # an array is a dimension of the matrix
//! duration = 5
//! ```

use std::path::Path;

use anyhow::{bail, Context};
use clap::Parser;

use crate::cli::{Cli, Command as CliCommand};

/// A parsed TOML file that remembers its text, for errors with line numbers.
pub struct TomlFile {
    pub file: String,
    text: String,
    pub doc: toml::Table,
}

/// One combination of one `[[test]]` table: the test command's flags, without the target.
#[derive(Debug, Clone, PartialEq)]
pub struct TestCase {
    /// `[[test]]` index, then combination index: stable across runs of the same file.
    pub id: String,
    /// The test command (`stream`, `ping`, ...).
    pub kind: String,
    pub flags: Vec<String>,
}

impl TomlFile {
    pub fn read(path: &Path) -> anyhow::Result<TomlFile> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {file}"))?;
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map_or(0, |s| text[..s.start].lines().count().max(1));
            anyhow::anyhow!("{file}:{line}: {}", e.message())
        })?;
        Ok(TomlFile { file, text, doc })
    }

    /// An error at the first line that sets `key`.
    pub fn err(&self, key: &str, msg: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("{}:{}: key '{key}': {msg}", self.file, self.line_of(key))
    }

    /// The line of the first `key = ...` in the file, for error messages.
    fn line_of(&self, key: &str) -> usize {
        self.text
            .lines()
            .position(|l| {
                l.trim_start()
                    .strip_prefix(key)
                    .is_some_and(|r| r.trim_start().starts_with('='))
            })
            .map_or(0, |i| i + 1)
    }

    /// `repetitions`, 1 when absent.
    pub fn repetitions(&self) -> anyhow::Result<usize> {
        match self.doc.get("repetitions") {
            None => Ok(1),
            Some(toml::Value::Integer(n)) if (1..=1000).contains(n) => Ok(*n as usize),
            Some(_) => Err(self.err("repetitions", "must be an integer in 1..=1000")),
        }
    }

    /// A required non-empty string.
    pub fn name(&self, key: &str, what: &str) -> anyhow::Result<String> {
        match self.doc.get(key) {
            Some(toml::Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(_) => Err(self.err(key, "must be a non-empty string")),
            None => Err(self.err(key, format!("missing: {what}"))),
        }
    }

    /// Flags every test command of the file gets (`port`, `key_file`, ...), when set.
    pub fn common_flags(&self, keys: &[&str]) -> Vec<String> {
        keys.iter()
            .filter_map(|k| self.doc.get(*k).and_then(scalar).map(|v| (k, v)))
            .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v])
            .collect()
    }

    /// Expands every `[[test]]` table; each combination must parse and validate as
    /// `sonde TYPE <target> <common> <flags>` would.
    pub fn tests(&self, target: &[String], common: &[String]) -> anyhow::Result<Vec<TestCase>> {
        let tests = match self.doc.get("test") {
            Some(toml::Value::Array(t)) if !t.is_empty() => t,
            _ => return Err(self.err("test", "no [[test]] tables")),
        };
        let names = test_names();
        let mut cases = Vec::new();
        for (ti, t) in tests.iter().enumerate() {
            let Some(t) = t.as_table() else {
                bail!("{}: [[test]] {} is not a table", self.file, ti + 1)
            };
            let kind = t
                .get("type")
                .and_then(|v| v.as_str())
                .filter(|k| names.iter().any(|n| n == k))
                .ok_or_else(|| {
                    let msg = format!("test {} needs type = one of {}", ti + 1, names.join(", "));
                    self.err("type", msg)
                })?;
            for (ci, flags) in self.combinations(t)?.into_iter().enumerate() {
                let mut argv = vec![kind.to_string()];
                argv.extend(target.iter().chain(common).chain(&flags).cloned());
                self.check(t, &argv)?;
                cases.push(TestCase {
                    id: format!("{ti}:{ci}"),
                    kind: kind.to_string(),
                    flags,
                });
            }
        }
        Ok(cases)
    }

    /// Each key is a dimension: an array gives its values, a scalar one value.
    fn combinations(&self, t: &toml::Table) -> anyhow::Result<Vec<Vec<String>>> {
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
                                self.err(k, "values must be strings, numbers or booleans")
                            })?;
                            c.extend([flag.clone(), s]);
                        }
                    }
                    next.push(c);
                }
            }
            combos = next;
        }
        Ok(combos)
    }

    /// The CLI's verdict on `sonde ARGV`, blamed on the table's key that names the flag.
    fn check(&self, t: &toml::Table, argv: &[String]) -> anyhow::Result<()> {
        let key_of = |msg: &str| {
            t.keys()
                .find(|k| msg.contains(&format!("--{}", k.replace('_', "-"))))
                .cloned()
                .unwrap_or_else(|| "type".into())
        };
        match Cli::try_parse_from(std::iter::once("sonde".to_string()).chain(argv.iter().cloned()))
        {
            Err(e) => {
                let msg = e.render().to_string();
                let first = msg
                    .lines()
                    .next()
                    .unwrap_or("invalid")
                    .trim_start_matches("error: ")
                    .to_string();
                Err(self.err(&key_of(&first), first))
            }
            // The values must also make a valid test, as the run would check.
            Ok(cli) => match spec_error(cli.command) {
                Some(e) => Err(self.err(&key_of(e.flag), e)),
                None => Ok(()),
            },
        }
    }
}

/// The test types a `[[test]]` table may name: every kind's, and `load`.
fn test_names() -> Vec<String> {
    sonde_run::kind::test_names()
        .iter()
        .map(|n| n.to_string())
        .chain(["load".to_string()])
        .collect()
}

pub fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// What `sonde TEST` would refuse about its flags' values.
fn spec_error(cmd: CliCommand) -> Option<sonde_results::SpecError> {
    cmd.plan()?.err()
}
