//! The embedded state store: one SQLite file (WAL mode), so several
//! `vergence` processes on one machine (an `up --watch` and a `release`)
//! share state safely. Records are stored as JSON with the columns needed for
//! lookups beside them; every instance write checks the revision in SQL.
//!
//! Calls run synchronously under a mutex: SQLite work here takes well under
//! a millisecond, and the embedded mode serves one machine.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use vergence_model::ports::{
    AlertStore, ApprovalStore, ConfigSnapshot, ConfigStore, CurrentConfig, EventStore,
    InstanceChange, InstanceCommit, InstanceFilter, InstanceStore, JobStore, ReleaseStore,
    TokenStore,
};
use vergence_model::{
    AlertState, ApiToken, ApplicationName, Approval, Event, EventFilter, InstanceKey,
    InstanceRecord, JobHandle, JobId, JobRecord, JobResult, JobState, Release, ServiceName,
    TokenSubject,
};

use crate::error::EmbeddedError;

mod agents;

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

#[async_trait]
impl ConfigStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_snapshot", level = "debug", skip_all)]
    async fn put_snapshot(&self, snapshot: &ConfigSnapshot) -> Result<()> {
        let body = to_json("put_snapshot", snapshot)?;
        self.write("put_snapshot", |tx| {
            tx.execute(
                "INSERT OR IGNORE INTO snapshots (hash, created_at, body) VALUES (?1, ?2, ?3)",
                params![snapshot.hash, millis(snapshot.created_at), body],
            )
            .map_err(|e| EmbeddedError::sql("put_snapshot", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_snapshot", level = "debug", skip_all, fields(hash = %hash))]
    async fn get_snapshot(&self, hash: &str) -> Result<Option<ConfigSnapshot>> {
        let body: Option<String> = self
            .conn()
            .query_row("SELECT body FROM snapshots WHERE hash = ?1", [hash], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| EmbeddedError::sql("get_snapshot", e))?;
        Ok(body.map(|b| from_json("get_snapshot", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.current_config", level = "debug", skip_all)]
    async fn current_config(&self) -> Result<Option<CurrentConfig>> {
        let row = self
            .conn()
            .query_row(
                "SELECT hash, revision, channels FROM current_config WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, String>(2)?)),
            )
            .optional()
            .map_err(|e| EmbeddedError::sql("current_config", e))?;
        let Some((hash, revision, channels)) = row else {
            return Ok(None);
        };
        Ok(Some(CurrentConfig {
            hash,
            revision,
            channels: from_json("current_config", &channels)?,
        }))
    }

    #[tracing::instrument(name = "sqlite.set_current_config", level = "debug", skip_all)]
    async fn set_current_config(
        &self,
        next: &CurrentConfig,
        expected_revision: Option<u64>,
    ) -> Result<u64> {
        let channels = to_json("set_current_config", &next.channels)?;
        self.write("set_current_config", |tx| {
            let current: Option<u64> = tx
                .query_row(
                    "SELECT revision FROM current_config WHERE id = 1",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| EmbeddedError::sql("set_current_config", e))?;
            if current != expected_revision {
                return Err(conflict("the current config pointer"));
            }
            let revision = current.unwrap_or(0) + 1;
            tx.execute(
                "INSERT INTO current_config (id, hash, revision, channels) VALUES (1, ?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, revision = excluded.revision,
                   channels = excluded.channels",
                params![next.hash, revision, channels],
            )
            .map_err(|e| EmbeddedError::sql("set_current_config", e))?;
            Ok(revision)
        })
    }
}

fn insert_events(tx: &Transaction<'_>, events: &[Event]) -> std::result::Result<(), EmbeddedError> {
    let mut stmt = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO events (id, application, service, release_channel, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(|e| EmbeddedError::sql("insert_events", e))?;
    for event in events {
        stmt.execute(params![
            event.id,
            event.application.as_str(),
            event.service.as_ref().map(ServiceName::as_str),
            event.release_channel.as_ref().map(|c| c.as_str()),
            to_json("insert_events", event)?
        ])
        .map_err(|e| EmbeddedError::sql("insert_events", e))?;
    }
    Ok(())
}

#[async_trait]
impl InstanceStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.get_instance", level = "debug", skip_all, fields(instance = %key))]
    async fn get_instance(&self, key: &InstanceKey) -> Result<Option<InstanceRecord>> {
        let row: Option<(String, u64)> = self
            .conn()
            .query_row(
                "SELECT body, revision FROM instances WHERE id = ?1",
                [key.storage_id()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| EmbeddedError::sql("get_instance", e))?;
        Ok(row
            .map(|(body, revision)| decode_instance(&body, revision))
            .transpose()?)
    }

    #[tracing::instrument(name = "sqlite.list_instances", level = "debug", skip_all, fields(filter = ?filter))]
    async fn list_instances(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT body, revision FROM instances
                 WHERE (?1 IS NULL OR application = ?1) AND (?2 IS NULL OR service = ?2)
                   AND (?3 IS NULL OR release_channel = ?3)
                 ORDER BY id",
            )
            .map_err(|e| EmbeddedError::sql("list_instances", e))?;
        let rows = stmt
            .query_map(
                params![
                    filter.application.as_ref().map(ApplicationName::as_str),
                    filter.service.as_ref().map(ServiceName::as_str),
                    filter.release_channel.as_ref().map(|c| c.as_str())
                ],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)),
            )
            .map_err(|e| EmbeddedError::sql("list_instances", e))?;
        let mut records = Vec::new();
        for row in rows {
            let (body, revision) = row.map_err(|e| EmbeddedError::sql("list_instances", e))?;
            records.push(decode_instance(&body, revision)?);
        }
        Ok(records)
    }

    #[tracing::instrument(name = "sqlite.due_instances", level = "debug", skip_all)]
    async fn due_instances(&self, now: Timestamp, limit: usize) -> Result<Vec<InstanceKey>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id FROM instances WHERE next_check_at IS NOT NULL AND next_check_at <= ?1
                 ORDER BY next_check_at, id LIMIT ?2",
            )
            .map_err(|e| EmbeddedError::sql("due_instances", e))?;
        let ids = stmt
            .query_map(params![millis(now), limit as i64], |r| {
                r.get::<_, String>(0)
            })
            .map_err(|e| EmbeddedError::sql("due_instances", e))?;
        let mut keys = Vec::new();
        for id in ids {
            let id = id.map_err(|e| EmbeddedError::sql("due_instances", e))?;
            keys.push(InstanceKey::parse_storage_id(&id).map_err(|message| {
                EmbeddedError::Corrupt {
                    what: format!("instance id {id}"),
                    message,
                }
            })?);
        }
        Ok(keys)
    }

    #[tracing::instrument(name = "sqlite.commit", level = "debug", skip_all, fields(instance = %commit.change.key(), expected = ?commit.expected_revision))]
    async fn commit(&self, commit: InstanceCommit) -> Result<u64> {
        let key = commit.change.key().clone();
        let id = key.storage_id();
        self.write("commit", |tx| {
            let current: Option<u64> = tx
                .query_row("SELECT revision FROM instances WHERE id = ?1", [&id], |r| r.get(0))
                .optional()
                .map_err(|e| EmbeddedError::sql("commit", e))?;
            if current != commit.expected_revision {
                return Err(conflict(format!("instance {key}")));
            }
            let revision = match &commit.change {
                InstanceChange::Put(record) => {
                    let next = current.unwrap_or(0) + 1;
                    let mut stored = (**record).clone();
                    stored.revision = next;
                    tx.execute(
                        "INSERT INTO instances (id, application, service, release_channel, revision, next_check_at, body)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                         ON CONFLICT (id) DO UPDATE SET revision = excluded.revision,
                           next_check_at = excluded.next_check_at, body = excluded.body",
                        params![
                            id,
                            key.application.as_str(),
                            key.service.as_str(),
                            key.release_channel.as_str(),
                            next,
                            stored.next_check_at.map(millis),
                            to_json("commit", &stored)?
                        ],
                    )
                    .map_err(|e| EmbeddedError::sql("commit", e))?;
                    next
                }
                InstanceChange::Delete(_) => {
                    tx.execute("DELETE FROM instances WHERE id = ?1", [&id])
                        .map_err(|e| EmbeddedError::sql("commit", e))?;
                    0
                }
            };
            for job in &commit.new_jobs {
                let inserted = tx
                    .execute(
                        "INSERT OR IGNORE INTO jobs (id, instance, state, body) VALUES (?1, ?2, ?3, ?4)",
                        params![job.id.as_str(), id, state_name(&job.state), to_json("commit", job)?],
                    )
                    .map_err(|e| EmbeddedError::sql("commit", e))?;
                if inserted == 0 {
                    return Err(conflict(format!("job {} (already recorded)", job.id)));
                }
            }
            for (job, result) in &commit.finished_jobs {
                if !finish(tx, "commit", job, result)? {
                    return Err(conflict(format!("job {job} (already finished)")));
                }
            }
            insert_events(tx, &commit.events)?;
            Ok(revision)
        })
    }
}

fn decode_instance(
    body: &str,
    revision: u64,
) -> std::result::Result<InstanceRecord, EmbeddedError> {
    let mut record: InstanceRecord = from_json("instance", body)?;
    record.revision = revision;
    Ok(record)
}

/// Finished jobs kept per instance, newest first. Only the instance's
/// newest job is ever read again (the one in flight, until its result is
/// taken up); the rest stay for a look with `sqlite3`. Each keeps up to
/// 1 MiB of output, and a fetch polled every few seconds finishes a job
/// each time: without a bound the state file grows by gigabytes a week.
pub const FINISHED_JOBS_KEPT: usize = 10;

/// Deletes the finished jobs of `instance` past [`FINISHED_JOBS_KEPT`].
/// Jobs are ordered by rowid: SQLite hands out increasing ones as rows are
/// inserted, and the newest job of an instance is never among those
/// deleted, so no rowid is reused out of order.
fn prune_finished_jobs(
    tx: &Transaction<'_>,
    operation: &'static str,
    instance: &InstanceKey,
) -> std::result::Result<(), EmbeddedError> {
    tx.execute(
        "DELETE FROM jobs WHERE state = 'finished' AND instance = ?1
           AND rowid NOT IN (
             SELECT rowid FROM jobs WHERE instance = ?1
              ORDER BY rowid DESC LIMIT ?2)",
        params![instance.storage_id(), FINISHED_JOBS_KEPT as i64],
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    Ok(())
}

fn state_name(state: &JobState) -> &'static str {
    match state {
        JobState::Created => "created",
        JobState::Dispatched { .. } => "dispatched",
        JobState::Finished { .. } => "finished",
    }
}

impl SqliteStore {
    /// Rewrites a job's state to `next(current)` if `allowed` says the
    /// current one may change.
    fn transition_job(
        &self,
        operation: &'static str,
        id: &JobId,
        allowed: impl Fn(&JobState) -> bool,
        next: impl Fn(&JobState) -> JobState,
    ) -> Result<bool> {
        self.write(operation, |tx| transition(tx, operation, id, allowed, next))
    }
}

/// [`SqliteStore::transition_job`] within `tx`. A job that ends here makes
/// room for itself among its instance's kept jobs in the same transaction.
fn transition(
    tx: &Transaction<'_>,
    operation: &'static str,
    id: &JobId,
    allowed: impl Fn(&JobState) -> bool,
    next: impl Fn(&JobState) -> JobState,
) -> std::result::Result<bool, EmbeddedError> {
    let body: Option<String> = tx
        .query_row("SELECT body FROM jobs WHERE id = ?1", [id.as_str()], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|e| EmbeddedError::sql(operation, e))?;
    let Some(body) = body else { return Ok(false) };
    let mut job: JobRecord = from_json(operation, &body)?;
    if !allowed(&job.state) {
        return Ok(false);
    }
    job.state = next(&job.state);
    tx.execute(
        "UPDATE jobs SET state = ?2, body = ?3 WHERE id = ?1",
        params![
            id.as_str(),
            state_name(&job.state),
            to_json(operation, &job)?
        ],
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    if matches!(job.state, JobState::Finished { .. }) {
        prune_finished_jobs(tx, operation, &job.instance)?;
    }
    Ok(true)
}

/// Records `result` as the job's, once: `false` when it already has one
/// (or is unknown).
fn finish(
    tx: &Transaction<'_>,
    operation: &'static str,
    id: &JobId,
    result: &JobResult,
) -> std::result::Result<bool, EmbeddedError> {
    transition(
        tx,
        operation,
        id,
        |s| !matches!(s, JobState::Finished { .. }),
        |_| JobState::Finished {
            result: result.clone(),
        },
    )
}

#[async_trait]
impl JobStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.get_job", level = "debug", skip_all, fields(job = %id))]
    async fn get_job(&self, id: &JobId) -> Result<Option<JobRecord>> {
        let body: Option<String> = self
            .conn()
            .query_row("SELECT body FROM jobs WHERE id = ?1", [id.as_str()], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| EmbeddedError::sql("get_job", e))?;
        Ok(body.map(|b| from_json("get_job", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.claim_job", level = "debug", skip_all, fields(job = %id))]
    async fn claim_job(&self, id: &JobId, at: Timestamp) -> Result<bool> {
        self.transition_job(
            "claim_job",
            id,
            |s| *s == JobState::Created,
            |_| JobState::Dispatched { at, handle: None },
        )
    }

    #[tracing::instrument(name = "sqlite.record_handle", level = "debug", skip_all, fields(job = %id, handle = %handle))]
    async fn record_handle(&self, id: &JobId, handle: &JobHandle) -> Result<bool> {
        self.transition_job(
            "record_handle",
            id,
            |s| matches!(s, JobState::Dispatched { .. }),
            |state| match state {
                JobState::Dispatched { at, .. } => JobState::Dispatched {
                    at: *at,
                    handle: Some(handle.clone()),
                },
                other => other.clone(),
            },
        )
    }

    #[tracing::instrument(name = "sqlite.finish_job", level = "debug", skip_all, fields(job = %id))]
    async fn finish_job(&self, id: &JobId, result: &JobResult) -> Result<bool> {
        self.write("finish_job", |tx| finish(tx, "finish_job", id, result))
    }
}

#[async_trait]
impl ReleaseStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_release", level = "debug", skip_all, fields(application = %release.application, service = %release.service, version = %release.version))]
    async fn put_release(&self, release: &Release) -> Result<()> {
        self.write("put_release", |tx| {
            let existing: Option<String> = tx
                .query_row(
                    "SELECT body FROM releases WHERE application = ?1 AND service = ?2 AND version = ?3",
                    params![release.application.as_str(), release.service.as_str(), release.version.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| EmbeddedError::sql("put_release", e))?;
            let next_seq: i64 = tx
                .query_row("SELECT COALESCE(MAX(pushed_seq), 0) + 1 FROM releases", [], |r| r.get(0))
                .map_err(|e| EmbeddedError::sql("put_release", e))?;
            match existing {
                Some(body) => {
                    let stored: Release = from_json("put_release", &body)?;
                    if stored.params != release.params {
                        return Err(conflict(format!(
                            "release {} of {} (it exists with other parameters; versions are immutable)",
                            release.version, release.service
                        )));
                    }
                    tx.execute(
                        "UPDATE releases SET pushed_seq = ?4 WHERE application = ?1 AND service = ?2 AND version = ?3",
                        params![release.application.as_str(), release.service.as_str(), release.version.as_str(), next_seq],
                    )
                }
                None => tx.execute(
                    "INSERT INTO releases (application, service, version, pushed_seq, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        release.application.as_str(),
                        release.service.as_str(),
                        release.version.as_str(),
                        next_seq,
                        to_json("put_release", release)?
                    ],
                ),
            }
            .map_err(|e| EmbeddedError::sql("put_release", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.latest_release", level = "debug", skip_all, fields(application = %application, service = %service))]
    async fn latest_release(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
    ) -> Result<Option<Release>> {
        Ok(self
            .list_releases(application, service, 1)
            .await?
            .into_iter()
            .next())
    }

    #[tracing::instrument(name = "sqlite.list_releases", level = "debug", skip_all, fields(application = %application, service = %service))]
    async fn list_releases(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        limit: usize,
    ) -> Result<Vec<Release>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT body FROM releases WHERE application = ?1 AND service = ?2 ORDER BY pushed_seq DESC LIMIT ?3",
            )
            .map_err(|e| EmbeddedError::sql("list_releases", e))?;
        let rows = stmt
            .query_map(
                params![application.as_str(), service.as_str(), limit as i64],
                |r| r.get::<_, String>(0),
            )
            .map_err(|e| EmbeddedError::sql("list_releases", e))?;
        let mut releases = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_releases", e))?;
            releases.push(from_json("list_releases", &body)?);
        }
        Ok(releases)
    }
}

#[async_trait]
impl ApprovalStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_approval", level = "debug", skip_all, fields(instance = %approval.instance, version = %approval.version))]
    async fn put_approval(&self, approval: &Approval) -> Result<()> {
        let body = to_json("put_approval", approval)?;
        self.write("put_approval", |tx| {
            tx.execute(
                "INSERT INTO approvals (instance, body) VALUES (?1, ?2)",
                params![approval.instance.storage_id(), body],
            )
            .map_err(|e| EmbeddedError::sql("put_approval", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.list_approvals", level = "debug", skip_all, fields(instance = %key))]
    async fn list_approvals(&self, key: &InstanceKey) -> Result<Vec<Approval>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT body FROM approvals WHERE instance = ?1 ORDER BY rowid")
            .map_err(|e| EmbeddedError::sql("list_approvals", e))?;
        let rows = stmt
            .query_map([key.storage_id()], |r| r.get::<_, String>(0))
            .map_err(|e| EmbeddedError::sql("list_approvals", e))?;
        let mut approvals = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_approvals", e))?;
            approvals.push(from_json("list_approvals", &body)?);
        }
        Ok(approvals)
    }
}

/// What the tokens table's `application` column holds for a subject: an
/// application's name, `agent:<name>` or `platform:` (`:` is never part
/// of a name).
fn subject_key(subject: &TokenSubject) -> String {
    match subject {
        TokenSubject::Application(application) => application.as_str().to_owned(),
        TokenSubject::Agent(agent) => format!("agent:{agent}"),
        TokenSubject::Platform => "platform:".to_owned(),
    }
}

#[async_trait]
impl TokenStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_token", level = "debug", skip_all)]
    async fn put_token(&self, token: &ApiToken) -> Result<()> {
        let body = to_json("put_token", token)?;
        self.write("put_token", |tx| {
            let inserted = tx
                .execute(
                    "INSERT INTO tokens (id, application, body) VALUES (?1, ?2, ?3)
                     ON CONFLICT (id) DO NOTHING",
                    params![token.id, subject_key(&token.subject), body],
                )
                .map_err(|e| EmbeddedError::sql("put_token", e))?;
            if inserted == 0 {
                return Err(EmbeddedError::Conflict {
                    what: format!("token {}", token.id),
                });
            }
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_token", level = "debug", skip_all, fields(id = %id))]
    async fn get_token(&self, id: &str) -> Result<Option<ApiToken>> {
        let conn = self.conn();
        let body: Option<String> = conn
            .query_row("SELECT body FROM tokens WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(|e| EmbeddedError::sql("get_token", e))?;
        Ok(body.map(|b| from_json("get_token", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.list_tokens", level = "debug", skip_all, fields(subject = %subject))]
    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<ApiToken>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT body FROM tokens WHERE application = ?1 ORDER BY id")
            .map_err(|e| EmbeddedError::sql("list_tokens", e))?;
        let rows = stmt
            .query_map([subject_key(subject)], |r| r.get::<_, String>(0))
            .map_err(|e| EmbeddedError::sql("list_tokens", e))?;
        let mut tokens = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_tokens", e))?;
            tokens.push(from_json("list_tokens", &body)?);
        }
        Ok(tokens)
    }

    #[tracing::instrument(name = "sqlite.delete_token", level = "debug", skip_all, fields(id = %id))]
    async fn delete_token(&self, id: &str) -> Result<bool> {
        self.write("delete_token", |tx| {
            let n = tx
                .execute("DELETE FROM tokens WHERE id = ?1", [id])
                .map_err(|e| EmbeddedError::sql("delete_token", e))?;
            Ok(n > 0)
        })
    }
}

#[async_trait]
impl AlertStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_alert", level = "debug", skip_all)]
    async fn put_alert(&self, alert: &AlertState) -> Result<()> {
        let body = to_json("put_alert", alert)?;
        self.write("put_alert", |tx| {
            tx.execute(
                "INSERT INTO alerts (name, body) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET body = excluded.body",
                params![alert.name, body],
            )
            .map_err(|e| EmbeddedError::sql("put_alert", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_alert", level = "debug", skip_all, fields(name = %name))]
    async fn get_alert(&self, name: &str) -> Result<Option<AlertState>> {
        let conn = self.conn();
        let body: Option<String> = conn
            .query_row("SELECT body FROM alerts WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| EmbeddedError::sql("get_alert", e))?;
        Ok(body.map(|b| from_json("get_alert", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.list_alerts", level = "debug", skip_all)]
    async fn list_alerts(&self) -> Result<Vec<AlertState>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT body FROM alerts ORDER BY name")
            .map_err(|e| EmbeddedError::sql("list_alerts", e))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| EmbeddedError::sql("list_alerts", e))?;
        let mut alerts = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_alerts", e))?;
            alerts.push(from_json("list_alerts", &body)?);
        }
        Ok(alerts)
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.append_events", level = "debug", skip_all, fields(events = events.len()))]
    async fn append_events(&self, events: &[Event]) -> Result<()> {
        self.write("append_events", |tx| insert_events(tx, events))
    }

    #[tracing::instrument(name = "sqlite.list_events", level = "debug", skip_all)]
    async fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT body FROM events
                 WHERE (?1 IS NULL OR application = ?1) AND (?2 IS NULL OR service = ?2)
                   AND (?3 IS NULL OR release_channel = ?3)
                 ORDER BY id DESC LIMIT ?4",
            )
            .map_err(|e| EmbeddedError::sql("list_events", e))?;
        let limit = filter.limit.map_or(-1, |l| l as i64);
        let rows = stmt
            .query_map(
                params![
                    filter.application.as_ref().map(ApplicationName::as_str),
                    filter.service.as_ref().map(ServiceName::as_str),
                    filter.release_channel.as_ref().map(|c| c.as_str()),
                    limit
                ],
                |r| r.get::<_, String>(0),
            )
            .map_err(|e| EmbeddedError::sql("list_events", e))?;
        let mut events = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_events", e))?;
            events.push(from_json("list_events", &body)?);
        }
        events.reverse();
        Ok(events)
    }
}
