//! API tokens, one item per token id (the secret only as its hash) in a
//! partition of their own. Token lookups (every authenticated request) are
//! one read by id; listing one application's (or agent's) tokens filters
//! the partition, which holds tens of tokens, not thousands.

use async_trait::async_trait;
use jiff::Timestamp;

use vergence_model::ports::TokenStore;
use vergence_model::{ApiToken, TokenSubject};

use super::payload::{decode_inline, inline_body};
use super::table::{self, PK};
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, Item, describe, get_attr, key, n, s};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const TOKENS_PK: &str = "tokens";
const TOKEN_PREFIX: &str = "token#";
const APPLICATION: &str = "application";
const AGENT: &str = "agent";
const PLATFORM: &str = "platform";
const BODY: &str = "body";
/// Used webhook signatures: `signature#<hex>`, one partition each.
const SIGNATURE_PREFIX: &str = "signature#";
const SIGNATURE_SK: &str = "webhook";
const USE_TOKEN: &str = "use_token";

fn token_sk(id: &str) -> String {
    format!("{TOKEN_PREFIX}{id}")
}

/// The attribute naming a token's subject, and its value.
fn subject_attribute(subject: &TokenSubject) -> (&'static str, &str) {
    match subject {
        TokenSubject::Application(application) => (APPLICATION, application.as_str()),
        TokenSubject::Agent(agent) => (AGENT, agent.as_str()),
        TokenSubject::Platform => (PLATFORM, PLATFORM),
    }
}

fn decode_token(operation: &'static str, item: &Item) -> std::result::Result<ApiToken, AwsError> {
    let body = get_attr(operation, item, BODY)?;
    decode_inline(operation, &describe(item), body)
}

impl DynamoStore {
    async fn create_token(&self, token: &ApiToken) -> std::result::Result<(), AwsError> {
        let mut item = key(TOKENS_PK, token_sk(&token.id));
        let (attribute, value) = subject_attribute(&token.subject);
        item.insert(attribute.to_owned(), s(value));
        let body = inline_body("put_token", || format!("token {}", token.id), token)?;
        item.insert(BODY.to_owned(), body);
        match self
            .write_one("put_token", Write::put(item, Some(Expression::absent())))
            .await?
        {
            Outcome::Written => Ok(()),
            Outcome::Lost { .. } => Err(AwsError::conflict(format!("token {}", token.id))),
        }
    }

    async fn load_token(&self, id: &str) -> std::result::Result<Option<ApiToken>, AwsError> {
        self.get_item("get_token", key(TOKENS_PK, token_sk(id)))
            .await?
            .map(|item| decode_token("get_token", &item))
            .transpose()
    }

    async fn tokens_of(
        &self,
        subject: &TokenSubject,
    ) -> std::result::Result<Vec<ApiToken>, AwsError> {
        let (attribute, value) = subject_attribute(subject);
        let items: Vec<Item> = self
            .client
            .query()
            .table_name(&self.table)
            .consistent_read(true)
            .key_condition_expression("#pk = :pk")
            .filter_expression("#subject = :subject")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#subject", attribute)
            .expression_attribute_values(":pk", s(TOKENS_PK))
            .expression_attribute_values(":subject", s(value))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| AwsError::dynamo("list_tokens", e))?;
        // Sort-key order is id order.
        items
            .iter()
            .map(|item| decode_token("list_tokens", item))
            .collect()
    }

    /// One item per signature, its `ttl` at its expiry: DynamoDB deletes
    /// it some time after, and until then the condition treats an expired
    /// item as absent.
    async fn record_signature(
        &self,
        signature: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> std::result::Result<bool, AwsError> {
        // A random token per call, as a job's claim has: a retried put
        // whose first try landed (its answer lost) finds its own token.
        let token = format!("{:016x}", fastrand::u64(..));
        let mut item = key(format!("{SIGNATURE_PREFIX}{signature}"), SIGNATURE_SK);
        item.insert(table::TTL.to_owned(), n(expires_at.as_second()));
        item.insert(USE_TOKEN.to_owned(), s(token.clone()));
        let unused =
            Expression::new("attribute_not_exists(#pk) OR #ttl <= :now OR #token = :token")
                .name("#pk", PK)
                .name("#ttl", table::TTL)
                .name("#token", USE_TOKEN)
                .value(":now", n(now.as_second()))
                .value(":token", s(token));
        let outcome = self
            .write_one("use_webhook_signature", Write::put(item, Some(unused)))
            .await?;
        Ok(outcome == Outcome::Written)
    }

    async fn remove_token(&self, id: &str) -> std::result::Result<bool, AwsError> {
        let delete = Write::Delete {
            key: key(TOKENS_PK, token_sk(id)),
            // Fails for a token that is not there, which tells the caller.
            condition: Some(Expression::new("attribute_exists(#pk)").name("#pk", PK)),
        };
        Ok(self.write_one("delete_token", delete).await? == Outcome::Written)
    }
}

#[async_trait]
impl TokenStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_token", level = "debug", skip_all)]
    async fn put_token(&self, token: &ApiToken) -> Result<()> {
        Ok(self.create_token(token).await?)
    }

    #[tracing::instrument(name = "dynamodb.get_token", level = "debug", skip_all, fields(id = %id))]
    async fn get_token(&self, id: &str) -> Result<Option<ApiToken>> {
        Ok(self.load_token(id).await?)
    }

    #[tracing::instrument(name = "dynamodb.list_tokens", level = "debug", skip_all, fields(subject = %subject))]
    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<ApiToken>> {
        Ok(self.tokens_of(subject).await?)
    }

    #[tracing::instrument(name = "dynamodb.delete_token", level = "debug", skip_all, fields(id = %id))]
    async fn delete_token(&self, id: &str) -> Result<bool> {
        Ok(self.remove_token(id).await?)
    }

    #[tracing::instrument(name = "dynamodb.use_webhook_signature", level = "debug", skip_all)]
    async fn use_webhook_signature(
        &self,
        signature: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<bool> {
        Ok(self.record_signature(signature, now, expires_at).await?)
    }
}
