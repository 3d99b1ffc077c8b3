//! Where in a document a config error is: a field path such as
//! `application.releaseChannels[2].preconditions[0]`.
//!
//! The checker extends a path as it walks into a document, so every error
//! names its field in the notation the YAML reader records positions in
//! (which is how an error finds its line) and users see in messages.

use std::fmt;

/// A field path in a config document, from the document's kind down.
///
/// Extending a path returns a new one and leaves the original as it was, so
/// a release channel's path can be handed to each of its parts. Paths are
/// short and every one that is reported ends up as a `String` in a
/// `ConfigError`, so a `String` is all it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldPath(String);

impl FieldPath {
    /// The top of a document: its kind (`application`, `runtime`, `service`
    /// or `protection`).
    pub fn root(kind: &str) -> Self {
        FieldPath(kind.to_owned())
    }

    /// The field `key` of the mapping at this path: `base.key`.
    pub fn key(&self, key: &str) -> Self {
        let mut path = String::with_capacity(self.0.len() + 1 + key.len());
        path.push_str(&self.0);
        path.push('.');
        path.push_str(key);
        FieldPath(path)
    }

    /// The item `index` of the list at this path: `base[index]`.
    pub fn index(&self, index: usize) -> Self {
        FieldPath(format!("{}[{index}]", self.0))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<FieldPath> for String {
    fn from(path: FieldPath) -> Self {
        path.0
    }
}

impl From<&FieldPath> for String {
    fn from(path: &FieldPath) -> Self {
        path.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_keys_with_dots_and_indexes_in_brackets() {
        let path = FieldPath::root("application")
            .key("releaseChannels")
            .index(2)
            .key("preconditions")
            .index(0)
            .key("releaseChannelStable");
        assert_eq!(
            path.to_string(),
            "application.releaseChannels[2].preconditions[0].releaseChannelStable"
        );
    }

    #[test]
    fn a_root_alone_is_the_document_kind() {
        assert_eq!(FieldPath::root("service").to_string(), "service");
    }

    #[test]
    fn extending_a_path_leaves_the_original_unchanged() {
        let channel = FieldPath::root("service").key("perReleaseChannel").index(1);
        let runtime = channel.key("runtime");
        let env = channel.key("env").key("LOG_LEVEL");
        assert_eq!(channel.to_string(), "service.perReleaseChannel[1]");
        assert_eq!(runtime.to_string(), "service.perReleaseChannel[1].runtime");
        assert_eq!(
            env.to_string(),
            "service.perReleaseChannel[1].env.LOG_LEVEL"
        );
    }

    #[test]
    fn keys_are_written_as_given() {
        // Env variable names are keys too, and are reported as written,
        // even when they are not valid names.
        let path = FieldPath::root("service").key("env").key("bad name");
        assert_eq!(String::from(&path), "service.env.bad name");
        assert_eq!(String::from(path), "service.env.bad name");
    }
}
