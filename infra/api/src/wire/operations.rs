//! The bodies of the operator routes that work on several instances at
//! once (pause, resume, checks) and of pin.

use serde::{Deserialize, Serialize};
use vergence_model::InstanceKey;

/// `POST /v1/applications/{app}/pause`, `…/resume` and `…/checks`: the
/// application's instances, narrowed to a service and/or a release channel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstancesRequest {
    pub service: Option<String>,
    pub release_channel: Option<String>,
}

/// The instances an operation matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstancesResponse {
    pub instances: Vec<InstanceKey>,
}

/// `POST …/release-channels/{rc}/pin`: the released version to hold the
/// instance on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PinRequest {
    pub version: Option<String>,
}
