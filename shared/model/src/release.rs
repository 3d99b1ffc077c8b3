//! Releases (a service version and its parameter values, pushed by CI) and
//! approvals (a person's go-ahead for one version in one release channel).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::instance::InstanceKey;
use super::names::{ApplicationName, ServiceName};
use super::runner::SecretRef;

/// A typed parameter value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ParamValue {
    String(String),
    Int(i64),
    DockerImage(String),
    Secret(SecretRef),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::String(s) | ParamValue::DockerImage(s) => f.write_str(s),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Secret(_) => f.write_str("<secret>"),
        }
    }
}

/// A service version: what CI pushes (`v42`, `1.2.3`, `sha-abc1234`), or
/// what the compiler derives from the config (`cfg-<hash>`, and
/// `<release>+cfg-<hash>` after a config change on top of a release).
///
/// [`Version::parse`] checks what people and CI write; stored versions are
/// read back as they were written, since they were checked then.
///
/// Shared, not copied: a version never changes, and the instance's state,
/// its events and its jobs all carry the one they are about.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(Arc<str>);

impl Version {
    /// Parses a version given by a person or CI, saying what is wrong.
    pub fn parse(raw: impl Into<String>) -> Result<Self, String> {
        let raw = raw.into();
        check_version(&raw)?;
        Ok(Self(raw.into()))
    }

    /// A version derived by the compiler from the config's content hash.
    pub fn from_config(hash: &str) -> Self {
        Self(format!("cfg-{hash}").into())
    }

    /// This release's version with a config change on top of it.
    pub fn with_config(&self, hash: &str) -> Self {
        Self(format!("{}+cfg-{hash}", self.0).into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The release this version runs, without a config change on top of
    /// it (`v42` of `v42+cfg-…`); a version made from the config alone is
    /// its own. What a failed version is remembered by: the same release
    /// under a pushed config is still the version that failed.
    pub fn release(&self) -> &str {
        self.0
            .split_once("+cfg-")
            .map_or(&self.0, |(release, _)| release)
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Stored versions are read back as they were written: they were checked
/// when they were pushed.
impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|raw| Self(raw.into()))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Reads as the text it is, for formatting and comparisons; a `&str` never
/// becomes a `Version` without [`Version::parse`].
impl std::ops::Deref for Version {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<Version> for str {
    fn eq(&self, other: &Version) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Version> for String {
    fn eq(&self, other: &Version) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Version> for &str {
    fn eq(&self, other: &Version) -> bool {
        *self == other.as_str()
    }
}

impl AsRef<str> for Version {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Version {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl PartialEq<str> for Version {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<String> for Version {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Version {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Checks a version string: what CI pushes (`v42`, `1.2.3`, `sha-abc1234`).
pub fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() || version.len() > 128 {
        return Err(format!(
            "version {version:?} must be between 1 and 128 characters"
        ));
    }
    if let Some(bad) = version
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+')))
    {
        return Err(format!(
            "version {version:?} contains {bad:?}; only letters, digits, '.', '_', '-' and '+' are allowed"
        ));
    }
    Ok(())
}

/// Most bytes one release parameter's value may have. Parameters reach a
/// job's command line and environment, which `exec` bounds (Linux: 128 KiB
/// for one string, about 2 MiB in all): a larger value would be stored and
/// then fail every apply with E2BIG.
pub const MAX_PARAM_BYTES: usize = 32 * 1024;

/// Most bytes of one release's parameters, names and values together.
pub const MAX_PARAMS_BYTES: usize = 128 * 1024;

/// Refuses release parameters a job could not be started with, naming the
/// parameter and the limit. The field is `param NAME`, or `params` for the
/// total.
pub fn check_param_sizes(raw: &BTreeMap<String, String>) -> Result<(), crate::Error> {
    for (name, value) in raw {
        if value.len() > MAX_PARAM_BYTES {
            return Err(crate::Error::invalid(
                format!("param {name}"),
                format!(
                    "its value is {} bytes, over the limit of {MAX_PARAM_BYTES} bytes (32 KiB) for one release parameter: jobs get parameters in their command line and environment, which exec limits; pass large data by reference (a URL, a digest)",
                    value.len()
                ),
            ));
        }
    }
    let total: usize = raw
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    if total > MAX_PARAMS_BYTES {
        return Err(crate::Error::invalid(
            "params",
            format!(
                "the parameters are {total} bytes in all, over the limit of {MAX_PARAMS_BYTES} bytes (128 KiB) for one release: jobs get them in their command line and environment, which exec limits; pass large data by reference (a URL, a digest)"
            ),
        ));
    }
    Ok(())
}

/// An immutable service version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub application: ApplicationName,
    pub service: ServiceName,
    pub version: Version,
    pub params: BTreeMap<String, ParamValue>,
    /// Fingerprint of the service's compiled jobs when the release was
    /// pushed; a later config change shows up as `version+cfg-…`.
    pub config_fingerprint: String,
    pub created_at: Timestamp,
    pub actor: String,
}

/// A recorded approval, bound to one version (and, for plan-producing
/// runtimes, one plan).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub instance: InstanceKey,
    pub version: Version,
    /// SHA-256 of the plan that was approved, when there was one.
    pub plan_sha256: Option<String>,
    pub actor: String,
    pub at: Timestamp,
}
