//! Record bodies: JSON, gzip-compressed above a small size, and — for the
//! records that can outgrow an item (config snapshots, job inputs and
//! results) — split over part items written before the record naming them.
//!
//! A spilled body's attribute is a map `{token, parts, bytes}`; its parts
//! live under the record's `pk` at `part#<token>#<index>`. The token is
//! random per write, so two writers racing for the same record never touch
//! each other's parts, and the loser can delete its own.

use std::collections::HashMap;
use std::io::{Read, Write as _};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{DynamoStore, Item, get_s, get_u64, key, n, s, table};
use crate::error::AwsError;

/// JSON up to this size is stored as a readable string; compressing it
/// would save little.
const COMPRESS_ABOVE: usize = 1024;
/// Spillable bodies up to this size stay in their record's item. Leaves room
/// for a second body (a job's result) and the key attributes within
/// DynamoDB's 400 KB item limit.
const INLINE_LIMIT: usize = 180 * 1024;
/// Records that are never split must fit their item with their keys.
const ITEM_LIMIT: usize = 390 * 1024;
/// Bytes of body per part item.
const PART_BYTES: usize = 350 * 1024;
/// Largest compressed body stored at all: past this, a record is not state
/// but bulk data, and reading it back would take seconds.
const SPILL_LIMIT: usize = 64 * 1024 * 1024;

const DATA: &str = "data";
const REF_TOKEN: &str = "token";
const REF_PARTS: &str = "parts";
const REF_BYTES: &str = "bytes";

/// A body ready to be written: the attribute the record carries, and the
/// part items to write before it (none when the body fits the record).
#[derive(Debug)]
pub(crate) struct Payload {
    pub(crate) attribute: AttributeValue,
    pub(crate) parts: Vec<Item>,
}

enum Encoded {
    Text(String),
    Compressed(Vec<u8>),
}

fn encode<T: Serialize>(operation: &'static str, value: &T) -> Result<Encoded, AwsError> {
    let encode_error =
        |source: Box<dyn std::error::Error + Send + Sync>| AwsError::Encode { operation, source };
    let json = serde_json::to_string(value).map_err(|e| encode_error(e.into()))?;
    if json.len() <= COMPRESS_ABOVE {
        return Ok(Encoded::Text(json));
    }
    let mut encoder = GzEncoder::new(Vec::with_capacity(json.len() / 4), Compression::default());
    encoder
        .write_all(json.as_bytes())
        .map_err(|e| encode_error(e.into()))?;
    let compressed = encoder.finish().map_err(|e| encode_error(e.into()))?;
    Ok(Encoded::Compressed(compressed))
}

impl Encoded {
    fn len(&self) -> usize {
        match self {
            Encoded::Text(text) => text.len(),
            Encoded::Compressed(bytes) => bytes.len(),
        }
    }

    fn into_attribute(self) -> AttributeValue {
        match self {
            Encoded::Text(text) => AttributeValue::S(text),
            Encoded::Compressed(bytes) => AttributeValue::B(Blob::new(bytes)),
        }
    }
}

/// The body of a record that always fits its item (instances, events,
/// releases, approvals); a clear error in the unlikely case it does not.
pub(crate) fn inline_body<T: Serialize>(
    operation: &'static str,
    what: impl FnOnce() -> String,
    value: &T,
) -> Result<AttributeValue, AwsError> {
    let encoded = encode(operation, value)?;
    if encoded.len() > ITEM_LIMIT {
        return Err(AwsError::TooLarge {
            operation,
            what: what(),
            size: encoded.len(),
            limit: ITEM_LIMIT,
        });
    }
    Ok(encoded.into_attribute())
}

/// The body of a record that may spill into parts under `pk`.
pub(crate) fn payload<T: Serialize>(
    operation: &'static str,
    what: impl FnOnce() -> String,
    pk: &str,
    value: &T,
) -> Result<Payload, AwsError> {
    let bytes = match encode(operation, value)? {
        Encoded::Compressed(bytes) if bytes.len() > INLINE_LIMIT => bytes,
        small => {
            return Ok(Payload {
                attribute: small.into_attribute(),
                parts: Vec::new(),
            });
        }
    };
    if bytes.len() > SPILL_LIMIT {
        return Err(AwsError::TooLarge {
            operation,
            what: what(),
            size: bytes.len(),
            limit: SPILL_LIMIT,
        });
    }
    let token = format!("{:016x}", fastrand::u64(..));
    let parts: Vec<Item> = bytes
        .chunks(PART_BYTES)
        .enumerate()
        .map(|(index, chunk)| {
            let mut item = key(pk, part_sk(&token, index));
            item.insert(DATA.to_owned(), AttributeValue::B(Blob::new(chunk)));
            item
        })
        .collect();
    let reference = HashMap::from([
        (REF_TOKEN.to_owned(), s(&token)),
        (REF_PARTS.to_owned(), n(parts.len())),
        (REF_BYTES.to_owned(), n(bytes.len())),
    ]);
    Ok(Payload {
        attribute: AttributeValue::M(reference),
        parts,
    })
}

fn part_prefix(token: &str) -> String {
    format!("part#{token}#")
}

fn part_sk(token: &str, index: usize) -> String {
    format!("{}{index:05}", part_prefix(token))
}

/// Decodes a body that is stored in its item (a string or gzip binary).
pub(crate) fn decode_inline<T: DeserializeOwned>(
    operation: &'static str,
    what: &str,
    attribute: &AttributeValue,
) -> Result<T, AwsError> {
    match attribute {
        AttributeValue::S(text) => {
            serde_json::from_str(text).map_err(|e| AwsError::decode(operation, what, e))
        }
        AttributeValue::B(blob) => decode_compressed(operation, what, blob.as_ref()),
        other => Err(AwsError::decode(
            operation,
            what,
            format!("a body cannot be {other:?}"),
        )),
    }
}

fn decode_compressed<T: DeserializeOwned>(
    operation: &'static str,
    what: &str,
    bytes: &[u8],
) -> Result<T, AwsError> {
    let mut json = Vec::with_capacity(bytes.len() * 4);
    GzDecoder::new(bytes)
        .read_to_end(&mut json)
        .map_err(|e| AwsError::decode(operation, what, e))?;
    serde_json::from_slice(&json).map_err(|e| AwsError::decode(operation, what, e))
}

impl DynamoStore {
    /// Decodes a body of a record under `pk`, reading its parts if it spilled.
    pub(crate) async fn read_payload<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        what: &str,
        pk: &str,
        attribute: &AttributeValue,
    ) -> Result<T, AwsError> {
        let AttributeValue::M(reference) = attribute else {
            return decode_inline(operation, what, attribute);
        };
        let token = get_s(operation, reference, REF_TOKEN)?;
        let expected_parts = get_u64(operation, reference, REF_PARTS)?;
        let expected_bytes = get_u64(operation, reference, REF_BYTES)?;
        let items = self
            .query_prefix(operation, pk, &part_prefix(token))
            .await?;
        // Parts come back in sort-key order, which is index order.
        let mut bytes = Vec::with_capacity(usize::try_from(expected_bytes).unwrap_or(0));
        for item in &items {
            match item.get(DATA) {
                Some(AttributeValue::B(data)) => bytes.extend_from_slice(data.as_ref()),
                _ => return Err(AwsError::decode(operation, what, "a body part has no data")),
            }
        }
        if items.len() as u64 != expected_parts || bytes.len() as u64 != expected_bytes {
            return Err(AwsError::decode(
                operation,
                what,
                format!(
                    "the body should be {expected_parts} parts of {expected_bytes} bytes in all; found {} parts of {} bytes",
                    items.len(),
                    bytes.len()
                ),
            ));
        }
        decode_compressed(operation, what, &bytes)
    }

    /// Writes the parts of bodies before the records that will name them.
    pub(crate) async fn write_parts(
        &self,
        operation: &'static str,
        parts: &[Item],
    ) -> Result<(), AwsError> {
        if parts.is_empty() {
            return Ok(());
        }
        self.put_all(operation, parts.to_vec()).await
    }

    /// Deletes parts whose record was not written (it lost its condition).
    /// Best effort: a leftover part is invisible and costs only storage.
    pub(crate) async fn discard_parts(&self, operation: &'static str, parts: &[Item]) {
        if parts.is_empty() {
            return;
        }
        let keys = parts
            .iter()
            .map(|part| {
                part.iter()
                    .filter(|(name, _)| *name == table::PK || *name == table::SK)
                    .map(|(name, value)| (name.clone(), value.clone()))
                    .collect()
            })
            .collect();
        if let Err(error) = self.delete_all(operation, keys).await {
            tracing::warn!(%error, parts = parts.len(), "could not delete the parts of an unwritten body");
        }
    }
}
