//! Control operations: what the CLI and the HTTP API do on behalf of people
//! and CI — apply a config, push a release, approve, ask for fresh checks,
//! read status, events and plans. Each validates everything before writing
//! anything, so a rejected request stores nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tracing::info;

use vergence_model::ConfigBundle;
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    ChannelOrder, Clock, CompiledConfig, Compiler, ConfigSnapshot, CurrentConfig, InstanceChange,
    InstanceCommit, InstanceFilter, StateStore, WorkItem, WorkQueue,
};
use vergence_model::{
    ApplicationName, Approval, Desired, Event, EventFilter, EventKind, InstanceKey, InstanceRecord,
    InstanceState, Precondition, Release, ServiceName, Version,
};

mod policy;

pub use policy::{PauseAction, StepFailure};

const MAX_CONFLICT_RETRIES: usize = 5;

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

/// The control operations, over the injected store, queue and compiler.
#[derive(Clone)]
pub struct Control {
    store: Arc<dyn StateStore>,
    queue: Arc<dyn WorkQueue>,
    clock: Arc<dyn Clock>,
    compiler: Arc<dyn Compiler>,
    /// The config in force, compiled once per snapshot hash rather than on
    /// every operation that needs it.
    current: Arc<Mutex<Option<Arc<dyn CompiledConfig>>>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").finish_non_exhaustive()
    }
}

impl Control {
    pub fn new(
        store: Arc<dyn StateStore>,
        queue: Arc<dyn WorkQueue>,
        clock: Arc<dyn Clock>,
        compiler: Arc<dyn Compiler>,
    ) -> Self {
        Self {
            store,
            queue,
            clock,
            compiler,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// Checks a config without storing anything.
    pub fn validate(&self, bundle: &ConfigBundle) -> Result<Arc<dyn CompiledConfig>> {
        self.compiler.compile(bundle)
    }

    /// The config in force, compiled (once per snapshot).
    pub async fn current_model(&self) -> Result<Option<Arc<dyn CompiledConfig>>> {
        let Some(current) = self.store.current_config().await? else {
            return Ok(None);
        };
        if let Some(cached) = self.cached(&current.hash) {
            return Ok(Some(cached));
        }
        let snapshot = self
            .store
            .get_snapshot(&current.hash)
            .await?
            .ok_or_else(|| Error::not_found(format!("config snapshot {}", current.hash)))?;
        let model = self.validate(&snapshot.bundle)?;
        self.remember(&model);
        Ok(Some(model))
    }

    fn cached(&self, hash: &str) -> Option<Arc<dyn CompiledConfig>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|m| m.hash() == hash).cloned()
    }

    fn remember(&self, model: &Arc<dyn CompiledConfig>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(model.clone());
    }

    async fn require_model(&self) -> Result<Arc<dyn CompiledConfig>> {
        self.current_model().await?.ok_or_else(|| {
            Error::not_found(
                "config (apply one first with `vergence up` or `vergence configs push`)",
            )
        })
    }

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
        let now = self.clock.now();
        let desired = self.desired_states(model.as_ref(), None).await?;
        let current = self.store.current_config().await?;
        self.store
            .put_snapshot(&ConfigSnapshot {
                hash: model.hash().to_owned(),
                bundle,
                created_at: now,
                actor: actor.to_owned(),
            })
            .await?;
        let mut report = ApplyReport {
            hash: model.hash().to_owned(),
            ..ApplyReport::default()
        };
        let existing: BTreeMap<InstanceKey, InstanceRecord> = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        for (key, wanted) in &desired {
            match existing.get(key) {
                None => {
                    self.add_instance(key, wanted, model.hash(), actor).await?;
                    report.added.push(key.clone());
                }
                Some(record) if record.controls.pinned.is_some() => {
                    // A pinned instance keeps its version, compiled with the new config.
                    let release = match &record.controls.pinned {
                        Some(pin) => self.release(key, &pin.version).await?,
                        None => None,
                    };
                    let pinned = match policy::desired_of(model.as_ref(), key, release.as_ref()) {
                        Ok(d) => Some(d),
                        Err(Error::NotFound { .. }) => None,
                        Err(e) => return Err(e),
                    };
                    match pinned {
                        Some(d) if d != record.desired => {
                            self.update_instance(key, |r| {
                                r.desired = d.clone();
                                r.config_hash = model.hash().to_owned();
                                Vec::new()
                            })
                            .await?;
                            report.updated.push(key.clone());
                        }
                        _ => report.unchanged += 1,
                    }
                }
                Some(record) if record.desired == *wanted => report.unchanged += 1,
                Some(_) => {
                    self.set_desired(key, wanted, model.hash()).await?;
                    report.updated.push(key.clone());
                }
            }
        }
        for key in existing.keys().filter(|k| !desired.contains_key(*k)) {
            self.remove_instance(key, actor).await?;
            report.removed.push(key.clone());
        }
        let pointer = CurrentConfig {
            hash: model.hash().to_owned(),
            revision: 0,
            channels: channel_order(model.as_ref()),
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
        if changed {
            let events: Vec<Event> = model
                .applications()
                .into_iter()
                .map(|app| Event {
                    id: String::new(),
                    at: now,
                    application: app.clone(),
                    service: None,
                    release_channel: None,
                    actor: actor.to_owned(),
                    kind: EventKind::ConfigApplied {
                        hash: model.hash().to_owned(),
                    },
                    message: format!(
                        "config {} applied: {} added, {} updated, {} removed",
                        short(model.hash()),
                        report.added.len(),
                        report.updated.len(),
                        report.removed.len()
                    ),
                })
                .collect();
            self.append_events(events, &format!("config-{}", short(model.hash())))
                .await?;
        }
        self.remember(&model);
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
    async fn set_desired(&self, key: &InstanceKey, desired: &Desired, hash: &str) -> Result<bool> {
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

    /// Re-reads and rewrites an instance until the write wins the revision
    /// check. `change` returns the events to record with the write.
    async fn update_instance(
        &self,
        key: &InstanceKey,
        change: impl Fn(&mut InstanceRecord) -> Vec<Event>,
    ) -> Result<InstanceRecord> {
        for _ in 0..MAX_CONFLICT_RETRIES {
            let Some(mut record) = self.store.get_instance(key).await? else {
                return Err(Error::not_found(format!("instance {key}")));
            };
            let expected = record.revision;
            let now = self.clock.now();
            let mut events = change(&mut record);
            Event::assign_ids(
                &mut events,
                &format!("{}@{}c", key.storage_id(), expected + 1),
            );
            record.next_check_at = Some(now);
            record.updated_at = now;
            let commit = InstanceCommit {
                change: InstanceChange::Put(Box::new(record.clone())),
                expected_revision: Some(expected),
                new_jobs: Vec::new(),
                events,
            };
            match self.store.commit(commit).await {
                Ok(revision) => {
                    record.revision = revision;
                    return Ok(record);
                }
                Err(Error::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Conflict {
            what: format!("instance {key}"),
        })
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

    /// Records a release (a new service version with its parameter values)
    /// and makes it the desired version of the service in every channel.
    pub async fn push_release(
        &self,
        application: Option<ApplicationName>,
        service: &ServiceName,
        version: &Version,
        params: &BTreeMap<String, String>,
        actor: &str,
    ) -> Result<Release> {
        let model = self.require_model().await?;
        let application = match application {
            Some(app) => app,
            None => model.application_of(service)?,
        };
        let typed = model.release_params(&application, service, params)?;
        let release = Release {
            application: application.clone(),
            service: service.clone(),
            version: version.clone(),
            config_fingerprint: model.fingerprint(&application, service, &typed)?,
            params: typed,
            created_at: self.clock.now(),
            actor: actor.to_owned(),
        };
        let desired = model.compile_service(&application, service, Some(&release))?;
        self.store.put_release(&release).await?;
        let mut keys = Vec::new();
        for (key, state) in desired {
            if self.set_desired(&key, &state, model.hash()).await? {
                keys.push(key);
            }
        }
        let event = Event {
            id: String::new(),
            at: release.created_at,
            application: application.clone(),
            service: Some(service.clone()),
            release_channel: None,
            actor: actor.to_owned(),
            kind: EventKind::ReleaseCreated {
                version: version.clone(),
            },
            message: format!("release {version} of {service} pushed"),
        };
        let scope = format!(
            "release-{application}-{service}-{version}-{}",
            release.created_at.as_millisecond()
        );
        self.append_events(vec![event], &scope).await?;
        self.wake(&keys).await?;
        Ok(release)
    }

    /// Records an approval for one instance, bound to a version (the desired
    /// one when not given).
    pub async fn approve(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        actor: &str,
    ) -> Result<Approval> {
        let record = self
            .store
            .get_instance(key)
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {key}")))?;
        let version = match version {
            Some(v) => v.clone(),
            None => record.desired.version().cloned().ok_or_else(|| {
                Error::invalid(
                    "version",
                    format!("{key} has no desired version yet; pass --version"),
                )
            })?,
        };
        // Approving the version that has a plan approves that exact plan.
        let plan = record.state.plan.as_ref().filter(|p| p.version == version);
        let approval = Approval {
            instance: key.clone(),
            version: version.clone(),
            plan_sha256: plan.map(|p| p.sha256.clone()),
            actor: actor.to_owned(),
            at: self.clock.now(),
        };
        self.store.put_approval(&approval).await?;
        let event = Event::for_instance(
            key,
            approval.at,
            actor,
            EventKind::ApprovalRecorded {
                version: version.clone(),
            },
            match plan {
                Some(p) => format!(
                    "{actor} approved {version} with plan {} for {}",
                    p.short(),
                    key.release_channel
                ),
                None => format!("{actor} approved {version} for {}", key.release_channel),
            },
        );
        let scope = format!(
            "{}@approval-{}",
            key.storage_id(),
            approval.at.as_millisecond()
        );
        self.append_events(vec![event], &scope).await?;
        self.wake(std::slice::from_ref(key)).await?;
        Ok(approval)
    }

    /// Asks the engine to look at instances afresh: fetch again instead of
    /// trusting the last observation, and retry versions that failed.
    pub async fn request_checks(
        &self,
        filter: &InstanceFilter,
        actor: &str,
    ) -> Result<Vec<InstanceKey>> {
        let records = self.store.list_instances(filter).await?;
        let mut keys = Vec::new();
        for record in records {
            let now = self.clock.now();
            let actor = actor.to_owned();
            self.update_instance(&record.key, |r| {
                r.state.checks_requested = true;
                // Failing protections are checked again too, not trusted
                // until their poll interval says so.
                r.state.protections.retain(|_, seen| seen.passed);
                let mut events = Vec::new();
                if let Some(target) = r.state.target.as_mut().filter(|t| t.failed.is_some()) {
                    target.failed = None;
                    target.apply_failures = 0;
                    target.fetch_failures = 0;
                    target.retry_at = None;
                    events.push(Event::for_instance(
                        &r.key,
                        now,
                        actor.clone(),
                        EventKind::ChecksRequested,
                        format!("{actor} asked to retry {} after it failed", target.version),
                    ));
                }
                events
            })
            .await?;
            keys.push(record.key);
        }
        self.wake(&keys).await?;
        Ok(keys)
    }

    /// Instances in a stable order: application, service, promotion order
    /// (as stored with the config pointer: reads never compile).
    pub async fn status(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>> {
        let mut records = self.store.list_instances(filter).await?;
        let current = self.store.current_config().await?;
        records.sort_by_key(|r| {
            let rank = current
                .as_ref()
                .and_then(|c| c.rank(&r.key.application, &r.key.release_channel));
            (
                r.key.application.clone(),
                r.key.service.clone(),
                rank.unwrap_or(usize::MAX),
                r.key.release_channel.clone(),
            )
        });
        Ok(records)
    }

    pub async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        self.store.list_events(filter).await
    }

    /// What applying a compiled config would change, per instance, without
    /// running anything or storing anything.
    pub async fn plan(&self, model: &dyn CompiledConfig) -> Result<Vec<PlanEntry>> {
        let desired = self.desired_states(model, None).await?;
        let existing: BTreeMap<InstanceKey, InstanceRecord> = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        let pointer = CurrentConfig {
            hash: model.hash().to_owned(),
            revision: 0,
            channels: channel_order(model),
        };
        let mut entries = Vec::new();
        for (key, wanted) in &desired {
            let record = existing.get(key);
            let current_version = record.and_then(|r| r.state.current_version.clone());
            let desired_version = wanted.version().cloned();
            let action = match (record, wanted) {
                (_, Desired::Unresolved { .. }) => PlanAction::WaitForRelease,
                (None, _) => PlanAction::Add,
                (Some(_), _) if current_version != desired_version => PlanAction::Update,
                (Some(r), _) if r.desired != *wanted => PlanAction::Reconfigure,
                (Some(_), _) => PlanAction::NoChange,
            };
            entries.push(PlanEntry {
                instance: key.clone(),
                current_version,
                desired_version,
                notes: plan_notes(wanted, &action),
                action,
            });
        }
        for (key, record) in existing.iter().filter(|(k, _)| !desired.contains_key(*k)) {
            entries.push(PlanEntry {
                instance: key.clone(),
                current_version: record.state.current_version.clone(),
                desired_version: None,
                action: PlanAction::Remove,
                notes: vec!["Vergence stops managing it; nothing is undeployed".to_owned()],
            });
        }
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

    async fn append_events(&self, mut events: Vec<Event>, scope: &str) -> Result<()> {
        Event::assign_ids(&mut events, scope);
        self.store.append_events(&events).await
    }

    async fn wake(&self, keys: &[InstanceKey]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let unique: BTreeSet<&InstanceKey> = keys.iter().collect();
        let items: Vec<WorkItem> = unique
            .into_iter()
            .map(|k| WorkItem {
                instance: k.clone(),
                not_before: now,
            })
            .collect();
        self.queue.enqueue(&items).await
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(10)]
}

/// Each application's release channels in promotion order.
fn channel_order(model: &dyn CompiledConfig) -> ChannelOrder {
    model
        .applications()
        .into_iter()
        .map(|app| {
            let order = model.promotion_order(&app);
            (app, order)
        })
        .collect()
}

impl Control {
    /// The pointer to the config in force, with its applications and their
    /// channel order; cheap, and compiles nothing.
    pub async fn current_config(&self) -> Result<Option<CurrentConfig>> {
        self.store.current_config().await
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
