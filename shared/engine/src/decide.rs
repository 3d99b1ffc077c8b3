//! `decide()`: the pure heart of the convergence engine. Given an
//! instance's stored state, its compiled desired state and the facts of the
//! moment, it returns the next state, the jobs to start, the events to
//! record and when to look again. No I/O, no clock: the same input always
//! gives the same decision.

use std::borrow::Cow;

use jiff::{SignedDuration, Timestamp};

use super::gates::{self, Gate, human};
use super::rollback;
use super::{Decision, Facts};
use vergence_model::{
    CompiledInstance, Desired, DriftPolicy, Event, EventKind, FailureBehavior, FetchSpec,
    FetchVerdict, InFlightJob, InstanceControls, InstanceKey, InstanceRecord, InstanceState,
    JobOutcome, JobRecord, JobResult, Lifecycle, LifecycleKind, Precondition, Status,
    TargetProgress, Version, WaitCause,
};

mod absorb;
mod adoption;
mod jobs;
mod rollout;
mod verdicts;

/// When to look again at a job being stopped, should the step that stops
/// it die first.
const STOP_RECHECK: SignedDuration = SignedDuration::from_secs(5);

/// Who the engine's events are attributed to.
pub const ACTOR: &str = "engine";

/// Decides the next step for one instance.
pub fn decide(record: &InstanceRecord, facts: &Facts) -> Decision {
    let mut decider = Decider {
        key: &record.key,
        controls: &record.controls,
        facts,
        now: facts.now,
        state: record.state.clone(),
        jobs: Vec::new(),
        events: Vec::new(),
        next: None,
    };
    match &record.desired {
        Desired::Unresolved { reason } => {
            // Nothing to check until a release resolves it.
            decider.state.checks_requested = false;
            decider.set_status(Status::Pending, reason.clone(), Some(WaitCause::Release));
        }
        Desired::Ready(spec) => decider.converge(spec),
    }
    decider.finish(record)
}

struct Decider<'a> {
    key: &'a InstanceKey,
    controls: &'a InstanceControls,
    facts: &'a Facts,
    now: Timestamp,
    state: InstanceState,
    jobs: Vec<JobRecord>,
    events: Vec<Event>,
    next: Option<Timestamp>,
}

/// What the instance should run now: the desired state, or during a
/// rollback the version it goes back to. A rollback is not a promotion,
/// so upstream channels and promotion approvals do not hold it; it does
/// change the runtime, so what guards the runtime holds it like any
/// apply: the pause, the runtime's approval before apply, time windows
/// and deployment protections (a failing `FAIL` protection blocks it
/// instead of failing the way out).
///
/// The desired state is borrowed as it is unless a rollback or a pin
/// changes it: every decision asks for it, and copying a compiled instance
/// costs more than most decisions.
pub(crate) fn effective<'a>(
    desired: &'a CompiledInstance,
    state: &InstanceState,
    controls: &InstanceControls,
) -> Cow<'a, CompiledInstance> {
    let Some(rollback) = &state.rollback else {
        // A pin is a person choosing this version for this channel: it
        // does not wait for upstream channels to run it too.
        let upstream = |p: &Precondition| matches!(p, Precondition::ReleaseChannelStable { .. });
        if controls.pinned.is_none() || !desired.preconditions.iter().any(upstream) {
            return Cow::Borrowed(desired);
        }
        let mut spec = desired.clone();
        spec.preconditions.retain(|p| !upstream(p));
        return Cow::Owned(spec);
    };
    let mut spec = desired.clone();
    spec.version = rollback.to.version.clone();
    spec.apply = rollback.to.apply.clone();
    spec.fetch = rollback.to.fetch.clone();
    spec.preconditions.clear();
    spec.protections
        .retain(|p| p.lifecycle.kind() == LifecycleKind::Deployment);
    for protection in &mut spec.protections {
        protection.lifecycle = Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        };
    }
    Cow::Owned(spec)
}

pub(crate) fn after(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap_or(Timestamp::MAX)
}

/// A timestamp for reasons, to the second.
pub fn moment(at: Timestamp) -> String {
    at.round(jiff::Unit::Second).unwrap_or(at).to_string()
}

impl Decider<'_> {
    fn event(&mut self, kind: EventKind, message: impl Into<String>) {
        self.events.push(Event::for_instance_by(
            self.key, self.now, ACTOR, kind, message,
        ));
    }

    fn set_status(&mut self, status: Status, reason: impl Into<String>, wait: Option<WaitCause>) {
        self.state.status = status;
        self.state.reason = vergence_model::text::sentence(reason);
        self.state.wait = wait;
    }

    fn check_at(&mut self, at: Timestamp) {
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    fn target(&mut self) -> &mut TargetProgress {
        // ensure_target() runs before anything reads the target.
        self.state.target.get_or_insert_with(|| {
            TargetProgress::new(Version::from_config("unknown"), Timestamp::UNIX_EPOCH)
        })
    }

    fn converge(&mut self, desired: &CompiledInstance) {
        self.take_rollback_request(desired);
        self.end_rollback(desired);
        let spec = self.effective(desired);
        if let Some(job) = &self.facts.finished_job
            && let (Some(flight), Some(result)) = (self.state.in_flight.clone(), job.result())
            && flight.job_id == job.id
        {
            self.absorb(&spec, &flight, result);
        }
        self.ensure_target(&spec);
        if let Some(flight) = self.state.in_flight.clone()
            && self.wait_for(&spec, &flight)
        {
            return;
        }
        self.evaluate(&spec);
        // A failed step's traffic goes back first: a rollback waits on its
        // gates (a failing protection holds it), the failing version must
        // not keep its share meanwhile.
        if self.take_traffic_back(&spec) {
            return self.get_info(desired);
        }
        if let Some(rollback) = rollback::automatic(&self.state, desired, self.now) {
            self.start_rollback(rollback);
            let spec = self.effective(desired);
            self.ensure_target(&spec);
            self.evaluate(&spec);
        }
        self.get_info(desired);
    }

    /// Whether to keep waiting for the job in flight. A job of another
    /// version than the one wanted now (a newer release, a rollback) is
    /// stopped first: the next step stops it on its platform, so two
    /// versions never run against the runtime at once. A job past its
    /// deadline with no result is lost.
    fn wait_for(&mut self, spec: &CompiledInstance, flight: &InFlightJob) -> bool {
        if flight.version != spec.version {
            if flight.stop.is_none() {
                let reason = format!("{} superseded it", spec.version);
                self.event(
                    EventKind::JobStopRequested {
                        job_id: flight.job_id.clone(),
                        job: flight.kind,
                    },
                    format!(
                        "stopping the {} of {}: {reason}",
                        flight.kind, flight.version
                    ),
                );
                if let Some(f) = self.state.in_flight.as_mut() {
                    f.stop = Some(reason);
                }
            }
            // The engine stops it right after storing this; should that
            // step die, the next one stops it.
            self.check_at(after(self.now, STOP_RECHECK));
            return true;
        }
        if self.now >= flight.deadline {
            let lost = JobResult::without_output(JobOutcome::Lost, self.now);
            self.absorb(spec, flight, &lost);
            return false;
        }
        self.check_at(flight.deadline);
        if let Some(every) = flight.poll_every {
            self.check_at(after(self.now, every).min(flight.deadline));
        }
        true
    }

    fn effective<'d>(&self, desired: &'d CompiledInstance) -> Cow<'d, CompiledInstance> {
        effective(desired, &self.state, self.controls)
    }

    fn ensure_target(&mut self, spec: &CompiledInstance) {
        let previous = self.state.target.as_ref().map(|t| t.version.clone());
        if previous.as_ref() == Some(&spec.version) {
            return;
        }
        let mut target = TargetProgress::new(spec.version.clone(), self.now);
        target.rollout = self.start_rollout(spec);
        self.state.target = Some(target);
        let message = match &previous {
            Some(p) => format!("desired version is now {} (was {p})", spec.version),
            None => format!("desired version is {}", spec.version),
        };
        // A rollback announces itself with its own event.
        if self.state.rollback.is_none() {
            self.event(
                EventKind::DesiredVersionChanged {
                    from: previous,
                    to: spec.version.clone(),
                },
                message,
            );
        }
        if self.state.in_flight.is_none()
            && self.state.current_version.as_ref() != Some(&spec.version)
        {
            self.set_status(
                Status::Pending,
                format!("new desired version {}; checking the runtime", spec.version),
                None,
            );
        }
    }

    fn evaluate(&mut self, spec: &CompiledInstance) {
        let Some(target) = self.state.target.clone() else {
            return;
        };
        if let Some(failed) = &target.failed {
            self.state.checks_requested = false;
            let back = target
                .rollout
                .as_ref()
                .and_then(|p| p.traffic_back_at)
                .map(|at| {
                    format!(
                        "; all the traffic was sent back to the version before at {}",
                        moment(at)
                    )
                })
                .unwrap_or_default();
            self.set_status(Status::Failed, format!("{failed}{back}"), None);
            return;
        }
        match &spec.fetch {
            None => {
                self.state.checks_requested = false;
                // Without a fetch nothing says what a failed apply left
                // behind, so a rollback always applies the old version.
                let must_apply = self.state.rollback.is_some() && target.applied_at.is_none();
                if self.state.current_version.as_ref() == Some(&spec.version) && !must_apply {
                    self.converged(spec);
                    self.post_deployment(spec);
                } else {
                    self.want_apply(spec, &target, None);
                }
            }
            Some(fetch) => self.evaluate_with_fetch(spec, fetch, &target),
        }
    }

    fn evaluate_with_fetch(
        &mut self,
        spec: &CompiledInstance,
        fetch: &FetchSpec,
        target: &TargetProgress,
    ) {
        // An observation counts when it is of this version, was made after
        // our last apply, and nobody asked to look again since.
        let observation = self.state.last_fetch.clone().filter(|o| {
            o.version == spec.version
                && o.seq > target.applied_seq.unwrap_or(0)
                && !self.state.checks_requested
        });
        let Some(observation) = observation else {
            self.dispatch_fetch(spec, fetch, target.applied_seq.is_some());
            return;
        };
        let interval = match observation.verdict {
            // A rollout's steps are watched at the rollout's pace.
            FetchVerdict::Converged if target.rollout.is_some() => fetch.poll_interval,
            FetchVerdict::Converged => fetch.steady_state_poll_interval,
            // A transient error (a Terraform state lock) is spaced out by
            // its own count, and never counts towards failing.
            FetchVerdict::Error => spec
                .apply
                .retry_policy
                .backoff(target.fetch_failures.max(target.retryable_exits)),
            _ => fetch.poll_interval,
        };
        let due = after(observation.at, interval);
        if self.now >= due {
            self.dispatch_fetch(spec, fetch, target.applied_seq.is_some());
            return;
        }
        self.check_at(due);
        match observation.verdict {
            FetchVerdict::Converged if target.rollout.is_some() => {
                self.rollout_observed(spec, target, &observation);
            }
            FetchVerdict::Converged => {
                self.converged(spec);
                self.post_deployment(spec);
            }
            // A rollout in progress that no apply of ours started is waited
            // for; once an attempt of ours failed (its grace period ran
            // out), it is retried like any failed attempt instead.
            FetchVerdict::InProgress | FetchVerdict::NeedsApply
                if target.applied_seq.is_some()
                    || (observation.verdict == FetchVerdict::InProgress
                        && target.apply_failures == 0) =>
            {
                self.verifying(spec, target, &observation.summary);
            }
            FetchVerdict::NeedsApply | FetchVerdict::Failed | FetchVerdict::InProgress => {
                let drift = self.state.current_version.as_ref() == Some(&spec.version);
                self.want_apply(spec, target, Some((drift, observation.summary.clone())));
            }
            FetchVerdict::Error => self.fetch_failed(spec, target, &observation.summary, due),
        }
    }

    /// The runtime is not there yet but getting there (or an apply is being
    /// verified): wait, unless the apply's convergence grace period is over,
    /// which counts as a failed attempt.
    fn verifying(&mut self, spec: &CompiledInstance, target: &TargetProgress, summary: &str) {
        let grace_end = target
            .apply_started_at
            .map(|started| after(started, spec.convergence_grace_period));
        let grace_over = grace_end.is_some_and(|end| self.now >= end);
        if grace_over && target.applied_seq.is_some() {
            self.count_failure(
                spec,
                format!(
                    "{} did not converge within the convergence grace period ({}) of its apply: {summary}",
                    spec.version,
                    human(spec.convergence_grace_period),
                ),
            );
            return self.evaluate_after_failure(spec);
        }
        // The grace period only runs while an apply is verified; after
        // a failed or lost apply its end is past and means nothing.
        let grace_end = grace_end.filter(|_| target.applied_seq.is_some());
        let until = grace_end
            .map(|end| format!("; waiting until {}", moment(end)))
            .unwrap_or_default();
        if let Some(end) = grace_end {
            self.check_at(end);
        }
        self.set_status(Status::Verifying, format!("{summary}{until}"), None);
    }

    /// The fetch itself failed: it runs again at `due`; too many failures
    /// in a row fail the instance (never its version: nothing was seen).
    fn fetch_failed(
        &mut self,
        spec: &CompiledInstance,
        target: &TargetProgress,
        summary: &str,
        due: Timestamp,
    ) {
        let max = spec.apply.retry_policy.max_attempts;
        let message = format!("{summary}; fetching again at {}", moment(due));
        if target.fetch_failures >= max {
            self.set_status(
                Status::Failed,
                format!(
                    "fetch failed {} times in a row: {message}",
                    target.fetch_failures
                ),
                None,
            );
        } else {
            let status = self.state.status;
            self.set_status(status, message, None);
        }
    }

    /// After a counted failure: either given up, or wait for the retry.
    fn evaluate_after_failure(&mut self, spec: &CompiledInstance) {
        if let Some(target) = self.state.target.clone() {
            if let Some(failed) = &target.failed {
                self.set_status(Status::Failed, failed.clone(), None);
            } else {
                self.want_apply(spec, &target, None);
            }
        }
    }

    /// The runtime needs an apply: check drift policy and gates, respect the
    /// retry backoff, then apply. `observed` is (drift?, what fetch saw).
    fn want_apply(
        &mut self,
        spec: &CompiledInstance,
        target: &TargetProgress,
        observed: Option<(bool, String)>,
    ) {
        let drift = observed
            .as_ref()
            .filter(|(drift, _)| *drift)
            .map(|(_, s)| s.clone());
        if let Some(seen) = &drift
            && !self.remediate(spec, seen)
        {
            return;
        }
        if !self.gates_open(spec, drift.as_deref()) {
            return;
        }
        if let Some(retry_at) = target.retry_at.filter(|at| *at > self.now) {
            let last = target.last_failure.clone().unwrap_or_default();
            self.set_status(
                Status::Applying,
                format!("{last}; retrying at {}", moment(retry_at)),
                None,
            );
            self.check_at(retry_at);
            return;
        }
        let why = match (&drift, &observed) {
            (Some(seen), _) => format!(" to remediate drift: {seen}"),
            (None, Some((_, seen))) => format!(": {seen}"),
            (None, None) => String::new(),
        };
        self.dispatch_apply(spec, why);
    }

    /// Drift on a converged instance is recorded; whether it is remediated
    /// is the drift policy's call (`detectOnly` leaves it DRIFTED).
    fn remediate(&mut self, spec: &CompiledInstance, seen: &str) -> bool {
        if matches!(self.state.status, Status::Converged) {
            self.event(
                EventKind::DriftDetected {
                    version: spec.version.clone(),
                },
                format!("drift detected on {}: {seen}", spec.version),
            );
        }
        if spec.drift_policy == DriftPolicy::DetectOnly {
            self.set_status(
                Status::Drifted,
                format!(
                    "drift detected on {} (driftPolicy detectOnly, not applying): {seen}",
                    spec.version
                ),
                None,
            );
            return false;
        }
        true
    }

    /// Whether every gate is open. When one is not, the instance shows it:
    /// it waits, runs the protection check the gate needs, or fails.
    fn gates_open(&mut self, spec: &CompiledInstance, drift: Option<&str>) -> bool {
        match gates::evaluate(spec, self.facts, &self.state, self.controls) {
            Gate::Open => return true,
            Gate::Closed {
                status,
                reason,
                wait,
                recheck_at,
            } => {
                let reason = match drift {
                    Some(seen) => format!("drifted ({seen}); {reason}"),
                    None => reason,
                };
                self.set_status(status, reason, Some(wait));
                if let Some(at) = recheck_at {
                    self.check_at(at);
                }
            }
            Gate::Check { protection } => {
                let status = match self.state.status {
                    Status::Converged | Status::Failed | Status::RolledBack => Status::Pending,
                    other => other,
                };
                self.set_status(
                    status,
                    format!(
                        "checking protection {protection} before applying {}",
                        spec.version
                    ),
                    None,
                );
                self.dispatch_protection(spec, &protection);
            }
            Gate::Fail { reason } => self.fail_version(reason),
        }
        false
    }

    /// The version fails here for good: no retry; a rollback may follow.
    fn fail_version(&mut self, reason: String) {
        let target = self.target();
        target.failed = Some(reason.clone());
        target.retry_at = None;
        self.set_status(Status::Failed, reason, None);
    }

    fn converged(&mut self, spec: &CompiledInstance) {
        let version = &spec.version;
        // A rolled-back instance is converged on the version it went back
        // to; each routine fetch that finds it there again is no news.
        let already = matches!(self.state.status, Status::Converged | Status::RolledBack)
            && self.state.current_version.as_ref() == Some(version);
        if !already {
            self.state.converged_at = Some(self.now);
            self.state.current_version = Some(version.clone());
            self.event(
                EventKind::Converged {
                    version: version.clone(),
                },
                format!("converged on {version}"),
            );
        }
        // Verification of the last apply is over: from here on, a fetch that
        // needs work is drift, not an apply still settling.
        if let Some(target) = self.state.target.as_mut() {
            target.applied_seq = None;
            target.apply_started_at = None;
        }
        self.set_status(Status::Converged, format!("converged on {version}"), None);
    }

    fn finish(mut self, record: &InstanceRecord) -> Decision {
        let before = &record.state;
        self.rollback_status(before.status);
        if self.state.status != before.status {
            let message = self.state.reason.clone();
            self.event(
                EventKind::StatusChanged {
                    from: before.status,
                    to: self.state.status,
                },
                message,
            );
            self.state.since = Some(self.now);
        } else if self.state.since.is_none() {
            self.state.since = Some(self.now);
        }
        // Anything downstream gates read: status, version, checks, rollback.
        let moved = self.state.status != before.status
            || self.state.current_version != before.current_version
            || self.state.post_deployment != before.post_deployment
            || self.state.rollback != before.rollback;
        let wake = match (&record.desired, moved) {
            (Desired::Ready(spec), true) => spec.downstream.clone(),
            _ => Vec::new(),
        };
        Decision {
            state: self.state,
            jobs: self.jobs,
            events: self.events,
            next_check_at: self.next,
            wake,
        }
    }
}
