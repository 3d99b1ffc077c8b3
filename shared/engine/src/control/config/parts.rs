//! The parts of a config: which part each file belongs to, which parts a
//! push changes, and the chain of versions each part keeps (each version
//! names the one it replaced).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use vergence_model::error::{Error, Result};
use vergence_model::ports::{ConfigSnapshot, CurrentConfig};
use vergence_model::{ApplicationName, ConfigBundle, ConfigPart};

use crate::control::Control;

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
pub(super) struct StoredPart {
    pub(super) hash: Option<String>,
    pub(super) files: BTreeMap<String, String>,
}

/// The parts whose files differ, each with the paths that differ.
pub(super) fn changed_parts(
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
pub(super) fn split(
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

impl Control {
    /// The config in force and its parts. A config stored before parts
    /// existed is split as it would be now, its parts without versions.
    pub(super) async fn current_parts(
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

    pub(super) async fn snapshot(&self, hash: &str) -> Result<ConfigSnapshot> {
        self.store
            .get_snapshot(hash)
            .await?
            .ok_or_else(|| Error::not_found(format!("config snapshot {hash}")))
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
}
