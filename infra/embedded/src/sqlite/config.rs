//! Config snapshots (immutable, content-addressed) and the pointer to the
//! config in force, moved only from the revision read.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use vergence_model::ports::{ConfigSnapshot, ConfigStore, CurrentConfig};

use super::{
    Result, SqliteStore, cached_execute, cached_query_row, conflict, from_json, millis, to_json,
};
use crate::error::EmbeddedError;

#[async_trait]
impl ConfigStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_snapshot", level = "debug", skip_all)]
    async fn put_snapshot(&self, snapshot: &ConfigSnapshot) -> Result<()> {
        let body = to_json("put_snapshot", snapshot)?;
        self.write("put_snapshot", |tx| {
            cached_execute(
                tx,
                "INSERT OR IGNORE INTO snapshots (hash, created_at, body) VALUES (?1, ?2, ?3)",
                params![snapshot.hash, millis(snapshot.created_at), body],
            )
            .map_err(|e| EmbeddedError::sql("put_snapshot", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_snapshot", level = "debug", skip_all, fields(hash = %hash))]
    async fn get_snapshot(&self, hash: &str) -> Result<Option<ConfigSnapshot>> {
        let body: Option<String> = cached_query_row(
            &self.conn(),
            "SELECT body FROM snapshots WHERE hash = ?1",
            [hash],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| EmbeddedError::sql("get_snapshot", e))?;
        Ok(body.map(|b| from_json("get_snapshot", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.current_config", level = "debug", skip_all)]
    async fn current_config(&self) -> Result<Option<CurrentConfig>> {
        let row = cached_query_row(
            &self.conn(),
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
            let current: Option<u64> = cached_query_row(
                tx,
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
            cached_execute(
                tx,
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
