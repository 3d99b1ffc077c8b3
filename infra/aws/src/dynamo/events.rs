//! The audit trail: events partitioned per application, sorted by id (time
//! first), expiring through DynamoDB's TTL after the retention.

use std::collections::HashSet;

use async_trait::async_trait;
use futures::future::try_join_all;
use jiff::{SignedDuration, Timestamp};

use vergence_model::ports::EventStore;
use vergence_model::{ApplicationName, Event, EventFilter};

use super::payload::{decode_inline, inline_body};
use super::table::{PK, TTL};
use super::{DynamoStore, Item, describe, get_attr, key, n, s};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const BODY: &str = "body";
const SERVICE: &str = "service";
const RELEASE_CHANNEL: &str = "release_channel";
/// With a filter on service or channel, DynamoDB counts a page's limit
/// before filtering; pages this large keep the number of round trips low.
const FILTERED_PAGE: usize = 100;

fn events_pk(application: &ApplicationName) -> String {
    format!("events#{application}")
}

/// The item of an event, expiring `retention` after now.
pub(crate) fn event_item(
    operation: &'static str,
    event: &Event,
    retention: SignedDuration,
) -> std::result::Result<Item, AwsError> {
    if event.id.is_empty() {
        return Err(AwsError::Encode {
            operation,
            source: format!("an event of {} has no id", event.application).into(),
        });
    }
    let mut item = key(events_pk(&event.application), &event.id);
    if let Some(service) = &event.service {
        item.insert(SERVICE.to_owned(), s(service.as_str()));
    }
    if let Some(channel) = &event.release_channel {
        item.insert(RELEASE_CHANNEL.to_owned(), s(channel.as_str()));
    }
    let body = inline_body(operation, || format!("event {}", event.id), event)?;
    item.insert(BODY.to_owned(), body);
    let expires = Timestamp::now()
        .as_second()
        .saturating_add(retention.as_secs());
    item.insert(TTL.to_owned(), n(expires));
    Ok(item)
}

impl DynamoStore {
    async fn append(&self, events: &[Event]) -> std::result::Result<(), AwsError> {
        let mut items = Vec::with_capacity(events.len());
        let mut seen = HashSet::new();
        for event in events {
            // A batch may not name an item twice; the first one counts.
            if seen.insert((&event.application, event.id.as_str())) {
                items.push(event_item("append_events", event, self.event_retention)?);
            }
        }
        let applications: HashSet<&ApplicationName> =
            events.iter().map(|e| &e.application).collect();
        for application in applications {
            self.register("append_events", application).await?;
        }
        // Unconditional puts: event ids are deterministic (time, scope,
        // position), so an id already stored is rewritten with the same
        // event, which is what skipping it would leave.
        self.put_all("append_events", items).await
    }

    async fn list(&self, filter: &EventFilter) -> std::result::Result<Vec<Event>, AwsError> {
        if filter.limit == Some(0) {
            return Ok(Vec::new());
        }
        let applications = match &filter.application {
            Some(application) => vec![application.clone()],
            None => self.applications("list_events").await?,
        };
        let per_application =
            try_join_all(applications.iter().map(|a| self.events_of(a, filter))).await?;
        let mut events: Vec<Event> = per_application.into_iter().flatten().collect();
        events.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(limit) = filter.limit {
            events.drain(..events.len().saturating_sub(limit));
        }
        Ok(events)
    }

    /// One application's events matching the filter; with a limit, only
    /// the newest `limit` (read newest first, so no more than needed).
    async fn events_of(
        &self,
        application: &ApplicationName,
        filter: &EventFilter,
    ) -> std::result::Result<Vec<Event>, AwsError> {
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", s(events_pk(application)))
            .scan_index_forward(filter.limit.is_none());
        let mut conditions = Vec::new();
        if let Some(service) = &filter.service {
            conditions.push("#service = :service");
            query = query
                .expression_attribute_names("#service", SERVICE)
                .expression_attribute_values(":service", s(service.as_str()));
        }
        if let Some(channel) = &filter.release_channel {
            conditions.push("#channel = :channel");
            query = query
                .expression_attribute_names("#channel", RELEASE_CHANNEL)
                .expression_attribute_values(":channel", s(channel.as_str()));
        }
        if !conditions.is_empty() {
            query = query.filter_expression(conditions.join(" AND "));
        }
        let mut pages = query.into_paginator();
        if let Some(limit) = filter.limit {
            let page = if conditions.is_empty() {
                limit
            } else {
                limit.max(FILTERED_PAGE)
            };
            pages = pages.page_size(i32::try_from(page).unwrap_or(i32::MAX));
        }
        let mut items = pages.items().send();
        let mut events = Vec::new();
        while filter.limit.is_none_or(|limit| events.len() < limit) {
            let Some(item) = items
                .try_next()
                .await
                .map_err(|e| AwsError::dynamo("list_events", e))?
            else {
                break;
            };
            events.push(decode_event(&item)?);
        }
        Ok(events)
    }
}

fn decode_event(item: &Item) -> std::result::Result<Event, AwsError> {
    let body = get_attr("list_events", item, BODY)?;
    decode_inline("list_events", &describe(item), body)
}

#[async_trait]
impl EventStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.append_events", level = "debug", skip_all, fields(events = events.len()))]
    async fn append_events(&self, events: &[Event]) -> Result<()> {
        Ok(self.append(events).await?)
    }

    #[tracing::instrument(name = "dynamodb.list_events", level = "debug", skip_all)]
    async fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        Ok(self.list(filter).await?)
    }
}
