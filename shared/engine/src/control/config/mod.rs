//! Applying a config and planning one. Both start from one instance diff:
//! which instances a config adds, changes (a pinned instance keeps its
//! version, compiled with the new config), leaves alone and removes.
//!
//! [`push`] composes, compiles and stores a config part by part; [`apply`]
//! carries its diff out; [`plan`] shows the same diff without acting;
//! [`parts`] keeps each part's versions and [`rollback`] returns to one.

use std::collections::{BTreeMap, BTreeSet};

use vergence_model::error::{Error, Result};
use vergence_model::ports::{CompiledConfig, InstanceFilter};
use vergence_model::{Desired, InstanceKey, InstanceRecord, Release};

use super::{Control, policy};

pub(super) mod apply;
mod parts;
mod plan;
mod push;
mod rollback;

pub use apply::ApplyReport;
pub use parts::PartVersion;
pub use plan::{PlanAction, PlanEntry};
pub use push::PreparedPush;

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
}
