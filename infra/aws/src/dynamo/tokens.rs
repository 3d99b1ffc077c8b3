//! API tokens, one item per token id (the secret only as its hash) in a
//! partition of their own. Token lookups (every authenticated request) are
//! one read by id; listing one application's (or agent's) tokens filters
//! the partition, which holds tens of tokens, not thousands.

use async_trait::async_trait;

use vergence_model::ports::TokenStore;
use vergence_model::{ApiToken, TokenSubject};

use super::payload::{decode_inline, inline_body};
use super::table::PK;
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, Item, describe, get_attr, key, s};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const TOKENS_PK: &str = "tokens";
const TOKEN_PREFIX: &str = "token#";
const APPLICATION: &str = "application";
const AGENT: &str = "agent";
const PLATFORM: &str = "platform";
const BODY: &str = "body";

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
}
