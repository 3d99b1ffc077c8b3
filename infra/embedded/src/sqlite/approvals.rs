//! Approvals, per instance, in the order they were given.

use async_trait::async_trait;
use rusqlite::params;

use vergence_model::ports::ApprovalStore;
use vergence_model::{Approval, InstanceKey};

use super::{Result, SqliteStore, cached_execute, from_json, to_json};
use crate::error::EmbeddedError;

#[async_trait]
impl ApprovalStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_approval", level = "debug", skip_all, fields(instance = %approval.instance, version = %approval.version))]
    async fn put_approval(&self, approval: &Approval) -> Result<()> {
        let body = to_json("put_approval", approval)?;
        self.write("put_approval", |tx| {
            cached_execute(
                tx,
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
