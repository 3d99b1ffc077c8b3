//! Releases: immutable versions per service, listed in the order they were
//! last pushed.
//!
//! Each version has a record (`version#…`, the immutable body and the
//! sequence number of its latest push) and one push-order entry
//! (`pushed#<seq>`, a copy of the body), so the newest releases are one
//! descending query. The sequence number is the push's time in
//! microseconds (made unique by conditional writes), so a new version is
//! one transaction with nothing read first. Pushing a version again moves
//! its push-order entry to a new sequence number, in one transaction
//! conditional on the sequence number read. (Services pushed to before
//! 2026-11-28 have small sequence numbers from a counter item; the time's
//! are larger, so their order holds.)

use async_trait::async_trait;
use std::collections::HashSet;

use vergence_model::ports::{ReleasePush, ReleaseStore};
use vergence_model::{ApplicationName, Release, ServiceName};

use super::config::in_force;
use super::events::event_item;
use super::instances::{TRANSACTION_BYTES, TRANSACTION_ITEMS, record_write};
use super::payload::{decode_inline, inline_body};
use super::table::{PK, SK};
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, describe, get_attr, get_u64, key, n, s};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const BODY: &str = "body";
const PUSHED_SEQ: &str = "pushed_seq";
const VERSION: &str = "version";
const PUSHED_PREFIX: &str = "pushed#";
/// Pushes of the same version racing each other retry this often.
const PUSH_ATTEMPTS: usize = 5;

fn releases_pk(application: &ApplicationName, service: &ServiceName) -> String {
    format!("releases#{application}/{service}")
}

fn version_sk(version: &str) -> String {
    format!("version#{version}")
}

fn pushed_sk(seq: u64) -> String {
    format!("{PUSHED_PREFIX}{seq:020}")
}

impl DynamoStore {
    #[tracing::instrument(skip_all, fields(application = %release.application, service = %release.service, version = %release.version))]
    async fn push(&self, release: &Release) -> std::result::Result<(), AwsError> {
        self.push_with(release, &[], |_| None).await
    }

    /// Records `release` in one transaction with `with` (writes of other
    /// items; `lost` says what a lost condition among them stands for, as
    /// a conflict ending the push). The sequence number is the push's time;
    /// the first attempt takes the version for new (the usual push), later
    /// ones read it first.
    async fn push_with(
        &self,
        release: &Release,
        with: &[Write],
        lost: impl Fn(usize) -> Option<String>,
    ) -> std::result::Result<(), AwsError> {
        let pk = releases_pk(&release.application, &release.service);
        let first = u64::try_from(release.created_at.as_microsecond()).unwrap_or(0);
        for attempt in 0..PUSH_ATTEMPTS {
            let seq = first + attempt as u64;
            let mut writes = with.to_vec();
            writes.extend(self.release_writes(&pk, release, seq, attempt == 0).await?);
            match self.transact("put_release", writes).await? {
                Outcome::Written => return Ok(()),
                Outcome::Lost { index } => {
                    if let Some(what) = lost(index) {
                        return Err(AwsError::conflict(what));
                    }
                }
            }
        }
        Err(AwsError::conflict(format!(
            "release {} of {} (still being pushed concurrently after {PUSH_ATTEMPTS} attempts)",
            release.version, release.service
        )))
    }

    /// The writes that record `release` as push number `seq` (or after the
    /// version's previous push, if that is later). Unless `assume_new`, the
    /// version's record is read first, and a version pushed before with
    /// other parameters is refused.
    async fn release_writes(
        &self,
        pk: &str,
        release: &Release,
        seq: u64,
        assume_new: bool,
    ) -> std::result::Result<Vec<Write>, AwsError> {
        let version_key = key(pk, version_sk(&release.version));
        let existing = if assume_new {
            None
        } else {
            self.get_item("put_release", version_key.clone()).await?
        };
        let (body, previous_seq) = match &existing {
            Some(item) => {
                let body = get_attr("put_release", item, BODY)?;
                let stored: Release = decode_inline("put_release", &describe(item), body)?;
                if stored.params != release.params {
                    return Err(AwsError::conflict(format!(
                        "release {} of {} (it exists with other parameters; versions are immutable)",
                        release.version, release.service
                    )));
                }
                (
                    body.clone(),
                    Some(get_u64("put_release", item, PUSHED_SEQ)?),
                )
            }
            None => {
                let what = || format!("release {} of {}", release.version, release.service);
                (inline_body("put_release", what, release)?, None)
            }
        };
        let seq = previous_seq.map_or(seq, |previous| seq.max(previous + 1));
        let version_write = match previous_seq {
            None => {
                let mut item = version_key;
                item.insert(BODY.to_owned(), body.clone());
                item.insert(PUSHED_SEQ.to_owned(), n(seq));
                Write::put(item, Some(Expression::absent()))
            }
            Some(previous) => Write::Update {
                key: version_key,
                update: Expression::new("SET #seq = :seq")
                    .name("#seq", PUSHED_SEQ)
                    .value(":seq", n(seq)),
                condition: Some(Expression::equals(PUSHED_SEQ, n(previous))),
            },
        };
        let mut order = key(pk, pushed_sk(seq));
        order.insert(VERSION.to_owned(), s(release.version.as_str()));
        order.insert(BODY.to_owned(), body);
        // Another push in the same microsecond is another version's.
        let mut writes = vec![version_write, Write::put(order, Some(Expression::absent()))];
        if let Some(previous) = previous_seq {
            writes.push(Write::Delete {
                key: key(pk, pushed_sk(previous)),
                condition: None,
            });
        }
        Ok(writes)
    }

    /// A release with its instances' desired states and its events, in one
    /// transaction conditional on the config in force (see
    /// [`ReleaseStore::push_release`]).
    async fn push_all(&self, push: &ReleasePush) -> std::result::Result<(), AwsError> {
        let mut writes = vec![in_force(&push.config_hash)];
        for record in &push.instances {
            writes.push(record_write(record)?);
        }
        let mut seen = HashSet::new();
        for event in &push.events {
            // One transaction may not write an item twice.
            if seen.insert(event.id.as_str()) {
                let item = event_item("push_release", event, self.event_retention)?;
                writes.push(Write::put(item, None));
            }
        }
        // The release's own writes are at most 3 items, two copies of an
        // inline body (≤ 400 KB each): half the transaction is room enough.
        let bytes: usize = writes.iter().map(Write::size).sum();
        if writes.len() + 3 > TRANSACTION_ITEMS || bytes > TRANSACTION_BYTES / 2 {
            return self.push_in_parts(push).await;
        }
        let instances = 1..=push.instances.len();
        let lost = |index: usize| match index {
            0 => Some("the config in force".to_owned()),
            i if instances.contains(&i) => Some(format!("instance {}", push.instances[i - 1].key)),
            // The release's own writes: pushed concurrently, or before.
            _ => None,
        };
        self.push_with(&push.release, &writes, lost).await
    }

    /// A push too large for one transaction (a service in more channels
    /// than a transaction holds items): the release under the config's
    /// condition, then each instance under its own. An instance that
    /// changed meanwhile ends it as a conflict, and the caller pushes again
    /// (the same version again only moves it to the top).
    async fn push_in_parts(&self, push: &ReleasePush) -> std::result::Result<(), AwsError> {
        let config = [in_force(&push.config_hash)];
        let lost = |index: usize| (index == 0).then(|| "the config in force".to_owned());
        self.push_with(&push.release, &config, lost).await?;
        for record in &push.instances {
            if self
                .write_one("push_release", record_write(record)?)
                .await?
                != Outcome::Written
            {
                return Err(AwsError::conflict(format!("instance {}", record.key)));
            }
        }
        let mut items = Vec::new();
        for event in &push.events {
            items.push(event_item("push_release", event, self.event_retention)?);
        }
        self.put_all("push_release", items).await
    }

    async fn newest_releases(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        limit: usize,
    ) -> std::result::Result<Vec<Release>, AwsError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut items = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(releases_pk(application, service)))
            .expression_attribute_values(":prefix", s(PUSHED_PREFIX))
            .scan_index_forward(false)
            .into_paginator()
            .page_size(i32::try_from(limit).unwrap_or(i32::MAX))
            .items()
            .send();
        let mut releases = Vec::new();
        while releases.len() < limit {
            let Some(item) = items
                .try_next()
                .await
                .map_err(|e| AwsError::dynamo("list_releases", e))?
            else {
                break;
            };
            let body = get_attr("list_releases", &item, BODY)?;
            releases.push(decode_inline("list_releases", &describe(&item), body)?);
        }
        Ok(releases)
    }
}

#[async_trait]
impl ReleaseStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_release", level = "debug", skip_all, fields(application = %release.application, service = %release.service, version = %release.version))]
    async fn put_release(&self, release: &Release) -> Result<()> {
        Ok(self.push(release).await?)
    }

    #[tracing::instrument(name = "dynamodb.push_release", level = "debug", skip_all, fields(application = %push.release.application, service = %push.release.service, version = %push.release.version))]
    async fn push_release(&self, push: &ReleasePush) -> Result<()> {
        Ok(self.push_all(push).await?)
    }

    #[tracing::instrument(name = "dynamodb.latest_release", level = "debug", skip_all, fields(application = %application, service = %service))]
    async fn latest_release(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
    ) -> Result<Option<Release>> {
        let newest = self.newest_releases(application, service, 1).await?;
        Ok(newest.into_iter().next())
    }

    #[tracing::instrument(name = "dynamodb.list_releases", level = "debug", skip_all, fields(application = %application, service = %service))]
    async fn list_releases(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        limit: usize,
    ) -> Result<Vec<Release>> {
        Ok(self.newest_releases(application, service, limit).await?)
    }
}
