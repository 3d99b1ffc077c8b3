//! `decide()`: the pure heart of the convergence engine. Given an
//! instance's stored state, its compiled desired state and the facts of the
//! moment, it returns the next state, the jobs to start, the events to
//! record and when to look again. No I/O, no clock: the same input always
//! gives the same decision.

use jiff::{SignedDuration, Timestamp};

use super::fetch;
use super::gates::{self, Gate, human};
use super::{Decision, Facts};
use crate::hashing::hash_fields;
use crate::model::{
    CompiledInstance, Desired, DriftPolicy, Event, EventKind, FetchObservation, FetchSpec,
    FetchVerdict, InFlightJob, InstanceKey, InstanceRecord, InstanceState, JobId, JobKind,
    JobOutcome, JobRecord, JobResult, JobSpec, JobState, JobSummary, Status, TargetProgress,
    WaitCause,
};

/// Who the engine's events are attributed to.
pub const ACTOR: &str = "engine";

/// Time past a job's own timeout before it is presumed lost: a runner that
/// died never reports, and the instance must not wait forever.
const LOST_JOB_SLACK: SignedDuration = SignedDuration::from_mins(2);

/// Decides the next step for one instance.
pub fn decide(record: &InstanceRecord, facts: &Facts) -> Decision {
    let mut decider = Decider {
        key: &record.key,
        facts,
        now: facts.now,
        state: record.state.clone(),
        jobs: Vec::new(),
        events: Vec::new(),
        next: None,
    };
    match &record.desired {
        Desired::Unresolved { reason } => {
            decider.set_status(Status::Pending, reason.clone(), Some(WaitCause::Release));
        }
        Desired::Ready(spec) => decider.converge(spec),
    }
    decider.finish(record)
}

struct Decider<'a> {
    key: &'a InstanceKey,
    facts: &'a Facts,
    now: Timestamp,
    state: InstanceState,
    jobs: Vec<JobRecord>,
    events: Vec<Event>,
    next: Option<Timestamp>,
}

fn after(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap_or(Timestamp::MAX)
}

/// A timestamp for reasons, to the second.
pub fn moment(at: Timestamp) -> String {
    at.round(jiff::Unit::Second).unwrap_or(at).to_string()
}

impl Decider<'_> {
    fn event(&mut self, kind: EventKind, message: impl Into<String>) {
        self.events.push(Event::for_instance(
            self.key, self.now, ACTOR, kind, message,
        ));
    }

    fn set_status(&mut self, status: Status, reason: impl Into<String>, wait: Option<WaitCause>) {
        self.state.status = status;
        self.state.reason = reason.into();
        self.state.wait = wait;
    }

    fn check_at(&mut self, at: Timestamp) {
        self.next = Some(self.next.map_or(at, |n| n.min(at)));
    }

    fn target(&mut self) -> &mut TargetProgress {
        // ensure_target() runs before anything reads the target.
        self.state
            .target
            .get_or_insert_with(|| TargetProgress::new(String::new(), Timestamp::UNIX_EPOCH))
    }

    fn converge(&mut self, spec: &CompiledInstance) {
        if let Some(job) = &self.facts.finished_job
            && let (Some(flight), Some(result)) = (self.state.in_flight.clone(), job.result())
            && flight.job_id == job.id
        {
            self.absorb(spec, &flight, result);
        }
        self.ensure_target(spec);
        if let Some(flight) = self.state.in_flight.clone() {
            if self.now < flight.deadline {
                self.check_at(flight.deadline);
                return;
            }
            let lost = JobResult {
                outcome: JobOutcome::Lost,
                exit_code: None,
                stdout: String::new(),
                stderr_tail: String::new(),
                duration_ms: 0,
                outputs: Vec::new(),
                finished_at: self.now,
            };
            self.absorb(spec, &flight, &lost);
        }
        self.evaluate(spec);
    }

    fn ensure_target(&mut self, spec: &CompiledInstance) {
        let previous = self.state.target.as_ref().map(|t| t.version.clone());
        if previous.as_deref() == Some(spec.version.as_str()) {
            return;
        }
        self.state.target = Some(TargetProgress::new(spec.version.clone(), self.now));
        let message = match &previous {
            Some(p) => format!("desired version is now {} (was {p})", spec.version),
            None => format!("desired version is {}", spec.version),
        };
        self.event(
            EventKind::DesiredVersionChanged {
                from: previous,
                to: spec.version.clone(),
            },
            message,
        );
        if self.state.in_flight.is_none()
            && self.state.current_version.as_deref() != Some(spec.version.as_str())
        {
            self.set_status(
                Status::Pending,
                format!("new desired version {}; checking the runtime", spec.version),
                None,
            );
        }
    }

    fn absorb(&mut self, spec: &CompiledInstance, flight: &InFlightJob, result: &JobResult) {
        self.state.in_flight = None;
        let summary = JobSummary {
            job_id: flight.job_id.clone(),
            kind: flight.kind,
            version: flight.version.clone(),
            attempt: flight.attempt,
            outcome: result.outcome.clone(),
            exit_code: result.exit_code,
            finished_at: result.finished_at,
            duration_ms: result.duration_ms,
            stderr_tail: result.stderr_tail.clone(),
        };
        self.state.last_jobs.retain(|j| j.kind != flight.kind);
        self.state.last_jobs.push(summary);
        let stale = self
            .state
            .target
            .as_ref()
            .is_none_or(|t| t.version != flight.version);
        match flight.kind {
            JobKind::Apply => self.absorb_apply(spec, flight, result, stale),
            JobKind::Fetch => self.absorb_fetch(spec, flight, result, stale),
            JobKind::GetInfo => {}
        }
    }

    fn job_finished_event(&mut self, flight: &InFlightJob, result: &JobResult, message: String) {
        self.event(
            EventKind::JobFinished {
                job_id: flight.job_id.clone(),
                job: flight.kind,
                outcome: result.outcome.clone(),
                exit_code: result.exit_code,
            },
            message,
        );
    }

    fn absorb_apply(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
        stale: bool,
    ) {
        let took = human(SignedDuration::from_millis(result.duration_ms as i64));
        let what = format!("apply of {} (attempt {})", flight.version, flight.attempt);
        if result.exited_with(0) {
            self.job_finished_event(flight, result, format!("{what} succeeded in {took}"));
            if stale {
                // An older version finished while a newer one was pushed;
                // without a fetch, applying is all we know of the runtime.
                if spec.fetch.is_none() {
                    self.state.current_version = Some(flight.version.clone());
                }
                return;
            }
            let target = self.target();
            target.applied_at = Some(result.finished_at);
            target.applied_seq = Some(flight.seq);
            target.retry_at = None;
            target.retryable_exits = 0;
            if spec.fetch.is_none() {
                self.converged(spec);
            }
            return;
        }
        let retryable = result.outcome == JobOutcome::Exited
            && result
                .exit_code
                .is_some_and(|c| spec.apply.retryable_exit_codes.contains(&c));
        if stale {
            self.job_finished_event(flight, result, format!("{what} {}", result.describe()));
            return;
        }
        if retryable {
            let policy = spec.apply.retry_policy;
            let now = self.now;
            let target = self.target();
            target.retryable_exits += 1;
            let retry_at = after(now, policy.backoff(target.retryable_exits));
            target.retry_at = Some(retry_at);
            target.last_failure = Some(format!("{what} {} (retryable)", result.describe()));
            self.job_finished_event(
                flight,
                result,
                format!(
                    "{what} {}, which runtime {} marks retryable; retrying at {}",
                    result.describe(),
                    spec.runtime,
                    moment(retry_at)
                ),
            );
            return;
        }
        let failure = format!("{what} {}", result.describe());
        self.job_finished_event(flight, result, failure.clone());
        self.count_failure(spec, failure);
    }

    /// Counts a failed attempt against the retry policy: wait and retry, or
    /// give up on this version.
    fn count_failure(&mut self, spec: &CompiledInstance, failure: String) {
        let policy = spec.apply.retry_policy;
        let now = self.now;
        let target = self.target();
        target.apply_failures += 1;
        target.applied_seq = None;
        target.last_failure = Some(failure.clone());
        if target.apply_failures >= policy.max_attempts {
            target.failed = Some(format!(
                "{failure}; gave up after {} failed attempt(s) (retryPolicy.maxAttempts); \
                 a new version, a config change or `vergence up` retries",
                target.apply_failures
            ));
            target.retry_at = None;
        } else {
            target.retry_at = Some(after(now, policy.backoff(target.apply_failures)));
        }
    }

    fn absorb_fetch(
        &mut self,
        spec: &CompiledInstance,
        flight: &InFlightJob,
        result: &JobResult,
        stale: bool,
    ) {
        let Some(fetch) = &spec.fetch else { return };
        let (verdict, summary) = fetch::interpret(fetch.mode, result, &flight.version);
        let previous = self.state.last_fetch.as_ref().map(|o| o.verdict);
        self.state.last_fetch = Some(FetchObservation {
            at: self.now,
            seq: flight.seq,
            version: flight.version.clone(),
            verdict,
            summary: summary.clone(),
        });
        if stale {
            return;
        }
        let target = self.target();
        if verdict == FetchVerdict::Error {
            target.fetch_failures += 1;
        } else {
            target.fetch_failures = 0;
        }
        let rollout_failed = verdict == FetchVerdict::Failed && target.applied_seq.is_some();
        // Steady-state checks that see nothing new would flood the audit
        // trail; record fetches that change the picture or fail.
        if verdict == FetchVerdict::Error || previous != Some(verdict) {
            self.job_finished_event(flight, result, format!("fetch: {summary}"));
        }
        if rollout_failed {
            self.count_failure(
                spec,
                format!("the rollout of {} failed: {summary}", flight.version),
            );
        }
    }

    fn evaluate(&mut self, spec: &CompiledInstance) {
        let Some(target) = self.state.target.clone() else {
            return;
        };
        if let Some(failed) = &target.failed {
            self.state.checks_requested = false;
            self.set_status(Status::Failed, failed.clone(), None);
            return;
        }
        match &spec.fetch {
            None => {
                self.state.checks_requested = false;
                if self.state.current_version.as_deref() == Some(spec.version.as_str()) {
                    self.converged(spec);
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
            FetchVerdict::Converged => fetch.steady_state_poll_interval,
            FetchVerdict::Error => spec.apply.retry_policy.backoff(target.fetch_failures),
            _ => fetch.poll_interval,
        };
        let due = after(observation.at, interval);
        if self.now >= due {
            self.dispatch_fetch(spec, fetch, target.applied_seq.is_some());
            return;
        }
        self.check_at(due);
        let grace_end = target
            .apply_started_at
            .map(|started| after(started, spec.convergence_grace_period));
        let grace_over = grace_end.is_some_and(|end| self.now >= end);
        match observation.verdict {
            FetchVerdict::Converged => self.converged(spec),
            FetchVerdict::InProgress | FetchVerdict::NeedsApply
                if target.applied_seq.is_some()
                    || observation.verdict == FetchVerdict::InProgress =>
            {
                if grace_over && target.applied_seq.is_some() {
                    self.count_failure(
                        spec,
                        format!(
                            "{} did not converge within the convergence grace period ({}) of its apply: {}",
                            spec.version,
                            human(spec.convergence_grace_period),
                            observation.summary
                        ),
                    );
                    return self.evaluate_after_failure(spec);
                }
                let until = grace_end
                    .map(|end| format!("; waiting until {}", moment(end)))
                    .unwrap_or_default();
                if let Some(end) = grace_end {
                    self.check_at(end);
                }
                self.set_status(
                    Status::Verifying,
                    format!("{}{until}", observation.summary),
                    None,
                );
            }
            FetchVerdict::NeedsApply | FetchVerdict::Failed | FetchVerdict::InProgress => {
                let drift = self.state.current_version.as_deref() == Some(spec.version.as_str());
                self.want_apply(spec, target, Some((drift, observation.summary.clone())));
            }
            FetchVerdict::Error => {
                let max = spec.apply.retry_policy.max_attempts;
                let message = format!("{}; fetching again at {}", observation.summary, moment(due));
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
        if let Some(seen) = &drift {
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
                return;
            }
        }
        if let Gate::Closed {
            status,
            reason,
            wait,
            recheck_at,
        } = gates::evaluate(spec, self.facts)
        {
            let reason = match &drift {
                Some(seen) => format!("drifted ({seen}); {reason}"),
                None => reason,
            };
            self.set_status(status, reason, Some(wait));
            if let Some(at) = recheck_at {
                self.check_at(at);
            }
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

    fn dispatch_apply(&mut self, spec: &CompiledInstance, why: String) {
        let now = self.now;
        let target = self.target();
        target.apply_attempts += 1;
        target.apply_started_at = Some(now);
        target.applied_seq = None;
        target.retry_at = None;
        let attempt = target.apply_attempts;
        let job = self.new_job(spec, JobKind::Apply, &spec.apply.job, attempt);
        self.event(
            EventKind::JobStarted {
                job_id: job.id.clone(),
                job: JobKind::Apply,
                attempt,
            },
            format!("apply of {} started (attempt {attempt}){why}", spec.version),
        );
        self.set_status(
            Status::Applying,
            format!("applying {} (attempt {attempt}){why}", spec.version),
            None,
        );
        self.jobs.push(job);
    }

    fn dispatch_fetch(&mut self, spec: &CompiledInstance, fetch: &FetchSpec, verify: bool) {
        self.state.checks_requested = false;
        let attempt = self.state.target.as_ref().map_or(0, |t| t.fetch_failures) + 1;
        let job = self.new_job(spec, JobKind::Fetch, &fetch.job, attempt);
        if verify {
            self.set_status(
                Status::Verifying,
                format!("checking that {} converged after its apply", spec.version),
                None,
            );
        } else if self.state.status == Status::Pending {
            self.set_status(
                Status::Pending,
                format!("checking the runtime for {}", spec.version),
                None,
            );
        }
        self.jobs.push(job);
    }

    fn new_job(
        &mut self,
        spec: &CompiledInstance,
        kind: JobKind,
        job_spec: &JobSpec,
        attempt: u32,
    ) -> JobRecord {
        self.state.job_seq += 1;
        let seq = self.state.job_seq;
        // The time is part of the id so an instance removed and added again
        // never reuses the id of an old job.
        let digest = hash_fields([
            self.key.storage_id().as_bytes(),
            spec.version.as_bytes(),
            kind.as_str().as_bytes(),
            seq.to_string().as_bytes(),
            self.now.as_millisecond().to_string().as_bytes(),
        ]);
        let id = JobId(format!(
            "{}-{}",
            kind.as_str().to_lowercase(),
            &digest[..20]
        ));
        let deadline = after(after(self.now, job_spec.timeout), LOST_JOB_SLACK);
        self.state.in_flight = Some(InFlightJob {
            job_id: id.clone(),
            seq,
            kind,
            version: spec.version.clone(),
            attempt,
            dispatched_at: self.now,
            deadline,
        });
        self.check_at(deadline);
        JobRecord {
            id,
            instance: self.key.clone(),
            ids: spec.ids.clone(),
            kind,
            version: spec.version.clone(),
            attempt,
            spec: job_spec.clone(),
            workspace_root: spec.workspace_root.clone(),
            inputs: Vec::new(),
            created_at: self.now,
            deadline,
            state: JobState::Created,
        }
    }

    fn converged(&mut self, spec: &CompiledInstance) {
        let version = spec.version.as_str();
        let already = self.state.status == Status::Converged
            && self.state.current_version.as_deref() == Some(version);
        if !already {
            self.state.converged_at = Some(self.now);
            self.state.current_version = Some(version.to_owned());
            self.event(
                EventKind::Converged {
                    version: version.to_owned(),
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
        let moved = self.state.status != before.status
            || self.state.current_version != before.current_version;
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
