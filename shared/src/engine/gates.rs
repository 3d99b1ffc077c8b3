//! Gates an apply must pass: preconditions (upstream release channel
//! stable, manual approval) and the runtime's approval-before-apply. Every
//! closed gate says why, what it waits on and when to look again.

use jiff::Timestamp;

use super::Facts;
use crate::model::{CompiledInstance, InstanceRecord, Precondition, Status, WaitCause};

/// What a step needs to know about another release channel of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamView {
    pub status: Status,
    pub reason: String,
    pub current_version: Option<String>,
    pub converged_at: Option<Timestamp>,
    /// The version whose retries were exhausted there, if any.
    pub failed_version: Option<String>,
}

impl UpstreamView {
    pub fn of(record: &InstanceRecord) -> Self {
        let state = &record.state;
        Self {
            status: state.status,
            reason: state.reason.clone(),
            current_version: state.current_version.clone(),
            converged_at: state.converged_at,
            failed_version: state
                .target
                .as_ref()
                .filter(|t| t.failed.is_some())
                .map(|t| t.version.clone()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    Closed {
        status: Status,
        reason: String,
        wait: WaitCause,
        recheck_at: Option<Timestamp>,
    },
}

/// Evaluates the gates in the order they are written; the first closed one
/// is reported.
pub fn evaluate(spec: &CompiledInstance, facts: &Facts) -> Gate {
    let version = spec.version.as_str();
    for precondition in &spec.preconditions {
        let gate = match precondition {
            Precondition::ReleaseChannelStable {
                release_channel,
                duration,
            } => {
                let channel = release_channel;
                match facts.upstream.get(channel) {
                    None => closed_upstream(
                        channel,
                        format!(
                            "waiting for release channel {channel}, where this service has no instance yet"
                        ),
                    ),
                    Some(up)
                        if up.status == Status::Converged
                            && up.current_version.as_deref() == Some(version) =>
                    {
                        soak(channel, up, *duration, facts.now)
                    }
                    Some(up) if up.failed_version.as_deref() == Some(version) => closed_upstream(
                        channel,
                        format!(
                            "{version} failed in {channel}; it will not be promoted ({})",
                            up.reason
                        ),
                    ),
                    Some(up) => closed_upstream(
                        channel,
                        format!(
                            "waiting for {channel} to converge on {version} ({channel} is {}: {})",
                            up.status, up.reason
                        ),
                    ),
                }
            }
            Precondition::ManualApproval { name } => {
                if facts.approvals.iter().any(|a| a.version == version) {
                    Gate::Open
                } else {
                    Gate::Closed {
                        status: Status::WaitingApproval,
                        reason: format!(
                            "waiting for manual approval {name} of {version} (vergence approve --app {} --release-channel {} --service {})",
                            spec.key.application, spec.key.release_channel, spec.key.service
                        ),
                        wait: WaitCause::Person,
                        recheck_at: None,
                    }
                }
            }
        };
        if gate != Gate::Open {
            return gate;
        }
    }
    if spec.require_approval_before_apply && !facts.approvals.iter().any(|a| a.version == version) {
        return Gate::Closed {
            status: Status::WaitingApproval,
            reason: format!(
                "runtime {} requires approval before applying {version} (vergence approve --app {} --release-channel {} --service {})",
                spec.runtime, spec.key.application, spec.key.release_channel, spec.key.service
            ),
            wait: WaitCause::Person,
            recheck_at: None,
        };
    }
    Gate::Open
}

fn closed_upstream(channel: &crate::model::ReleaseChannelName, reason: String) -> Gate {
    Gate::Closed {
        status: Status::WaitingPreconditions,
        reason,
        wait: WaitCause::Upstream {
            release_channel: channel.clone(),
        },
        recheck_at: None,
    }
}

fn soak(
    channel: &crate::model::ReleaseChannelName,
    up: &UpstreamView,
    duration: Option<jiff::SignedDuration>,
    now: Timestamp,
) -> Gate {
    let (Some(duration), Some(since)) = (duration, up.converged_at) else {
        return Gate::Open;
    };
    let elapsed = now.duration_since(since);
    if elapsed >= duration {
        return Gate::Open;
    }
    let until = since.checked_add(duration).unwrap_or(now);
    Gate::Closed {
        status: Status::WaitingPreconditions,
        reason: format!(
            "{channel} stable for {} of {}",
            human(elapsed.max(jiff::SignedDuration::ZERO)),
            human(duration)
        ),
        wait: WaitCause::Time { until },
        recheck_at: Some(until),
    }
}

/// Durations as people say them: `4m`, `1h 30m`, `45s`.
pub fn human(duration: jiff::SignedDuration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m {s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h {m}m"),
    }
}
