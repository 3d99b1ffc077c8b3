//! A config as it was handed to Vergence: the YAML files of a directory (or
//! of a pushed bundle), keyed by path. Reading them from disk and making
//! sense of them is the compiler's business; the bundle is what is stored.
//!
//! A config is made of parts, each pushed, versioned and rolled back on its
//! own (docs/per-application-configs.md): one per application and one for
//! the platform (what several applications share). A part is stored as a
//! bundle of its files that names the part and the part version it
//! replaced; the config in force is the bundle of every part's files that
//! names each part's version. Both are ordinary snapshots, so the stores
//! keep one kind of record and history needs no table of its own.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::hashing::hash_fields;
use crate::names::ApplicationName;

/// The YAML files of a config directory, keyed by path relative to it.
/// Immutable once built; its hash identifies a config snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigBundle {
    pub files: BTreeMap<String, String>,
    /// The directory the files were read from, when they came from disk;
    /// local jobs run relative to it.
    pub root: Option<String>,
    /// Of a composed config: the hash of each part's snapshot, by
    /// [`ConfigPart::key`]. Empty for what was read from disk or pushed,
    /// and for configs stored before parts existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<String, String>,
    /// Of a part's snapshot: which part, and the version it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_of: Option<PartOf>,
}

/// What a part's snapshot is a version of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartOf {
    /// [`ConfigPart::key`].
    pub part: String,
    /// The hash of the part's snapshot this one replaced; `None` for the
    /// part's first version.
    pub previous: Option<String>,
}

impl ConfigBundle {
    pub fn from_files(files: BTreeMap<String, String>) -> Self {
        Self {
            files,
            root: None,
            parts: BTreeMap::new(),
            part_of: None,
        }
    }

    /// Content hash of the files (not of where they were read from), and of
    /// the parts a composed config names or the history a part's snapshot
    /// records: the same files reached by another history are another
    /// snapshot. A bundle without either hashes as it always did.
    pub fn hash(&self) -> String {
        let mut fields: Vec<&[u8]> = Vec::with_capacity(self.files.len() * 2 + 4);
        for (path, content) in &self.files {
            fields.push(path.as_bytes());
            fields.push(content.as_bytes());
        }
        if !self.parts.is_empty() {
            // No file path is empty, so this marker cannot be a file's.
            fields.push(b"");
            fields.push(b"parts");
            for (part, hash) in &self.parts {
                fields.push(part.as_bytes());
                fields.push(hash.as_bytes());
            }
        }
        if let Some(part_of) = &self.part_of {
            fields.push(b"");
            fields.push(b"partOf");
            fields.push(part_of.part.as_bytes());
            fields.push(part_of.previous.as_deref().unwrap_or("").as_bytes());
        }
        hash_fields(fields)
    }
}

/// Longest file path (in bytes) a bundle may hold.
pub const MAX_BUNDLE_PATH_BYTES: usize = 512;

/// Whether `path` may name a file of a config bundle, and if not, why.
/// One rule for both ends: the CLI refuses to bundle a file of the config
/// directory it breaks, and the API refuses a pushed bundle with such a
/// path, so the API stores nothing the CLI would never have sent. A path
/// is relative and `/`-separated, names a `*.yaml`, `*.yml` or `*.json`
/// file, and has no empty, `.`, `..` or hidden (`.name`) segment, and no
/// control or invisible formatting character (a newline, U+202E
/// right-to-left override, U+200B zero-width space…), which would make a
/// path in an error or a listing read as another.
pub fn check_bundle_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_BUNDLE_PATH_BYTES {
        return Err(format!(
            "a path must have 1 to {MAX_BUNDLE_PATH_BYTES} bytes"
        ));
    }
    if let Some(c) = path.chars().find(|&c| is_hidden_char(c)) {
        return Err(format!(
            "the path has the control or formatting character U+{:04X}",
            u32::from(c)
        ));
    }
    if path.contains('\\') {
        return Err("use '/' to separate directories".to_owned());
    }
    if path.starts_with('/') {
        return Err("paths are relative to the config directory; no leading '/'".to_owned());
    }
    for segment in path.split('/') {
        match segment {
            "" => return Err("the path has an empty segment ('//' or a trailing '/')".to_owned()),
            "." | ".." => {
                return Err(
                    "paths are relative to the config directory, without '.' or '..' segments"
                        .to_owned(),
                );
            }
            hidden if hidden.starts_with('.') => {
                return Err(format!(
                    "{hidden:?} is hidden (starts with '.'); hidden files and directories are not part of a config"
                ));
            }
            _ => {}
        }
    }
    if ![".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| path.ends_with(ext))
    {
        return Err(
            "only *.yaml and *.yml files (and *.json files services name) belong in a config bundle"
                .to_owned(),
        );
    }
    Ok(())
}

/// A character that is invisible or changes how the text around it is
/// shown: controls (Unicode Cc), formatting characters (Cf: the bidi
/// overrides and isolates, zero-width spaces and joiners, the byte order
/// mark…) and the line and paragraph separators.
fn is_hidden_char(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// One part of a config: an application's (its application document, its
/// services and the runtimes and protections only it uses) or the
/// platform's (what several applications share, or none uses).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigPart {
    Platform,
    Application(ApplicationName),
}

impl ConfigPart {
    /// How a composed config names the part: `platform` or `application:NAME`
    /// (`:` is never part of a name).
    pub fn key(&self) -> String {
        match self {
            ConfigPart::Platform => "platform".to_owned(),
            ConfigPart::Application(application) => format!("application:{application}"),
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        if key == "platform" {
            return Some(ConfigPart::Platform);
        }
        let name = key.strip_prefix("application:")?;
        name.parse().ok().map(ConfigPart::Application)
    }

    pub fn application(&self) -> Option<&ApplicationName> {
        match self {
            ConfigPart::Application(application) => Some(application),
            ConfigPart::Platform => None,
        }
    }
}

impl fmt::Display for ConfigPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigPart::Platform => f.write_str("the platform part"),
            ConfigPart::Application(application) => write!(f, "application {application}'s part"),
        }
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

    #[test]
    fn the_same_files_with_another_history_are_another_snapshot() {
        let plain = bundle(&[("a.yaml", "x")]);
        let mut first = plain.clone();
        first.part_of = Some(PartOf {
            part: "application:shop".into(),
            previous: None,
        });
        let mut again = first.clone();
        again.part_of = Some(PartOf {
            part: "application:shop".into(),
            previous: Some(first.hash()),
        });
        let mut composed = plain.clone();
        composed
            .parts
            .insert("application:shop".into(), first.hash());
        let hashes = [plain.hash(), first.hash(), again.hash(), composed.hash()];
        let distinct: std::collections::BTreeSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), 4, "{hashes:?}");
        // A bundle stored before parts existed reads back and hashes as it did.
        let stored: ConfigBundle =
            serde_json::from_str(r#"{"files":{"a.yaml":"x"},"root":null}"#).unwrap();
        assert_eq!(stored.hash(), plain.hash());
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            r#"{"files":{"a.yaml":"x"},"root":null}"#
        );
    }

    #[test]
    fn bundle_paths_are_plain_relative_config_file_names() {
        for ok in [
            "application.yaml",
            "apps/shop/services.yml",
            "ecs/task-definition.json",
            "Ünïcödé/日本.yaml",
            "a..b/c.d.yaml",
        ] {
            assert_eq!(check_bundle_path(ok), Ok(()), "{ok}");
        }
        let long = format!("{}.yaml", "a".repeat(MAX_BUNDLE_PATH_BYTES));
        for bad in [
            "",
            long.as_str(),
            "/etc/app.yaml",
            "../app.yaml",
            "a/../../b.yaml",
            "./app.yaml",
            "a/./b.yaml",
            "a//b.yaml",
            "a/b.yaml/",
            "a\\b.yaml",
            "notes.txt",
            ".hidden.yaml",
            "a/.git/config.yaml",
            "a\0b.yaml",
            "a\nb.yaml",
            "a\u{202E}lmay.exe.yaml",
            "a\u{200B}.yaml",
            "a\u{2066}b.yaml",
            "a\u{FEFF}b.yaml",
            "a\u{2028}b.yaml",
        ] {
            assert!(check_bundle_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn part_keys_read_back() {
        for part in [
            ConfigPart::Platform,
            ConfigPart::Application("platform".parse().unwrap()),
        ] {
            assert_eq!(ConfigPart::from_key(&part.key()), Some(part));
        }
        assert_eq!(ConfigPart::from_key("application:"), None);
        assert_eq!(ConfigPart::from_key("shop"), None);
    }
}
