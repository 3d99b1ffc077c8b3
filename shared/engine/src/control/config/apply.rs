//! Carrying out a config's instance diff: instances added, given their new
//! desired state (a pinned one keeps its version) or removed, then the
//! pointer to the config in force moved and the push recorded in the
//! audit trail of the applications it concerns.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use vergence_model::error::{Error, Result};
use vergence_model::ports::{CompiledConfig, CurrentConfig, InstanceChange, InstanceCommit};
use vergence_model::{
    ApplicationName, Desired, Event, EventKind, InstanceKey, InstanceRecord, InstanceState,
};

use super::InstanceDiff;
use crate::control::{Control, MAX_CONFLICT_RETRIES, channel_order, short};

/// What applying a config changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyReport {
    pub hash: String,
    pub added: Vec<InstanceKey>,
    pub updated: Vec<InstanceKey>,
    pub removed: Vec<InstanceKey>,
    pub unchanged: usize,
    /// The parts whose content changed ([`ConfigPart::key`](vergence_model::ConfigPart::key)).
    #[serde(default)]
    pub changed_parts: Vec<String>,
}

impl Control {
    pub(super) async fn apply_diffs(
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
    pub(super) async fn point_at(
        &self,
        model: &dyn CompiledConfig,
        current: Option<CurrentConfig>,
        report: &ApplyReport,
        told: &BTreeSet<ApplicationName>,
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
        // Only the applications the push concerns: another application's
        // audit trail says nothing about a push that left it alone.
        let events: Vec<Event> = told
            .iter()
            .cloned()
            .map(|app| Event {
                id: String::new(),
                at: now,
                application: app,
                service: None,
                release_channel: None,
                actor: actor.to_owned().into(),
                kind: EventKind::ConfigApplied {
                    hash: model.hash().to_owned(),
                },
                message: message.clone(),
            })
            .collect();
        self.append_events(events, &format!("config-{}", short(model.hash())))
            .await
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
            watchdog_at: None,
            quiet_checks: 0,
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
    pub(in crate::control) async fn set_desired(
        &self,
        key: &InstanceKey,
        desired: &Desired,
        hash: &str,
    ) -> Result<bool> {
        let record = self
            .update_instance(key, |record| {
                follow(record, desired, hash);
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

/// Gives `record` the `desired` state compiled from config `hash`, unless
/// it is pinned (a pinned instance keeps its version; `vergence unpin` lets
/// it follow again). Returns whether it was given.
pub(in crate::control) fn follow(
    record: &mut InstanceRecord,
    desired: &Desired,
    hash: &str,
) -> bool {
    let follows = record.controls.pinned.is_none();
    if follows {
        record.desired = desired.clone();
        record.config_hash = hash.to_owned();
    }
    follows
}
