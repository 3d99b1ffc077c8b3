//! Unconditional writes in bulk (body parts, events that did not fit a
//! transaction), with DynamoDB's unprocessed writes sent again.

use aws_sdk_dynamodb::types::{DeleteRequest, PutRequest, WriteRequest};

use super::{DynamoStore, Item};
use crate::error::AwsError;

/// BatchWriteItem takes at most this many writes per call.
const BATCH_WRITE_MAX: usize = 25;
/// How often writes DynamoDB left unprocessed (throttling) are sent again.
const UNPROCESSED_ATTEMPTS: u32 = 6;

impl DynamoStore {
    /// Puts items unconditionally, 25 per call, resending what DynamoDB
    /// leaves unprocessed with a growing pause.
    pub(crate) async fn put_all(
        &self,
        operation: &'static str,
        items: Vec<Item>,
    ) -> Result<(), AwsError> {
        let requests = items
            .into_iter()
            .map(|item| {
                let put = PutRequest::builder().set_item(Some(item)).build();
                put.map(|p| WriteRequest::builder().put_request(p).build())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(AwsError::build(operation))?;
        self.batch_write(operation, requests).await
    }

    /// Deletes items by key, as [`DynamoStore::put_all`] puts them.
    pub(crate) async fn delete_all(
        &self,
        operation: &'static str,
        keys: Vec<Item>,
    ) -> Result<(), AwsError> {
        let requests = keys
            .into_iter()
            .map(|key| {
                let delete = DeleteRequest::builder().set_key(Some(key)).build();
                delete.map(|d| WriteRequest::builder().delete_request(d).build())
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(AwsError::build(operation))?;
        self.batch_write(operation, requests).await
    }

    async fn batch_write(
        &self,
        operation: &'static str,
        requests: Vec<WriteRequest>,
    ) -> Result<(), AwsError> {
        for chunk in requests.chunks(BATCH_WRITE_MAX) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                if attempt == UNPROCESSED_ATTEMPTS {
                    return Err(AwsError::Unprocessed {
                        operation,
                        count: pending.len(),
                    });
                }
                if attempt > 0 {
                    let pause = std::time::Duration::from_millis(50 << attempt);
                    tokio::time::sleep(pause).await;
                }
                attempt += 1;
                let output = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(|e| AwsError::dynamo(operation, e))?;
                pending = output
                    .unprocessed_items
                    .and_then(|mut left| left.remove(&self.table))
                    .unwrap_or_default();
            }
        }
        Ok(())
    }
}
