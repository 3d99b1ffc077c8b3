//! Alert states pushed from outside, one item per alert name, replaced on
//! every push.

use async_trait::async_trait;

use vergence_model::AlertState;
use vergence_model::ports::AlertStore;

use super::payload::{decode_inline, inline_body};
use super::write::Write;
use super::{DynamoStore, describe, get_attr, key};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const ALERTS_PK: &str = "alerts";
const ALERT_PREFIX: &str = "alert#";
const BODY: &str = "body";

fn alert_sk(name: &str) -> String {
    format!("{ALERT_PREFIX}{name}")
}

fn decode_alert(
    operation: &'static str,
    item: &super::Item,
) -> std::result::Result<AlertState, AwsError> {
    let body = get_attr(operation, item, BODY)?;
    decode_inline(operation, &describe(item), body)
}

impl DynamoStore {
    async fn store_alert(&self, alert: &AlertState) -> std::result::Result<(), AwsError> {
        let mut item = key(ALERTS_PK, alert_sk(&alert.name));
        let body = inline_body("put_alert", || format!("alert {}", alert.name), alert)?;
        item.insert(BODY.to_owned(), body);
        // The latest push is the alert's state: a plain replace.
        self.write_one("put_alert", Write::put(item, None))
            .await
            .map(drop)
    }

    async fn load_alert(&self, name: &str) -> std::result::Result<Option<AlertState>, AwsError> {
        self.get_item("get_alert", key(ALERTS_PK, alert_sk(name)))
            .await?
            .map(|item| decode_alert("get_alert", &item))
            .transpose()
    }

    async fn all_alerts(&self) -> std::result::Result<Vec<AlertState>, AwsError> {
        // Sort-key order is name order.
        let items = self
            .query_prefix("list_alerts", ALERTS_PK, ALERT_PREFIX)
            .await?;
        items
            .iter()
            .map(|item| decode_alert("list_alerts", item))
            .collect()
    }
}

#[async_trait]
impl AlertStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_alert", level = "debug", skip_all)]
    async fn put_alert(&self, alert: &AlertState) -> Result<()> {
        Ok(self.store_alert(alert).await?)
    }

    #[tracing::instrument(name = "dynamodb.get_alert", level = "debug", skip_all, fields(name = %name))]
    async fn get_alert(&self, name: &str) -> Result<Option<AlertState>> {
        Ok(self.load_alert(name).await?)
    }

    #[tracing::instrument(name = "dynamodb.list_alerts", level = "debug", skip_all)]
    async fn list_alerts(&self) -> Result<Vec<AlertState>> {
        Ok(self.all_alerts().await?)
    }
}
