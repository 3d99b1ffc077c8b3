//! Alert states pushed from outside, one row per alert name, replaced on
//! every push.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use vergence_model::AlertState;
use vergence_model::ports::AlertStore;

use super::{Result, SqliteStore, cached_execute, cached_query_row, from_json, to_json};
use crate::error::EmbeddedError;

#[async_trait]
impl AlertStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_alert", level = "debug", skip_all)]
    async fn put_alert(&self, alert: &AlertState) -> Result<()> {
        let body = to_json("put_alert", alert)?;
        self.write("put_alert", |tx| {
            cached_execute(
                tx,
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
        let body: Option<String> = cached_query_row(
            &conn,
            "SELECT body FROM alerts WHERE name = ?1",
            [name],
            |r| r.get(0),
        )
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
