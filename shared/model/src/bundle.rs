//! A config as it was handed to Vergence: the YAML files of a directory (or
//! of a pushed bundle), keyed by path. Reading them from disk and making
//! sense of them is the compiler's business; the bundle is what is stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hashing::hash_fields;

/// The YAML files of a config directory, keyed by path relative to it.
/// Immutable once built; its hash identifies a config snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigBundle {
    pub files: BTreeMap<String, String>,
    /// The directory the files were read from, when they came from disk;
    /// local jobs run relative to it.
    pub root: Option<String>,
}

impl ConfigBundle {
    pub fn from_files(files: BTreeMap<String, String>) -> Self {
        Self { files, root: None }
    }

    /// Content hash of the files (not of where they were read from).
    pub fn hash(&self) -> String {
        let mut fields: Vec<&[u8]> = Vec::with_capacity(self.files.len() * 2);
        for (path, content) in &self.files {
            fields.push(path.as_bytes());
            fields.push(content.as_bytes());
        }
        hash_fields(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str)]) -> ConfigBundle {
        ConfigBundle::from_files(
            files
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn hash_depends_on_content_only() {
        let mut a = bundle(&[("a.yaml", "x")]);
        let b = bundle(&[("a.yaml", "x")]);
        a.root = Some("/somewhere".into());
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a.hash(), bundle(&[("a.yaml", "y")]).hash());
    }
}
