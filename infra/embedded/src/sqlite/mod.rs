//! The embedded state store: one SQLite file (WAL mode), so several
//! `vergence` processes on one machine (an `up --watch` and a `release`)
//! share state safely. Records are stored as JSON with the columns needed for
//! lookups beside them; every instance write checks the revision in SQL.
//!
//! Calls run synchronously under a mutex: SQLite work here takes well under
//! a millisecond, and the embedded mode serves one machine.
//!
//! This module opens the file, creates and migrates its schema and holds
//! the helpers every table uses; each store trait is implemented in a
//! module of its own.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use jiff::Timestamp;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::EmbeddedError;

mod agents;
mod alerts;
mod approvals;
mod config;
mod events;
mod instances;
mod jobs;
mod releases;
mod tokens;

pub use jobs::FINISHED_JOBS_KEPT;

type Result<T> = vergence_model::Result<T>;

const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS snapshots (
    hash TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS current_config (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    hash TEXT NOT NULL,
    revision INTEGER NOT NULL,
    channels TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    application TEXT NOT NULL,
    service TEXT NOT NULL,
    release_channel TEXT NOT NULL,
    revision INTEGER NOT NULL,
    next_check_at INTEGER,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS instances_due ON instances (next_check_at) WHERE next_check_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_instance ON jobs (instance);
CREATE TABLE IF NOT EXISTS releases (
    application TEXT NOT NULL,
    service TEXT NOT NULL,
    version TEXT NOT NULL,
    pushed_seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (application, service, version)
);
CREATE INDEX IF NOT EXISTS releases_latest ON releases (application, service, pushed_seq);
CREATE TABLE IF NOT EXISTS approvals (
    instance TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_instance ON approvals (instance);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    -- The token's subject: an application's name, or `agent:<name>`.
    application TEXT NOT NULL,
    body TEXT NOT NULL
);
-- Signatures of accepted webhooks, refused again until they expire;
-- expired rows are deleted by the next use.
CREATE TABLE IF NOT EXISTS webhook_signatures (
    signature TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_signatures_expiry ON webhook_signatures (expires_at);
CREATE TABLE IF NOT EXISTS alerts (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY,
    application TEXT NOT NULL,
    service TEXT,
    release_channel TEXT,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_application ON events (application, id);
CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_work (
    agent TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    leased_until INTEGER,
    body TEXT NOT NULL,
    PRIMARY KEY (agent, id)
);
CREATE INDEX IF NOT EXISTS agent_work_age ON agent_work (agent, created_at);
";

/// The SQLite state store.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// The path, when the file was opened read-only.
    read_only: Option<String>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, and its directory.
    /// An existing file with nothing in it is refused: SQLite would take it
    /// for a new, empty database, and an emptied state (a crash, a full
    /// disk, a bad copy) must never pass for a fresh start.
    pub fn open(path: &Path) -> std::result::Result<Self, EmbeddedError> {
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            return Err(EmbeddedError::EmptyState {
                path: path.display().to_string(),
            });
        }
        if path.is_file() && !writable(path) {
            return Self::open_read_only(path);
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| EmbeddedError::Create {
                path: dir.display().to_string(),
                source,
            })?;
        }
        if !path.exists() {
            create(path)?;
        }
        let conn = Connection::open(path).map_err(|source| EmbeddedError::Open {
            path: path.display().to_string(),
            source,
        })?;
        Self::init(conn, &path.display().to_string())
    }

    /// A state file this process may not write (its mode, a read-only
    /// mount, a backup kept read-only) is still read: `status`, `events`
    /// and `explain` work, and anything that would change it fails with an
    /// error saying why. Nothing is created or migrated.
    fn open_read_only(path: &Path) -> std::result::Result<Self, EmbeddedError> {
        let shown = path.display().to_string();
        let open_error = |source| EmbeddedError::Open {
            path: shown.clone(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_error)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(open_error)?;
        let conn = match probe(&conn) {
            Ok(()) => conn,
            // A WAL file needs its index (-shm) beside it; where that cannot
            // be created either (a read-only folder), no process can write
            // the state, so it is read as an immutable file.
            Err(_) => {
                drop(conn);
                let uri = format!("file:{}?immutable=1", uri_path(path));
                let conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                    .map_err(open_error)?;
                probe(&conn).map_err(open_error)?;
                conn
            }
        };
        Ok(Self {
            conn: Mutex::new(conn),
            read_only: Some(shown),
        })
    }

    /// A private store that lives as long as the value (for tests).
    pub fn in_memory() -> std::result::Result<Self, EmbeddedError> {
        let conn = Connection::open_in_memory().map_err(|source| EmbeddedError::Open {
            path: ":memory:".into(),
            source,
        })?;
        Self::init(conn, ":memory:")
    }

    fn init(conn: Connection, path: &str) -> std::result::Result<Self, EmbeddedError> {
        let setup = || -> rusqlite::Result<()> {
            // WAL lets readers (vergence status) work while a writer runs;
            // NORMAL sync is durable across process crashes, which is what
            // a local control plane needs.
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.busy_timeout(std::time::Duration::from_secs(10))?;
            conn.execute_batch(SCHEMA)?;
            migrate(&conn)
        };
        setup().map_err(|source| EmbeddedError::Open {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            conn: Mutex::new(conn),
            read_only: None,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (transactions roll back on drop), so a poisoned lock is usable.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `work` in an immediate transaction (takes the write lock first,
    /// so read-modify-write sequences cannot interleave across processes).
    fn write<T>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&Transaction<'_>) -> std::result::Result<T, EmbeddedError>,
    ) -> Result<T> {
        if let Some(path) = &self.read_only {
            return Err(EmbeddedError::ReadOnly {
                operation,
                path: path.clone(),
            }
            .into());
        }
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| EmbeddedError::sql(operation, e))?;
        let value = work(&tx)?;
        tx.commit().map_err(|e| EmbeddedError::sql(operation, e))?;
        Ok(value)
    }
}

/// Creates a state file at `path` whole, or leaves the one another
/// process created first. SQLite would create an empty file and write its
/// header later: a second process opening it in between would find an
/// empty file, which is refused as a damaged state. So the database is
/// made under a name of this process's own and linked into place, which
/// fails if `path` appeared meanwhile.
fn create(path: &Path) -> std::result::Result<(), EmbeddedError> {
    let name = path
        .file_name()
        .map_or_else(|| "state.db".into(), |n| n.to_string_lossy().into_owned());
    let fresh = path.with_file_name(format!(".{name}.{}.new", std::process::id()));
    let open_error = |source| EmbeddedError::Open {
        path: fresh.display().to_string(),
        source,
    };
    let _ = std::fs::remove_file(&fresh);
    let conn = Connection::open(&fresh).map_err(open_error)?;
    // Closing checkpoints the WAL into the file and removes it.
    SqliteStore::init(conn, &fresh.display().to_string())?;
    let placed = match std::fs::hard_link(&fresh, path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        // A file system without hard links: a rename, which could only
        // replace a file created in the last instant.
        Err(_) if !path.exists() => std::fs::rename(&fresh, path),
        other => other,
    };
    let _ = std::fs::remove_file(&fresh);
    placed.map_err(|source| EmbeddedError::Create {
        path: path.display().to_string(),
        source,
    })
}

/// Whether this process may write the file at `path` (it exists).
fn writable(path: &Path) -> bool {
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ),
    }
}

/// Reads the schema: fails on a file that is not a database or cannot be
/// read as one.
fn probe(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|_| ())
}

/// `path` for an SQLite URI: absolute, with the characters URIs reserve
/// escaped.
fn uri_path(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut escaped = String::new();
    for c in absolute.to_string_lossy().chars() {
        match c {
            '%' | '?' | '#' => escaped.push_str(&format!("%{:02X}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Brings a state file written by an earlier version up to this schema.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let has_channels: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('current_config') WHERE name = 'channels'",
        [],
        |r| r.get(0),
    )?;
    if !has_channels {
        conn.execute_batch(
            "ALTER TABLE current_config ADD COLUMN channels TEXT NOT NULL DEFAULT '{}'",
        )?;
    }
    Ok(())
}

fn to_json<T: Serialize>(
    operation: &'static str,
    value: &T,
) -> std::result::Result<String, EmbeddedError> {
    serde_json::to_string(value).map_err(|source| EmbeddedError::Encode { operation, source })
}

fn from_json<T: DeserializeOwned>(
    operation: &'static str,
    body: &str,
) -> std::result::Result<T, EmbeddedError> {
    serde_json::from_str(body).map_err(|source| EmbeddedError::Decode { operation, source })
}

fn millis(at: Timestamp) -> i64 {
    at.as_millisecond()
}

fn conflict(what: impl Into<String>) -> EmbeddedError {
    EmbeddedError::Conflict { what: what.into() }
}
