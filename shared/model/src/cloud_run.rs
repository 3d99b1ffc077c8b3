//! The first-class Cloud Run runtime's desired state for one service
//! instance: the rendered Cloud Run service, created or updated and read
//! by whoever runs the engine with the Cloud Run Admin API, in-process.

use serde::{Deserialize, Serialize};

/// One Cloud Run service as a release wants it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudRunService {
    pub project: String,
    pub region: String,
    /// The Cloud Run service's id (the file's `name`).
    pub service_name: String,
    /// The Service resource as compact JSON (Cloud Run Admin API v2),
    /// rendered from the service's file, without Vergence's annotations
    /// and without `name` (kept as text so specs stay hashable).
    pub spec: String,
    /// The instance's service id, annotated on the service.
    pub service_id: String,
    /// The version annotated on the service and its revision.
    pub version: String,
    /// The service file (for people): `run/web.yaml`.
    pub file: String,
    /// What to do with a live Cloud Run service Vergence did not make that differs
    /// from this (the runtime's `adopt`); one that matches is adopted.
    #[serde(default, skip_serializing_if = "crate::adoption::Adopt::is_default")]
    pub adopt: crate::adoption::Adopt,
    /// Set on the apply of a rollout's step short of 100%: the share of
    /// the traffic the new revision gets, the rest staying on the revision
    /// that served before. `None` leaves the traffic to the spec (all of
    /// it to the latest revision unless the spec says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_percent: Option<u8>,
}

impl CloudRunService {
    /// `projects/P/locations/R`.
    pub fn parent(&self) -> String {
        format!("projects/{}/locations/{}", self.project, self.region)
    }

    /// `projects/P/locations/R/services/S`.
    pub fn name(&self) -> String {
        format!("{}/services/{}", self.parent(), self.service_name)
    }

    /// What an operator runs to do by hand what the apply does.
    pub fn gcloud(&self) -> String {
        format!(
            "gcloud run services replace <{} rendered for {}, with annotations {}={} {}={}> --project {} --region {}",
            self.file,
            self.version,
            annotations::SERVICE_ID,
            self.service_id,
            annotations::VERSION,
            self.version,
            self.project,
            self.region
        )
    }
}

/// Annotations on the services and revisions the Cloud Run runtime writes.
pub mod annotations {
    /// The instance's service id.
    pub const SERVICE_ID: &str = "vergence.dev/service-id";
    /// The service version a revision was made for.
    pub const VERSION: &str = "vergence.dev/version";
}
