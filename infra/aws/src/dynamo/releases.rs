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
use vergence_model::ports::ReleaseStore;
use vergence_model::{ApplicationName, Release, ServiceName};

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
        let pk = releases_pk(&release.application, &release.service);
        let first = u64::try_from(release.created_at.as_microsecond()).unwrap_or(0);
        for attempt in 0..PUSH_ATTEMPTS {
            // The first attempt takes the version for new: the usual push.
            let seq = first + attempt as u64;
            if self.try_push(&pk, release, seq, attempt == 0).await? == Outcome::Written {
                return Ok(());
            }
        }
        Err(AwsError::conflict(format!(
            "release {} of {} (still being pushed concurrently after {PUSH_ATTEMPTS} attempts)",
            release.version, release.service
        )))
    }

    /// One attempt at pushing `release` as push number `seq` (or after the
    /// version's previous push, if that is later). Unless `assume_new`, the
    /// version's record is read first, and a version pushed before with
    /// other parameters is refused.
    async fn try_push(
        &self,
        pk: &str,
        release: &Release,
        seq: u64,
        assume_new: bool,
    ) -> std::result::Result<Outcome, AwsError> {
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
        self.transact("put_release", writes).await
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
