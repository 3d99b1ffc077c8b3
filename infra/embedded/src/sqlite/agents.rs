//! Agents and their work queues in SQLite. Leasing runs in one immediate
//! transaction, so two polls (of one agent, or of two processes sharing
//! the file) never take the same item.

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};

use vergence_model::ports::AgentStore;
use vergence_model::{AgentName, AgentState, AgentWork};

use super::{Result, SqliteStore, cached_execute, cached_query_row, from_json, millis, to_json};
use crate::error::EmbeddedError;

/// Rewrites an item's lease columns and body.
fn store_lease(
    tx: &Transaction<'_>,
    operation: &'static str,
    work: &AgentWork,
) -> std::result::Result<(), EmbeddedError> {
    cached_execute(
        tx,
        "UPDATE agent_work SET leased_until = ?3, body = ?4 WHERE agent = ?1 AND id = ?2",
        params![
            work.agent.as_str(),
            work.id,
            work.leased_until.map(millis),
            to_json(operation, work)?
        ],
    )
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    Ok(())
}

fn read_work(
    tx: &Transaction<'_>,
    operation: &'static str,
    agent: &AgentName,
    id: &str,
) -> std::result::Result<Option<AgentWork>, EmbeddedError> {
    let body: Option<String> = cached_query_row(
        tx,
        "SELECT body FROM agent_work WHERE agent = ?1 AND id = ?2",
        params![agent.as_str(), id],
        |r| r.get(0),
    )
    .optional()
    .map_err(|e| EmbeddedError::sql(operation, e))?;
    body.map(|b| from_json(operation, &b)).transpose()
}

#[async_trait]
impl AgentStore for SqliteStore {
    #[tracing::instrument(name = "sqlite.put_agent_work", level = "debug", skip_all, fields(agent = %work.agent, work = %work.id))]
    async fn put_agent_work(&self, work: &AgentWork) -> Result<bool> {
        let body = to_json("put_agent_work", work)?;
        self.write("put_agent_work", |tx| {
            let added = cached_execute(
                tx,
                "INSERT INTO agent_work (agent, id, created_at, leased_until, body)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (agent, id) DO NOTHING",
                params![
                    work.agent.as_str(),
                    work.id,
                    millis(work.created_at),
                    work.leased_until.map(millis),
                    body
                ],
            )
            .map_err(|e| EmbeddedError::sql("put_agent_work", e))?;
            Ok(added > 0)
        })
    }

    #[tracing::instrument(name = "sqlite.get_agent_work", level = "debug", skip_all, fields(agent = %agent, work = %id))]
    async fn get_agent_work(&self, agent: &AgentName, id: &str) -> Result<Option<AgentWork>> {
        let body: Option<String> = cached_query_row(
            &self.conn(),
            "SELECT body FROM agent_work WHERE agent = ?1 AND id = ?2",
            params![agent.as_str(), id],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| EmbeddedError::sql("get_agent_work", e))?;
        Ok(body.map(|b| from_json("get_agent_work", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.lease_agent_work", level = "debug", skip_all, fields(agent = %agent))]
    async fn lease_agent_work(
        &self,
        agent: &AgentName,
        now: Timestamp,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<AgentWork>> {
        const OPERATION: &str = "lease_agent_work";
        self.write(OPERATION, |tx| {
            let bodies: Vec<String> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT body FROM agent_work
                         WHERE agent = ?1 AND (leased_until IS NULL OR leased_until <= ?2)
                         ORDER BY created_at, id LIMIT ?3",
                    )
                    .map_err(|e| EmbeddedError::sql(OPERATION, e))?;
                let rows = stmt
                    .query_map(params![agent.as_str(), millis(now), limit as i64], |r| {
                        r.get(0)
                    })
                    .map_err(|e| EmbeddedError::sql(OPERATION, e))?;
                rows.collect::<rusqlite::Result<_>>()
                    .map_err(|e| EmbeddedError::sql(OPERATION, e))?
            };
            let mut leased = Vec::with_capacity(bodies.len());
            for body in bodies {
                let mut work: AgentWork = from_json(OPERATION, &body)?;
                work.leased_until = Some(until);
                work.deliveries += 1;
                store_lease(tx, OPERATION, &work)?;
                leased.push(work);
            }
            Ok(leased)
        })
    }

    #[tracing::instrument(name = "sqlite.renew_agent_work", level = "debug", skip_all, fields(agent = %agent, items = ids.len()))]
    async fn renew_agent_work(
        &self,
        agent: &AgentName,
        ids: &[String],
        until: Timestamp,
    ) -> Result<()> {
        const OPERATION: &str = "renew_agent_work";
        self.write(OPERATION, |tx| {
            for id in ids {
                if let Some(mut work) = read_work(tx, OPERATION, agent, id)? {
                    work.leased_until = Some(until);
                    store_lease(tx, OPERATION, &work)?;
                }
            }
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.finish_agent_work", level = "debug", skip_all, fields(agent = %agent, work = %id))]
    async fn finish_agent_work(&self, agent: &AgentName, id: &str) -> Result<bool> {
        self.write("finish_agent_work", |tx| {
            let removed = cached_execute(
                tx,
                "DELETE FROM agent_work WHERE agent = ?1 AND id = ?2",
                params![agent.as_str(), id],
            )
            .map_err(|e| EmbeddedError::sql("finish_agent_work", e))?;
            Ok(removed > 0)
        })
    }

    #[tracing::instrument(name = "sqlite.touch_agent", level = "debug", skip_all, fields(agent = %agent.name))]
    async fn touch_agent(&self, agent: &AgentState) -> Result<()> {
        let body = to_json("touch_agent", agent)?;
        self.write("touch_agent", |tx| {
            cached_execute(
                tx,
                "INSERT INTO agents (name, body) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET body = excluded.body",
                params![agent.name.as_str(), body],
            )
            .map_err(|e| EmbeddedError::sql("touch_agent", e))?;
            Ok(())
        })
    }

    #[tracing::instrument(name = "sqlite.get_agent", level = "debug", skip_all, fields(agent = %name))]
    async fn get_agent(&self, name: &AgentName) -> Result<Option<AgentState>> {
        let body: Option<String> = cached_query_row(
            &self.conn(),
            "SELECT body FROM agents WHERE name = ?1",
            [name.as_str()],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| EmbeddedError::sql("get_agent", e))?;
        Ok(body.map(|b| from_json("get_agent", &b)).transpose()?)
    }

    #[tracing::instrument(name = "sqlite.list_agents", level = "debug", skip_all)]
    async fn list_agents(&self) -> Result<Vec<AgentState>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT body FROM agents ORDER BY name")
            .map_err(|e| EmbeddedError::sql("list_agents", e))?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| EmbeddedError::sql("list_agents", e))?;
        let mut agents = Vec::new();
        for row in rows {
            let body = row.map_err(|e| EmbeddedError::sql("list_agents", e))?;
            agents.push(from_json("list_agents", &body)?);
        }
        Ok(agents)
    }
}
