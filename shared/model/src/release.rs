//! Releases (a service version and its parameter values, pushed by CI) and
//! approvals (a person's go-ahead for one version in one release channel).

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::instance::InstanceKey;
use super::job::SecretRef;
use super::names::{ApplicationName, ServiceName};

/// A typed parameter value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ParamValue {
    String(String),
    Int(i64),
    DockerImage(String),
    Secret(SecretRef),
}

impl ParamValue {
    pub fn type_name(&self) -> &'static str {
        match self {
            ParamValue::String(_) => "string",
            ParamValue::Int(_) => "int",
            ParamValue::DockerImage(_) => "dockerImage",
            ParamValue::Secret(_) => "secret",
        }
    }
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

/// An immutable service version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    pub application: ApplicationName,
    pub service: ServiceName,
    pub version: String,
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
    pub version: String,
    /// SHA-256 of the plan that was approved, when there was one.
    pub plan_sha256: Option<String>,
    pub actor: String,
    pub at: Timestamp,
}
