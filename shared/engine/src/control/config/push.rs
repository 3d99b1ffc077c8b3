//! Pushing a config, whole or one application's part: composed with the
//! parts it leaves alone, compiled, split into parts, authorized by the
//! parts it changes (a part push that changes another part is refused),
//! then stored with a new version of each changed part only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tracing::{debug, info};

use vergence_model::error::{Error, Result};
use vergence_model::ports::{CompiledConfig, ConfigSnapshot, CurrentConfig};
use vergence_model::{
    ApplicationName, ConfigBundle, ConfigErrors, ConfigPart, DeploymentTarget, InstanceKey, PartOf,
};

use super::apply::ApplyReport;
use super::parts::{changed_parts, split};
use crate::control::{Control, MAX_CONFLICT_RETRIES, short};

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
    /// The files of the part a part push writes; `None` for a whole push,
    /// which writes every file.
    own_files: Option<BTreeSet<String>>,
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

    /// What stops jobs this push writes from starting on `target` (see
    /// [`CompiledConfig::target_errors`]): those of every file for a whole
    /// push, those of the application's own files for a part push. The
    /// other parts stay as they were; their owners answer for them when
    /// they push them.
    pub fn target_errors(&self, target: DeploymentTarget) -> ConfigErrors {
        let mut errors = self.model.target_errors(target);
        if let Some(own) = &self.own_files {
            errors.0.retain(|e| own.contains(&e.file));
        }
        errors
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
        let own_files = application.map(|application| {
            after
                .get(&ConfigPart::Application(application.clone()))
                .map(|files| files.keys().cloned().collect())
                .unwrap_or_default()
        });
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
            own_files,
            concerns,
            current,
        })
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
}
