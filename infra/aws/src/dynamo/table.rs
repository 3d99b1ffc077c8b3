//! The table definition, in one place: the names the SAM template must use
//! for the table's keys, the due index and TTL, and [`create`] for tests and
//! local setups.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};

use crate::error::AwsError;

/// Partition key of the table (string).
pub const PK: &str = "pk";
/// Sort key of the table (string).
pub const SK: &str = "sk";
/// The sparse GSI of instances waiting for a time.
pub const DUE_INDEX: &str = "due";
/// Partition key of [`DUE_INDEX`] (string): `due#<shard>`.
pub const DUE_PK: &str = "due_pk";
/// Sort key of [`DUE_INDEX`] (string): `<epoch ms, 15 digits>#<instance id>`.
pub const DUE_SK: &str = "due_sk";
/// The TTL attribute (number, epoch seconds); set on events and ended jobs.
pub const TTL: &str = "ttl";
/// How many partitions the due index is spread over. Part of the table's
/// layout: changing it strands index entries in shards nobody queries, so
/// it may only change together with a rewrite of every instance.
pub const DUE_SHARDS: u32 = 8;

/// How long [`create`] waits for the table to become active.
const CREATE_TIMEOUT: Duration = Duration::from_secs(120);

fn key_element(name: &str, key_type: KeyType) -> Result<KeySchemaElement, AwsError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(AwsError::build("create_table"))
}

fn string_attribute(name: &str) -> Result<AttributeDefinition, AwsError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(AwsError::build("create_table"))
}

/// Creates the table (on-demand billing), its due index and TTL, and waits
/// until it is active.
pub(crate) async fn create(client: &Client, name: &str) -> Result<(), AwsError> {
    let due_index = GlobalSecondaryIndex::builder()
        .index_name(DUE_INDEX)
        .key_schema(key_element(DUE_PK, KeyType::Hash)?)
        .key_schema(key_element(DUE_SK, KeyType::Range)?)
        // The scheduler needs only the instance id, which is in the key.
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(AwsError::build("create_table"))?;
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(string_attribute(PK)?)
        .attribute_definitions(string_attribute(SK)?)
        .attribute_definitions(string_attribute(DUE_PK)?)
        .attribute_definitions(string_attribute(DUE_SK)?)
        .key_schema(key_element(PK, KeyType::Hash)?)
        .key_schema(key_element(SK, KeyType::Range)?)
        .global_secondary_indexes(due_index)
        .send()
        .await
        .map_err(|e| AwsError::dynamo("create_table", e))?;
    client
        .wait_until_table_exists()
        .table_name(name)
        .wait(CREATE_TIMEOUT)
        .await
        .map_err(|e| AwsError::dynamo_other("create_table", e))?;
    let ttl = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(TTL)
        .build()
        .map_err(AwsError::build("create_table"))?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(ttl)
        .send()
        .await
        .map_err(|e| AwsError::dynamo("create_table", e))?;
    Ok(())
}
