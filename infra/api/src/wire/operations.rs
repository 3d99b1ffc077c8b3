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

/// `POST …/release-channels/{rc}/override`: break-glass through the
/// instance's freezes and closed windows, for one version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverrideRequest {
    /// Why: required, kept in the audit trail and sent to notifications.
    pub reason: Option<String>,
    /// The version headed for; default: the one about to be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// How long it lasts at most (`30m`, `2h`); default 2h, at most 24h.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub lasting: Option<String>,
}
