//! Gates an apply must pass: the pause, preconditions (upstream release
//! channel stable, manual approval), the runtime's approval-before-apply,
//! time windows and protections. Every closed gate says why, what it waits
//! on and when to look again.

use std::convert::Infallible;
use std::fmt;
use std::ops::ControlFlow;

use jiff::{SignedDuration, Timestamp};

use super::Facts;
use super::windows::{self, WindowVerdict};
use vergence_model::{
    Approval, CompiledInstance, CompiledProtection, FailureBehavior, InstanceControls,
    InstanceRecord, InstanceState, Lifecycle, LifecycleKind, PlanRecord, Precondition,
    ProtectionCheck, ProtectionKey, ProtectionName, ReleaseChannelName, Status, Version, WaitCause,
    adoption::Takeover,
};

/// What a step needs to know about another release channel of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamView {
    pub status: Status,
    pub reason: String,
    pub current_version: Option<Version>,
    pub converged_at: Option<Timestamp>,
    /// The version that failed (or was rolled back) there, if any.
    pub failed_version: Option<Version>,
    /// Post-deployment checks of the current version are still running.
    pub checks_pending: bool,
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
                .rollback
                .as_ref()
                .map(|r| r.failed_version.clone())
                .or_else(|| {
                    state
                        .target
                        .as_ref()
                        .filter(|t| t.failed.is_some())
                        .map(|t| t.version.clone())
                }),
            checks_pending: state
                .post_deployment
                .as_ref()
                .is_some_and(|p| p.passed_at.is_none()),
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
    /// A protection has no fresh result: run it, then decide.
    Check {
        protection: ProtectionKey,
    },
    /// A FAIL protection failed: the version fails here.
    Fail {
        reason: String,
    },
}

/// Evaluates everything an apply must pass, in this order: pause,
/// preconditions as written (pre-approval protections just before the first
/// approval), the runtime's approval before apply, time windows, then
/// deployment protections. The first gate that is not open is reported, and
/// the gates after it are not evaluated.
pub fn evaluate(
    spec: &CompiledInstance,
    facts: &Facts,
    state: &InstanceState,
    controls: &InstanceControls,
) -> Gate {
    let first_closed = walk(spec, facts, state, controls, &mut |_, gate| match gate {
        Gate::Open => ControlFlow::Continue(()),
        closed => ControlFlow::Break(closed),
    });
    match first_closed {
        ControlFlow::Break(gate) => gate,
        ControlFlow::Continue(()) => Gate::Open,
    }
}

/// Every gate in order with its verdict, for `explain`.
pub fn all(
    spec: &CompiledInstance,
    facts: &Facts,
    state: &InstanceState,
    controls: &InstanceControls,
) -> Vec<(String, Gate)> {
    let mut gates = Vec::new();
    let ControlFlow::<Infallible>::Continue(()) =
        walk(spec, facts, state, controls, &mut |name, gate| {
            gates.push((name.to_string(), gate));
            ControlFlow::Continue(())
        });
    gates
}

/// What a gate is called in `explain`. Spelled out only there: deciding
/// needs the verdicts, not their names.
#[derive(Clone, Copy, Debug)]
enum GateName<'a> {
    Pause,
    ReleaseChannelStable(&'a ReleaseChannelName),
    ManualApproval(&'a str),
    Takeover,
    ApprovalBeforeApply,
    TimeWindows,
    Protection(&'a ProtectionName, LifecycleKind),
}

impl fmt::Display for GateName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateName::Pause => f.write_str("pause"),
            GateName::ReleaseChannelStable(channel) => {
                write!(f, "releaseChannelStable {channel}")
            }
            GateName::ManualApproval(name) => write!(f, "manualApproval {name}"),
            GateName::Takeover => f.write_str("adopt (take over what runs)"),
            GateName::ApprovalBeforeApply => f.write_str("requireApprovalBeforeApply"),
            GateName::TimeWindows => f.write_str("time windows"),
            GateName::Protection(name, at) => write!(f, "protection {name} ({})", at.as_str()),
        }
    }
}

/// Hands each gate and its verdict to `visit`, in the order [`evaluate`]
/// describes, until `visit` breaks.
fn walk<'a, B>(
    spec: &'a CompiledInstance,
    facts: &Facts,
    state: &InstanceState,
    controls: &InstanceControls,
    visit: &mut impl FnMut(GateName<'a>, Gate) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let wanted = Approvable::of(spec, state);
    visit(GateName::Pause, pause(spec, controls))?;
    // Pre-approval protections run just before the first manual approval,
    // or after the preconditions when there is none.
    let mut pre_approval_done = false;
    for precondition in &spec.preconditions {
        match precondition {
            Precondition::ReleaseChannelStable {
                release_channel,
                duration,
            } => visit(
                GateName::ReleaseChannelStable(release_channel),
                stable(release_channel, *duration, &spec.version, facts),
            )?,
            Precondition::ManualApproval { name } => {
                if !pre_approval_done {
                    pre_approval_done = true;
                    protections(spec, LifecycleKind::PreApproval, facts, state, visit)?;
                }
                visit(
                    GateName::ManualApproval(name),
                    manual_approval(name, &wanted, spec, facts),
                )?;
            }
        }
    }
    if !pre_approval_done {
        protections(spec, LifecycleKind::PreApproval, facts, state, visit)?;
    }
    if let Some(takeovers) = takeovers(spec, state) {
        visit(
            GateName::Takeover,
            takeover(takeovers, &wanted, spec, facts),
        )?;
    }
    if spec.require_approval_before_apply {
        let wanted = wanted.given_since(reapply_since(spec, state));
        visit(
            GateName::ApprovalBeforeApply,
            approval_before_apply(&wanted, spec, facts),
        )?;
    }
    if !spec.windows.is_empty() {
        // Break-glass opens the windows, and nothing else, for its version.
        let overridden = controls
            .window_override
            .as_ref()
            .filter(|o| o.opens(&spec.version, state, facts.now));
        let gate = match overridden {
            Some(_) => Gate::Open,
            None => time_windows(spec, facts.now),
        };
        visit(GateName::TimeWindows, gate)?;
    }
    protections(spec, LifecycleKind::Deployment, facts, state, visit)
}

/// A paused instance fetches but does not apply until someone resumes it.
fn pause(spec: &CompiledInstance, controls: &InstanceControls) -> Gate {
    let Some(paused) = &controls.paused else {
        return Gate::Open;
    };
    Gate::Closed {
        status: Status::Paused,
        reason: format!(
            "paused by {} at {}; fetches go on, applies wait (vergence resume --app {} --service {} --release-channel {})",
            paused.actor,
            super::moment(paused.at),
            spec.key.application,
            spec.key.service,
            spec.key.release_channel
        ),
        wait: WaitCause::Person,
        recheck_at: None,
    }
}

/// What an approval must name: the desired version and, when its fetch
/// produced a plan, that exact plan (a new plan needs a new approval).
struct Approvable<'a> {
    version: &'a Version,
    plan: Option<&'a PlanRecord>,
    /// Approvals older than this do not count (see [`reapply_since`]).
    since: Option<Timestamp>,
}

impl<'a> Approvable<'a> {
    fn of(spec: &'a CompiledInstance, state: &'a InstanceState) -> Self {
        let version = &spec.version;
        Self {
            version,
            plan: state.plan.as_ref().filter(|p| &p.version == version),
            since: None,
        }
    }

    fn given_since(&self, since: Option<Timestamp>) -> Self {
        Self {
            version: self.version,
            plan: self.plan,
            since,
        }
    }

    fn approved(&self, facts: &Facts) -> bool {
        facts.approvals.iter().any(|a: &Approval| {
            &a.version == self.version
                && self.since.is_none_or(|since| a.at >= since)
                && self
                    .plan
                    .is_none_or(|p| a.plan_sha256.as_deref() == Some(p.sha256.as_str()))
        })
    }

    /// "v2", or "v2 with plan 1a2b3c4d".
    fn what(&self) -> String {
        match self.plan {
            Some(p) => format!("{} with plan {}", self.version, p.short()),
            None => self.version.to_string(),
        }
    }
}

/// When the runtime's approval before apply must have been given for an
/// apply that is not the version's first: the approval of a version covers
/// rolling it out once. Remediating drift on it (it converged before) needs
/// an approval given since it converged, and a rollback one given since the
/// rollback started, whatever was approved for that version long ago.
fn reapply_since(spec: &CompiledInstance, state: &InstanceState) -> Option<Timestamp> {
    if let Some(rollback) = state
        .rollback
        .as_ref()
        .filter(|r| r.to.version == spec.version)
    {
        return Some(rollback.started_at);
    }
    state
        .converged_at
        .filter(|_| state.current_version.as_ref() == Some(&spec.version))
}

/// The command that gives the approval, for reasons.
fn approve_command(spec: &CompiledInstance) -> String {
    format!(
        "vergence approve --app {} --release-channel {} --service {}",
        spec.key.application, spec.key.release_channel, spec.key.service
    )
}

fn manual_approval(
    name: &str,
    wanted: &Approvable<'_>,
    spec: &CompiledInstance,
    facts: &Facts,
) -> Gate {
    if wanted.approved(facts) {
        return Gate::Open;
    }
    Gate::Closed {
        status: Status::WaitingApproval,
        reason: format!(
            "waiting for manual approval {name} of {} ({})",
            wanted.what(),
            approve_command(spec)
        ),
        wait: WaitCause::Person,
        recheck_at: None,
    }
}

/// The runtime's `requireApprovalBeforeApply`: the same approval as a
/// manual approval, pointing at the plan to read first when there is one.
fn approval_before_apply(wanted: &Approvable<'_>, spec: &CompiledInstance, facts: &Facts) -> Gate {
    if wanted.approved(facts) {
        return Gate::Open;
    }
    let show = if wanted.plan.is_some() {
        format!(
            "; see the plan with vergence status --service {}",
            spec.key.service
        )
    } else {
        String::new()
    };
    Gate::Closed {
        status: Status::WaitingApproval,
        reason: format!(
            "runtime {} requires approval before applying {} ({}){show}",
            spec.runtime,
            wanted.what(),
            approve_command(spec)
        ),
        wait: WaitCause::Person,
        recheck_at: None,
    }
}

/// What the last fetch of the desired version found live that Vergence did
/// not make and that differs from it (the runtime's `adopt: approve`).
pub fn takeovers<'a>(spec: &CompiledInstance, state: &'a InstanceState) -> Option<&'a [Takeover]> {
    state
        .last_fetch
        .as_ref()
        .filter(|f| f.version == spec.version && !f.takeovers.is_empty())
        .map(|f| f.takeovers.as_slice())
}

/// Taking over a live service Vergence did not make, which differs from
/// the desired state: the first apply waits for an approval of the
/// version, and the reason shows what the apply would change.
fn takeover(
    takeovers: &[Takeover],
    wanted: &Approvable<'_>,
    spec: &CompiledInstance,
    facts: &Facts,
) -> Gate {
    if wanted.approved(facts) {
        return Gate::Open;
    }
    let what: Vec<String> = takeovers
        .iter()
        .map(|t| format!("{}: {}", t.object, t.differences.join("; ")))
        .collect();
    Gate::Closed {
        status: Status::WaitingApproval,
        reason: format!(
            "waiting for approval to take over the existing {} (applying {} changes it: {})",
            what.join("; and the existing "),
            wanted.what(),
            approve_command(spec),
        ),
        wait: WaitCause::Person,
        recheck_at: None,
    }
}

/// Allowed windows and freezes: closed, the instance waits until the
/// windows open (or for a person when they do not open within the horizon).
fn time_windows(spec: &CompiledInstance, now: Timestamp) -> Gate {
    match windows::evaluate(&spec.windows, now) {
        WindowVerdict::Open { .. } => Gate::Open,
        WindowVerdict::Closed { reason, opens_at } => Gate::Closed {
            status: Status::Blocked,
            reason: format!("blocked: {reason}"),
            wait: opens_at.map_or(WaitCause::Person, |until| WaitCause::Time { until }),
            recheck_at: opens_at,
        },
    }
}

fn stable(
    channel: &ReleaseChannelName,
    duration: Option<SignedDuration>,
    version: &Version,
    facts: &Facts,
) -> Gate {
    match facts.upstream.get(channel) {
        None => closed_upstream(
            channel,
            format!(
                "waiting for release channel {channel}, where this service has no instance yet"
            ),
        ),
        Some(up) if up.failed_version.as_ref() == Some(version) => closed_upstream(
            channel,
            format!(
                "{version} failed in {channel}; it will not be promoted ({})",
                up.reason
            ),
        ),
        Some(up)
            if up.status == Status::Converged && up.current_version.as_ref() == Some(version) =>
        {
            if up.checks_pending {
                return closed_upstream(
                    channel,
                    format!(
                        "waiting for {channel}'s post-deployment checks of {version} ({})",
                        up.reason
                    ),
                );
            }
            soak(channel, up, duration, facts.now)
        }
        Some(up) => closed_upstream(
            channel,
            format!(
                "waiting for {channel} to converge on {version} ({channel} is {}: {})",
                up.status, up.reason
            ),
        ),
    }
}

/// The protections of one lifecycle point, before an apply.
fn protections<'a, B>(
    spec: &'a CompiledInstance,
    at: LifecycleKind,
    facts: &Facts,
    state: &InstanceState,
    visit: &mut impl FnMut(GateName<'a>, Gate) -> ControlFlow<B>,
) -> ControlFlow<B> {
    for protection in spec.protections_at(at) {
        visit(
            GateName::Protection(&protection.name, at),
            protection_gate(protection, facts, state),
        )?;
    }
    ControlFlow::Continue(())
}

fn protection_gate(protection: &CompiledProtection, facts: &Facts, state: &InstanceState) -> Gate {
    let behavior = match protection.lifecycle {
        Lifecycle::Deployment { failure_behavior } => failure_behavior,
        _ => FailureBehavior::Block,
    };
    let (passed, inconclusive, summary, next) = match &protection.check {
        ProtectionCheck::Alert { alert } => match facts.alerts.get(alert) {
            Some(a) if a.firing => (
                false,
                false,
                format!(
                    "alert {alert} is firing since {} (set by {}{})",
                    super::moment(a.since),
                    a.actor,
                    a.summary
                        .as_deref()
                        .map(|s| format!(": {s}"))
                        .unwrap_or_default()
                ),
                None,
            ),
            _ => (true, false, String::new(), None),
        },
        ProtectionCheck::Job { .. } => {
            let key = protection.key();
            match state.protections.get(&key) {
                Some(seen) if facts.now < after(seen.at, protection.poll_interval) => (
                    seen.passed,
                    seen.inconclusive,
                    seen.summary.clone(),
                    Some(after(seen.at, protection.poll_interval)),
                ),
                _ => return Gate::Check { protection: key },
            }
        }
    };
    if passed {
        return Gate::Open;
    }
    // A check that could not read its source is no evidence either way: it
    // holds the apply, and only a failure it did see may fail the version.
    if inconclusive {
        return blocked(
            format!(
                "protection {} ({}, of {}) cannot be evaluated: {summary}",
                protection.name,
                protection.lifecycle.as_str(),
                protection.attached_to
            ),
            next,
        );
    }
    let reason = format!(
        "protection {} ({}, {} of {}) is failing: {summary}",
        protection.name,
        protection.lifecycle.as_str(),
        match behavior {
            FailureBehavior::Block => "BLOCK",
            FailureBehavior::Fail => "FAIL",
        },
        protection.attached_to
    );
    if behavior == FailureBehavior::Fail {
        return Gate::Fail { reason };
    }
    blocked(reason, next)
}

/// BLOCKED by a protection, looked at again at `next` (its next check).
fn blocked(reason: String, next: Option<Timestamp>) -> Gate {
    Gate::Closed {
        status: Status::Blocked,
        reason: format!(
            "blocked: {reason}{}",
            next.map(|n| format!("; checking again at {}", super::moment(n)))
                .unwrap_or_default()
        ),
        wait: next.map_or(WaitCause::Person, |until| WaitCause::Time { until }),
        recheck_at: next,
    }
}

fn after(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap_or(Timestamp::MAX)
}

fn closed_upstream(channel: &ReleaseChannelName, reason: String) -> Gate {
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
    channel: &ReleaseChannelName,
    up: &UpstreamView,
    duration: Option<SignedDuration>,
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
            human(elapsed.max(SignedDuration::ZERO)),
            human(duration)
        ),
        wait: WaitCause::Time { until },
        recheck_at: Some(until),
    }
}

pub use vergence_model::text::human;
