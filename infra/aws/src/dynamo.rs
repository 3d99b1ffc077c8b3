//! The DynamoDB state store: every record in one table, every write that
//! can race conditional, and the scheduler's due index as a sparse, sharded
//! GSI so finding due instances costs O(due), not O(all).
//!
//! # Key schema
//!
//! `<app>`, `<service>` and `<channel>` are validated names (`[a-z0-9-]`),
//! so the `#` and `/` separators never occur inside them and a prefix query
//! for one service cannot match another. Instance ids are
//! `<app>/<service>/<channel>`.
//!
//! | record | `pk` | `sk` | other attributes |
//! |---|---|---|---|
//! | current config pointer | `config` | `current` | `hash` S, `revision` N |
//! | config snapshot | `snapshot#<hash>` | `snapshot` | `body` |
//! | application registry | `applications` | `applications` | `names` SS |
//! | service instance | `instances#<app>` | `instance#<service>/<channel>` | `revision` N, `body`, [`due_pk`, `due_sk`] |
//! | its last quiet check | `instances#<app>` | `instance#<service>/<channel>#check` | `base` N, `seq` N, `body` |
//! | job | `job#<job id>` | `job` | `instance` S, `state` S, [`dispatched_at` S], `body`, [`result`] |
//! | release | `releases#<app>/<service>` | `version#<version>` | `pushed_seq` N, `body` |
//! | release push order | `releases#<app>/<service>` | `pushed#<seq, 20 digits>` | `version` S, `body` |
//! | release push counter | `releases#<app>/<service>` | `counter` | `seq` N |
//! | approval | `approvals#<instance id>` | `<at, epoch ms, 15 digits>#<random>` | `body` |
//! | alert state | `alerts` | `alert#<alert name>` | `body` |
//! | API token | `tokens` | `token#<token id>` | `application` S or `agent` S, `body` (secret hashed) |
//! | used webhook signature | `signature#<hex>` | `webhook` | `ttl` N (when it may be used again), `use_token` S |
//! | agent | `agents` | `agent#<agent name>` | `body` |
//! | agent work item | `agent#<agent name>` | `work#<work id>` | [`leased_until` N (epoch ms)], `deliveries` N, `body` |
//! | event | `events#<app>` | `<event id>` | [`service` S], [`release_channel` S], `body`, `ttl` N |
//! | body part | its record's `pk` | `part#<token>#<index, 5 digits>` | `data` B |
//!
//! Instances, events and releases are partitioned per application (or
//! service), so one busy application does not share a partition with the
//! rest. Listing across applications goes through the registry item, which
//! gains a name when an application's first instance or event is written
//! (names are never removed: an application without instances lists empty).
//!
//! **Due index** (GSI [`table::DUE_INDEX`], keys only): an instance with a
//! `next_check_at` carries `due_pk` = `due#<shard>` and `due_sk` =
//! `<next_check_at, epoch ms, 15 digits>#<instance id>`; one without has
//! neither, so the index holds only instances that are waiting for a time.
//! The shard is a hash of the instance id modulo [`table::DUE_SHARDS`], which
//! spreads index writes over partitions; `due_instances` queries every shard
//! for `due_sk` before now and merges. The index is eventually consistent:
//! the scheduler may see an instance that was just rescheduled, and the step
//! it enqueues then finds nothing to do.
//!
//! **Commits**: a commit that writes only the instance is one conditional
//! PutItem or DeleteItem; with jobs or events it is one TransactWriteItems
//! (the instance conditional on its revision, each job on not existing yet,
//! events unconditional). Instance and jobs always share the transaction;
//! events beyond its limits (100 writes, 4 MB) are written right after it.
//! Reads are strongly consistent, except through the due index.
//!
//! **Bodies** are the records as JSON: a string up to 1 KiB, gzip binary
//! above. Snapshots and jobs (whose inputs and results carry artifacts) may
//! outgrow DynamoDB's 400 KB item limit; their compressed body is then split
//! over part items, written before the record that names them under a token
//! unique to that write, so readers never see half a body and a writer that
//! loses its condition deletes only its own parts.
//!
//! **Events** carry a `ttl` (epoch seconds) of write time plus the retention
//! (30 days unless [`DynamoStore::with_event_retention`] says otherwise).
//! **Ended jobs** get one of the time they ended plus the same retention
//! (their parts: their deadline plus it), so job records, each with up to
//! 1 MiB of output, do not pile up forever.

mod agents;
mod alerts;
mod approvals;
mod batch;
mod config;
mod events;
mod instances;
mod jobs;
mod payload;
mod registry;
mod releases;
pub mod table;
mod tokens;
mod write;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use jiff::SignedDuration;

use vergence_model::ApplicationName;

use crate::error::AwsError;

pub(crate) type Item = HashMap<String, AttributeValue>;

/// How long events are kept unless configured otherwise.
pub const DEFAULT_EVENT_RETENTION: SignedDuration = SignedDuration::from_hours(30 * 24);

/// The DynamoDB [`vergence_model::ports::StateStore`].
#[derive(Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    event_retention: SignedDuration,
    /// Applications this process has seen in the registry item, so the
    /// registry is written once per application per process, not per write.
    registered: Mutex<HashSet<ApplicationName>>,
}

impl DynamoStore {
    /// A store over an existing table (see [`DynamoStore::create_table`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            event_retention: DEFAULT_EVENT_RETENTION,
            registered: Mutex::new(HashSet::new()),
        }
    }

    /// Keeps events for `retention` after they are written (DynamoDB's TTL
    /// deletes them some time after that).
    pub fn with_event_retention(mut self, retention: SignedDuration) -> Self {
        self.event_retention = retention;
        self
    }

    /// Creates the table with its due index and TTL, as the SAM template
    /// does, and waits until it is usable. For tests and local setups.
    pub async fn create_table(client: &Client, name: &str) -> Result<(), AwsError> {
        table::create(client, name).await
    }

    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// Reads one item, strongly consistent: callers decide on what they read
    /// and then write conditionally, so a stale read only costs a conflict.
    pub(crate) async fn get_item(
        &self,
        operation: &'static str,
        key: Item,
    ) -> Result<Option<Item>, AwsError> {
        self.client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map(|output| output.item)
            .map_err(|e| AwsError::dynamo(operation, e))
    }

    /// Every item under `pk` whose sort key starts with `sk_prefix` (any
    /// item when it is empty), in sort-key order: all pages, strongly
    /// consistent.
    pub(crate) async fn query_prefix(
        &self,
        operation: &'static str,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<Item>, AwsError> {
        let query = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .expression_attribute_names("#pk", table::PK)
            .expression_attribute_values(":pk", s(pk));
        // begins_with does not accept an empty prefix.
        let query = if sk_prefix.is_empty() {
            query.key_condition_expression("#pk = :pk")
        } else {
            query
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#sk", table::SK)
                .expression_attribute_values(":prefix", s(sk_prefix))
        };
        query
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| AwsError::dynamo(operation, e))
    }
}

/// A string attribute.
pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub(crate) fn n(value: impl std::fmt::Display) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The primary key of an item.
pub(crate) fn key(pk: impl Into<String>, sk: impl Into<String>) -> Item {
    HashMap::from([(table::PK.to_owned(), s(pk)), (table::SK.to_owned(), s(sk))])
}

/// A string attribute of a read item.
pub(crate) fn get_s<'a>(
    operation: &'static str,
    item: &'a Item,
    name: &str,
) -> Result<&'a str, AwsError> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value),
        other => Err(missing(operation, item, name, other)),
    }
}

/// A number attribute of a read item.
pub(crate) fn get_u64(operation: &'static str, item: &Item, name: &str) -> Result<u64, AwsError> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => value.parse().map_err(|e| {
            AwsError::decode(operation, describe(item), format!("attribute {name}: {e}"))
        }),
        other => Err(missing(operation, item, name, other)),
    }
}

/// A body-like attribute of a read item.
pub(crate) fn get_attr<'a>(
    operation: &'static str,
    item: &'a Item,
    name: &str,
) -> Result<&'a AttributeValue, AwsError> {
    item.get(name)
        .ok_or_else(|| missing(operation, item, name, None))
}

fn missing(
    operation: &'static str,
    item: &Item,
    name: &str,
    found: Option<&AttributeValue>,
) -> AwsError {
    let message = match found {
        None => format!("attribute {name} is missing"),
        Some(other) => format!("attribute {name} has an unexpected type: {other:?}"),
    };
    AwsError::decode(operation, describe(item), message)
}

/// Names an item by its key, for error messages.
pub(crate) fn describe(item: &Item) -> String {
    let part = |name| match item.get(name) {
        Some(AttributeValue::S(value)) => value.as_str(),
        _ => "?",
    };
    format!("item {} / {}", part(table::PK), part(table::SK))
}

/// Epoch milliseconds, zero-padded so that string order is time order.
pub(crate) fn sortable_millis(millis: i64) -> String {
    format!("{:015}", millis.max(0))
}
