//! The commands over stored runs: list, show, export and import them; compare two labels;
//! write a report. Each returns its text (or reports each step through `say`); the binary
//! prints it, JSON as JSON ([`Text`]), and picks the exit code.

use std::path::{Path, PathBuf};

use sonde_results::Document;
use sonde_store::{Run, Store, StoreError};

/// A command's output: text for the terminal, or JSON (escaped as JSON when printed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Terminal(String),
    Json(String),
}

/// `sonde results export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Json,
    Csv,
    HdrLog,
    Openmetrics,
}

impl ExportFormat {
    /// Every format, in the order `--format` lists them.
    pub const ALL: [ExportFormat; 4] = [
        ExportFormat::Json,
        ExportFormat::Csv,
        ExportFormat::HdrLog,
        ExportFormat::Openmetrics,
    ];

    /// The word `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Json => "json",
            ExportFormat::Csv => "csv",
            ExportFormat::HdrLog => "hdr-log",
            ExportFormat::Openmetrics => "openmetrics",
        }
    }
}

/// Why a command over stored runs failed, naming the flag or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("--label {0}: no stored run has this label")]
    NoRunLabelled(String),
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a sonde result document", path.display())]
    NotADocument {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    HdrLog(#[from] sonde_report::hdr_log::HdrLogError),
    #[error("'{a}' holds {a_test} runs and '{b}' holds {b_test} runs: compare like with like")]
    Unlike {
        a: String,
        a_test: String,
        b: String,
        b_test: String,
    },
    #[error("-o {}: the report is .html or .md", .0.display())]
    ReportFormat(PathBuf),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// A file that could not be written (`--output`, a report).
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Writes to a temporary file beside `path`, then renames: a reader never sees half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let tmp = path.with_extension("tmp");
    let failed = |path: &Path, source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, bytes).map_err(|e| failed(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| failed(path, e))
}

fn open(db: Option<&Path>) -> Result<Store, StoreError> {
    Store::open(&sonde_store::default_path(db))
}

/// `sonde results list`: stored runs, newest first.
pub fn list(db: Option<&Path>, label: Option<&str>) -> Result<String, StoredError> {
    let runs = open(db)?.list(label)?;
    let rows: Vec<_> = runs
        .iter()
        .map(|r| (r.id, r.label.clone(), &r.document))
        .collect();
    Ok(sonde_report::summary::runs(&rows))
}

/// `sonde results show`: one run's document.
pub fn show(db: Option<&Path>, id: i64) -> Result<String, StoredError> {
    Ok(sonde_report::json(&open(db)?.get(id)?.document))
}

/// `sonde results export`: the runs labelled `label`, or `ids`, or all, in `format`.
pub fn export(
    db: Option<&Path>,
    ids: &[i64],
    label: Option<&str>,
    format: ExportFormat,
) -> Result<Text, StoredError> {
    let store = open(db)?;
    let runs: Vec<Run> = if let Some(l) = label {
        let runs = store.list(Some(l))?;
        if runs.is_empty() {
            return Err(StoredError::NoRunLabelled(l.to_string()));
        }
        runs
    } else if ids.is_empty() {
        store.list(None)?
    } else {
        ids.iter()
            .map(|&i| store.get(i))
            .collect::<Result<_, _>>()?
    };
    let docs: Vec<&Document> = runs.iter().map(|r| &r.document).collect();
    let by_id: Vec<(i64, &Document)> = runs.iter().map(|r| (r.id, &r.document)).collect();
    Ok(match format {
        ExportFormat::Json => Text::Json(serde_json::to_string_pretty(&docs)?),
        ExportFormat::Csv => Text::Terminal(sonde_report::csv::intervals(&by_id)),
        ExportFormat::Openmetrics => Text::Terminal(sonde_report::openmetrics::export(&docs)),
        ExportFormat::HdrLog => Text::Terminal(sonde_report::hdr_log::interval_log(&by_id)?),
    })
}

/// `sonde results import`: each file's document stored under `label`; `said` hears each
/// file and its run id as it is stored.
pub fn import(
    db: Option<&Path>,
    files: &[PathBuf],
    label: Option<&str>,
    said: &dyn Fn(&Path, i64),
) -> Result<(), StoredError> {
    let store = open(db)?;
    for f in files {
        let read = |source| StoredError::Read {
            path: f.clone(),
            source,
        };
        let bytes = std::fs::read(f).map_err(read)?;
        let doc: Document =
            serde_json::from_slice(&bytes).map_err(|source| StoredError::NotADocument {
                path: f.clone(),
                source,
            })?;
        said(f, store.save(&doc, label)?);
    }
    Ok(())
}

/// What `sonde compare` asks.
pub struct CompareParams<'a> {
    pub db: Option<&'a Path>,
    /// Baseline and candidate: labels or run ids.
    pub a: &'a str,
    pub b: &'a str,
    pub json: bool,
    /// `--fail-if-worse`: the percentage beyond which a significant change is a regression.
    pub fail_if_worse: Option<f64>,
}

/// `sonde compare`: the comparison's text, and whether a metric regressed beyond
/// `--fail-if-worse`.
pub fn compare(p: &CompareParams<'_>) -> Result<(Text, bool), StoredError> {
    let store = open(p.db)?;
    let (ra, rb) = (store.named(p.a)?, store.named(p.b)?);
    if ra[0].test != rb[0].test {
        return Err(StoredError::Unlike {
            a: p.a.to_string(),
            a_test: ra[0].test.to_string(),
            b: p.b.to_string(),
            b_test: rb[0].test.to_string(),
        });
    }
    let da: Vec<&Document> = ra.iter().map(|r| &r.document).collect();
    let db: Vec<&Document> = rb.iter().map(|r| &r.document).collect();
    let cmp = sonde_results::compare::compare_runs(&da, &db);
    let limits = sonde_results::compare::limit_shift(&da, &db);
    let text = if p.json {
        // The figures' rows, then what limited each group as one more row.
        let mut rows = serde_json::to_value(&cmp)?;
        if let (Some(l), Some(rows)) = (&limits, rows.as_array_mut()) {
            rows.push(serde_json::to_value(l)?);
        }
        Text::Json(serde_json::to_string_pretty(&rows)?)
    } else {
        let text = sonde_report::summary::comparison(p.a, p.b, &cmp, limits.as_ref());
        Text::Terminal(text)
    };
    let worse = p
        .fail_if_worse
        .is_some_and(|limit| sonde_results::compare::regressed(&cmp, limit));
    Ok((text, worse))
}

/// What `sonde report` asks.
pub struct ReportParams<'a> {
    pub db: Option<&'a Path>,
    /// Labels or run ids; two labels of one test also get a comparison.
    pub runs: &'a [String],
    /// `-o`: .html or .md.
    pub output: &'a Path,
    pub title: &'a str,
}

/// `sonde report`: the report written to `-o`; how many runs it holds.
pub fn report(p: &ReportParams<'_>) -> Result<usize, StoredError> {
    let store = open(p.db)?;
    let mut groups: Vec<(String, Vec<Run>)> = Vec::new();
    for sel in p.runs {
        groups.push((sel.clone(), store.named(sel)?));
    }
    let stored = groups
        .iter()
        .flat_map(|(_, rs)| rs.iter().map(|r| (r.id, r.label.clone(), &r.document)))
        .collect();
    let runs = sonde_report::html::ReportRun::named(stored);
    let cmp = match &groups[..] {
        [(a_name, ra), (b_name, rb)] if ra[0].test == rb[0].test => {
            let da: Vec<&Document> = ra.iter().map(|r| &r.document).collect();
            let db: Vec<&Document> = rb.iter().map(|r| &r.document).collect();
            Some((
                a_name.as_str(),
                b_name.as_str(),
                sonde_results::compare::compare_runs(&da, &db),
                sonde_results::compare::limit_shift(&da, &db),
            ))
        }
        _ => None,
    };
    let when = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let cmp_ref = cmp.as_ref().map(|(x, y, c, _)| (*x, *y, c.as_slice()));
    let report = sonde_report::html::Report {
        title: p.title,
        generated_at: &when,
        runs: &runs,
        comparison: cmp_ref,
        limits: cmp.as_ref().and_then(|c| c.3.as_ref()),
    };
    let text = match p.output.extension().and_then(|e| e.to_str()) {
        Some("md") => sonde_report::html::markdown(&report),
        Some("html") | Some("htm") => sonde_report::html::render(&report),
        _ => return Err(StoredError::ReportFormat(p.output.to_path_buf())),
    };
    write_atomically(p.output, text.as_bytes())?;
    Ok(runs.len())
}
