//! The hard errors of reading a document (a wrong type, a missing key),
//! worded for people who write config rather than for serde, and located
//! at the innermost field they are about.

use std::fmt;

use serde::de;

/// A hard error while reading a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeError {
    pub message: String,
    pub path: Option<String>,
    pub line: Option<usize>,
}

impl DeError {
    /// Attaches a location if the error does not have one yet: the innermost
    /// node that sees an error is the one it is about.
    pub(super) fn locate(mut self, path: &str, line: usize) -> Self {
        if self.path.is_none() {
            self.path = Some(path.to_owned());
            self.line = Some(line);
        }
        self
    }

    pub(super) fn at(path: &str, line: usize, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            path: Some(path.to_owned()),
            line: Some(line),
        }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self {
            message: msg.to_string(),
            path: None,
            line: None,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Self::custom(format!("missing required key '{field}'"))
    }

    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::custom(format!(
            "expected {exp}, found {}",
            describe_unexpected(unexp)
        ))
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Self::custom(format!(
            "unknown value '{variant}'; expected one of: {}",
            expected.join(", ")
        ))
    }
}

fn describe_unexpected(unexp: de::Unexpected<'_>) -> String {
    match unexp {
        de::Unexpected::Str(s) => format!("the text {s:?}"),
        de::Unexpected::Map => "a mapping".to_owned(),
        de::Unexpected::Seq => "a list".to_owned(),
        de::Unexpected::Unit => "nothing".to_owned(),
        other => other.to_string(),
    }
}
