//! The first-class Cloud Run runtime's unit of work: one Cloud Run service
//! per service instance, its spec rendered from the service's file. The
//! apply and fetch are API calls made by whoever runs the engine.

use serde::{Deserialize, Serialize};

/// One instance's Cloud Run service, as it is applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudRunService {
    pub project: String,
    pub region: String,
    /// The Cloud Run service's id (`web-prod`).
    pub name: String,
    /// The rendered `Service` resource (Cloud Run Admin API v2, REST JSON)
    /// as compact JSON, already carrying Vergence's annotations.
    pub spec: String,
    /// The version written to the service's [`VERSION`] annotation.
    pub version: String,
    /// Where the spec came from (for people): `run/web.yaml`.
    pub source: String,
}

/// The service's annotation with the service version it was applied for.
pub const VERSION: &str = crate::manifests::object_labels::VERSION;
/// The service's annotation with the instance's service id.
pub const SERVICE_ID: &str = crate::manifests::object_labels::SERVICE_ID;

impl CloudRunService {
    /// `projects/P/locations/R`.
    pub fn parent(&self) -> String {
        format!("projects/{}/locations/{}", self.project, self.region)
    }

    /// `projects/P/locations/R/services/NAME`.
    pub fn full_name(&self) -> String {
        format!("{}/services/{}", self.parent(), self.name)
    }

    /// What an operator runs to do by hand what the apply does.
    pub fn gcloud_replace(&self) -> String {
        format!(
            "gcloud run services replace {} (rendered for {}) --project {} --region {}",
            self.source, self.version, self.project, self.region
        )
    }
}
