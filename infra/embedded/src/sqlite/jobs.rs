//! Jobs: recorded with their instance's commit, claimed once, finished
//! once; only the newest finished jobs of each instance are kept.

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};

use vergence_model::ports::JobStore;
use vergence_model::{InstanceKey, JobHandle, JobId, JobRecord, JobResult, JobState};

use super::{Result, SqliteStore, cached_execute, cached_query_row, from_json, to_json};
use crate::error::EmbeddedError;

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
    cached_execute(
        tx,
        "DELETE FROM jobs WHERE state = 'finished' AND instance = ?1
           AND rowid NOT IN (
             SELECT rowid FROM jobs WHERE instance = ?1
              ORDER BY rowid DESC LIMIT ?2)",
        params![instance.storage_id(), FINISHED_JOBS_KEPT as i64],
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    Ok(())
}

pub(super) fn state_name(state: &JobState) -> &'static str {
    match state {
        JobState::Created => "created",
        JobState::Dispatched { .. } => "dispatched",
        JobState::Finished { .. } => "finished",
    }
}

impl SqliteStore {
    /// Rewrites a job's state to `next(current)` if `allowed` says the
    /// current one may change; grouped with other steps' writes.
    async fn transition_job(
        &self,
        operation: &'static str,
        id: &JobId,
        allowed: impl Fn(&JobState) -> bool + Send + 'static,
        next: impl Fn(&JobState) -> JobState + Send + 'static,
    ) -> Result<bool> {
        let id = id.clone();
        self.write_grouped(operation, move |tx| {
            transition(tx, operation, &id, allowed, next)
        })
        .await
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
    let body: Option<String> = cached_query_row(
        tx,
        "SELECT body FROM jobs WHERE id = ?1",
        [id.as_str()],
        |r| r.get(0),
    )
    .optional()
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    let Some(body) = body else { return Ok(false) };
    let mut job: JobRecord = from_json(operation, &body)?;
    if !allowed(&job.state) {
        return Ok(false);
    }
    job.state = next(&job.state);
    cached_execute(
        tx,
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
pub(super) fn finish(
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
        let body: Option<String> = cached_query_row(
            &self.conn(),
            "SELECT body FROM jobs WHERE id = ?1",
            [id.as_str()],
            |r| r.get(0),
        )
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
            move |_| JobState::Dispatched { at, handle: None },
        )
        .await
    }

    #[tracing::instrument(name = "sqlite.record_handle", level = "debug", skip_all, fields(job = %id, handle = %handle))]
    async fn record_handle(&self, id: &JobId, handle: &JobHandle) -> Result<bool> {
        let handle = handle.clone();
        self.transition_job(
            "record_handle",
            id,
            |s| matches!(s, JobState::Dispatched { .. }),
            move |state| match state {
                JobState::Dispatched { at, .. } => JobState::Dispatched {
                    at: *at,
                    handle: Some(handle.clone()),
                },
                other => other.clone(),
            },
        )
        .await
    }

    #[tracing::instrument(name = "sqlite.finish_job", level = "debug", skip_all, fields(job = %id))]
    async fn finish_job(&self, id: &JobId, result: &JobResult) -> Result<bool> {
        let (id, result) = (id.clone(), result.clone());
        self.write_grouped("finish_job", move |tx| {
            finish(tx, "finish_job", &id, &result)
        })
        .await
    }
}
