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
    ApplicationName, ConfigBundle, ConfigPart, Desired, Event, EventKind, InstanceKey,
    InstanceRecord, InstanceState, PartOf, Precondition, Release, Version,
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
    /// The parts whose content changed ([`ConfigPart::key`]).
    #[serde(default)]
    pub changed_parts: Vec<String>,
}

/// How many versions of a part are listed (and searched for a rollback).
const MAX_HISTORY: usize = 1000;

/// The shortest hash prefix a rollback accepts.
const MIN_HASH_PREFIX: usize = 7;

/// One version of a config part, as `vergence configs list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartVersion {
    pub hash: String,
    pub created_at: Timestamp,
    /// Who pushed it.
    pub actor: String,
    pub files: Vec<String>,
    /// Whether it is the version in force.
    pub current: bool,
    /// The version it replaced.
    pub previous: Option<String>,
}

/// A part of the config in force: its version (none for a config stored
/// before parts existed) and its files.
struct StoredPart {
    hash: Option<String>,
    files: BTreeMap<String, String>,
}

/// A push composed, compiled and split into parts, not yet stored. Who may
/// make it depends on the parts it changes.
#[derive(Debug)]
pub struct PreparedPush {
    model: Arc<dyn CompiledConfig>,
    composed: ConfigBundle,
    /// Snapshots of the parts that get a new version.
    new_parts: Vec<ConfigBundle>,
    changed: BTreeMap<ConfigPart, Vec<String>>,
    application: Option<ApplicationName>,
    concerns: BTreeMap<String, BTreeSet<ApplicationName>>,
    current: Option<CurrentConfig>,
}

impl PreparedPush {
    pub fn model(&self) -> &Arc<dyn CompiledConfig> {
        &self.model
    }

    /// The parts whose content the push changes, each with the files that
    /// change (added, edited, removed, or moved to another part).
    pub fn changed(&self) -> &BTreeMap<ConfigPart, Vec<String>> {
        &self.changed
    }

    /// What a push of one application's part changes elsewhere (empty for a
    /// whole push): such a push is refused, whoever makes it.
    pub fn outside_scope(&self) -> Vec<&ConfigPart> {
        let Some(application) = &self.application else {
            return Vec::new();
        };
        self.changed
            .keys()
            .filter(|part| part.application() != Some(application))
            .collect()
    }

    /// Why a push of one application's part is refused when it would
    /// change another part: `None` when it changes only its own.
    pub fn scope_refusal(&self) -> Option<String> {
        let part = self.outside_scope().into_iter().next()?;
        // Every part shares one tree of paths: two teams that each push a
        // folder holding `application.yaml` write the same file.
        let mine = self.application.as_ref()?;
        Some(format!(
            "this push of one application's config would also change {}; nothing was changed. Push that part with its own token, or the whole config with a platform token. If those are {mine}'s own files at paths another part already has, keep {mine}'s files in a folder of their own ({mine}/…) and push from its parent directory (docs/per-application-configs.md)",
            self.describe(part)
        ))
    }

    /// A part and the files the push changes in it, for messages:
    /// `application blog's part (blog.yaml)`, `the platform part
    /// (runtimes.yaml, used by blog and shop)`.
    pub fn describe(&self, part: &ConfigPart) -> String {
        let files = self.changed.get(part).cloned().unwrap_or_default();
        let users: BTreeSet<&str> = files
            .iter()
            .filter_map(|f| self.concerns.get(f))
            .flatten()
            .map(|a| a.as_str())
            .collect();
        let used_by = match part {
            ConfigPart::Platform if users.len() > 1 => format!(
                ", used by {}",
                users.into_iter().collect::<Vec<_>>().join(" and ")
            ),
            ConfigPart::Platform if users.is_empty() => ", used by no application".to_owned(),
            _ => String::new(),
        };
        format!("{part} ({}{used_by})", files.join(", "))
    }

    /// The applications whose audit trail records the push: those whose
    /// part changed, those a changed shared file concerns, and those with
    /// an instance added, updated or removed.
    fn concerned_applications(&self, report: &ApplyReport) -> BTreeSet<ApplicationName> {
        let mut told = BTreeSet::new();
        let applications = self.model.applications();
        for (part, files) in &self.changed {
            match part {
                ConfigPart::Application(application) => {
                    told.insert(application.clone());
                }
                ConfigPart::Platform => {
                    told.extend(
                        files
                            .iter()
                            .filter_map(|f| self.concerns.get(f))
                            .flatten()
                            .cloned(),
                    );
                }
            }
        }
        told.extend(
            report
                .added
                .iter()
                .chain(&report.updated)
                .chain(&report.removed)
                .map(|k| k.application.clone()),
        );
        // An application that is gone has no audit trail to write to here;
        // its instances' removals recorded it.
        told.retain(|a| applications.contains(a));
        told
    }
}

/// The parts whose files differ, each with the paths that differ.
fn changed_parts(
    before: &BTreeMap<ConfigPart, StoredPart>,
    after: &BTreeMap<ConfigPart, BTreeMap<String, String>>,
) -> BTreeMap<ConfigPart, Vec<String>> {
    let mut changed = BTreeMap::new();
    let all_parts: BTreeSet<&ConfigPart> = before.keys().chain(after.keys()).collect();
    let empty = BTreeMap::new();
    for part in all_parts {
        let old = before.get(part).map_or(&empty, |p| &p.files);
        let new = after.get(part).unwrap_or(&empty);
        let paths: Vec<String> = old
            .keys()
            .chain(new.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|path| old.get(*path) != new.get(*path))
            .cloned()
            .collect();
        if !paths.is_empty() {
            changed.insert(part.clone(), paths);
        }
    }
    changed
}

/// Which part each file belongs to. A file keeps its part while its content
/// and whom it concerns allow: a shared file stays the platform's, and an
/// application's file stays its own until another application uses what it
/// defines. A new or edited file is its application's when it concerns
/// exactly one, and the platform's otherwise (shared, or used by none).
fn split(
    files: &BTreeMap<String, String>,
    concerns: &BTreeMap<String, BTreeSet<ApplicationName>>,
    before: &BTreeMap<ConfigPart, StoredPart>,
) -> BTreeMap<ConfigPart, BTreeMap<String, String>> {
    let none = BTreeSet::new();
    let mut parts: BTreeMap<ConfigPart, BTreeMap<String, String>> = BTreeMap::new();
    for (path, content) in files {
        let applications = concerns.get(path).unwrap_or(&none);
        let kept = before
            .iter()
            .find(|(_, p)| p.files.get(path) == Some(content))
            .map(|(part, _)| part);
        let part = match kept {
            Some(ConfigPart::Platform) => ConfigPart::Platform,
            Some(ConfigPart::Application(owner)) if applications.iter().all(|a| a == owner) => {
                ConfigPart::Application(owner.clone())
            }
            _ => match applications.iter().collect::<Vec<_>>().as_slice() {
                [only] => ConfigPart::Application((*only).clone()),
                _ => ConfigPart::Platform,
            },
        };
        parts
            .entry(part)
            .or_default()
            .insert(path.clone(), content.clone());
    }
    parts
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
    /// Rolled back from the desired version, which failed: `up` leaves it
    /// until a new version is pushed.
    StaysRolledBack,
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
    /// A config with errors is rejected before anything is written. The
    /// config is split into parts and only the parts whose content changed
    /// get a new version (docs/per-application-configs.md).
    pub async fn apply_config(&self, bundle: ConfigBundle, actor: &str) -> Result<ApplyReport> {
        self.push_config(&bundle, None, actor, None, |_| Ok::<(), Error>(()))
            .await
    }

    /// [`Control::apply_config`] for a config the caller already compiled,
    /// so a whole config that changes nothing is compiled once.
    pub async fn apply_compiled(
        &self,
        model: Arc<dyn CompiledConfig>,
        bundle: ConfigBundle,
        actor: &str,
    ) -> Result<ApplyReport> {
        self.push_config(&bundle, None, actor, Some(model), |_| Ok::<(), Error>(()))
            .await
    }

    /// Pushes a config: the whole config (`application` None), or one
    /// application's part, keeping every other part as it is. `authorize`
    /// sees which parts the push changes before anything is stored; its
    /// error is returned as is. `compiled`, when the caller compiled the
    /// pushed files already, saves compiling them again.
    pub async fn push_config<E: From<Error>>(
        &self,
        bundle: &ConfigBundle,
        application: Option<&ApplicationName>,
        actor: &str,
        compiled: Option<Arc<dyn CompiledConfig>>,
        authorize: impl Fn(&PreparedPush) -> std::result::Result<(), E>,
    ) -> std::result::Result<ApplyReport, E> {
        // Two pushes at once (two `vergence up` on one state, or CI runs
        // racing) each see the pointer the other moved: the loser composes
        // again from what is there now, is authorized again for what its
        // push now changes, and finds nothing left to do when both pushed
        // the same config.
        let mut attempts = 0;
        loop {
            let prepared = self
                .prepare_push(bundle, application, compiled.clone())
                .await?;
            authorize(&prepared)?;
            match self.commit_push(prepared, actor).await {
                Err(Error::Conflict { what }) if attempts + 1 < MAX_CONFLICT_RETRIES => {
                    attempts += 1;
                    debug!(%what, attempts, "config push lost a race; applying again");
                }
                done => return done.map_err(E::from),
            }
        }
    }

    /// Composes the config a push makes, compiles it and splits it into
    /// parts, storing nothing.
    pub async fn prepare_push(
        &self,
        bundle: &ConfigBundle,
        application: Option<&ApplicationName>,
        compiled: Option<Arc<dyn CompiledConfig>>,
    ) -> Result<PreparedPush> {
        let current = self.store.current_config().await?;
        let (before_bundle, before) = self.current_parts(current.as_ref()).await?;
        let mut files = match application {
            None => BTreeMap::new(),
            Some(application) => {
                let mine = before.get(&ConfigPart::Application(application.clone()));
                let mut kept = before_bundle
                    .as_ref()
                    .map(|b| b.files.clone())
                    .unwrap_or_default();
                kept.retain(|path, _| mine.is_none_or(|part| !part.files.contains_key(path)));
                kept
            }
        };
        files.extend(bundle.files.clone());
        let mut candidate = ConfigBundle::from_files(files);
        // Local jobs run relative to the root: the other parts' files were
        // read from the current one, so a part push keeps it.
        let before_root = before_bundle.as_ref().and_then(|b| b.root.clone());
        candidate.root = match application {
            Some(_) => before_root.or_else(|| bundle.root.clone()),
            None => bundle.root.clone().or(before_root),
        };
        let model = match compiled {
            Some(model) if model.hash() == candidate.hash() => model,
            _ => self.validate(&candidate)?,
        };
        if let Some(application) = application
            && !model.applications().contains(application)
        {
            return Err(Error::invalid(
                "application",
                format!(
                    "the pushed files define no application {application}; push the directory with its `application:` document (to remove an application, push the whole config without it)"
                ),
            ));
        }
        let concerns = model.file_applications();
        let after = split(&candidate.files, &concerns, &before);
        let changed = changed_parts(&before, &after);
        let mut new_parts = Vec::new();
        let mut composed = candidate;
        for (part, files) in after {
            let previous = before.get(&part).and_then(|p| p.hash.clone());
            let hash = match &previous {
                Some(hash) if !changed.contains_key(&part) => hash.clone(),
                _ => {
                    let mut snapshot = ConfigBundle::from_files(files);
                    snapshot.part_of = Some(PartOf {
                        part: part.key(),
                        previous,
                    });
                    let hash = snapshot.hash();
                    new_parts.push(snapshot);
                    hash
                }
            };
            composed.parts.insert(part.key(), hash);
        }
        // Pushing what is in force again (every `vergence up`) finds it
        // compiled already.
        let model = match self.cached(&composed.hash()) {
            Some(model) => model,
            None => self.validate(&composed)?,
        };
        Ok(PreparedPush {
            model,
            composed,
            new_parts,
            changed,
            application: application.cloned(),
            concerns,
            current,
        })
    }

    /// The config in force and its parts. A config stored before parts
    /// existed is split as it would be now, its parts without versions.
    async fn current_parts(
        &self,
        current: Option<&CurrentConfig>,
    ) -> Result<(Option<ConfigBundle>, BTreeMap<ConfigPart, StoredPart>)> {
        let Some(current) = current else {
            return Ok((None, BTreeMap::new()));
        };
        let snapshot = self.snapshot(&current.hash).await?;
        let mut parts = BTreeMap::new();
        if snapshot.bundle.parts.is_empty() {
            let model = match self.cached(&current.hash) {
                Some(model) => model,
                None => self.validate(&snapshot.bundle)?,
            };
            for (part, files) in split(
                &snapshot.bundle.files,
                &model.file_applications(),
                &BTreeMap::new(),
            ) {
                parts.insert(part, StoredPart { hash: None, files });
            }
            return Ok((Some(snapshot.bundle), parts));
        }
        for (key, hash) in &snapshot.bundle.parts {
            let part = ConfigPart::from_key(key).ok_or_else(|| {
                Error::invalid(
                    "config",
                    format!(
                        "config snapshot {} names an unknown part {key:?}",
                        current.hash
                    ),
                )
            })?;
            let files = self.snapshot(hash).await?.bundle.files;
            parts.insert(
                part,
                StoredPart {
                    hash: Some(hash.clone()),
                    files,
                },
            );
        }
        Ok((Some(snapshot.bundle), parts))
    }

    async fn snapshot(&self, hash: &str) -> Result<ConfigSnapshot> {
        self.store
            .get_snapshot(hash)
            .await?
            .ok_or_else(|| Error::not_found(format!("config snapshot {hash}")))
    }

    /// Stores a prepared push and makes it the desired state. Fails with
    /// [`Error::Conflict`] when the config in force moved since it was
    /// prepared.
    pub async fn commit_push(&self, prepared: PreparedPush, actor: &str) -> Result<ApplyReport> {
        let now = self.clock.now();
        for part in &prepared.new_parts {
            self.store
                .put_snapshot(&ConfigSnapshot {
                    hash: part.hash(),
                    bundle: part.clone(),
                    created_at: now,
                    actor: actor.to_owned(),
                })
                .await?;
        }
        let model = &prepared.model;
        self.store
            .put_snapshot(&ConfigSnapshot {
                hash: model.hash().to_owned(),
                bundle: prepared.composed.clone(),
                created_at: now,
                actor: actor.to_owned(),
            })
            .await?;
        let existing = self.existing().await?;
        let diffs = self.diff(model.as_ref(), &existing).await?;
        let mut report = self.apply_diffs(diffs, model.hash(), actor).await?;
        report.changed_parts = prepared.changed.keys().map(ConfigPart::key).collect();
        let told = prepared.concerned_applications(&report);
        self.point_at(
            model.as_ref(),
            prepared.current.clone(),
            &report,
            &told,
            actor,
            now,
        )
        .await?;
        self.remember(model);
        let touched: Vec<InstanceKey> = report
            .added
            .iter()
            .chain(&report.updated)
            .cloned()
            .collect();
        self.wake(&touched).await?;
        info!(hash = %short(model.hash()), parts = ?report.changed_parts, added = report.added.len(), updated = report.updated.len(), removed = report.removed.len(), "config applied");
        Ok(report)
    }

    /// The versions of one part of the config in force, newest first (at
    /// most `limit`). Empty when the part has none yet (no such part, or a
    /// config stored before parts existed).
    pub async fn part_versions(&self, part: &ConfigPart, limit: usize) -> Result<Vec<PartVersion>> {
        let Some(current) = self.store.current_config().await? else {
            return Ok(Vec::new());
        };
        let composed = self.snapshot(&current.hash).await?;
        let mut next = composed.bundle.parts.get(&part.key()).cloned();
        let mut versions = Vec::new();
        while let Some(hash) = next.take() {
            if versions.len() >= limit {
                break;
            }
            let snapshot = self.snapshot(&hash).await?;
            next = snapshot
                .bundle
                .part_of
                .as_ref()
                .and_then(|p| p.previous.clone());
            versions.push(PartVersion {
                current: versions.is_empty(),
                hash,
                created_at: snapshot.created_at,
                actor: snapshot.actor,
                files: snapshot.bundle.files.keys().cloned().collect(),
                previous: next.clone(),
            });
        }
        Ok(versions)
    }

    /// Rolls an application's part back to an earlier version (`to`, a hash
    /// or its prefix as `part_versions` lists it; default the one before
    /// the current), as a push of that version's files: the other parts
    /// stay, and `authorize` decides as for any push.
    pub async fn rollback_config<E: From<Error>>(
        &self,
        application: &ApplicationName,
        to: Option<&str>,
        actor: &str,
        authorize: impl Fn(&PreparedPush) -> std::result::Result<(), E>,
    ) -> std::result::Result<ApplyReport, E> {
        let part = ConfigPart::Application(application.clone());
        let versions = self.part_versions(&part, MAX_HISTORY).await?;
        let list = format!("see `vergence configs list --app {application}`");
        let target = match to {
            None => versions.get(1).ok_or_else(|| {
                Error::invalid(
                    "to",
                    format!(
                        "application {application} has no earlier config version to roll back to ({list})"
                    ),
                )
            })?,
            Some(wanted) => {
                let wanted = wanted.trim();
                if wanted.len() < MIN_HASH_PREFIX {
                    return Err(E::from(Error::invalid(
                        "to",
                        format!(
                            "give at least {MIN_HASH_PREFIX} characters of a version's hash ({list})"
                        ),
                    )));
                }
                let matching: Vec<&PartVersion> = versions
                    .iter()
                    .filter(|v| v.hash.starts_with(wanted))
                    .collect();
                match matching.as_slice() {
                    [one] if one.current => {
                        return Err(E::from(Error::invalid(
                            "to",
                            format!(
                                "{wanted} is application {application}'s current config version; name an earlier one ({list})"
                            ),
                        )));
                    }
                    [one] => *one,
                    [] => {
                        return Err(E::from(Error::not_found(format!(
                            "config version {wanted} of application {application} ({list})"
                        ))));
                    }
                    _ => {
                        return Err(E::from(Error::invalid(
                            "to",
                            format!("{wanted} matches several versions; give more of the hash"),
                        )));
                    }
                }
            }
        };
        let files = self.snapshot(&target.hash).await?.bundle.files;
        self.push_config(
            &ConfigBundle::from_files(files),
            Some(application),
            actor,
            None,
            authorize,
        )
        .await
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
