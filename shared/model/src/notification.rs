//! Notifications: which recorded events people are told about, where, and
//! the message each becomes.
//!
//! The events in the store are the outbox. A notifier (`vergence-notify`)
//! reads the events newer than its [`NotificationCursor`], turns those a
//! [`NotificationRule`] asks for into [`Notification`]s and hands them to a
//! [`NotificationSender`]; the engine never waits for any of it. Nothing
//! here speaks HTTP, and no secret value is ever held: targets name where
//! their URL and signing secret are read when a message is sent.

use std::collections::BTreeSet;

use async_trait::async_trait;
use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::{
    ApplicationName, Event, EventKind, InstanceKey, ReleaseChannelName, SecretRef, ServiceName,
    Status, Version,
};

/// The events people act on, by the name config uses in `on:`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum NotificationEvent {
    /// An instance waits for someone to approve its next apply.
    ApprovalNeeded,
    /// An instance failed: a version failed for good, or a step cannot go on.
    Failed,
    /// A failed version was rolled back to the last good one.
    RolledBack,
    /// A converged instance no longer matches its desired state.
    DriftDetected,
    /// An instance is blocked: a failing protection, a freeze, a runner
    /// that cannot take jobs.
    Blocked,
    /// An instance of the application's last release channel converged:
    /// a version reached production.
    Converged,
    /// Someone broke the glass: a version may apply through a freeze.
    Overridden,
}

impl NotificationEvent {
    pub const ALL: [NotificationEvent; 7] = [
        NotificationEvent::ApprovalNeeded,
        NotificationEvent::Failed,
        NotificationEvent::RolledBack,
        NotificationEvent::DriftDetected,
        NotificationEvent::Blocked,
        NotificationEvent::Converged,
        NotificationEvent::Overridden,
    ];

    /// The name written in config and sent in payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationEvent::ApprovalNeeded => "approvalNeeded",
            NotificationEvent::Failed => "failed",
            NotificationEvent::RolledBack => "rolledBack",
            NotificationEvent::DriftDetected => "driftDetected",
            NotificationEvent::Blocked => "blocked",
            NotificationEvent::Converged => "converged",
            NotificationEvent::Overridden => "overridden",
        }
    }

    /// A few words for a message's headline.
    fn headline(self) -> &'static str {
        match self {
            NotificationEvent::ApprovalNeeded => "approval needed",
            NotificationEvent::Failed => "failed",
            NotificationEvent::RolledBack => "rolled back",
            NotificationEvent::DriftDetected => "drift detected",
            NotificationEvent::Blocked => "blocked",
            NotificationEvent::Converged => "converged",
            NotificationEvent::Overridden => "freeze overridden",
        }
    }

    /// What a recorded event means to the people notified, if anything.
    /// `last_channel` is the last release channel of the event's
    /// application in promotion order: only there is converging news.
    pub fn of(event: &Event, last_channel: Option<&ReleaseChannelName>) -> Option<Self> {
        match &event.kind {
            EventKind::StatusChanged { to, .. } => match to {
                Status::WaitingApproval => Some(NotificationEvent::ApprovalNeeded),
                Status::Failed => Some(NotificationEvent::Failed),
                Status::Blocked => Some(NotificationEvent::Blocked),
                // RolledBack has its own event, with the version.
                _ => None,
            },
            EventKind::StepFailed { .. } => Some(NotificationEvent::Failed),
            EventKind::RolledBack { .. } => Some(NotificationEvent::RolledBack),
            EventKind::DriftDetected { .. } => Some(NotificationEvent::DriftDetected),
            EventKind::Overridden { .. } => Some(NotificationEvent::Overridden),
            EventKind::Converged { .. }
                if last_channel.is_some() && event.release_channel.as_ref() == last_channel =>
            {
                Some(NotificationEvent::Converged)
            }
            _ => None,
        }
    }
}

/// Where a rule's messages go. Holds where the secrets are read, never
/// their values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotificationTarget {
    /// A Slack incoming webhook; its URL is the secret.
    Slack { webhook_url: SecretRef },
    /// An HTTP endpoint of one's own, sent a JSON body signed with
    /// HMAC-SHA256 of `"<timestamp>.<body>"`.
    Webhook {
        url: SecretRef,
        signing_secret: SecretRef,
    },
}

impl NotificationTarget {
    pub fn kind(&self) -> &'static str {
        match self {
            NotificationTarget::Slack { .. } => "slack",
            NotificationTarget::Webhook { .. } => "webhook",
        }
    }
}

/// One entry of an application's `notifications:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationRule {
    pub application: ApplicationName,
    /// Unique within the application; names the rule in logs and events.
    pub name: String,
    pub target: NotificationTarget,
    pub on: BTreeSet<NotificationEvent>,
    /// Only these release channels; every channel when `None`.
    pub release_channels: Option<BTreeSet<ReleaseChannelName>>,
}

impl NotificationRule {
    /// Whether this rule asks for `what` about `event`.
    pub fn wants(&self, what: NotificationEvent, event: &Event) -> bool {
        event.application == self.application
            && self.on.contains(&what)
            && self.release_channels.as_ref().is_none_or(|channels| {
                event
                    .release_channel
                    .as_ref()
                    .is_some_and(|c| channels.contains(c))
            })
    }
}

/// A message about one event for one rule: the generic webhook's JSON
/// body, and what the Slack message is written from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// The dedup key: the event's id, the same on every delivery of it.
    pub delivery_id: String,
    /// The rule's name.
    pub notification: String,
    pub event: NotificationEvent,
    pub application: ApplicationName,
    pub service: Option<ServiceName>,
    pub release_channel: Option<ReleaseChannelName>,
    /// The version the event is about, when it names one.
    pub version: Option<Version>,
    pub at: Timestamp,
    /// The event's sentence: what happened and why.
    pub message: String,
    /// The instance's page in the status UI; `None` when the deployment
    /// has no public URL configured.
    pub link: Option<String>,
}

impl Notification {
    pub fn new(
        rule: &NotificationRule,
        what: NotificationEvent,
        event: &Event,
        public_url: Option<&str>,
    ) -> Self {
        let version = match &event.kind {
            EventKind::Converged { version } | EventKind::DriftDetected { version } => {
                Some(version.clone())
            }
            EventKind::RolledBack { to } => Some(to.clone()),
            _ => None,
        };
        let link = match (public_url, &event.service, &event.release_channel) {
            (Some(base), Some(service), Some(channel)) => Some(instance_link(
                base,
                &InstanceKey::new(event.application.clone(), service.clone(), channel.clone()),
            )),
            _ => None,
        };
        Self {
            delivery_id: event.id.clone(),
            notification: rule.name.clone(),
            event: what,
            application: event.application.clone(),
            service: event.service.clone(),
            release_channel: event.release_channel.clone(),
            version,
            at: event.at,
            message: event.message.clone(),
            link,
        }
    }

    /// `shop/web@prod`, or the application alone.
    pub fn subject(&self) -> String {
        match (&self.service, &self.release_channel) {
            (Some(s), Some(c)) => format!("{}/{s}@{c}", self.application),
            _ => self.application.to_string(),
        }
    }

    /// One line for chat: `shop/web@prod: approval needed — <message>`.
    pub fn text(&self) -> String {
        format!(
            "{}: {} — {}",
            self.subject(),
            self.event.headline(),
            self.message
        )
    }
}

/// The status page of an instance:
/// `{public_url}/ui/instances/{app}/{release channel}/{service}`.
pub fn instance_link(public_url: &str, key: &InstanceKey) -> String {
    format!(
        "{}/ui/instances/{}/{}/{}",
        public_url.trim_end_matches('/'),
        key.application,
        key.release_channel,
        key.service
    )
}

/// Why a message was not delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryFailure {
    /// Whether trying again may help (a 5xx, a timeout, a refused
    /// connection) or not (a secret that is not set, a 4xx).
    pub retryable: bool,
    pub message: String,
}

/// Sends one notification to one target. Implemented over HTTP by
/// `vergence-notify`; reads the target's secrets when sending.
#[async_trait]
pub trait NotificationSender: Send + Sync {
    async fn send(
        &self,
        target: &NotificationTarget,
        notification: &Notification,
    ) -> std::result::Result<(), DeliveryFailure>;
}

/// Reads the value of a secret reference when a message is sent (a
/// target's URL or signing secret), so no value is in the config, the
/// state or the environment of the process that sends. Implemented with
/// the AWS SDK by `vergence-aws` (SSM parameters, Secrets Manager
/// secrets); the notifier reads `fromEnv` itself.
#[async_trait]
pub trait SecretReader: Send + Sync {
    async fn read(&self, secret: &SecretRef) -> std::result::Result<String, SecretFailure>;
}

/// Why a secret's value could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretFailureKind {
    /// Nothing in this process reads that kind of source (a build
    /// without the AWS SDK).
    NoReader,
    /// The source says there is no such secret (or version).
    NotFound,
    /// The source refused the reader's identity (or its key).
    AccessDenied,
    /// Throttled, unreachable, a server error: trying again may help.
    Unavailable,
    /// Read, or asked for, but not usable as a value: the request was
    /// refused as malformed, or the secret is empty, binary, or lacks the
    /// JSON key the reference names.
    Invalid,
}

impl SecretFailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretFailureKind::NoReader => "not readable here",
            SecretFailureKind::NotFound => "not found",
            SecretFailureKind::AccessDenied => "access denied",
            SecretFailureKind::Unavailable => "unavailable",
            SecretFailureKind::Invalid => "unusable",
        }
    }
}

/// A secret that could not be read: what kind of failure, and the
/// source's own words (never the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretFailure {
    pub kind: SecretFailureKind,
    pub detail: String,
}

impl SecretFailure {
    pub fn new(kind: SecretFailureKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }

    /// Only a source that is down or throttling may answer differently
    /// in a moment; the rest need someone to change something.
    pub fn is_retryable(&self) -> bool {
        self.kind == SecretFailureKind::Unavailable
    }
}

impl std::fmt::Display for SecretFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

/// How far the notifier got: events before `since` (less a look-back) are
/// done, and of those after it, `delivered` lists what was already handled
/// (`rule/event id`), so an event committed late is still sent once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationCursor {
    pub since: Option<Timestamp>,
    #[serde(default)]
    pub delivered: BTreeSet<String>,
}

/// Where the notifier keeps its cursor between passes (and restarts).
#[async_trait]
pub trait NotificationCursorStore: Send + Sync {
    async fn load(&self) -> Result<Option<NotificationCursor>>;
    async fn save(&self, cursor: &NotificationCursor) -> Result<()>;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
