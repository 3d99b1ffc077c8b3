//! `vergence plan`: what applying a compiled config would do to each
//! instance, and what each change waits for, without storing anything.

use std::collections::BTreeMap;

use serde::Serialize;

use vergence_model::error::Result;
use vergence_model::ports::{CompiledConfig, CurrentConfig};
use vergence_model::{Desired, InstanceKey, InstanceRecord, Precondition, Version};

use super::InstanceDiff;
use crate::control::{Control, channel_order};

/// One line of `vergence plan`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    pub instance: InstanceKey,
    pub current_version: Option<Version>,
    pub desired_version: Option<Version>,
    pub action: PlanAction,
    /// What the change waits for before it is applied (gates, fetch).
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanAction {
    /// A new instance; it will be converged to the desired version.
    Add,
    /// The desired version differs from what runs.
    Update,
    /// Same version; other settings (gates, intervals) change.
    Reconfigure,
    /// Already at the desired version; nothing to do.
    NoChange,
    /// No longer in the config; Vergence stops managing it.
    Remove,
    /// Waits for a release to set missing parameters.
    WaitForRelease,
    /// Rolled back from the desired version, which failed: `up` leaves it
    /// until a new version is pushed.
    StaysRolledBack,
}

impl Control {
    /// What applying a compiled config would change, per instance, without
    /// running anything or storing anything.
    pub async fn plan(&self, model: &dyn CompiledConfig) -> Result<Vec<PlanEntry>> {
        let existing = self.existing().await?;
        let pointer = CurrentConfig {
            hash: model.hash().to_owned(),
            revision: 0,
            channels: channel_order(model),
        };
        let mut entries: Vec<PlanEntry> = self
            .diff(model, &existing)
            .await?
            .into_iter()
            .map(|diff| plan_entry(diff, &existing))
            .collect();
        entries.sort_by_key(|e| {
            let rank = pointer.rank(&e.instance.application, &e.instance.release_channel);
            (
                e.instance.application.clone(),
                e.instance.service.clone(),
                rank.unwrap_or(usize::MAX),
            )
        });
        Ok(entries)
    }
}

/// One line of the plan for one diff.
fn plan_entry(diff: InstanceDiff, existing: &BTreeMap<InstanceKey, InstanceRecord>) -> PlanEntry {
    let (key, desired, changed) = match diff {
        InstanceDiff::Remove { key } => {
            let current_version = existing
                .get(&key)
                .and_then(|r| r.state.current_version.clone());
            return PlanEntry {
                instance: key,
                current_version,
                desired_version: None,
                action: PlanAction::Remove,
                notes: vec!["Vergence stops managing it; nothing is undeployed".to_owned()],
            };
        }
        InstanceDiff::Add { key, desired } => (key, desired, true),
        InstanceDiff::Change { key, desired, .. } => (key, desired, true),
        InstanceDiff::Same { key } => {
            let desired = existing.get(&key).map_or(
                Desired::Unresolved {
                    reason: String::new(),
                },
                |r| r.desired.clone(),
            );
            (key, desired, false)
        }
    };
    let record = existing.get(&key);
    let current_version = record.and_then(|r| r.state.current_version.clone());
    let desired_version = desired.version().cloned();
    let rolled_back =
        record.and_then(|r| crate::rollback::plan_note(&r.state, desired_version.as_ref()));
    let action = match (record, &desired) {
        (_, Desired::Unresolved { .. }) => PlanAction::WaitForRelease,
        (None, _) => PlanAction::Add,
        (Some(_), _) if rolled_back.is_some() => PlanAction::StaysRolledBack,
        (Some(_), _) if current_version != desired_version => PlanAction::Update,
        (Some(_), _) if changed => PlanAction::Reconfigure,
        (Some(_), _) => PlanAction::NoChange,
    };
    PlanEntry {
        instance: key,
        current_version,
        desired_version,
        notes: rolled_back.map_or_else(|| plan_notes(&desired, &action), |note| vec![note]),
        action,
    }
}

fn plan_notes(desired: &Desired, action: &PlanAction) -> Vec<String> {
    let Desired::Ready(spec) = desired else {
        if let Desired::Unresolved { reason } = desired {
            return vec![reason.clone()];
        }
        return Vec::new();
    };
    if matches!(action, PlanAction::NoChange | PlanAction::Reconfigure) {
        return Vec::new();
    }
    let mut notes = Vec::new();
    if spec.fetch.is_some() {
        notes.push(format!(
            "fetch runs first; {} is applied only if the runtime differs",
            spec.version
        ));
    }
    for precondition in &spec.preconditions {
        notes.push(match precondition {
            Precondition::ReleaseChannelStable {
                release_channel,
                duration: Some(d),
            } => {
                format!(
                    "after {release_channel} is stable on {} for {}",
                    spec.version,
                    crate::human(*d)
                )
            }
            Precondition::ReleaseChannelStable {
                release_channel,
                duration: None,
            } => {
                format!("after {release_channel} converges on {}", spec.version)
            }
            Precondition::ManualApproval { name } => format!("after manual approval {name}"),
        });
    }
    if spec.require_approval_before_apply {
        notes.push("after approval of the apply".to_owned());
    }
    notes
}
