//! Service instances: every write conditional on the revision read, written
//! atomically with the jobs and events its decision implies; and the sparse,
//! sharded due index the scheduler queries.
//!
//! A steady-state check that found nothing ([`QuietCheck`]) is kept in a
//! small item of its own next to the instance (`…#check`), so that it costs
//! one write unit instead of rewriting the whole record and its index entry.
//! The check item names the revision it was made on: a later write of the
//! instance (which carries the check's fields, read with it) supersedes it,
//! and a reader takes it up only while the instance is at that revision.

use std::collections::HashSet;

use async_trait::async_trait;
use futures::future::try_join_all;
use jiff::Timestamp;
use sha2::{Digest, Sha256};

use std::collections::HashMap;

use vergence_model::ports::{InstanceChange, InstanceCommit, InstanceFilter, InstanceStore};
use vergence_model::{ApplicationName, InstanceKey, InstanceRecord, QuietCheck};

use super::events::event_item;
use super::jobs::{expire, finish_write, job_item};
use super::payload::{decode_inline, inline_body};
use super::table::{DUE_INDEX, DUE_PK, DUE_SHARDS, DUE_SK};
use super::write::{Expression, Outcome, Write, item_size};
use super::{DynamoStore, Item, describe, get_attr, get_u64, key, n, s, sortable_millis};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const REVISION: &str = "revision";
const BODY: &str = "body";
/// The check item's revision of the instance it was made on.
const BASE: &str = "base";
/// The check item's count of checks on that revision.
const SEQ: &str = "seq";
/// What follows an instance's sort key in its check item's. No name may
/// contain `#`, and `-` sorts after it: between an instance's key and its
/// check item's there is no other item.
const CHECK_SUFFIX: &str = "#check";
/// DynamoDB's limit on the writes in one transaction.
pub(super) const TRANSACTION_ITEMS: usize = 100;
/// DynamoDB's 4 MB limit on a transaction, less a margin for what the size
/// estimate leaves out (expressions, request framing).
pub(super) const TRANSACTION_BYTES: usize = 4 * 1024 * 1024 - 256 * 1024;

fn instance_pk(application: &ApplicationName) -> String {
    format!("instances#{application}")
}

fn instance_sk(instance: &InstanceKey) -> String {
    format!("instance#{}/{}", instance.service, instance.release_channel)
}

/// A stable shard for the instance, so its index entries always land in
/// the same `due#<shard>` partition (SHA-256: stable across processes and
/// releases, unlike the standard library's hasher).
fn due_shard(id: &str) -> u32 {
    let digest = Sha256::digest(id.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % DUE_SHARDS
}

fn check_sk(instance: &InstanceKey) -> String {
    format!("{}{CHECK_SUFFIX}", instance_sk(instance))
}

fn instance_item(record: &InstanceRecord, revision: u64) -> std::result::Result<Item, AwsError> {
    let instance = &record.key;
    let mut stored = record.clone();
    stored.revision = revision;
    let mut item = key(instance_pk(&instance.application), instance_sk(instance));
    item.insert(REVISION.to_owned(), n(revision));
    let body = inline_body("commit", || format!("instance {instance}"), &stored)?;
    item.insert(BODY.to_owned(), body);
    // Only instances waiting for a time carry the index keys: the index stays sparse.
    if let Some(at) = record.due_at() {
        let id = instance.storage_id();
        item.insert(DUE_PK.to_owned(), s(format!("due#{}", due_shard(&id))));
        item.insert(
            DUE_SK.to_owned(),
            s(format!("{}#{id}", sortable_millis(at.as_millisecond()))),
        );
    }
    Ok(item)
}

/// The instance in `item`, with the check in `check` taken up when it was
/// made on the instance's revision.
fn decode_instance(
    operation: &'static str,
    item: &Item,
    check: Option<&Item>,
) -> std::result::Result<InstanceRecord, AwsError> {
    let body = get_attr(operation, item, BODY)?;
    let mut record: InstanceRecord = decode_inline(operation, &describe(item), body)?;
    record.revision = get_u64(operation, item, REVISION)?;
    if let Some(check) = check
        && get_u64(operation, check, BASE)? == record.revision
    {
        let quiet: QuietCheck = decode_inline(
            operation,
            &describe(check),
            get_attr(operation, check, BODY)?,
        )?;
        record.take_check(&quiet);
        record.quiet_checks = get_u64(operation, check, SEQ)?;
    }
    Ok(record)
}

/// A check of `record` as its own item: conditional on no later check of
/// the same revision, and on no check of a later one.
fn check_write(
    record: &InstanceRecord,
    check: &QuietCheck,
) -> std::result::Result<Write, AwsError> {
    let instance = &record.key;
    let mut item = key(instance_pk(&instance.application), check_sk(instance));
    item.insert(BASE.to_owned(), n(record.revision));
    item.insert(SEQ.to_owned(), n(record.quiet_checks + 1));
    let body = inline_body("record_check", || format!("check of {instance}"), check)?;
    item.insert(BODY.to_owned(), body);
    let condition = Expression::new(
        "attribute_not_exists(#base) OR #base < :base OR (#base = :base AND #seq = :seq)",
    )
    .name("#base", BASE)
    .name("#seq", SEQ)
    .value(":base", n(record.revision))
    .value(":seq", n(record.quiet_checks));
    Ok(Write::put(item, Some(condition)))
}

/// The write of `record` at the next revision, conditional on its own
/// (the one read).
pub(super) fn record_write(record: &InstanceRecord) -> std::result::Result<Write, AwsError> {
    let commit = InstanceCommit {
        change: InstanceChange::Put(Box::new(record.clone())),
        expected_revision: Some(record.revision),
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    };
    Ok(instance_write(&commit)?.0)
}

/// The instance's own write, conditional on the revision read, and the
/// revision it leaves (0 after a delete).
fn instance_write(commit: &InstanceCommit) -> std::result::Result<(Write, u64), AwsError> {
    let condition = Some(match commit.expected_revision {
        None => Expression::absent(),
        Some(revision) => Expression::equals(REVISION, n(revision)),
    });
    Ok(match &commit.change {
        InstanceChange::Put(record) => {
            let next = commit.expected_revision.unwrap_or(0) + 1;
            (Write::put(instance_item(record, next)?, condition), next)
        }
        InstanceChange::Delete(instance) => {
            let key = key(instance_pk(&instance.application), instance_sk(instance));
            (Write::Delete { key, condition }, 0)
        }
    })
}

/// The check item goes with its instance: one added again later starts at
/// revision 1, which an old check of revision 1 must not be taken for.
fn check_delete(commit: &InstanceCommit) -> Option<Write> {
    let InstanceChange::Delete(instance) = &commit.change else {
        return None;
    };
    Some(Write::Delete {
        key: key(instance_pk(&instance.application), check_sk(instance)),
        condition: None,
    })
}

/// What the write at `index` of a commit's transaction, which lost its
/// condition, stands for.
fn lost_write(commit: &InstanceCommit, index: usize) -> String {
    // A delete's second write, its check item's, has no condition.
    let first_job = 1 + usize::from(check_delete(commit).is_some());
    let Some(job) = index.checked_sub(first_job) else {
        return format!("instance {}", commit.change.key());
    };
    if let Some(job) = commit.new_jobs.get(job) {
        return format!("job {} (already recorded)", job.id);
    }
    match commit.finished_jobs.get(job - commit.new_jobs.len()) {
        Some((job, _)) => format!("job {job} (already finished)"),
        None => format!("instance {}", commit.change.key()),
    }
}

/// The writes of a commit: those that must be atomic, then events as long as
/// the transaction has room, and the events that did not fit.
struct Plan {
    /// The instance's revision once the commit is written.
    revision: u64,
    writes: Vec<Write>,
    overflow: Vec<Item>,
    parts: Vec<Item>,
}

impl DynamoStore {
    fn plan_commit(&self, commit: &InstanceCommit) -> std::result::Result<Plan, AwsError> {
        let instance = commit.change.key();
        let (write, revision) = instance_write(commit)?;
        let mut writes = vec![write];
        writes.extend(check_delete(commit));
        let mut parts = Vec::new();
        let mut job_ids = HashSet::new();
        for job in &commit.new_jobs {
            // One transaction may not write an item twice; the second record
            // of a job would be a replay, as the embedded store reports it.
            if !job_ids.insert(&job.id) {
                return Err(AwsError::conflict(format!(
                    "job {} (already recorded)",
                    job.id
                )));
            }
            let (item, mut job_parts) = job_item("commit", job)?;
            // The job ends by its deadline; its item expires a retention
            // after it ends (see `finish`), its parts with it.
            expire(&mut job_parts, job.deadline, self.event_retention);
            // A job id already recorded means this decision was committed before.
            writes.push(Write::put(item, Some(Expression::absent())));
            parts.extend(job_parts);
        }
        for (job, result) in &commit.finished_jobs {
            let (write, result_parts) =
                finish_write("commit", job, result, self.event_retention, None)?;
            writes.push(write);
            parts.extend(result_parts);
        }
        let mut bytes: usize = writes.iter().map(Write::size).sum();
        if writes.len() > TRANSACTION_ITEMS || bytes > TRANSACTION_BYTES {
            return Err(AwsError::TooLarge {
                operation: "commit",
                what: format!(
                    "the commit of instance {instance} with {} jobs",
                    commit.new_jobs.len()
                ),
                size: bytes,
                limit: TRANSACTION_BYTES,
            });
        }
        let mut overflow = Vec::new();
        let mut seen = HashSet::new();
        for event in &commit.events {
            // One transaction may not write an item twice.
            if !seen.insert(event.id.as_str()) {
                continue;
            }
            let item = event_item("commit", event, self.event_retention)?;
            let size = item_size(&item);
            if overflow.is_empty()
                && writes.len() < TRANSACTION_ITEMS
                && bytes + size <= TRANSACTION_BYTES
            {
                bytes += size;
                writes.push(Write::put(item, None));
            } else {
                overflow.push(item);
            }
        }
        Ok(Plan {
            revision,
            writes,
            overflow,
            parts,
        })
    }

    #[tracing::instrument(skip_all, fields(instance = %commit.change.key(), expected = ?commit.expected_revision))]
    async fn commit_instance(&self, commit: InstanceCommit) -> std::result::Result<u64, AwsError> {
        let instance = commit.change.key().clone();
        let Plan {
            revision,
            mut writes,
            overflow,
            parts,
        } = self.plan_commit(&commit)?;
        let creating = commit.expected_revision.is_none() && revision > 0;
        if creating {
            self.register("commit", &instance.application).await?;
        }
        self.write_parts("commit", &parts).await?;
        // A lone instance write needs no transaction, which costs twice as much.
        let outcome = if writes.len() == 1 {
            self.write_one("commit", writes.remove(0)).await
        } else {
            self.transact("commit", writes).await
        };
        match outcome {
            Ok(Outcome::Written) => {}
            Ok(Outcome::Lost { index }) => {
                self.discard_parts("commit", &parts).await;
                return Err(AwsError::conflict(lost_write(&commit, index)));
            }
            Err(error) => {
                self.discard_parts("commit", &parts).await;
                return Err(error);
            }
        }
        // The instance and its jobs are committed; events that did not fit the
        // transaction follow it. Failing the commit now would make the caller
        // redo a decision that is already stored, so a failure is only logged.
        if !overflow.is_empty() {
            let count = overflow.len();
            if let Err(error) = self.put_all("commit", overflow).await {
                tracing::error!(%error, count, "events of a committed change were not recorded");
            }
        }
        Ok(revision)
    }

    async fn list_instance_records(
        &self,
        filter: &InstanceFilter,
    ) -> std::result::Result<Vec<InstanceRecord>, AwsError> {
        let applications = match &filter.application {
            Some(application) => vec![application.clone()],
            None => self.applications("list_instances").await?,
        };
        let prefix = match &filter.service {
            Some(service) => format!("instance#{service}/"),
            None => "instance#".to_owned(),
        };
        let pages = try_join_all(applications.iter().map(|application| {
            let pk = instance_pk(application);
            let prefix = &prefix;
            async move { self.query_prefix("list_instances", &pk, prefix).await }
        }))
        .await?;
        let mut instances = Vec::new();
        let mut checks = HashMap::new();
        for item in pages.iter().flatten() {
            let sk = super::get_s("list_instances", item, super::table::SK)?;
            match sk.strip_suffix(CHECK_SUFFIX) {
                Some(instance) => {
                    checks.insert(instance.to_owned(), item);
                }
                None => instances.push((sk, item)),
            }
        }
        let mut records = Vec::new();
        for (sk, item) in instances {
            let check = checks.get(sk).copied();
            let record = decode_instance("list_instances", item, check)?;
            if filter.matches(&record.key) {
                records.push(record);
            }
        }
        records.sort_by_cached_key(|record| record.key.storage_id());
        Ok(records)
    }

    /// The instance and its check item, in one request (the two are
    /// adjacent in the sort order).
    async fn instance_with_check(
        &self,
        instance: &InstanceKey,
    ) -> std::result::Result<Option<InstanceRecord>, AwsError> {
        const OPERATION: &str = "get_instance";
        let sk = instance_sk(instance);
        let check = check_sk(instance);
        let items: Vec<Item> = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :instance AND :check")
            .expression_attribute_names("#pk", super::table::PK)
            .expression_attribute_names("#sk", super::table::SK)
            .expression_attribute_values(":pk", s(instance_pk(&instance.application)))
            .expression_attribute_values(":instance", s(&sk))
            .expression_attribute_values(":check", s(&check))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| AwsError::dynamo(OPERATION, e))?;
        let find = |wanted: &str| {
            items.iter().find(|item| {
                matches!(item.get(super::table::SK), Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)) if sk == wanted)
            })
        };
        find(&sk)
            .map(|item| decode_instance(OPERATION, item, find(&check)))
            .transpose()
    }

    #[tracing::instrument(skip(self))]
    async fn due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> std::result::Result<Vec<InstanceKey>, AwsError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Every entry due at or before `now` sorts before the next millisecond.
        let before = sortable_millis(now.as_millisecond().saturating_add(1));
        let shards =
            try_join_all((0..DUE_SHARDS).map(|shard| self.due_in_shard(shard, &before, limit)))
                .await?;
        let mut due: Vec<String> = shards.into_iter().flatten().collect();
        due.sort();
        due.truncate(limit);
        due.iter()
            .map(|entry| {
                let id = entry.split_once('#').map_or(entry.as_str(), |(_, id)| id);
                InstanceKey::parse_storage_id(id).map_err(|message| {
                    AwsError::decode("due_instances", format!("due index entry {entry}"), message)
                })
            })
            .collect()
    }

    /// The earliest `limit` entries of one shard due before `before`.
    async fn due_in_shard(
        &self,
        shard: u32,
        before: &str,
        limit: usize,
    ) -> std::result::Result<Vec<String>, AwsError> {
        let mut entries = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(DUE_INDEX)
            .key_condition_expression("#shard = :shard AND #at < :before")
            .expression_attribute_names("#shard", DUE_PK)
            .expression_attribute_names("#at", DUE_SK)
            .expression_attribute_values(":shard", s(format!("due#{shard}")))
            .expression_attribute_values(":before", s(before))
            .into_paginator()
            .page_size(i32::try_from(limit).unwrap_or(i32::MAX))
            .items()
            .send();
        let mut due = Vec::new();
        while due.len() < limit {
            let Some(item) = entries
                .try_next()
                .await
                .map_err(|e| AwsError::dynamo("due_instances", e))?
            else {
                break;
            };
            if let Some(aws_sdk_dynamodb::types::AttributeValue::S(entry)) = item.get(DUE_SK) {
                due.push(entry.clone());
            }
        }
        Ok(due)
    }
}

#[async_trait]
impl InstanceStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.get_instance", level = "debug", skip_all, fields(instance = %instance))]
    async fn get_instance(&self, instance: &InstanceKey) -> Result<Option<InstanceRecord>> {
        Ok(self.instance_with_check(instance).await?)
    }

    async fn record_check(&self, record: &InstanceRecord, check: &QuietCheck) -> Result<bool> {
        let write = check_write(record, check)?;
        Ok(match self.write_one("record_check", write).await? {
            Outcome::Written => true,
            Outcome::Lost { .. } => false,
        })
    }

    #[tracing::instrument(name = "dynamodb.list_instances", level = "debug", skip_all, fields(filter = ?filter))]
    async fn list_instances(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>> {
        Ok(self.list_instance_records(filter).await?)
    }

    /// Instances of one service are adjacent in their application's
    /// partition: one query reads all its channels. It reads the channels
    /// not asked for too, but a query is billed by the bytes it reads
    /// together (4 KB a unit), so that costs no more units than a query
    /// per channel until a service's records pass 4 KB a channel.
    #[tracing::instrument(name = "dynamodb.get_instances", level = "debug", skip_all, fields(instances = keys.len()))]
    async fn get_instances(&self, keys: &[InstanceKey]) -> Result<Vec<Option<InstanceRecord>>> {
        let [first, rest @ ..] = keys else {
            return Ok(Vec::new());
        };
        let one_service = rest
            .iter()
            .all(|k| k.application == first.application && k.service == first.service);
        if rest.is_empty() || !one_service {
            let mut found = Vec::with_capacity(keys.len());
            for key in keys {
                found.push(self.instance_with_check(key).await?);
            }
            return Ok(found);
        }
        let filter = InstanceFilter {
            application: Some(first.application.clone()),
            service: Some(first.service.clone()),
            release_channel: None,
        };
        let records: HashMap<InstanceKey, InstanceRecord> = self
            .list_instance_records(&filter)
            .await?
            .into_iter()
            .map(|record| (record.key.clone(), record))
            .collect();
        Ok(keys.iter().map(|key| records.get(key).cloned()).collect())
    }

    #[tracing::instrument(name = "dynamodb.due_instances", level = "debug", skip_all)]
    async fn due_instances(&self, now: Timestamp, limit: usize) -> Result<Vec<InstanceKey>> {
        Ok(self.due(now, limit).await?)
    }

    #[tracing::instrument(name = "dynamodb.commit", level = "debug", skip_all, fields(instance = %commit.change.key(), expected = ?commit.expected_revision))]
    async fn commit(&self, commit: InstanceCommit) -> Result<u64> {
        Ok(self.commit_instance(commit).await?)
    }
}
