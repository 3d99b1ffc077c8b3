//! The application registry: one item naming every application with
//! instances or events, so listings across applications query each
//! application's partitions instead of scanning the table.

use std::sync::PoisonError;

use aws_sdk_dynamodb::types::AttributeValue;

use vergence_model::ApplicationName;

use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, describe, key};
use crate::error::AwsError;

const REGISTRY_PK: &str = "applications";
const REGISTRY_SK: &str = "applications";
const NAMES: &str = "names";

impl DynamoStore {
    /// Adds the application to the registry unless this process already did.
    /// Adding to a set is idempotent, so concurrent writers need no condition.
    pub(crate) async fn register(
        &self,
        operation: &'static str,
        application: &ApplicationName,
    ) -> Result<(), AwsError> {
        let known = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(application);
        if known {
            return Ok(());
        }
        let add = Write::Update {
            key: key(REGISTRY_PK, REGISTRY_SK),
            update: Expression::new("ADD #names :name")
                .name("#names", NAMES)
                .value(":name", AttributeValue::Ss(vec![application.to_string()])),
            condition: None,
        };
        match self.write_one(operation, add).await? {
            Outcome::Written => {
                self.registered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(application.clone());
                Ok(())
            }
            Outcome::Lost { .. } => Err(AwsError::conflict("the application registry")),
        }
    }

    /// Every registered application, in name order.
    pub(crate) async fn applications(
        &self,
        operation: &'static str,
    ) -> Result<Vec<ApplicationName>, AwsError> {
        let Some(item) = self
            .get_item(operation, key(REGISTRY_PK, REGISTRY_SK))
            .await?
        else {
            return Ok(Vec::new());
        };
        let Some(AttributeValue::Ss(names)) = item.get(NAMES) else {
            return Ok(Vec::new());
        };
        let mut applications = names
            .iter()
            .map(|name| ApplicationName::parse(name.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|message| AwsError::decode(operation, describe(&item), message))?;
        applications.sort();
        Ok(applications)
    }
}
