//! Approvals, partitioned per instance and sorted by when they were given.

use async_trait::async_trait;

use vergence_model::ports::ApprovalStore;
use vergence_model::{Approval, InstanceKey};

use super::payload::{decode_inline, inline_body};
use super::write::Write;
use super::{DynamoStore, describe, get_attr, key, sortable_millis};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const BODY: &str = "body";

fn approvals_pk(instance: &InstanceKey) -> String {
    format!("approvals#{}", instance.storage_id())
}

impl DynamoStore {
    async fn record_approval(&self, approval: &Approval) -> std::result::Result<(), AwsError> {
        // Every approval is kept, like a log: the random suffix keeps two
        // approvals given in the same millisecond apart.
        let sk = format!(
            "{}#{:016x}",
            sortable_millis(approval.at.as_millisecond()),
            fastrand::u64(..)
        );
        let mut item = key(approvals_pk(&approval.instance), sk);
        let body = inline_body(
            "put_approval",
            || format!("approval of {}", approval.instance),
            approval,
        )?;
        item.insert(BODY.to_owned(), body);
        self.write_one("put_approval", Write::put(item, None))
            .await
            .map(drop)
    }

    async fn approvals_of(
        &self,
        instance: &InstanceKey,
    ) -> std::result::Result<Vec<Approval>, AwsError> {
        let items = self
            .query_prefix("list_approvals", &approvals_pk(instance), "")
            .await?;
        items
            .iter()
            .map(|item| {
                let body = get_attr("list_approvals", item, BODY)?;
                decode_inline("list_approvals", &describe(item), body)
            })
            .collect()
    }
}

#[async_trait]
impl ApprovalStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.put_approval", level = "debug", skip_all, fields(instance = %approval.instance, version = %approval.version))]
    async fn put_approval(&self, approval: &Approval) -> Result<()> {
        Ok(self.record_approval(approval).await?)
    }

    #[tracing::instrument(name = "dynamodb.list_approvals", level = "debug", skip_all, fields(instance = %instance))]
    async fn list_approvals(&self, instance: &InstanceKey) -> Result<Vec<Approval>> {
        Ok(self.approvals_of(instance).await?)
    }
}
