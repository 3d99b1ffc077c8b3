//! Config errors that name the file, line and field path, and say what is
//! wrong. The loader and compiler collect all of them before giving up.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem in the user's config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigError {
    /// Path of the file relative to the config directory.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Field path inside the document, e.g. `runtime.apply.taskConfig.program.cmd[1]`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in a config, in file and line order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigErrors(pub Vec<ConfigError>);

/// The most config errors an answer lists (the API's `invalidConfig`, the
/// CLI's output); the rest are counted. A config pushed to be validated can
/// have tens of thousands of errors, and the first hundred say what is
/// wrong as well as all of them would, in a bounded answer.
pub const MAX_LISTED_ERRORS: usize = 100;

impl ConfigErrors {
    /// The errors to list, at most [`MAX_LISTED_ERRORS`] of them, each
    /// field clipped to a sentence, and how many more there are.
    pub fn listed(&self) -> (Vec<ConfigError>, usize) {
        let listed = self
            .0
            .iter()
            .take(MAX_LISTED_ERRORS)
            .map(|error| ConfigError {
                file: crate::text::sentence(error.file.clone()),
                line: error.line,
                path: crate::text::sentence(error.path.clone()),
                message: crate::text::sentence(error.message.clone()),
            })
            .collect();
        (listed, self.0.len().saturating_sub(MAX_LISTED_ERRORS))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// Orders errors by file and line and drops exact repeats, so output is
    /// stable and each problem is reported once.
    pub fn sorted(mut self) -> Self {
        self.0.sort_by(|a, b| {
            (
                a.file.as_str(),
                a.line.unwrap_or(0),
                a.path.as_str(),
                a.message.as_str(),
            )
                .cmp(&(
                    b.file.as_str(),
                    b.line.unwrap_or(0),
                    b.path.as_str(),
                    b.message.as_str(),
                ))
        });
        self.0.dedup();
        self
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// A place in the user's config: a file, a line and a field path, shown as
/// `FILE:LINE: PATH` like the start of a [`ConfigError`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLocation {
    /// Path of the file relative to the config directory.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Field path inside the document, e.g. `runtime.runner`.
    pub path: String,
}

impl ConfigLocation {
    /// A message about this place, displayed as `FILE:LINE: PATH: MESSAGE`.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: self.line,
            path: self.path.clone(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        Ok(())
    }
}

/// Where each field of one document is, so errors found after parsing (by
/// the compiler) can still name a line.
#[derive(Clone, Debug, Default)]
pub struct Positions {
    lines: HashMap<String, usize>,
}

impl Positions {
    pub fn record(&mut self, path: &str, line: usize) {
        self.lines.entry(path.to_owned()).or_insert(line);
    }

    /// The line of `path`, or of its closest recorded parent.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut probe = path;
        loop {
            if let Some(line) = self.lines.get(probe) {
                return Some(*line);
            }
            let cut = probe.rfind(['.', '['])?;
            probe = &probe[..cut];
        }
    }
}

/// The file and field positions of one document, used to build errors.
#[derive(Clone, Debug)]
pub struct Source {
    pub file: String,
    /// 1-based line where the document starts.
    pub line: usize,
    pub positions: Positions,
}

impl Source {
    pub fn error(&self, path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        self.location(path).error(message)
    }

    /// The place of `path` in this document, with the line of the path or
    /// of its closest written parent.
    pub fn location(&self, path: impl Into<String>) -> ConfigLocation {
        let path = path.into();
        ConfigLocation {
            file: self.file.clone(),
            line: self.positions.line_of(&path),
            path,
        }
    }
}

/// The candidate closest to `key`, if it is close enough to be a typo:
/// a small edit distance (transpositions count once) or a shared prefix.
pub fn suggest<'a>(key: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_lowercase();
    let allowed = (key.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter_map(|c| {
            let lower = c.to_lowercase();
            let distance = strsim::osa_distance(&key, &lower);
            let similarity = strsim::jaro_winkler(&key, &lower);
            (distance <= allowed || similarity >= 0.85).then_some((distance, c))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_of_falls_back_to_the_nearest_parent() {
        let mut positions = Positions::default();
        positions.record("runtime", 1);
        positions.record("runtime.apply", 3);
        positions.record("runtime.apply.taskConfig.program.cmd[1]", 7);
        assert_eq!(
            positions.line_of("runtime.apply.taskConfig.program.cmd[1]"),
            Some(7)
        );
        assert_eq!(positions.line_of("runtime.apply.retryPolicy"), Some(3));
        assert_eq!(positions.line_of("service"), None);
    }

    #[test]
    fn errors_display_file_line_path_and_message() {
        let error = ConfigError {
            file: "runtime.yaml".into(),
            line: Some(7),
            path: "runtime.apply".into(),
            message: "boom".into(),
        };
        assert_eq!(error.to_string(), "runtime.yaml:7: runtime.apply: boom");
    }

    #[test]
    fn a_location_names_the_line_of_its_path_and_starts_errors_about_it() {
        let mut positions = Positions::default();
        positions.record("runtime.runner", 4);
        let source = Source {
            file: "runtimes.yaml".into(),
            line: 1,
            positions,
        };
        let at = source.location("runtime.runner.ecs");
        assert_eq!(at.to_string(), "runtimes.yaml:4: runtime.runner.ecs");
        assert_eq!(
            at.error("needs an agent").to_string(),
            "runtimes.yaml:4: runtime.runner.ecs: needs an agent"
        );
    }
}
