//! Events: the audit trail. Every status transition, job, config change,
//! release and approval is recorded with who or what caused it and why.

use std::borrow::Cow;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::instance::{InstanceKey, Status};
use super::job::{JobId, JobKind, JobOutcome};
use super::names::{ApplicationName, ReleaseChannelName, ServiceName};
use super::policy::ProtectionKey;
use super::release::Version;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum EventKind {
    StatusChanged {
        from: Status,
        to: Status,
    },
    DesiredVersionChanged {
        from: Option<Version>,
        to: Version,
    },
    #[serde(rename_all = "camelCase")]
    JobStarted {
        job_id: JobId,
        job: JobKind,
        attempt: u32,
    },
    #[serde(rename_all = "camelCase")]
    JobFinished {
        job_id: JobId,
        job: JobKind,
        outcome: JobOutcome,
        exit_code: Option<i32>,
    },
    /// A running job was superseded (a newer version, a rollback) and is
    /// being stopped.
    #[serde(rename_all = "camelCase")]
    JobStopRequested {
        job_id: JobId,
        job: JobKind,
    },
    DriftDetected {
        version: Version,
    },
    Converged {
        version: Version,
    },
    /// A live object Vergence did not make already ran the desired
    /// version's state: the runtime marked it as Vergence's, without
    /// applying.
    Adopted {
        version: Version,
        object: String,
    },
    ConfigApplied {
        hash: String,
    },
    InstanceAdded,
    InstanceRemoved,
    ReleaseCreated {
        version: Version,
    },
    ApprovalRecorded {
        version: Version,
    },
    ChecksRequested,
    /// A protection's result changed (pass ↔ fail).
    ProtectionChanged {
        protection: ProtectionKey,
        passed: bool,
    },
    /// Post-deployment checks of a version all passed.
    ChecksPassed {
        version: Version,
    },
    /// A version being rolled out in steps reached a step: it has
    /// `percent` of the traffic (0 when a failed check sent it back).
    RolloutStep {
        version: Version,
        percent: u8,
    },
    #[serde(rename_all = "camelCase")]
    RollbackStarted {
        failed_version: Version,
        to: Version,
    },
    RolledBack {
        to: Version,
    },
    #[serde(rename_all = "camelCase")]
    AlertChanged {
        alert: String,
        firing: bool,
    },
    Paused,
    Resumed,
    Pinned {
        version: Version,
    },
    Unpinned,
    RollbackRequested {
        to: Option<Version>,
    },
    /// Break-glass: someone let `version` through the instance's freezes
    /// and closed windows; the message carries who, why and until when.
    Overridden {
        version: Version,
    },
    /// A convergence step failed in a way retrying does not fix, or its
    /// message was given up on (moved to the dead-letter queue).
    #[serde(rename_all = "camelCase")]
    StepFailed {
        dead_lettered: bool,
    },
    /// A notification about an event could not be delivered after every
    /// attempt; the notifier moved on to the next.
    #[serde(rename_all = "camelCase")]
    NotificationFailed {
        notification: String,
        delivery_id: String,
        attempts: u32,
    },
}

impl EventKind {
    /// A short name for tables and filters.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::StatusChanged { .. } => "statusChanged",
            EventKind::DesiredVersionChanged { .. } => "desiredVersionChanged",
            EventKind::JobStarted { .. } => "jobStarted",
            EventKind::JobFinished { .. } => "jobFinished",
            EventKind::JobStopRequested { .. } => "jobStopRequested",
            EventKind::DriftDetected { .. } => "driftDetected",
            EventKind::Converged { .. } => "converged",
            EventKind::Adopted { .. } => "adopted",
            EventKind::ConfigApplied { .. } => "configApplied",
            EventKind::InstanceAdded => "instanceAdded",
            EventKind::InstanceRemoved => "instanceRemoved",
            EventKind::ReleaseCreated { .. } => "releaseCreated",
            EventKind::ApprovalRecorded { .. } => "approvalRecorded",
            EventKind::ChecksRequested => "checksRequested",
            EventKind::ProtectionChanged { .. } => "protectionChanged",
            EventKind::ChecksPassed { .. } => "checksPassed",
            EventKind::RolloutStep { .. } => "rolloutStep",
            EventKind::RollbackStarted { .. } => "rollbackStarted",
            EventKind::RolledBack { .. } => "rolledBack",
            EventKind::AlertChanged { .. } => "alertChanged",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
            EventKind::Pinned { .. } => "pinned",
            EventKind::Unpinned => "unpinned",
            EventKind::RollbackRequested { .. } => "rollbackRequested",
            EventKind::Overridden { .. } => "overridden",
            EventKind::StepFailed { .. } => "stepFailed",
            EventKind::NotificationFailed { .. } => "notificationFailed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Sortable and unique: time first, then what makes it unique.
    pub id: String,
    pub at: Timestamp,
    pub application: ApplicationName,
    pub service: Option<ServiceName>,
    pub release_channel: Option<ReleaseChannelName>,
    /// Who or what caused it: `engine`, `cli:alice`, `api:token-ci`, …
    /// Borrowed when it is a constant (the engine's every event).
    pub actor: Cow<'static, str>,
    #[serde(flatten)]
    pub kind: EventKind,
    /// The human sentence: what happened and why.
    pub message: String,
}

impl Event {
    /// An event about one instance; the id is filled in when it is recorded.
    pub fn for_instance(
        key: &InstanceKey,
        at: Timestamp,
        actor: impl Into<String>,
        kind: EventKind,
        message: impl Into<String>,
    ) -> Self {
        Self::about(key, at, Cow::Owned(actor.into()), kind, message)
    }

    /// The same, by an actor whose name is a constant (the engine, on every
    /// decision it records): the events share the name instead of copying it.
    pub fn for_instance_by(
        key: &InstanceKey,
        at: Timestamp,
        actor: &'static str,
        kind: EventKind,
        message: impl Into<String>,
    ) -> Self {
        Self::about(key, at, Cow::Borrowed(actor), kind, message)
    }

    fn about(
        key: &InstanceKey,
        at: Timestamp,
        actor: Cow<'static, str>,
        kind: EventKind,
        message: impl Into<String>,
    ) -> Self {
        Self {
            id: String::new(),
            at,
            application: key.application.clone(),
            service: Some(key.service.clone()),
            release_channel: Some(key.release_channel.clone()),
            actor,
            kind,
            message: crate::text::sentence(message),
        }
    }

    /// Gives a batch of events ids that sort by time, then by batch order:
    /// `<millisecond>-<scope>+<nonce>-<position>`. `scope` says where the
    /// batch comes from (an instance and revision, an approval); the nonce,
    /// random for each batch, makes ids unique by construction: two writers
    /// with the same scope in the same millisecond (two approvals of one
    /// instance) would otherwise write the same id, and the store would
    /// keep one of the two events.
    pub fn assign_ids(events: &mut [Event], scope: &str) {
        let nonce = batch_nonce();
        for (i, event) in events.iter_mut().enumerate() {
            if event.id.is_empty() {
                event.id = format!(
                    "{:015}-{}+{nonce:016x}-{:03}",
                    event.at.as_millisecond().max(0),
                    scope,
                    i
                );
            }
        }
    }
}

/// 64 random bits. Should the system's source fail (it does not on any
/// platform Vergence runs on), the clock's nanoseconds, the process id and
/// a counter still differ between any two batches of one process.
fn batch_nonce() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    getrandom::u64().unwrap_or_else(|_| {
        let nanos = Timestamp::now().as_nanosecond().unsigned_abs() as u64;
        let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        nanos ^ (u64::from(std::process::id()) << 40) ^ count.rotate_left(20)
    })
}

/// Which events to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub application: Option<ApplicationName>,
    pub service: Option<ServiceName>,
    pub release_channel: Option<ReleaseChannelName>,
    /// Only the newest `limit` events (oldest first in the result).
    pub limit: Option<usize>,
}

impl EventFilter {
    pub fn matches(&self, event: &Event) -> bool {
        self.application
            .as_ref()
            .is_none_or(|a| *a == event.application)
            && self
                .service
                .as_ref()
                .is_none_or(|s| event.service.as_ref() == Some(s))
            && self
                .release_channel
                .as_ref()
                .is_none_or(|rc| event.release_channel.as_ref() == Some(rc))
    }
}
