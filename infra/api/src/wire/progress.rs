//! Where a rollout stands and what a config would change: the answers a
//! client needs to wait on a push (`vergence up --endpoint`) and to plan
//! one (`vergence plan --endpoint`).

use serde::{Deserialize, Serialize};
use vergence_engine::Settled;
use vergence_engine::control::{PlanAction, PlanEntry};
use vergence_model::{
    ApplicationName, InstanceKey, InstanceRecord, ReleaseChannelName, ServiceName, Status, Version,
};

/// Whether the engine is done with an instance, as `vergence up` decides
/// when to stop: the engine's own classification ([`vergence_engine::settled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Standing {
    Converged,
    Failed,
    /// Only a person or the passing of time can move it.
    Waiting,
    /// Waits for the same service in another release channel (`upstream`).
    Upstream,
    /// The engine is working on it (a job in flight, checks asked for, a
    /// rollback under way, post-deployment checks running).
    Progressing,
}

/// One instance of `GET /v1/applications/{app}/rollout`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceProgress {
    pub application: ApplicationName,
    pub service: ServiceName,
    pub release_channel: ReleaseChannelName,
    pub status: Status,
    pub standing: Standing,
    /// For `upstream`: the release channel it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<ReleaseChannelName>,
    /// Changed (by a config, a release, an approval, an operator) since the
    /// engine last looked at it: whatever its status says, the engine has
    /// yet to act on the change. Every such write makes the instance due
    /// at that instant, and every step of the engine that follows moves
    /// its next check on.
    pub awaiting_engine: bool,
    /// ROLLED_BACK because its release failed, not because someone asked:
    /// the version CI pushed does not run.
    pub failed_release: bool,
}

impl InstanceProgress {
    pub fn of(record: &InstanceRecord) -> Self {
        let (standing, upstream) = match vergence_engine::settled(record) {
            Settled::Converged => (Standing::Converged, None),
            Settled::Failed => (Standing::Failed, None),
            Settled::Waiting => (Standing::Waiting, None),
            Settled::Upstream(channel) => (Standing::Upstream, Some(channel)),
            Settled::Progressing => (Standing::Progressing, None),
        };
        let state = &record.state;
        Self {
            application: record.key.application.clone(),
            service: record.key.service.clone(),
            release_channel: record.key.release_channel.clone(),
            status: state.status,
            standing,
            upstream,
            awaiting_engine: record
                .next_check_at
                .is_some_and(|at| at <= record.updated_at),
            failed_release: state.status == Status::RolledBack
                && state
                    .rollback
                    .as_ref()
                    .is_some_and(|r| r.requested_by.is_none()),
        }
    }

    pub fn key(&self) -> InstanceKey {
        InstanceKey::new(
            self.application.clone(),
            self.service.clone(),
            self.release_channel.clone(),
        )
    }
}

/// `GET /v1/applications/{app}/rollout`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutResponse {
    /// The hash of the config in force (`null` before the first push).
    pub config: Option<String>,
    pub instances: Vec<InstanceProgress>,
}

/// What a plan does to an instance; [`PlanAction`] as the API spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanActionName {
    Add,
    Update,
    Reconfigure,
    NoChange,
    Remove,
    WaitForRelease,
    StaysRolledBack,
}

impl PlanActionName {
    pub fn of(action: &PlanAction) -> Self {
        match action {
            PlanAction::Add => Self::Add,
            PlanAction::Update => Self::Update,
            PlanAction::Reconfigure => Self::Reconfigure,
            PlanAction::NoChange => Self::NoChange,
            PlanAction::Remove => Self::Remove,
            PlanAction::WaitForRelease => Self::WaitForRelease,
            PlanAction::StaysRolledBack => Self::StaysRolledBack,
        }
    }
}

/// One line of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntryView {
    pub instance: InstanceKey,
    pub action: PlanActionName,
    pub current_version: Option<Version>,
    pub desired_version: Option<Version>,
    /// What the change waits for before it is applied (gates, fetch).
    pub notes: Vec<String>,
}

impl PlanEntryView {
    pub fn of(entry: &PlanEntry) -> Self {
        Self {
            instance: entry.instance.clone(),
            action: PlanActionName::of(&entry.action),
            current_version: entry.current_version.clone(),
            desired_version: entry.desired_version.clone(),
            notes: entry.notes.clone(),
        }
    }
}

/// `POST /v1/configs/plan`: what pushing the config would change, per
/// instance; nothing is stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanResponse {
    /// The hash the pushed config would have.
    pub hash: String,
    pub instances: Vec<PlanEntryView>,
}
