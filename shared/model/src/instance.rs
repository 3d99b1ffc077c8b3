//! Service instances (service × release channel): their identity, status and
//! the state the convergence engine keeps between steps.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::compiled::CompiledInstance;
use super::job::{JobId, JobKind, JobOutcome};
use super::names::{ApplicationName, ReleaseChannelName, ServiceName};
use super::policy::{
    InfoOutput, InstanceControls, PlanRecord, PostDeployment, ProtectionKey, ProtectionObservation,
    Rollback, RollbackRequest, RollbackTarget,
};
use super::release::Version;
use crate::hashing::stable_id;

/// Identifies one service instance: a service deployed to one release channel.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceKey {
    pub application: ApplicationName,
    pub service: ServiceName,
    pub release_channel: ReleaseChannelName,
}

impl InstanceKey {
    pub fn new(
        application: ApplicationName,
        service: ServiceName,
        release_channel: ReleaseChannelName,
    ) -> Self {
        Self {
            application,
            service,
            release_channel,
        }
    }

    /// The same service in another release channel of the application.
    pub fn in_channel(&self, release_channel: &ReleaseChannelName) -> Self {
        Self {
            application: self.application.clone(),
            service: self.service.clone(),
            release_channel: release_channel.clone(),
        }
    }

    /// A compact, stable string form (`app/service/channel`) used as a storage key.
    pub fn storage_id(&self) -> String {
        format!(
            "{}/{}/{}",
            self.application, self.service, self.release_channel
        )
    }

    /// Parses the form produced by [`InstanceKey::storage_id`].
    pub fn parse_storage_id(raw: &str) -> Result<Self, String> {
        let mut parts = raw.split('/');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(app), Some(svc), Some(rc), None) => Ok(Self {
                application: ApplicationName::parse(app)?,
                service: ServiceName::parse(svc)?,
                release_channel: ReleaseChannelName::parse(rc)?,
            }),
            _ => Err(format!(
                "{raw:?} is not an instance id of the form application/service/release-channel"
            )),
        }
    }
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}@{}",
            self.application, self.service, self.release_channel
        )
    }
}

/// Stable identifiers handed to jobs (`VERGENCE_*_ID`), derived from names so
/// they survive config edits and never need to be stored separately.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceIds {
    pub application_id: String,
    pub release_channel_id: String,
    pub service_id: String,
}

impl InstanceIds {
    /// Ids derived from names: stable across config edits, unique per scope.
    /// Shared: the compiled instance and each of its jobs carry the same ids.
    pub fn of(key: &InstanceKey) -> std::sync::Arc<Self> {
        let app = key.application.as_str();
        std::sync::Arc::new(Self {
            application_id: stable_id("application", app),
            release_channel_id: stable_id(
                "release-channel",
                &format!("{app}/{}", key.release_channel),
            ),
            service_id: stable_id("service", &format!("{app}/{}", key.service)),
        })
    }
}

/// The status vocabulary shown to users.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pending,
    WaitingPreconditions,
    WaitingApproval,
    Blocked,
    Applying,
    Verifying,
    Converged,
    Drifted,
    Failed,
    RollingBack,
    RolledBack,
    Paused,
}

impl Status {
    pub const ALL: [Status; 12] = [
        Status::Pending,
        Status::WaitingPreconditions,
        Status::WaitingApproval,
        Status::Blocked,
        Status::Applying,
        Status::Verifying,
        Status::Converged,
        Status::Drifted,
        Status::Failed,
        Status::RollingBack,
        Status::RolledBack,
        Status::Paused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::WaitingPreconditions => "WAITING_PRECONDITIONS",
            Status::WaitingApproval => "WAITING_APPROVAL",
            Status::Blocked => "BLOCKED",
            Status::Applying => "APPLYING",
            Status::Verifying => "VERIFYING",
            Status::Converged => "CONVERGED",
            Status::Drifted => "DRIFTED",
            Status::Failed => "FAILED",
            Status::RollingBack => "ROLLING_BACK",
            Status::RolledBack => "ROLLED_BACK",
            Status::Paused => "PAUSED",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the desired state of an instance is, as far as the compiler can tell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Desired {
    /// Fully resolved: the engine can converge it.
    Ready(Box<CompiledInstance>),
    /// The config is valid but something only a release can give is missing
    /// (a service parameter without a default, for example).
    Unresolved { reason: String },
}

impl Desired {
    pub fn compiled(&self) -> Option<&CompiledInstance> {
        match self {
            Desired::Ready(compiled) => Some(compiled),
            Desired::Unresolved { .. } => None,
        }
    }

    pub fn version(&self) -> Option<&Version> {
        self.compiled().map(|c| &c.version)
    }
}

/// One stored instance: its desired state (written when config or releases
/// change) and the engine's state (written by convergence steps). Every write
/// is conditional on `revision`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    pub key: InstanceKey,
    /// Incremented by the store on every write; 0 before the first write.
    pub revision: u64,
    /// Hash of the config snapshot the desired state was compiled from.
    pub config_hash: String,
    pub desired: Desired,
    pub state: InstanceState,
    /// When the engine wants to look at this instance again, if ever.
    pub next_check_at: Option<Timestamp>,
    /// Pause and pin, set by operators.
    #[serde(default)]
    pub controls: InstanceControls,
    pub updated_at: Timestamp,
    /// When `next_check_at` is a steady-state check that the queue carries
    /// (a delayed message from the check before), the due index holds this
    /// later time instead: checks that find nothing then never write the
    /// index, and it only finds an instance whose chain of messages broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog_at: Option<Timestamp>,
    /// How many checks that found nothing the store holds on top of
    /// `revision` ([`InstanceStore::record_check`]); already applied to
    /// this record. Never serialized: the store's own bookkeeping.
    ///
    /// [`InstanceStore::record_check`]: crate::ports::InstanceStore::record_check
    #[serde(skip)]
    pub quiet_checks: u64,
}

impl InstanceRecord {
    /// When the due index should find this instance: its next check, or
    /// the watchdog behind a check the queue carries.
    pub fn due_at(&self) -> Option<Timestamp> {
        self.watchdog_at.or(self.next_check_at)
    }

    /// The record with `check` taken up, as the engine would have stored it.
    pub fn take_check(&mut self, check: &QuietCheck) {
        self.state.last_fetch = Some(check.last_fetch.clone());
        self.state.last_jobs.retain(|j| j.kind != check.job.kind);
        self.state.last_jobs.push(check.job.clone());
        self.state.job_seq = check.job_seq;
        self.next_check_at = Some(check.next_check_at);
        self.updated_at = check.at;
    }
}

/// A steady-state check of a converged instance that found nothing to do:
/// the only things it changes, so that a store can keep it apart from the
/// instance, in a small write that leaves the rest of the record alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuietCheck {
    pub at: Timestamp,
    pub last_fetch: FetchObservation,
    /// The fetch, as `status` shows the latest job of its kind. No job
    /// record is kept for it: its output, when there was any, is only this
    /// summary's tail.
    pub job: JobSummary,
    pub job_seq: u64,
    pub next_check_at: Timestamp,
}

impl QuietCheck {
    /// The check that took `before` to `after` (the state after a fetch
    /// that ran and ended), if that is all it did: the fetch is the only
    /// thing it adds, nothing else in the state moved, and the instance is
    /// still converged with a next check. Anything more (drift, a failed
    /// fetch, a changed reason) is not quiet and is stored in full.
    pub fn between(
        before: &InstanceRecord,
        after: &InstanceState,
        next_check_at: Option<Timestamp>,
        at: Timestamp,
    ) -> Option<QuietCheck> {
        let next_check_at = next_check_at?;
        let last_fetch = after.last_fetch.clone()?;
        let job = after.last_jobs.last()?.clone();
        if after.status != Status::Converged
            || after.in_flight.is_some()
            || job.kind != JobKind::Fetch
            || last_fetch.verdict != FetchVerdict::Converged
        {
            return None;
        }
        let check = QuietCheck {
            at,
            last_fetch,
            job,
            job_seq: after.job_seq,
            next_check_at,
        };
        let mut replayed = before.clone();
        replayed.take_check(&check);
        (replayed.state == *after).then_some(check)
    }
}

/// Why an instance is not progressing by itself, so callers such as
/// `vergence up` know whether waiting longer can help.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "on")]
pub enum WaitCause {
    /// A person must act (an approval).
    Person,
    /// Only time helps (a soak, a window, a backoff measured in minutes).
    Time { until: Timestamp },
    /// Another release channel of the same service must get there first.
    Upstream { release_channel: ReleaseChannelName },
    /// A release with the missing parameter values must be pushed.
    Release,
}

/// The engine's memory of one instance between steps. Everything `decide()`
/// needs that is not in the desired state or the facts lives here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceState {
    pub status: Status,
    /// A sentence a person can act on, for every status.
    pub reason: String,
    /// When `status` last changed.
    pub since: Option<Timestamp>,
    pub wait: Option<WaitCause>,
    /// The version last seen converged (or, for apply-only runtimes, last
    /// applied successfully).
    pub current_version: Option<Version>,
    /// When `current_version` became converged; soaks count from here.
    pub converged_at: Option<Timestamp>,
    /// Progress towards the desired version.
    pub target: Option<TargetProgress>,
    pub in_flight: Option<InFlightJob>,
    pub last_fetch: Option<FetchObservation>,
    /// The latest finished job of each kind, for `status` and `explain`.
    #[serde(default)]
    pub last_jobs: Vec<JobSummary>,
    /// Counter that makes job ids unique per instance; also orders jobs, so
    /// "this fetch ran after that apply" never depends on clocks.
    pub job_seq: u64,
    /// Set by `vergence up` and manual retries: the next step fetches again
    /// instead of trusting the last observation.
    #[serde(default)]
    pub checks_requested: bool,
    /// Latest result of each protection ([`CompiledProtection::key`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub protections: BTreeMap<ProtectionKey, ProtectionObservation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_deployment: Option<PostDeployment>,
    /// The latest version that converged and passed its checks: where an
    /// automatic rollback goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<Box<RollbackTarget>>,
    /// The good version before `last_good`: where a manual rollback goes
    /// once the last good one is the desired one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_good: Option<Box<RollbackTarget>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_request: Option<RollbackRequest>,
    /// Someone asked for the version this instance rolled back from to be
    /// applied again (it was released again, or approved explicitly); the
    /// engine ends the hold of a failed version only then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_request: Option<crate::RetryRequest>,
    /// getInfo's outputs when it printed the structured form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<InfoOutput>,
    /// What getInfo printed otherwise (freeform), bounded by
    /// [`crate::info_text`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_text: Option<String>,
    /// How the last getInfo failed (`getInfo exited with 1: …`), shown
    /// with what it printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanRecord>,
}

impl InstanceState {
    /// The version that failed here and is not applied again until asked
    /// for: the one a rollback went back from, else a failed target's.
    pub fn failed_version(&self) -> Option<&Version> {
        match &self.rollback {
            Some(rollback) => Some(&rollback.failed_version),
            None => self
                .target
                .as_ref()
                .filter(|t| t.failed.is_some())
                .map(|t| &t.version),
        }
    }

    /// The state of an instance the engine has not looked at yet.
    pub fn new_pending(reason: impl Into<String>) -> Self {
        Self {
            status: Status::Pending,
            reason: reason.into(),
            since: None,
            wait: None,
            current_version: None,
            converged_at: None,
            target: None,
            in_flight: None,
            last_fetch: None,
            last_jobs: Vec::new(),
            job_seq: 0,
            checks_requested: false,
            protections: BTreeMap::new(),
            post_deployment: None,
            last_good: None,
            previous_good: None,
            rollback: None,
            rollback_request: None,
            retry_request: None,
            info: Vec::new(),
            info_text: None,
            info_failure: None,
            info_at: None,
            plan: None,
        }
    }
}

/// Attempts and results for one desired version; reset when it changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetProgress {
    pub version: Version,
    pub since: Timestamp,
    /// Applies dispatched for this version.
    pub apply_attempts: u32,
    /// Applies that failed and count against the retry policy.
    pub apply_failures: u32,
    /// Consecutive retryable exits; they space retries but never fail the version.
    pub retryable_exits: u32,
    /// Consecutive applies lost (the process or worker running them died,
    /// or nothing reported by the deadline); counted as failures only
    /// after a few in a row.
    #[serde(default)]
    pub lost_applies: u32,
    pub apply_started_at: Option<Timestamp>,
    /// When the latest apply of this version finished successfully.
    pub applied_at: Option<Timestamp>,
    /// Job sequence number of that apply: fetches after it verify it.
    pub applied_seq: Option<u64>,
    pub retry_at: Option<Timestamp>,
    /// Consecutive fetch errors.
    pub fetch_failures: u32,
    /// The latest counted failure, shown while waiting to retry.
    pub last_failure: Option<String>,
    /// Set when the retry policy is exhausted: the version is not applied
    /// again until a new version or a manual retry.
    pub failed: Option<String>,
    /// The version's traffic steps, when it is rolled out in steps (a
    /// rollout is configured and an earlier version serves the traffic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::RolloutProgress>,
}

impl TargetProgress {
    pub fn new(version: Version, since: Timestamp) -> Self {
        Self {
            version,
            since,
            apply_attempts: 0,
            apply_failures: 0,
            retryable_exits: 0,
            lost_applies: 0,
            apply_started_at: None,
            applied_at: None,
            applied_seq: None,
            retry_at: None,
            fetch_failures: 0,
            last_failure: None,
            failed: None,
            rollout: None,
        }
    }

    /// Someone asked for this failed version again (`up`, a release or an
    /// approval naming it): its failure and counts are forgotten, and it
    /// is applied from its first attempt.
    pub fn retry_from_start(&mut self) {
        self.failed = None;
        self.apply_failures = 0;
        self.fetch_failures = 0;
        self.retry_at = None;
        // A rollout starts again from its first step.
        if self.rollout.is_some() {
            self.rollout = Some(crate::RolloutProgress::start());
        }
    }
}

/// The job an instance is waiting on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightJob {
    pub job_id: JobId,
    pub seq: u64,
    pub kind: JobKind,
    pub version: Version,
    pub attempt: u32,
    pub dispatched_at: Timestamp,
    /// After this the job is presumed lost (runner died, message dropped).
    pub deadline: Timestamp,
    /// For protection jobs: which protection ([`CompiledProtection::key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ProtectionKey>,
    /// How often to ask the job's runner while it runs, for runners whose
    /// reports can be lost (platform events, an agent); none for runners
    /// that report from the same process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_every: Option<jiff::SignedDuration>,
    /// Set when a newer version or a rollback superseded the job: why. The
    /// next step stops it on its platform before anything else runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

/// What the latest fetch said about the desired version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchObservation {
    pub at: Timestamp,
    /// Sequence number of the fetch job.
    pub seq: u64,
    pub version: Version,
    pub verdict: FetchVerdict,
    pub summary: String,
    /// Live objects the fetch found that Vergence did not make and that
    /// differ from the desired state: the first apply takes them over, so
    /// it waits for an approval (see `adoption`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub takeovers: Vec<crate::adoption::Takeover>,
    /// The share of the traffic the version has, when the runtime splits
    /// traffic and says (a structured fetch's `trafficPercent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_percent: Option<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FetchVerdict {
    /// The runtime is at the desired version: nothing to do.
    Converged,
    /// The runtime differs from the desired version: apply.
    NeedsApply,
    /// A rollout is under way; look again later without applying.
    InProgress,
    /// The runtime reports the rollout failed.
    Failed,
    /// The fetch itself failed; nothing is known (never treated as drift).
    Error,
}

/// A finished job, kept on the instance for `status` and `explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    pub job_id: JobId,
    pub kind: JobKind,
    pub version: Version,
    pub attempt: u32,
    pub outcome: JobOutcome,
    pub exit_code: Option<i32>,
    pub finished_at: Timestamp,
    pub duration_ms: u64,
    pub stderr_tail: String,
}
