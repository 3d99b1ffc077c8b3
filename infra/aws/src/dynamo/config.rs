//! Config snapshots (immutable, content-addressed, possibly large) and the
//! pointer to the config in force (moved only from the revision read).

use async_trait::async_trait;

use vergence_model::ports::{ConfigSnapshot, ConfigStore, CurrentConfig};

use super::payload::payload;
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, get_attr, get_s, get_u64, key, n, s};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const BODY: &str = "body";
const HASH: &str = "hash";
const REVISION: &str = "revision";
const CHANNELS: &str = "channels";

fn snapshot_pk(hash: &str) -> String {
    format!("snapshot#{hash}")
}

const SNAPSHOT_SK: &str = "snapshot";
const POINTER_PK: &str = "config";
const POINTER_SK: &str = "current";

/// A transaction's condition that `hash` is the config in force.
pub(super) fn in_force(hash: &str) -> Write {
    Write::Check {
        key: key(POINTER_PK, POINTER_SK),
        condition: Expression::equals(HASH, s(hash)),
    }
}

impl DynamoStore {
    async fn store_snapshot(&self, snapshot: &ConfigSnapshot) -> std::result::Result<(), AwsError> {
        let pk = snapshot_pk(&snapshot.hash);
        let body = payload(
            "put_snapshot",
            || format!("config snapshot {}", snapshot.hash),
            &pk,
            snapshot,
        )?;
        self.write_parts("put_snapshot", &body.parts).await?;
        let mut item = key(&pk, SNAPSHOT_SK);
        item.insert(BODY.to_owned(), body.attribute);
        // The same hash is the same config: whoever stored it first wins,
        // and storing it again is a no-op rather than a rewrite.
        let outcome = self
            .write_one("put_snapshot", Write::put(item, Some(Expression::absent())))
            .await;
        if !matches!(outcome, Ok(Outcome::Written)) {
            self.discard_parts("put_snapshot", &body.parts).await;
        }
        outcome.map(drop)
    }

    async fn load_snapshot(
        &self,
        hash: &str,
    ) -> std::result::Result<Option<ConfigSnapshot>, AwsError> {
        let pk = snapshot_pk(hash);
        let Some(item) = self.get_item("get_snapshot", key(&pk, SNAPSHOT_SK)).await? else {
            return Ok(None);
        };
        let body = get_attr("get_snapshot", &item, BODY)?;
        let what = format!("config snapshot {hash}");
        self.read_payload("get_snapshot", &what, &pk, body)
            .await
            .map(Some)
    }

    async fn load_current_config(&self) -> std::result::Result<Option<CurrentConfig>, AwsError> {
        let Some(item) = self
            .get_item("current_config", key(POINTER_PK, POINTER_SK))
            .await?
        else {
            return Ok(None);
        };
        // Pointers written before channel order was kept have none; reads
        // then order channels by name until the next config push.
        let channels = match item.get(CHANNELS) {
            Some(_) => serde_json::from_str(get_s("current_config", &item, CHANNELS)?)
                .map_err(|e| AwsError::decode("current_config", "the config pointer", e))?,
            None => Default::default(),
        };
        Ok(Some(CurrentConfig {
            hash: get_s("current_config", &item, HASH)?.to_owned(),
            revision: get_u64("current_config", &item, REVISION)?,
            channels,
        }))
    }

    async fn move_current_config(
        &self,
        pointer: &CurrentConfig,
        expected_revision: Option<u64>,
    ) -> std::result::Result<u64, AwsError> {
        let next = expected_revision.unwrap_or(0) + 1;
        let channels = serde_json::to_string(&pointer.channels).map_err(|e| AwsError::Encode {
            operation: "set_current_config",
            source: e.into(),
        })?;
        let mut item = key(POINTER_PK, POINTER_SK);
        item.insert(HASH.to_owned(), s(&pointer.hash));
        item.insert(REVISION.to_owned(), n(next));
        item.insert(CHANNELS.to_owned(), s(&channels));
        let condition = match expected_revision {
            None => Expression::absent(),
            Some(revision) => Expression::equals(REVISION, n(revision)),
        };
        match self
            .write_one("set_current_config", Write::put(item, Some(condition)))
            .await?
        {
            Outcome::Written => Ok(next),
            Outcome::Lost { .. } => Err(AwsError::conflict("the current config pointer")),
        }
    }
}

#[async_trait]
impl ConfigStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_snapshot", level = "debug", skip_all)]
    async fn put_snapshot(&self, snapshot: &ConfigSnapshot) -> Result<()> {
        Ok(self.store_snapshot(snapshot).await?)
    }

    #[tracing::instrument(name = "dynamodb.get_snapshot", level = "debug", skip_all, fields(hash = %hash))]
    async fn get_snapshot(&self, hash: &str) -> Result<Option<ConfigSnapshot>> {
        Ok(self.load_snapshot(hash).await?)
    }

    #[tracing::instrument(name = "dynamodb.current_config", level = "debug", skip_all)]
    async fn current_config(&self) -> Result<Option<CurrentConfig>> {
        Ok(self.load_current_config().await?)
    }

    #[tracing::instrument(name = "dynamodb.set_current_config", level = "debug", skip_all)]
    async fn set_current_config(
        &self,
        next: &CurrentConfig,
        expected_revision: Option<u64>,
    ) -> Result<u64> {
        Ok(self.move_current_config(next, expected_revision).await?)
    }
}
