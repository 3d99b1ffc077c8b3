//! Delivery policies: protections, rollback, pause and pin, plans and the
//! informational outputs of getInfo. Compiled parts live in the desired
//! state; progress parts in the engine's instance state.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::compiled::{ApplySpec, FetchSpec};
use super::job::{Artifact, JobSpec};
use super::names::ProtectionName;
use super::release::Version;

/// A protection attached to a release channel or a service, compiled for
/// one instance and one lifecycle point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompiledProtection {
    pub name: ProtectionName,
    pub lifecycle: Lifecycle,
    pub check: ProtectionCheck,
    /// How often a failing or post-deployment check runs again.
    pub poll_interval: SignedDuration,
    /// Where it was attached, for reasons ("release channel prod").
    pub attached_to: String,
}

impl CompiledProtection {
    /// Identifies this protection's results in the instance state.
    pub fn key(&self) -> ProtectionKey {
        ProtectionKey {
            name: self.name.clone(),
            lifecycle: self.lifecycle.kind(),
        }
    }
}

/// One protection at one lifecycle point: the same protection may guard
/// applies and verify releases, and each keeps its own results. Written as
/// `name@lifecycle` in stored state and events.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtectionKey {
    pub name: ProtectionName,
    pub lifecycle: LifecycleKind,
}

impl fmt::Display for ProtectionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.lifecycle.as_str())
    }
}

impl fmt::Debug for ProtectionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl std::str::FromStr for ProtectionKey {
    type Err = String;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let (name, lifecycle) = raw
            .rsplit_once('@')
            .ok_or_else(|| format!("{raw:?} is not a protection key (name@lifecycle)"))?;
        Ok(Self {
            name: ProtectionName::parse(name)?,
            lifecycle: lifecycle.parse()?,
        })
    }
}

impl Serialize for ProtectionKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProtectionKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum ProtectionCheck {
    /// A job; exit 0 = pass.
    Job { job: std::sync::Arc<JobSpec> },
    /// An alert whose state is pushed from outside (`vergence alert set`,
    /// the API, an Alertmanager webhook); passes while not firing.
    Alert { alert: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailureBehavior {
    /// Hold applies while failing; continue when it passes.
    Block,
    /// Fail the version in this channel (and roll back).
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "at")]
pub enum Lifecycle {
    /// Must pass before approvals are asked for.
    PreApproval,
    /// Must pass before every apply.
    #[serde(rename_all = "camelCase")]
    Deployment { failure_behavior: FailureBehavior },
    /// Runs after convergence: waits `delay`, then checks at the poll
    /// interval until `duration` has passed without a failure.
    #[serde(rename_all = "camelCase")]
    PostDeployment {
        delay: SignedDuration,
        duration: SignedDuration,
    },
}

impl Lifecycle {
    pub fn kind(&self) -> LifecycleKind {
        match self {
            Lifecycle::PreApproval => LifecycleKind::PreApproval,
            Lifecycle::Deployment { .. } => LifecycleKind::Deployment,
            Lifecycle::PostDeployment { .. } => LifecycleKind::PostDeployment,
        }
    }

    pub fn as_str(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// The lifecycle points a protection can be attached to, without their
/// settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LifecycleKind {
    PreApproval,
    Deployment,
    PostDeployment,
}

impl LifecycleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleKind::PreApproval => "preApproval",
            LifecycleKind::Deployment => "deployment",
            LifecycleKind::PostDeployment => "postDeployment",
        }
    }
}

impl std::str::FromStr for LifecycleKind {
    type Err = String;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        [
            LifecycleKind::PreApproval,
            LifecycleKind::Deployment,
            LifecycleKind::PostDeployment,
        ]
        .into_iter()
        .find(|k| k.as_str() == raw)
        .ok_or_else(|| {
            format!("{raw:?} is not a lifecycle (preApproval, deployment, postDeployment)")
        })
    }
}

/// The latest result of one protection for one instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtectionObservation {
    pub at: Timestamp,
    pub version: Version,
    pub passed: bool,
    pub summary: String,
    /// The check could not read its source (a metric system that did not
    /// answer): `passed` is false, but it is no failure. The gate blocks
    /// and a post-deployment check waits, whatever the failure behaviour.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
}

/// Post-deployment checks of the version an instance converged on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostDeployment {
    pub version: Version,
    /// When the version converged: delays and durations count from here.
    pub converged_at: Timestamp,
    /// Set once every check has passed for its whole duration.
    pub passed_at: Option<Timestamp>,
}

/// What a rollback applies: a version that converged before, with the jobs
/// that got it there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackTarget {
    pub version: Version,
    pub apply: ApplySpec,
    pub fetch: Option<FetchSpec>,
}

/// A rollback under way or done: while the desired version is
/// `failed_version`, the instance runs `to` instead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    pub failed_version: Version,
    pub to: Box<RollbackTarget>,
    /// Why: the failure, or who asked.
    pub reason: String,
    pub started_at: Timestamp,
    /// Who asked, for a manual rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// A manual rollback asked for through the CLI or API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackRequest {
    /// The version to go back to; `None` = the last one that converged.
    pub to: Option<Box<RollbackTarget>>,
    pub actor: String,
    pub at: Timestamp,
}

/// A request to apply again a version this instance rolled back from:
/// the version released again, or approved explicitly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryRequest {
    pub version: Version,
    pub actor: String,
    pub at: Timestamp,
}

/// Operator controls on an instance, set through the CLI or API and read by
/// the engine; the engine never changes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceControls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<ControlMark>,
    /// Holds the instance on this version until unpinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pin>,
    /// Break-glass: this version may be applied through closed windows
    /// and freezes, until it converges or the override expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override: Option<WindowOverride>,
}

/// A break-glass override of the instance's time windows and freezes,
/// for one version, given with a reason by someone with the `override`
/// scope. It opens nothing else: approvals, protections and pauses hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowOverride {
    pub version: Version,
    pub actor: String,
    pub reason: String,
    pub at: Timestamp,
    pub expires_at: Timestamp,
}

impl WindowOverride {
    /// Whether it still opens the windows for `version`: given for it, not
    /// expired, and the version has not converged since it was given (a
    /// converged version is done with it; drift remediation under the
    /// freeze waits like any apply).
    pub fn opens(&self, version: &Version, state: &crate::InstanceState, now: Timestamp) -> bool {
        let converged_since = state.current_version.as_ref() == Some(&self.version)
            && state.converged_at.is_some_and(|at| at >= self.at);
        &self.version == version && now < self.expires_at && !converged_since
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlMark {
    pub actor: String,
    pub at: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    pub version: Version,
    pub actor: String,
    pub at: Timestamp,
}

/// The state of an externally managed alert.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertState {
    pub name: String,
    pub firing: bool,
    /// When it last changed.
    pub since: Timestamp,
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// One getInfo output of the structured form (`{"outputs":[{"name",
/// "text"}]}`), shown in status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfoOutput {
    pub name: String,
    pub text: String,
}

/// The most of getInfo's output that is kept and shown, in bytes: a
/// console link or a summary fits many times over, and every instance's
/// state (a DynamoDB item in a serverless deployment) carries it.
pub const INFO_MAX: usize = 8 * 1024;

/// What getInfo printed, for people: as printed without its final line
/// end, cut to [`INFO_MAX`] bytes (on a character boundary) with a last
/// line saying so. The runner masked secrets in it before; a cut cannot
/// uncover one (a mask is `***`).
pub fn info_text(printed: &str) -> String {
    let printed = printed.trim_end_matches(['\n', '\r']);
    if printed.len() <= INFO_MAX {
        return printed.to_owned();
    }
    let mut end = INFO_MAX;
    while !printed.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n… (getInfo printed {} bytes; the first {INFO_MAX} are shown)",
        &printed[..end],
        printed.len()
    )
}

/// Files a fetch produced for the apply of the same version (a plan).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    pub version: Version,
    /// Sequence number of the fetch that produced it.
    pub fetch_seq: u64,
    pub at: Timestamp,
    /// What an approval binds to: for a Terraform plan, the digest of its
    /// changes (the same for every re-plan of the same changes); otherwise
    /// a digest over every artifact.
    pub sha256: String,
    pub artifacts: Vec<Artifact>,
    /// A Terraform plan's changes, for people (`+1 ~0 -0: + terraform_data.app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<crate::terraform::PlanContent>,
}

impl PlanRecord {
    pub fn new(version: Version, fetch_seq: u64, at: Timestamp, artifacts: Vec<Artifact>) -> Self {
        let digest = crate::hashing::hash_fields(
            artifacts
                .iter()
                .flat_map(|a| [a.name.as_bytes(), a.sha256.as_bytes()]),
        );
        Self {
            version,
            fetch_seq,
            at,
            sha256: digest,
            artifacts,
            content: None,
        }
    }

    /// A Terraform plan: bound by the digest of its changes.
    pub fn terraform(
        version: Version,
        fetch_seq: u64,
        at: Timestamp,
        artifacts: Vec<Artifact>,
        content: crate::terraform::PlanContent,
    ) -> Self {
        Self {
            version,
            fetch_seq,
            at,
            sha256: content.digest.clone(),
            artifacts,
            content: Some(content),
        }
    }

    /// What the plan changes, when it is a Terraform plan.
    pub fn summary(&self) -> Option<String> {
        self.content.as_ref().map(|c| c.summary())
    }

    /// One line per artifact, for people: name, size and digest (a plan
    /// may be binary; its content stays in the artifact store).
    pub fn files(&self) -> Vec<String> {
        self.artifacts
            .iter()
            .map(|a| {
                format!(
                    "{} ({} bytes, sha256 {})",
                    a.name,
                    a.size,
                    &a.sha256[..a.sha256.len().min(12)]
                )
            })
            .collect()
    }

    pub fn short(&self) -> &str {
        &self.sha256[..self.sha256.len().min(12)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_kept_as_printed_up_to_its_bound_and_says_where_it_was_cut() {
        assert_eq!(
            info_text("see https://x.example\n"),
            "see https://x.example"
        );
        // A multi-byte character straddles the bound: the cut goes before it.
        let printed = format!("{}é{}", "a".repeat(INFO_MAX - 1), "b".repeat(100));
        let kept = info_text(&printed);
        let (head, note) = kept.split_once('\n').unwrap();
        assert_eq!(head, "a".repeat(INFO_MAX - 1));
        assert_eq!(
            note,
            format!(
                "… (getInfo printed {} bytes; the first {INFO_MAX} are shown)",
                printed.len()
            )
        );
    }
}
