//! Applying a config and planning one. Both start from one instance diff:
//! which instances a config adds, changes (a pinned instance keeps its
//! version, compiled with the new config), leaves alone and removes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tracing::{debug, info};

use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    CompiledConfig, ConfigSnapshot, CurrentConfig, InstanceChange, InstanceCommit, InstanceFilter,
};
use vergence_model::{
    ConfigBundle, Desired, Event, EventKind, InstanceKey, InstanceRecord, InstanceState,
    Precondition, Release, Version,
};

use super::{Control, MAX_CONFLICT_RETRIES, channel_order, policy, short};

/// What applying a config changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub hash: String,
    pub added: Vec<InstanceKey>,
    pub updated: Vec<InstanceKey>,
    pub removed: Vec<InstanceKey>,
    pub unchanged: usize,
}

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
}

/// What a config does to one instance: the one diff behind both
/// `apply_config` and `plan`.
#[derive(Clone, Debug)]
enum InstanceDiff {
    Add {
        key: InstanceKey,
        desired: Desired,
    },
    Change {
        key: InstanceKey,
        desired: Desired,
        /// Compiled for the instance's pinned release, which it keeps.
        pinned: bool,
    },
    Same {
        key: InstanceKey,
    },
    Remove {
        key: InstanceKey,
    },
}

impl Control {
    /// Stores a config and makes it the desired state of every instance.
    /// A config with errors is rejected before anything is written.
    pub async fn apply_config(&self, bundle: ConfigBundle, actor: &str) -> Result<ApplyReport> {
        let model = self.validate(&bundle)?;
        self.apply_compiled(model, bundle, actor).await
    }

    /// [`Control::apply_config`] for a config the caller already compiled
    /// (to check who may push it, say), so it is compiled once.
    pub async fn apply_compiled(
        &self,
        model: Arc<dyn CompiledConfig>,
        bundle: ConfigBundle,
        actor: &str,
    ) -> Result<ApplyReport> {
        // Two pushes at once (two `vergence up` on one state, or CI runs
        // racing) each see the pointer the other moved: the loser applies
        // again from what is there now, which is idempotent, and finds
        // nothing left to do when both pushed the same config.
        let mut attempts = 0;
        loop {
            match self.apply_compiled_once(&model, &bundle, actor).await {
                Err(Error::Conflict { what }) if attempts + 1 < MAX_CONFLICT_RETRIES => {
                    attempts += 1;
                    debug!(%what, attempts, "config push lost a race; applying again");
                }
                done => return done,
            }
        }
    }

    async fn apply_compiled_once(
        &self,
        model: &Arc<dyn CompiledConfig>,
        bundle: &ConfigBundle,
        actor: &str,
    ) -> Result<ApplyReport> {
        let now = self.clock.now();
        let current = self.store.current_config().await?;
        self.store
            .put_snapshot(&ConfigSnapshot {
                hash: model.hash().to_owned(),
                bundle: bundle.clone(),
                created_at: now,
                actor: actor.to_owned(),
            })
            .await?;
        let existing = self.existing().await?;
        let diffs = self.diff(model.as_ref(), &existing).await?;
        let report = self.apply_diffs(diffs, model.hash(), actor).await?;
        self.point_at(model.as_ref(), current, &report, actor, now)
            .await?;
        self.remember(model);
        let touched: Vec<InstanceKey> = report
            .added
            .iter()
            .chain(&report.updated)
            .cloned()
            .collect();
        self.wake(&touched).await?;
        info!(hash = %short(model.hash()), added = report.added.len(), updated = report.updated.len(), removed = report.removed.len(), "config applied");
        Ok(report)
    }

    async fn existing(&self) -> Result<BTreeMap<InstanceKey, InstanceRecord>> {
        Ok(self
            .store
            .list_instances(&InstanceFilter::default())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect())
    }

    /// What `model` does to each instance, given the instances that exist.
    async fn diff(
        &self,
        model: &dyn CompiledConfig,
        existing: &BTreeMap<InstanceKey, InstanceRecord>,
    ) -> Result<Vec<InstanceDiff>> {
        let desired = self.desired_states(model, None).await?;
        let wanted: BTreeSet<InstanceKey> = desired.keys().cloned().collect();
        let mut diffs = Vec::new();
        for (key, desired) in desired {
            let diff = match existing.get(&key) {
                None => InstanceDiff::Add { key, desired },
                Some(record) => self.diff_existing(model, record, key, desired).await?,
            };
            diffs.push(diff);
        }
        for key in existing.keys().filter(|k| !wanted.contains(*k)) {
            diffs.push(InstanceDiff::Remove { key: key.clone() });
        }
        Ok(diffs)
    }

    async fn diff_existing(
        &self,
        model: &dyn CompiledConfig,
        record: &InstanceRecord,
        key: InstanceKey,
        desired: Desired,
    ) -> Result<InstanceDiff> {
        let Some(pin) = &record.controls.pinned else {
            return Ok(if record.desired == desired {
                InstanceDiff::Same { key }
            } else {
                InstanceDiff::Change {
                    key,
                    desired,
                    pinned: false,
                }
            });
        };
        // A pinned instance keeps its version, compiled with the new config.
        let release = self.release(&key, &pin.version).await?;
        Ok(match policy::desired_of(model, &key, release.as_ref()) {
            Ok(pinned) if pinned != record.desired => InstanceDiff::Change {
                key,
                desired: pinned,
                pinned: true,
            },
            Ok(_) | Err(Error::NotFound { .. }) => InstanceDiff::Same { key },
            Err(e) => return Err(e),
        })
    }

    async fn apply_diffs(
        &self,
        diffs: Vec<InstanceDiff>,
        hash: &str,
        actor: &str,
    ) -> Result<ApplyReport> {
        let mut report = ApplyReport {
            hash: hash.to_owned(),
            ..ApplyReport::default()
        };
        for diff in diffs {
            match diff {
                InstanceDiff::Add { key, desired } => {
                    self.add_instance(&key, &desired, hash, actor).await?;
                    report.added.push(key);
                }
                InstanceDiff::Change {
                    key,
                    desired,
                    pinned: true,
                } => {
                    self.update_instance(&key, |r| {
                        r.desired = desired.clone();
                        r.config_hash = hash.to_owned();
                        Vec::new()
                    })
                    .await?;
                    report.updated.push(key);
                }
                InstanceDiff::Change {
                    key,
                    desired,
                    pinned: false,
                } => {
                    self.set_desired(&key, &desired, hash).await?;
                    report.updated.push(key);
                }
                InstanceDiff::Same { .. } => report.unchanged += 1,
                InstanceDiff::Remove { key } => {
                    self.remove_instance(&key, actor).await?;
                    report.removed.push(key);
                }
            }
        }
        Ok(report)
    }

    /// Points at the applied config (with the channel order reads need) and
    /// records that it was applied.
    async fn point_at(
        &self,
        model: &dyn CompiledConfig,
        current: Option<CurrentConfig>,
        report: &ApplyReport,
        actor: &str,
        now: Timestamp,
    ) -> Result<()> {
        let pointer = CurrentConfig {
            hash: model.hash().to_owned(),
            revision: 0,
            channels: channel_order(model),
        };
        let changed = current.as_ref().map(|c| c.hash.as_str()) != Some(model.hash());
        // A pointer written before channel order was kept gets it now.
        let stale = current
            .as_ref()
            .is_some_and(|c| c.channels != pointer.channels);
        if changed || stale {
            self.store
                .set_current_config(&pointer, current.map(|c| c.revision))
                .await?;
        }
        if !changed {
            return Ok(());
        }
        let message = format!(
            "config {} applied: {} added, {} updated, {} removed",
            short(model.hash()),
            report.added.len(),
            report.updated.len(),
            report.removed.len()
        );
        let events: Vec<Event> = model
            .applications()
            .into_iter()
            .map(|app| Event {
                id: String::new(),
                at: now,
                application: app,
                service: None,
                release_channel: None,
                actor: actor.to_owned(),
                kind: EventKind::ConfigApplied {
                    hash: model.hash().to_owned(),
                },
                message: message.clone(),
            })
            .collect();
        self.append_events(events, &format!("config-{}", short(model.hash())))
            .await
    }

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

    /// Desired state of every instance, with each service's latest release
    /// (or `override_release` for its service).
    async fn desired_states(
        &self,
        model: &dyn CompiledConfig,
        override_release: Option<&Release>,
    ) -> Result<BTreeMap<InstanceKey, Desired>> {
        let mut desired = BTreeMap::new();
        for (app, service) in model.services() {
            let release = match override_release {
                Some(r) if r.application == app && r.service == service => Some(r.clone()),
                _ => self.store.latest_release(&app, &service).await?,
            };
            for (key, state) in model.compile_service(&app, &service, release.as_ref())? {
                desired.insert(key, state);
            }
        }
        Ok(desired)
    }

    async fn add_instance(
        &self,
        key: &InstanceKey,
        desired: &Desired,
        hash: &str,
        actor: &str,
    ) -> Result<()> {
        let now = self.clock.now();
        let record = InstanceRecord {
            key: key.clone(),
            revision: 0,
            config_hash: hash.to_owned(),
            desired: desired.clone(),
            state: InstanceState::new_pending(
                "added by the config; the engine has not looked at it yet",
            ),
            next_check_at: Some(now),
            controls: Default::default(),
            updated_at: now,
        };
        let mut events = vec![Event::for_instance(
            key,
            now,
            actor,
            EventKind::InstanceAdded,
            format!("{key} added by config {}", short(hash)),
        )];
        Event::assign_ids(
            &mut events,
            &format!("{}@add-{}", key.storage_id(), short(hash)),
        );
        let commit = InstanceCommit {
            change: InstanceChange::Put(Box::new(record)),
            expected_revision: None,
            new_jobs: Vec::new(),
            finished_jobs: Vec::new(),
            events,
        };
        match self.store.commit(commit).await {
            // Someone added it meanwhile (two pushes racing): update instead.
            Err(Error::Conflict { .. }) => self.set_desired(key, desired, hash).await.map(|_| ()),
            other => other.map(|_| ()),
        }
    }

    /// Sets an instance's desired state unless it is pinned (a pinned
    /// instance keeps its version; `vergence unpin` lets it follow again).
    /// Returns whether it was set.
    pub(super) async fn set_desired(
        &self,
        key: &InstanceKey,
        desired: &Desired,
        hash: &str,
    ) -> Result<bool> {
        let record = self
            .update_instance(key, |record| {
                if record.controls.pinned.is_none() {
                    record.desired = desired.clone();
                    record.config_hash = hash.to_owned();
                }
                Vec::new()
            })
            .await?;
        Ok(record.controls.pinned.is_none())
    }

    async fn remove_instance(&self, key: &InstanceKey, actor: &str) -> Result<()> {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let Some(record) = self.store.get_instance(key).await? else {
                return Ok(());
            };
            let mut events = vec![Event::for_instance(
                key,
                self.clock.now(),
                actor,
                EventKind::InstanceRemoved,
                format!(
                    "{key} is no longer in the config; Vergence stops managing it (nothing was undeployed)"
                ),
            )];
            Event::assign_ids(
                &mut events,
                &format!("{}@{}d", key.storage_id(), record.revision + 1),
            );
            let commit = InstanceCommit {
                change: InstanceChange::Delete(key.clone()),
                expected_revision: Some(record.revision),
                new_jobs: Vec::new(),
                finished_jobs: Vec::new(),
                events,
            };
            match self.store.commit(commit).await {
                Ok(_) => return Ok(()),
                Err(Error::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict {
            what: format!("instance {key}"),
        })
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
    let action = match (record, &desired) {
        (_, Desired::Unresolved { .. }) => PlanAction::WaitForRelease,
        (None, _) => PlanAction::Add,
        (Some(_), _) if current_version != desired_version => PlanAction::Update,
        (Some(_), _) if changed => PlanAction::Reconfigure,
        (Some(_), _) => PlanAction::NoChange,
    };
    PlanEntry {
        instance: key,
        current_version,
        desired_version,
        notes: plan_notes(&desired, &action),
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
