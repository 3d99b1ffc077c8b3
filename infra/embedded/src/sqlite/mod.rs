//! The embedded state store: one SQLite file (WAL mode), so several
//! `vergence` processes on one machine (an `up --watch` and a `release`)
//! share state safely. Records are stored as JSON with the columns needed for
//! lookups beside them; every instance write checks the revision in SQL.
//!
//! Calls run synchronously under a mutex: SQLite work here takes well under
//! a millisecond, and the embedded mode serves one machine. The writes of
//! a step (an instance's commit, a job's claim, handle and result), which
//! concurrent steps make all the time, go to one writer thread instead,
//! which commits those waiting together in one transaction ([`Writer`]).
//!
//! This module opens the file, creates and migrates its schema and holds
//! the helpers every table uses; each store trait is implemented in a
//! module of its own.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

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
    conn: Arc<Mutex<Connection>>,
    /// The path, when the file was opened read-only.
    read_only: Option<String>,
    /// Group-commits the writes of concurrent steps; none when read-only.
    writer: Option<Writer>,
    /// Write transactions committed.
    committed: Arc<AtomicU64>,
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
            conn: Arc::new(Mutex::new(conn)),
            read_only: Some(shown),
            writer: None,
            committed: Arc::default(),
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
        let conn = Arc::new(Mutex::new(conn));
        let committed = Arc::<AtomicU64>::default();
        let writer =
            Writer::start(Arc::clone(&conn), Arc::clone(&committed)).map_err(|source| {
                EmbeddedError::Create {
                    path: format!("the writer thread of {path}"),
                    source,
                }
            })?;
        Ok(Self {
            conn,
            read_only: None,
            writer: Some(writer),
            committed,
        })
    }

    /// Write transactions this store committed so far: one per write, or
    /// one per group of writes made together (for diagnostics and tests).
    pub fn transactions_committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
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
        self.committed.fetch_add(1, Ordering::Relaxed);
        Ok(value)
    }

    /// Runs `work` as [`SqliteStore::write`] does, atomically and on its
    /// own, but on the writer thread, in one transaction with the writes
    /// other steps make meanwhile: a write that fails leaves nothing (its
    /// savepoint is rolled back) and does not fail the others, and none is
    /// answered before the transaction that holds it committed.
    async fn write_grouped<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> std::result::Result<T, EmbeddedError> + Send + 'static,
    {
        let Some(writer) = &self.writer else {
            return self.write(operation, work);
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        writer.submit(Box::new(Pending {
            operation,
            work,
            answer,
        }))?;
        answered
            .await
            .map_err(|_| EmbeddedError::WriterGone { operation })?
    }
}

/// A write handed to the writer thread.
trait GroupedWrite: Send {
    /// Runs in the group's transaction; says whether it failed, and how to
    /// answer once the group is committed (or not).
    fn run(self: Box<Self>, tx: &Transaction<'_>) -> (bool, Reply);
    /// Answers a write that could not run with SQLite's error.
    fn refuse(self: Box<Self>, error: &rusqlite::Error);
}

/// Answers a write that ran, given whether its group was committed.
type Reply = Box<dyn FnOnce(std::result::Result<(), &rusqlite::Error>) + Send>;

struct Pending<T, F> {
    operation: &'static str,
    work: F,
    answer: tokio::sync::oneshot::Sender<Result<T>>,
}

impl<T, F> GroupedWrite for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Transaction<'_>) -> std::result::Result<T, EmbeddedError> + Send + 'static,
{
    fn run(self: Box<Self>, tx: &Transaction<'_>) -> (bool, Reply) {
        let Pending {
            operation,
            work,
            answer,
        } = *self;
        let value = work(tx);
        let failed = value.is_err();
        let reply: Reply = Box::new(move |committed| {
            let result = match (value, committed) {
                (Ok(value), Ok(())) => Ok(value),
                (Ok(_), Err(e)) => Err(EmbeddedError::sql(operation, same_error(e)).into()),
                // A failed write's answer is its own error, whatever the
                // group's commit did.
                (Err(e), _) => Err(e.into()),
            };
            // The caller may have stopped waiting; what it wrote stands.
            let _ = answer.send(result);
        });
        (failed, reply)
    }

    fn refuse(self: Box<Self>, error: &rusqlite::Error) {
        let _ = self.answer.send(Err(
            EmbeddedError::sql(self.operation, same_error(error)).into()
        ));
    }
}

/// Most writes committed together: bounds how long the write lock is held
/// (other processes wait on it) and how many writes one failed commit fails.
const MAX_GROUP: usize = 64;

/// The thread that commits grouped writes. Writes that arrive while it
/// commits a group wait and go together in the next: under load one
/// transaction (one write lock, one WAL append of the pages they share)
/// serves many steps; alone, a write is committed at once.
#[derive(Debug)]
struct Writer {
    queue: Option<mpsc::Sender<Box<dyn GroupedWrite>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(conn: Arc<Mutex<Connection>>, committed: Arc<AtomicU64>) -> std::io::Result<Self> {
        let (queue, writes) = mpsc::channel::<Box<dyn GroupedWrite>>();
        let thread = std::thread::Builder::new()
            .name("vergence-sqlite-writer".into())
            .spawn(move || {
                while let Ok(first) = writes.recv() {
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP {
                        match writes.try_recv() {
                            Ok(next) => group.push(next),
                            Err(_) => break,
                        }
                    }
                    if commit_group(&conn, group) {
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    fn submit(&self, write: Box<dyn GroupedWrite>) -> std::result::Result<(), EmbeddedError> {
        // The thread ends only when the store is dropped, or a write
        // panicked on it.
        let gone = || EmbeddedError::WriterGone { operation: "write" };
        self.queue
            .as_ref()
            .ok_or_else(gone)?
            .send(write)
            .map_err(|_| gone())
    }
}

impl Drop for Writer {
    /// Writes already handed over are committed, and the connection is let
    /// go, before the store is gone: the file is closed (its WAL
    /// checkpointed) when the store drops, as before.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `group` in one immediate transaction, each write within a
/// savepoint of its own when there are several, and answers each after the
/// commit. A failure of SQLite itself (the lock not taken in time, a full
/// disk) fails every write of the group: none of them was committed.
/// Whether a transaction was committed.
fn commit_group(conn: &Mutex<Connection>, group: Vec<Box<dyn GroupedWrite>>) -> bool {
    let mut conn = lock(conn);
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            for write in group {
                write.refuse(&e);
            }
            return false;
        }
    };
    // A write alone needs no savepoint: the transaction is its own.
    let alone = group.len() == 1;
    let mut replies = Vec::with_capacity(group.len());
    let mut broken: Option<rusqlite::Error> = None;
    let mut rolled_back = false;
    for write in group {
        if let Some(e) = &broken {
            write.refuse(e);
            continue;
        }
        if !alone && let Err(e) = run_cached(&tx, &["SAVEPOINT w"]) {
            write.refuse(&e);
            broken = Some(e);
            continue;
        }
        // A write that panics is not answered (its caller hears the
        // writer stopped) and takes the group down with it: what it left
        // in the transaction is unknown.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write.run(&tx)));
        let Ok((failed, reply)) = ran else {
            broken = Some(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                Some("a write of the same transaction panicked".into()),
            ));
            continue;
        };
        replies.push(reply);
        if alone {
            rolled_back = failed;
        } else if let Err(e) = run_cached(
            &tx,
            if failed {
                &["ROLLBACK TO w", "RELEASE w"]
            } else {
                &["RELEASE w"]
            },
        ) {
            broken = Some(e);
        }
    }
    let committed = match broken {
        // Dropping the transaction rolls it back.
        Some(e) => {
            drop(tx);
            Err(e)
        }
        None if rolled_back => {
            drop(tx);
            return answer(conn, replies, Ok(()), false);
        }
        None => tx.commit(),
    };
    let ok = committed.is_ok();
    answer(conn, replies, committed, ok)
}

/// Lets go of the connection, then answers the group's writes.
fn answer(
    conn: MutexGuard<'_, Connection>,
    replies: Vec<Reply>,
    committed: rusqlite::Result<()>,
    counted: bool,
) -> bool {
    drop(conn);
    for reply in replies {
        reply(committed.as_ref().map(|_| ()));
    }
    counted
}

/// The mutex's connection. A panic while holding the lock cannot leave
/// SQLite inconsistent (transactions roll back on drop), so a poisoned
/// lock is usable.
fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `error` again, for each write of a group whose commit failed with it;
/// SQLite's code is kept, so a busy lock is still retried.
fn same_error(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
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

/// `Connection::execute` through the connection's statement cache. Every
/// step runs the same few statements for its instance and jobs, and
/// parsing them again each time was a visible part of a local run's time
/// (docs/performance.md).
fn cached_execute(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// `Connection::query_row` through the statement cache (see
/// [`cached_execute`]).
fn cached_query_row<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    row: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached(sql)?.query_row(params, row)
}

/// Runs `statements` through the connection's statement cache: a group
/// commit runs its savepoints for every write, and parsing them each time
/// was a visible part of a local run's time (docs/performance.md).
fn run_cached(tx: &Transaction<'_>, statements: &[&str]) -> rusqlite::Result<()> {
    for statement in statements {
        cached_execute(tx, statement, [])?;
    }
    Ok(())
}
