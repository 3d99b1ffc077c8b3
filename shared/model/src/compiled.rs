//! The compiler's output: everything the engine needs to converge one
//! service instance, with every template already resolved.

use std::sync::Arc;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use super::instance::{InstanceIds, InstanceKey};
use super::job::JobSpec;
use super::names::{ReleaseChannelName, RuntimeName};
use super::policy::{CompiledProtection, LifecycleKind, ProtectionCheck};
use super::release::Version;
use super::runner::RunnerSpec;
use super::window::TimeWindows;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompiledInstance {
    pub key: InstanceKey,
    /// Shared with every job of the instance.
    pub ids: Arc<InstanceIds>,
    /// The version this instance should run.
    pub version: Version,
    pub runtime: RuntimeName,
    /// Absolute root that job working directories are relative to, when the
    /// config came from a local directory.
    pub workspace_root: Option<String>,
    pub apply: ApplySpec,
    pub fetch: Option<FetchSpec>,
    pub get_info: Option<GetInfoSpec>,
    pub convergence_grace_period: SignedDuration,
    pub require_approval_before_apply: bool,
    pub preconditions: Vec<Precondition>,
    /// Release channels whose preconditions name this one, so they are woken
    /// when this instance converges or fails.
    pub downstream: Vec<ReleaseChannelName>,
    pub drift_policy: DriftPolicy,
    /// Checks gating applies and verifying releases, in config order.
    #[serde(default)]
    pub protections: Vec<CompiledProtection>,
    /// Roll back to the last converged version when this one fails.
    #[serde(default = "yes")]
    pub auto_rollback: bool,
    /// When applies may run (allowed windows and freezes).
    #[serde(default, skip_serializing_if = "TimeWindows::is_empty")]
    pub windows: TimeWindows,
    /// Traffic steps for a new version (the channel's `rollout`, else the
    /// runtime's); only on runtimes that can split traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::Rollout>,
}

fn yes() -> bool {
    true
}

impl CompiledInstance {
    pub fn protections_at(
        &self,
        at: LifecycleKind,
    ) -> impl Iterator<Item = &CompiledProtection> + '_ {
        self.protections
            .iter()
            .filter(move |p| p.lifecycle.kind() == at)
    }

    /// Every runner the instance's jobs use (apply, fetch, getInfo and
    /// protection checks), once each, in that order.
    pub fn runners(&self) -> Vec<RunnerSpec> {
        let mut runners: Vec<RunnerSpec> = Vec::new();
        let jobs = [Some(&self.apply.job), self.fetch.as_ref().map(|f| &f.job)]
            .into_iter()
            .chain([self.get_info.as_ref().map(|g| &g.job)])
            .flatten()
            .chain(self.protections.iter().filter_map(|p| match &p.check {
                ProtectionCheck::Job { job } => Some(job),
                ProtectionCheck::Alert { .. } => None,
            }));
        for job in jobs {
            if !runners.contains(&job.runner) {
                runners.push(job.runner.clone());
            }
        }
        runners
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplySpec {
    /// Shared with every job started from it: a job runs the spec as
    /// compiled, and a decision that starts one copies no part of it.
    pub job: Arc<JobSpec>,
    /// Exit codes that mean "try again later", never counted as failures.
    pub retryable_exit_codes: Vec<i32>,
    pub retry_policy: RetryPolicy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    pub base_interval: SignedDuration,
    pub max_interval: SignedDuration,
    /// Failed attempts after which the version is marked FAILED.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base_interval: SignedDuration::from_secs(10),
            max_interval: SignedDuration::from_mins(10),
            max_attempts: 3,
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff after the `n`th consecutive failure (n ≥ 1),
    /// doubling from the base interval and capped at the max interval.
    pub fn backoff(&self, n: u32) -> SignedDuration {
        let exponent = n.saturating_sub(1).min(30);
        let factor = 1i32 << exponent.min(30);
        self.base_interval
            .checked_mul(factor)
            .map_or(self.max_interval, |d| d.min(self.max_interval))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FetchMode {
    /// Exit 0 = converged, 2 = drift, anything else = error.
    ExitCode,
    /// JSON on stdout describing objects and their versions.
    Structured,
    /// Vergence's Terraform fetch: `plan -detailed-exitcode` (0 = no
    /// changes, 2 = changes, planned into [`crate::terraform::PLAN_FILE`]),
    /// read through `terraform show -json`.
    TerraformPlan,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchSpec {
    pub job: Arc<JobSpec>,
    pub mode: FetchMode,
    /// How often to fetch until converged.
    pub poll_interval: SignedDuration,
    /// How often to fetch after converging, to detect drift.
    pub steady_state_poll_interval: SignedDuration,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetInfoSpec {
    pub job: Arc<JobSpec>,
    pub poll_interval: SignedDuration,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Precondition {
    /// The same version must be converged in another release channel first.
    #[serde(rename_all = "camelCase")]
    ReleaseChannelStable {
        release_channel: ReleaseChannelName,
        /// How long it must have been converged there (a soak).
        duration: Option<SignedDuration>,
    },
    /// A person must approve this version for this release channel.
    ManualApproval { name: String },
}

impl Precondition {
    /// The release channels a list of preconditions waits for.
    pub fn upstream_channels(
        preconditions: &[Precondition],
    ) -> impl Iterator<Item = &ReleaseChannelName> {
        preconditions.iter().filter_map(|p| match p {
            Precondition::ReleaseChannelStable {
                release_channel, ..
            } => Some(release_channel),
            Precondition::ManualApproval { .. } => None,
        })
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DriftPolicy {
    /// Apply again when drift is detected.
    #[default]
    Remediate,
    /// Record and report drift; apply nothing.
    DetectOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_and_stops_at_the_cap() {
        let policy = RetryPolicy {
            base_interval: SignedDuration::from_secs(30),
            max_interval: SignedDuration::from_mins(3),
            max_attempts: 10,
        };
        let secs: Vec<i64> = (1..=6).map(|n| policy.backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![30, 60, 120, 180, 180, 180]);
        assert_eq!(policy.backoff(200).as_secs(), 180);
    }
}
