//! Conditional writes, sent alone or together in a transaction, and the
//! answer that matters to callers: written, or lost to a condition.
//!
//! Every expression names attributes through `#placeholders`, so no
//! attribute name can collide with DynamoDB's reserved words.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};

use super::{DynamoStore, Item, table};
use crate::error::AwsError;

/// `#placeholder` → attribute name.
type Names = HashMap<String, String>;
/// `:placeholder` → value.
type Values = HashMap<String, AttributeValue>;

/// An expression with its placeholders.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expression {
    text: String,
    names: Names,
    values: Values,
}

impl Expression {
    pub(crate) fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// `#placeholder` stands for the attribute `name`.
    pub(crate) fn name(mut self, placeholder: &str, name: &str) -> Self {
        self.names.insert(placeholder.to_owned(), name.to_owned());
        self
    }

    /// `:placeholder` stands for `value`.
    pub(crate) fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }

    /// The item must not exist yet.
    pub(crate) fn absent() -> Self {
        Self::new("attribute_not_exists(#pk)").name("#pk", table::PK)
    }

    /// The item must exist with `attribute` equal to `value`.
    pub(crate) fn equals(attribute: &str, value: AttributeValue) -> Self {
        Self::new("#expected_attr = :expected_value")
            .name("#expected_attr", attribute)
            .value(":expected_value", value)
    }

    /// Placeholders of this and `other` together (the update and condition
    /// of one request share them).
    pub(crate) fn placeholders(
        &self,
        other: Option<&Expression>,
    ) -> (Option<Names>, Option<Values>) {
        let mut names = self.names.clone();
        let mut values = self.values.clone();
        if let Some(other) = other {
            names.extend(other.names.clone());
            values.extend(other.values.clone());
        }
        (
            (!names.is_empty()).then_some(names),
            (!values.is_empty()).then_some(values),
        )
    }
}

/// One write of a commit.
#[derive(Clone, Debug)]
pub(crate) enum Write {
    Put {
        item: Item,
        condition: Option<Expression>,
    },
    Delete {
        key: Item,
        condition: Option<Expression>,
    },
    Update {
        key: Item,
        update: Expression,
        condition: Option<Expression>,
    },
    /// A condition on an item the transaction does not write.
    Check { key: Item, condition: Expression },
}

/// What became of a conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Written,
    /// A condition did not hold, or another transaction held the item: either
    /// way a concurrent writer got there first. In a transaction, `index` is
    /// the write that lost.
    Lost {
        index: usize,
    },
}

/// Lost conditions and items locked by another transaction, as DynamoDB
/// names them for single writes and in transaction cancellation reasons.
fn is_lost_race(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ConditionalCheckFailedException"
                | "ConditionalCheckFailed"
                | "TransactionConflictException"
                | "TransactionConflict"
        )
    )
}

impl Write {
    pub(crate) fn put(item: Item, condition: Option<Expression>) -> Self {
        Write::Put { item, condition }
    }

    /// Approximate size in bytes, as DynamoDB counts it against the
    /// transaction size limit.
    pub(crate) fn size(&self) -> usize {
        match self {
            Write::Put { item, .. } => item_size(item),
            Write::Delete { key, .. } | Write::Check { key, .. } => item_size(key),
            Write::Update { key, update, .. } => {
                item_size(key) + update.values.values().map(value_size).sum::<usize>()
            }
        }
    }

    fn into_transact_item(
        self,
        operation: &'static str,
        table: &str,
    ) -> Result<TransactWriteItem, AwsError> {
        let build = AwsError::build(operation);
        Ok(match self {
            Write::Put { item, condition } => {
                let (names, values) = placeholders(condition.as_ref());
                let put = Put::builder()
                    .table_name(table)
                    .set_item(Some(item))
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .build()
                    .map_err(build)?;
                TransactWriteItem::builder().put(put).build()
            }
            Write::Delete { key, condition } => {
                let (names, values) = placeholders(condition.as_ref());
                let delete = Delete::builder()
                    .table_name(table)
                    .set_key(Some(key))
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .build()
                    .map_err(build)?;
                TransactWriteItem::builder().delete(delete).build()
            }
            Write::Update {
                key,
                update,
                condition,
            } => {
                let (names, values) = update.placeholders(condition.as_ref());
                let update = Update::builder()
                    .table_name(table)
                    .set_key(Some(key))
                    .update_expression(update.text)
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .build()
                    .map_err(build)?;
                TransactWriteItem::builder().update(update).build()
            }
            Write::Check { key, condition } => {
                let (names, values) = condition.placeholders(None);
                let check = ConditionCheck::builder()
                    .table_name(table)
                    .set_key(Some(key))
                    .condition_expression(condition.text)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .build()
                    .map_err(build)?;
                TransactWriteItem::builder().condition_check(check).build()
            }
        })
    }
}

fn placeholders(condition: Option<&Expression>) -> (Option<Names>, Option<Values>) {
    condition.map_or((None, None), |c| c.placeholders(None))
}

/// Size of an item the way DynamoDB measures it: attribute names plus values.
pub(crate) fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(set) | AttributeValue::Ns(set) => set.iter().map(String::len).sum(),
        AttributeValue::Bs(set) => set.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::M(map) => 3 + item_size(map),
        AttributeValue::L(list) => 3 + list.iter().map(value_size).sum::<usize>(),
        _ => 1,
    }
}

impl DynamoStore {
    /// Sends one write on its own (a plain write costs half a transactional one).
    pub(crate) async fn write_one(
        &self,
        operation: &'static str,
        write: Write,
    ) -> Result<Outcome, AwsError> {
        // Only a transaction checks an item without writing it.
        if matches!(write, Write::Check { .. }) {
            return self.transact(operation, vec![write]).await;
        }
        let result = match write {
            Write::Put { item, condition } => {
                let (names, values) = placeholders(condition.as_ref());
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| lost_or(operation, e))
            }
            Write::Delete { key, condition } => {
                let (names, values) = placeholders(condition.as_ref());
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(key))
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| lost_or(operation, e))
            }
            Write::Update {
                key,
                update,
                condition,
            } => {
                let (names, values) = update.placeholders(condition.as_ref());
                self.client
                    .update_item()
                    .table_name(&self.table)
                    .set_key(Some(key))
                    .update_expression(update.text)
                    .set_condition_expression(condition.map(|c| c.text))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| lost_or(operation, e))
            }
            // Sent as a transaction above.
            Write::Check { .. } => Ok(()),
        };
        match result {
            Ok(()) => Ok(Outcome::Written),
            Err(None) => Ok(Outcome::Lost { index: 0 }),
            Err(Some(error)) => Err(error),
        }
    }

    /// Sends the writes as one transaction. The SDK gives the request an
    /// idempotency token, so its own retries cannot apply it twice.
    pub(crate) async fn transact(
        &self,
        operation: &'static str,
        writes: Vec<Write>,
    ) -> Result<Outcome, AwsError> {
        let items = writes
            .into_iter()
            .map(|w| w.into_transact_item(operation, &self.table))
            .collect::<Result<Vec<_>, _>>()?;
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(Outcome::Written),
            Err(error) => match lost_in_transaction(&error) {
                Some(index) => Ok(Outcome::Lost { index }),
                None => Err(AwsError::dynamo(operation, error)),
            },
        }
    }
}

/// `None` when the write lost a race, else the error.
fn lost_or<E>(operation: &'static str, error: SdkError<E>) -> Option<AwsError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if matches!(error, SdkError::ServiceError(_)) && is_lost_race(error.code()) {
        None
    } else {
        Some(AwsError::dynamo(operation, error))
    }
}

/// The index of the write that lost, when the transaction was cancelled
/// only because of lost races (not throttling or validation).
fn lost_in_transaction(error: &SdkError<TransactWriteItemsError>) -> Option<usize> {
    let SdkError::ServiceError(service) = error else {
        return None;
    };
    let TransactWriteItemsError::TransactionCanceledException(cancelled) = service.err() else {
        return None;
    };
    let reasons = cancelled.cancellation_reasons();
    let failed = |code: Option<&str>| !matches!(code, None | Some("None"));
    if reasons
        .iter()
        .any(|r| failed(r.code()) && !is_lost_race(r.code()))
    {
        return None;
    }
    reasons.iter().position(|r| is_lost_race(r.code()))
}
