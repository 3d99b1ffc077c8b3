//! Releases: immutable versions per service, listed in the order they were
//! last pushed.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};

use vergence_model::ports::{ReleasePush, ReleaseStore};
use vergence_model::{ApplicationName, Release, ServiceName};

use super::events::insert_events;
use super::instances::put_instance;
use super::{Result, SqliteStore, cached_execute, cached_query_row, conflict, from_json, to_json};
use crate::error::EmbeddedError;

#[async_trait]
impl ReleaseStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_release", level = "debug", skip_all, fields(application = %release.application, service = %release.service, version = %release.version))]
    async fn put_release(&self, release: &Release) -> Result<()> {
        self.write("put_release", |tx| put_release(tx, "put_release", release))
    }

    #[tracing::instrument(name = "sqlite.push_release", level = "debug", skip_all, fields(application = %push.release.application, service = %push.release.service, version = %push.release.version))]
    async fn push_release(&self, push: &ReleasePush) -> Result<()> {
        const OPERATION: &str = "push_release";
        self.write(OPERATION, |tx| {
            let in_force: Option<String> = cached_query_row(
                tx,
                "SELECT hash FROM current_config WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| EmbeddedError::sql(OPERATION, e))?;
            if in_force.as_deref() != Some(push.config_hash.as_str()) {
                return Err(conflict("the config in force"));
            }
            put_release(tx, OPERATION, &push.release)?;
            for record in &push.instances {
                put_instance(tx, OPERATION, record, Some(record.revision))?;
            }
            insert_events(tx, &push.events)
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

/// Records `release` within `tx` (see [`ReleaseStore::put_release`]).
fn put_release(
    tx: &Transaction<'_>,
    operation: &'static str,
    release: &Release,
) -> std::result::Result<(), EmbeddedError> {
    let existing: Option<String> = cached_query_row(
        tx,
        "SELECT body FROM releases WHERE application = ?1 AND service = ?2 AND version = ?3",
        params![
            release.application.as_str(),
            release.service.as_str(),
            release.version.as_str()
        ],
        |r| r.get(0),
    )
    .optional()
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    let next_seq: i64 = cached_query_row(
        tx,
        "SELECT COALESCE(MAX(pushed_seq), 0) + 1 FROM releases",
        [],
        |r| r.get(0),
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    match existing {
        Some(body) => {
            let stored: Release = from_json(operation, &body)?;
            if stored.params != release.params {
                return Err(conflict(format!(
                    "release {} of {} (it exists with other parameters; versions are immutable)",
                    release.version, release.service
                )));
            }
            cached_execute(tx,
                "UPDATE releases SET pushed_seq = ?4 WHERE application = ?1 AND service = ?2 AND version = ?3",
                params![
                    release.application.as_str(),
                    release.service.as_str(),
                    release.version.as_str(),
                    next_seq
                ],
            )
        }
        None => cached_execute(tx,
            "INSERT INTO releases (application, service, version, pushed_seq, body) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                release.application.as_str(),
                release.service.as_str(),
                release.version.as_str(),
                next_seq,
                to_json(operation, release)?
            ],
        ),
    }
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    Ok(())
}
