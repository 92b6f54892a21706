//! What `sonde suite` and `sonde fleet` files share: a TOML file whose errors name the
//! line and key, and `[[test]]` tables expanded into a matrix of test commands, each
//! built by the caller (the CLI's own parser and spec builders) before anything runs.
//!
//! ```toml
//! [[test]]
//! type = "stream"
//! connections = [1, 8, 64] # an array is a dimension of the matrix
//! duration = 5
//! ```

use std::path::Path;

/// A file that cannot be read or makes no valid test: `FILE:LINE: key 'KEY': why`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

/// Builds one test command's words (`stream HOST --flag value ...`) into what runs, or
/// says why not, naming the flag (`--connections`) to blame.
pub type Build<'a, T> = dyn Fn(&[String]) -> Result<T, BuildError> + 'a;

/// Why a test command's words build no test: a spec's check, whose flag is the error's,
/// or what the command line itself refused (clap's words, which name the flag), an
/// unknown command, an agent or key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Spec(#[from] sonde_results::SpecError),
    #[error("{0}")]
    Words(String),
}

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
    pub fn read(path: &Path) -> Result<TomlFile, FileError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| FileError(format!("cannot read {file}: {e}")))?;
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map_or(0, |s| text[..s.start].lines().count().max(1));
            FileError(format!("{file}:{line}: {}", e.message()))
        })?;
        Ok(TomlFile { file, text, doc })
    }

    /// An error at the first line that sets `key`.
    pub fn err(&self, key: &str, msg: impl std::fmt::Display) -> FileError {
        FileError(format!(
            "{}:{}: key '{key}': {msg}",
            self.file,
            self.line_of(key)
        ))
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
    pub fn repetitions(&self) -> Result<usize, FileError> {
        match self.doc.get("repetitions") {
            None => Ok(1),
            Some(toml::Value::Integer(n)) if (1..=1000).contains(n) => Ok(*n as usize),
            Some(_) => Err(self.err("repetitions", "must be an integer in 1..=1000")),
        }
    }

    /// A required non-empty string.
    pub fn name(&self, key: &str, what: &str) -> Result<String, FileError> {
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

    /// Expands every `[[test]]` table; each combination must build (`build`) as
    /// `sonde TYPE <target> <common> <flags>` would.
    pub fn tests<T>(
        &self,
        target: &[String],
        common: &[String],
        build: &Build<'_, T>,
    ) -> Result<Vec<TestCase>, FileError> {
        self.tests_toward(&|_| target.to_vec(), common, build)
    }

    /// As [`TomlFile::tests`], each type built toward its own target (`target(TYPE)`: a
    /// fleet's STAMP tests toward a reflector, its other tests between two agents).
    pub fn tests_toward<T>(
        &self,
        target: &dyn Fn(&str) -> Vec<String>,
        common: &[String],
        build: &Build<'_, T>,
    ) -> Result<Vec<TestCase>, FileError> {
        let tests = match self.doc.get("test") {
            Some(toml::Value::Array(t)) if !t.is_empty() => t,
            _ => return Err(self.err("test", "no [[test]] tables")),
        };
        let names = test_names();
        let mut cases = Vec::new();
        for (ti, t) in tests.iter().enumerate() {
            let Some(t) = t.as_table() else {
                let why = format!("{}: [[test]] {} is not a table", self.file, ti + 1);
                return Err(FileError(why));
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
                argv.extend(target(kind).iter().chain(common).chain(&flags).cloned());
                if let Err(e) = build(&argv) {
                    return Err(self.blame(t, &e.to_string()));
                }
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
    fn combinations(&self, t: &toml::Table) -> Result<Vec<Vec<String>>, FileError> {
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

    /// A build's refusal, blamed on the table's key that names the flag (else `type`).
    fn blame(&self, t: &toml::Table, msg: &str) -> FileError {
        let key = t
            .keys()
            .find(|k| msg.contains(&format!("--{}", k.replace('_', "-"))))
            .map_or("type", |k| k.as_str());
        self.err(key, msg)
    }
}

/// The test types a `[[test]]` table may name: every kind's, `load` and `stamp`.
fn test_names() -> Vec<String> {
    crate::kind::test_names()
        .iter()
        .map(|n| n.to_string())
        .chain(["load".to_string(), "stamp".to_string()])
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

#[cfg(test)]
pub(crate) mod tests {
    /// The CLI's verdict, faked for the file tests: the words themselves, unless a
    /// connection count is 0 or a duration is not a number.
    pub(crate) fn build(argv: &[String]) -> Result<Vec<String>, super::BuildError> {
        use super::BuildError;
        for w in argv.windows(2) {
            match (w[0].as_str(), w[1].as_str()) {
                ("--connections", "0") => {
                    return Err(BuildError::Spec(sonde_results::SpecError {
                        flag: "--connections",
                        reason: "0 is not in 1..=1024".into(),
                    }))
                }
                ("--window", "0") => {
                    return Err(BuildError::Spec(sonde_results::SpecError {
                        flag: "--window",
                        reason: "0 is not in 1..=1024".into(),
                    }))
                }
                ("--duration", v) if v.parse::<f64>().is_err() => {
                    let why = format!("invalid value '{v}' for '--duration <SECS>'");
                    return Err(BuildError::Words(why));
                }
                _ => {}
            }
        }
        Ok(argv.to_vec())
    }
}
