//! Service instances: every write checks the revision read, in SQL, and
//! stores the jobs and events its decision implies in the same
//! transaction; and the instances due for a check.

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};

use vergence_model::ports::{InstanceChange, InstanceCommit, InstanceFilter, InstanceStore};
use vergence_model::{ApplicationName, InstanceKey, InstanceRecord, ServiceName};

use super::events::insert_events;
use super::jobs::{finish, state_name};
use super::{
    Result, SqliteStore, cached_execute, cached_query_row, conflict, from_json, millis, to_json,
};
use crate::error::EmbeddedError;

#[async_trait]
impl InstanceStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.get_instance", level = "debug", skip_all, fields(instance = %key))]
    async fn get_instance(&self, key: &InstanceKey) -> Result<Option<InstanceRecord>> {
        let row: Option<(String, u64)> = cached_query_row(
            &self.conn(),
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
        // Grouped: concurrent steps' commits share one transaction.
        self.write_grouped("commit", move |tx| {
            let revision = match &commit.change {
                InstanceChange::Put(record) => {
                    put_instance(tx, "commit", record, commit.expected_revision)?
                }
                InstanceChange::Delete(_) => {
                    at_revision(tx, "commit", &key, commit.expected_revision)?;
                    cached_execute(tx, "DELETE FROM instances WHERE id = ?1", [&id])
                        .map_err(|e| EmbeddedError::sql("commit", e))?;
                    0
                }
            };
            for job in &commit.new_jobs {
                let inserted = cached_execute(
                    tx,
                    "INSERT OR IGNORE INTO jobs (id, instance, state, body)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![
                        job.id.as_str(),
                        id,
                        state_name(&job.state),
                        to_json("commit", job)?
                    ],
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
        .await
    }
}

/// Checks within `tx` that the instance is at `expected` (`None`: that it
/// does not exist): a conflict otherwise. Its current revision.
fn at_revision(
    tx: &Transaction<'_>,
    operation: &'static str,
    key: &InstanceKey,
    expected: Option<u64>,
) -> std::result::Result<Option<u64>, EmbeddedError> {
    let current: Option<u64> = cached_query_row(
        tx,
        "SELECT revision FROM instances WHERE id = ?1",
        [key.storage_id()],
        |r| r.get(0),
    )
    .optional()
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    if current != expected {
        return Err(conflict(format!("instance {key}")));
    }
    Ok(current)
}

/// Writes `record` within `tx` if the instance is at `expected` (`None`:
/// it must not exist); returns its new revision.
pub(super) fn put_instance(
    tx: &Transaction<'_>,
    operation: &'static str,
    record: &InstanceRecord,
    expected: Option<u64>,
) -> std::result::Result<u64, EmbeddedError> {
    let key = &record.key;
    let id = key.storage_id();
    let current = at_revision(tx, operation, key, expected)?;
    let next = current.unwrap_or(0) + 1;
    let mut stored = record.clone();
    stored.revision = next;
    cached_execute(tx,
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
            stored.due_at().map(millis),
            to_json(operation, &stored)?
        ],
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    Ok(next)
}

fn decode_instance(
    body: &str,
    revision: u64,
) -> std::result::Result<InstanceRecord, EmbeddedError> {
    let mut record: InstanceRecord = from_json("instance", body)?;
    record.revision = revision;
    Ok(record)
}
