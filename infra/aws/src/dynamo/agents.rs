//! Agents (one item each, replaced on every call) and their work queues
//! (a partition per agent, an item per work id).
//!
//! A work item's body is the item as queued; its lease and delivery count
//! live in attributes of their own, so leasing is an update conditional on
//! the lease as it was read: of two polls racing for an item, the second
//! finds the lease changed and moves on to the next free item.

use async_trait::async_trait;
use jiff::Timestamp;

use vergence_model::ports::AgentStore;
use vergence_model::{AgentName, AgentState, AgentWork};

use super::payload::{decode_inline, inline_body};
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, Item, describe, get_attr, get_u64, key, n, table};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const AGENTS_PK: &str = "agents";
const AGENT_PREFIX: &str = "agent#";
const WORK_PREFIX: &str = "work#";
const BODY: &str = "body";
/// Epoch milliseconds until which the item is leased; absent when free.
const LEASED_UNTIL: &str = "leased_until";
const DELIVERIES: &str = "deliveries";

fn agent_sk(name: &AgentName) -> String {
    format!("{AGENT_PREFIX}{name}")
}

fn work_pk(agent: &AgentName) -> String {
    format!("agent#{agent}")
}

fn work_sk(id: &str) -> String {
    format!("{WORK_PREFIX}{id}")
}

fn millis(at: Timestamp) -> i64 {
    at.as_millisecond()
}

/// A work item as stored: the body as queued, with its lease attributes.
fn decode_work(operation: &'static str, item: &Item) -> std::result::Result<AgentWork, AwsError> {
    let mut work: AgentWork =
        decode_inline(operation, &describe(item), get_attr(operation, item, BODY)?)?;
    work.leased_until = match item.get(LEASED_UNTIL) {
        None => None,
        Some(_) => {
            let at = get_u64(operation, item, LEASED_UNTIL)?;
            let at = i64::try_from(at).unwrap_or(i64::MAX);
            Some(Timestamp::from_millisecond(at).map_err(|e| {
                AwsError::decode(operation, describe(item), format!("{LEASED_UNTIL}: {e}"))
            })?)
        }
    };
    work.deliveries = match item.get(DELIVERIES) {
        None => 0,
        Some(_) => u32::try_from(get_u64(operation, item, DELIVERIES)?).unwrap_or(u32::MAX),
    };
    Ok(work)
}

/// The lease must still be what was read.
fn lease_unchanged(read: Option<Timestamp>) -> Expression {
    match read {
        None => Expression::new("attribute_exists(#pk) AND attribute_not_exists(#leased)")
            .name("#pk", table::PK)
            .name("#leased", LEASED_UNTIL),
        Some(at) => Expression::new("#leased = :read")
            .name("#leased", LEASED_UNTIL)
            .value(":read", n(millis(at))),
    }
}

impl DynamoStore {
    async fn queue_work(&self, work: &AgentWork) -> std::result::Result<bool, AwsError> {
        let mut item = key(work_pk(&work.agent), work_sk(&work.id));
        let body = inline_body("put_agent_work", || format!("work {}", work.id), work)?;
        item.insert(BODY.to_owned(), body);
        item.insert(DELIVERIES.to_owned(), n(work.deliveries));
        if let Some(until) = work.leased_until {
            item.insert(LEASED_UNTIL.to_owned(), n(millis(until)));
        }
        let put = Write::put(item, Some(Expression::absent()));
        Ok(self.write_one("put_agent_work", put).await? == Outcome::Written)
    }

    async fn load_work(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> std::result::Result<Option<AgentWork>, AwsError> {
        self.get_item("get_agent_work", key(work_pk(agent), work_sk(id)))
            .await?
            .map(|item| decode_work("get_agent_work", &item))
            .transpose()
    }

    /// Leases free items oldest first; an item another poll took since it
    /// was read is skipped for the next one.
    async fn lease(
        &self,
        agent: &AgentName,
        now: Timestamp,
        until: Timestamp,
        limit: usize,
    ) -> std::result::Result<Vec<AgentWork>, AwsError> {
        const OPERATION: &str = "lease_agent_work";
        let items = self
            .query_prefix(OPERATION, &work_pk(agent), WORK_PREFIX)
            .await?;
        let mut free = items
            .iter()
            .map(|item| decode_work(OPERATION, item))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        free.retain(|work| work.is_free(now));
        free.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        let mut leased = Vec::new();
        for mut work in free {
            if leased.len() >= limit {
                break;
            }
            let update = Write::Update {
                key: key(work_pk(agent), work_sk(&work.id)),
                update: Expression::new("SET #until = :until, #deliveries = :deliveries")
                    .name("#until", LEASED_UNTIL)
                    .name("#deliveries", DELIVERIES)
                    .value(":until", n(millis(until)))
                    .value(":deliveries", n(work.deliveries + 1)),
                condition: Some(lease_unchanged(work.leased_until)),
            };
            if self.write_one(OPERATION, update).await? == Outcome::Written {
                work.leased_until = Some(until);
                work.deliveries += 1;
                leased.push(work);
            }
        }
        Ok(leased)
    }

    async fn renew(
        &self,
        agent: &AgentName,
        ids: &[String],
        until: Timestamp,
    ) -> std::result::Result<(), AwsError> {
        for id in ids {
            let update = Write::Update {
                key: key(work_pk(agent), work_sk(id)),
                update: Expression::new("SET #until = :until")
                    .name("#until", LEASED_UNTIL)
                    .value(":until", n(millis(until))),
                // An item already done stays done.
                condition: Some(Expression::new("attribute_exists(#pk)").name("#pk", table::PK)),
            };
            self.write_one("renew_agent_work", update).await?;
        }
        Ok(())
    }

    async fn remove_work(
        &self,
        agent: &AgentName,
        id: &str,
    ) -> std::result::Result<bool, AwsError> {
        let delete = Write::Delete {
            key: key(work_pk(agent), work_sk(id)),
            condition: Some(Expression::new("attribute_exists(#pk)").name("#pk", table::PK)),
        };
        Ok(self.write_one("finish_agent_work", delete).await? == Outcome::Written)
    }

    async fn store_agent(&self, agent: &AgentState) -> std::result::Result<(), AwsError> {
        let mut item = key(AGENTS_PK, agent_sk(&agent.name));
        let body = inline_body("touch_agent", || format!("agent {}", agent.name), agent)?;
        item.insert(BODY.to_owned(), body);
        self.write_one("touch_agent", Write::put(item, None))
            .await
            .map(drop)
    }

    async fn load_agent(
        &self,
        name: &AgentName,
    ) -> std::result::Result<Option<AgentState>, AwsError> {
        self.get_item("get_agent", key(AGENTS_PK, agent_sk(name)))
            .await?
            .map(|item| {
                decode_inline(
                    "get_agent",
                    &describe(&item),
                    get_attr("get_agent", &item, BODY)?,
                )
            })
            .transpose()
    }

    async fn all_agents(&self) -> std::result::Result<Vec<AgentState>, AwsError> {
        // Sort-key order is name order.
        let items = self
            .query_prefix("list_agents", AGENTS_PK, AGENT_PREFIX)
            .await?;
        items
            .iter()
            .map(|item| {
                decode_inline(
                    "list_agents",
                    &describe(item),
                    get_attr("list_agents", item, BODY)?,
                )
            })
            .collect()
    }
}

#[async_trait]
impl AgentStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_agent_work", level = "debug", skip_all, fields(agent = %work.agent, work = %work.id))]
    async fn put_agent_work(&self, work: &AgentWork) -> Result<bool> {
        Ok(self.queue_work(work).await?)
    }

    #[tracing::instrument(name = "dynamodb.get_agent_work", level = "debug", skip_all, fields(agent = %agent, work = %id))]
    async fn get_agent_work(&self, agent: &AgentName, id: &str) -> Result<Option<AgentWork>> {
        Ok(self.load_work(agent, id).await?)
    }

    #[tracing::instrument(name = "dynamodb.lease_agent_work", level = "debug", skip_all, fields(agent = %agent))]
    async fn lease_agent_work(
        &self,
        agent: &AgentName,
        now: Timestamp,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<AgentWork>> {
        Ok(self.lease(agent, now, until, limit).await?)
    }

    #[tracing::instrument(name = "dynamodb.renew_agent_work", level = "debug", skip_all, fields(agent = %agent, items = ids.len()))]
    async fn renew_agent_work(
        &self,
        agent: &AgentName,
        ids: &[String],
        until: Timestamp,
    ) -> Result<()> {
        Ok(self.renew(agent, ids, until).await?)
    }

    #[tracing::instrument(name = "dynamodb.finish_agent_work", level = "debug", skip_all, fields(agent = %agent, work = %id))]
    async fn finish_agent_work(&self, agent: &AgentName, id: &str) -> Result<bool> {
        Ok(self.remove_work(agent, id).await?)
    }

    #[tracing::instrument(name = "dynamodb.touch_agent", level = "debug", skip_all, fields(agent = %agent.name))]
    async fn touch_agent(&self, agent: &AgentState) -> Result<()> {
        Ok(self.store_agent(agent).await?)
    }

    #[tracing::instrument(name = "dynamodb.get_agent", level = "debug", skip_all, fields(agent = %name))]
    async fn get_agent(&self, name: &AgentName) -> Result<Option<AgentState>> {
        Ok(self.load_agent(name).await?)
    }

    #[tracing::instrument(name = "dynamodb.list_agents", level = "debug", skip_all)]
    async fn list_agents(&self) -> Result<Vec<AgentState>> {
        Ok(self.all_agents().await?)
    }
}
