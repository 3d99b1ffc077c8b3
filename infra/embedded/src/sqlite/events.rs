//! The audit trail: events appended once (an id already stored is
//! skipped), alone or with an instance's commit, and listed by filter.

use async_trait::async_trait;
use rusqlite::{Transaction, params};

use vergence_model::ports::EventStore;
use vergence_model::{ApplicationName, Event, EventFilter, ServiceName};

use super::{Result, SqliteStore, from_json, to_json};
use crate::error::EmbeddedError;

pub(super) fn insert_events(
    tx: &Transaction<'_>,
    events: &[Event],
) -> std::result::Result<(), EmbeddedError> {
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
