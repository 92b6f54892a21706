//! The result store: every run's result document with its label, command lines and times,
//! in one SQLite file whose schema is versioned (PRAGMA user_version) and migrated forward
//! on open. Writers from several processes are serialised by SQLite itself (WAL, busy
//! timeout); a run is one row written in one transaction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use sonde_results::Document;

/// The schema this code writes. Each step in `MIGRATIONS` takes the file one version up.
pub const SCHEMA_VERSION: i64 = 3;

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: runs with their document.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        test TEXT NOT NULL,
        started_at TEXT NOT NULL,
        command TEXT NOT NULL,
        document TEXT NOT NULL
    );",
    // 1 -> 2: labels, the agent's command line, the software version, partial runs.
    "ALTER TABLE runs ADD COLUMN label TEXT;
     ALTER TABLE runs ADD COLUMN server_command TEXT;
     ALTER TABLE runs ADD COLUMN software TEXT NOT NULL DEFAULT '';
     ALTER TABLE runs ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;
     CREATE INDEX runs_label ON runs(label);",
    // 2 -> 3: the suite item a run belongs to, for `sonde suite --resume`.
    "ALTER TABLE runs ADD COLUMN suite_key TEXT;
     CREATE INDEX runs_suite_key ON runs(suite_key);",
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("result store {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("result store {path} has schema version {found}, newer than this sonde ({SCHEMA_VERSION}): upgrade sonde")]
    TooNew { path: String, found: i64 },
    #[error("run {0} is not in the store")]
    NoSuchRun(i64),
    #[error("run {id}: stored document is unreadable: {reason}")]
    BadDocument { id: i64, reason: String },
    #[error("no runs labelled '{0}' (and it is not a run id)")]
    NoSuchLabel(String),
}

/// The store a command uses: `db` when given, else `$SONDE_DB`, else
/// `$XDG_DATA_HOME` (or `~/.local/share`) `/netsonde/results.db`.
pub fn default_path(db: Option<&Path>) -> PathBuf {
    if let Some(p) = db {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("SONDE_DB") {
        return PathBuf::from(p);
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("netsonde/results.db")
}

/// One stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: i64,
    pub label: Option<String>,
    pub test: String,
    pub started_at: String,
    pub command: String,
    pub partial: bool,
    pub document: Document,
}

/// The columns of one row as read: id, label, test, started_at, command, partial, document.
type RunRow = (i64, Option<String>, String, String, String, bool, String);

pub struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    /// Opens (creating if needed) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let p = path.display().to_string();
        let err = |source| StoreError::Sqlite {
            path: p.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        let mut store = Store { conn, path: p };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        // IMMEDIATE: two processes opening an old file at once migrate it once.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        let found: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found,
            });
        }
        for (v, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(sql).map_err(|e| StoreError::Sqlite {
                path: self.path.clone(),
                source: e,
            })?;
            tx.pragma_update(None, "user_version", v as i64 + 1)
                .map_err(|e| StoreError::Sqlite {
                    path: self.path.clone(),
                    source: e,
                })?;
        }
        tx.commit().map_err(|e| StoreError::Sqlite {
            path: self.path.clone(),
            source: e,
        })
    }

    /// Saves a run; returns its id.
    pub fn save(&self, doc: &Document, label: Option<&str>) -> Result<i64, StoreError> {
        self.save_for_suite(doc, label, None)
    }

    /// Saves a run that is item `suite_key` of a suite.
    pub fn save_for_suite(
        &self,
        doc: &Document,
        label: Option<&str>,
        suite_key: Option<&str>,
    ) -> Result<i64, StoreError> {
        let json = serde_json::to_string(doc).expect("a document always serialises");
        self.conn
            .execute(
                "INSERT INTO runs (test, started_at, command, document, label, server_command, software, partial, suite_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    doc.test.as_str(),
                    doc.start.started_at,
                    doc.start.command,
                    json,
                    label,
                    doc.start.server_command,
                    doc.start.software,
                    doc.end.partial as i64,
                    suite_key
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    fn row(&self, r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get::<_, i64>(5)? != 0,
            r.get(6)?,
        ))
    }

    fn to_run(&self, t: RunRow) -> Result<Run, StoreError> {
        let document = serde_json::from_str(&t.6).map_err(|e| StoreError::BadDocument {
            id: t.0,
            reason: e.to_string(),
        })?;
        Ok(Run {
            id: t.0,
            label: t.1,
            test: t.2,
            started_at: t.3,
            command: t.4,
            partial: t.5,
            document,
        })
    }

    const COLUMNS: &'static str = "id, label, test, started_at, command, partial, document";

    /// Runs, newest first, optionally only those with `label`.
    pub fn list(&self, label: Option<&str>) -> Result<Vec<Run>, StoreError> {
        let sql = format!(
            "SELECT {} FROM runs WHERE (?1 IS NULL OR label = ?1) ORDER BY id DESC",
            Self::COLUMNS
        );
        let mut st = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![label], |r| self.row(r))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(self.to_run(r.map_err(|e| self.err(e))?)?);
        }
        Ok(out)
    }

    /// Whether a complete (not partial) run of suite item `key` is stored.
    pub fn has_suite_item(&self, key: &str) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM runs WHERE suite_key = ?1 AND partial = 0",
                params![key],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }

    /// The runs named by a label, or the one run with that id (a label wins).
    pub fn named(&self, which: &str) -> Result<Vec<Run>, StoreError> {
        let by_label = self.list(Some(which))?;
        if !by_label.is_empty() {
            return Ok(by_label);
        }
        match which.parse::<i64>() {
            Ok(id) => Ok(vec![self.get(id)?]),
            Err(_) => Err(StoreError::NoSuchLabel(which.to_string())),
        }
    }

    pub fn get(&self, id: i64) -> Result<Run, StoreError> {
        let sql = format!("SELECT {} FROM runs WHERE id = ?1", Self::COLUMNS);
        let t = self
            .conn
            .query_row(&sql, params![id], |r| self.row(r))
            .optional()
            .map_err(|e| self.err(e))?;
        self.to_run(t.ok_or(StoreError::NoSuchRun(id))?)
    }
}

#[cfg(test)]
mod tests;
