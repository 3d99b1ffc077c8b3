//! Starting jobs: an apply, a fetch, a protection check or getInfo become a
//! job record with a deterministic id, the instance's in-flight job and a
//! check at the job's deadline. A job whose runner cannot take it now is not
//! created: the instance waits BLOCKED for the runner instead.

use std::sync::Arc;

use jiff::SignedDuration;

use super::{Decider, after};
use vergence_model::hashing::FieldHasher;
use vergence_model::{
    CompiledInstance, EventKind, FetchSpec, InFlightJob, JobId, JobKind, JobRecord, JobSpec,
    JobState, ProtectionCheck, ProtectionKey, RunnerKind, Status, WaitCause,
};

/// Time past a job's own timeout before it is presumed lost: a runner that
/// died never reports, and the instance must not wait forever.
const LOST_JOB_SLACK: SignedDuration = SignedDuration::from_mins(2);

/// How soon an instance waiting for its runner (an agent that went quiet)
/// looks again.
const RUNNER_RECHECK: SignedDuration = SignedDuration::from_secs(30);

impl Decider<'_> {
    /// Whether a job on `job`'s runner can start now; when it cannot, the
    /// instance waits BLOCKED with the runner's reason and looks again soon,
    /// without counting an attempt.
    fn runner_ready(&mut self, job: &JobSpec) -> bool {
        let Some(reason) = self.facts.unavailable(&job.runner) else {
            return true;
        };
        let until = after(self.now, RUNNER_RECHECK);
        let reason = format!("waiting for the {} runner: {reason}", job.runner.name());
        self.set_status(Status::Blocked, reason, Some(WaitCause::Time { until }));
        self.check_at(until);
        false
    }

    pub(super) fn dispatch_apply(&mut self, spec: &CompiledInstance, why: String) {
        if !self.runner_ready(&spec.apply.job) {
            return;
        }
        let (job_spec, traffic) = self.step_apply(spec);
        let share = traffic
            .map(|p| format!(" at {p}% of the traffic"))
            .unwrap_or_default();
        let now = self.now;
        let target = self.target();
        target.apply_attempts += 1;
        target.apply_started_at = Some(now);
        target.applied_seq = None;
        target.retry_at = None;
        let attempt = target.apply_attempts;
        let job = self.new_job(spec, JobKind::Apply, &job_spec, attempt);
        self.event(
            EventKind::JobStarted {
                job_id: job.id.clone(),
                job: JobKind::Apply,
                attempt,
            },
            format!(
                "apply of {}{share} started (attempt {attempt}){why}{}",
                spec.version,
                reproduce(&spec.apply.job)
            ),
        );
        self.set_status(
            Status::Applying,
            format!("applying {}{share} (attempt {attempt}){why}", spec.version),
            None,
        );
        self.start_job(job);
    }

    pub(super) fn dispatch_fetch(
        &mut self,
        spec: &CompiledInstance,
        fetch: &FetchSpec,
        verify: bool,
    ) {
        if !self.runner_ready(&fetch.job) {
            return;
        }
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
        self.start_job(job);
    }

    pub(super) fn dispatch_protection(&mut self, spec: &CompiledInstance, key: &ProtectionKey) {
        let Some(protection) = spec.protections.iter().find(|p| &p.key() == key) else {
            return;
        };
        let ProtectionCheck::Job { job } = &protection.check else {
            return;
        };
        if !self.runner_ready(job) {
            return;
        }
        let job = self.new_job(spec, JobKind::Protection, job, 1);
        if let Some(flight) = self.state.in_flight.as_mut() {
            flight.protection = Some(key.clone());
        }
        self.start_job(job);
    }

    /// Runs getInfo at its interval when nothing else is running; its
    /// outputs are for people and never change convergence.
    pub(super) fn get_info(&mut self, spec: &CompiledInstance) {
        let Some(info) = &spec.get_info else {
            return;
        };
        let due = self
            .state
            .info_at
            .map_or(self.now, |at| after(at, info.poll_interval));
        if self.now < due {
            self.check_at(due);
        } else if self.jobs.is_empty()
            && self.state.in_flight.is_none()
            && self.facts.unavailable(&info.job.runner).is_none()
        {
            let job = self.new_job(spec, JobKind::GetInfo, &info.job, 1);
            self.start_job(job);
        }
    }

    /// Records a job to start. A job record is large (about a kilobyte) and
    /// a decision starts one job, rarely more: room is made for exactly the
    /// ones started, not for the four a growing `Vec` begins with.
    fn start_job(&mut self, job: JobRecord) {
        self.jobs.reserve_exact(1);
        self.jobs.push(job);
    }

    pub(super) fn new_job(
        &mut self,
        spec: &CompiledInstance,
        kind: JobKind,
        job_spec: &Arc<JobSpec>,
        attempt: u32,
    ) -> JobRecord {
        self.state.job_seq += 1;
        let seq = self.state.job_seq;
        // The time is part of the id so an instance removed and added again
        // never reuses the id of an old job. The fields are those of
        // `hash_fields([storage_id, version, kind, seq, millisecond])`,
        // hashed without building their strings.
        let key = self.key;
        let mut digest = FieldHasher::default();
        digest.field(&[
            key.application.as_str().as_bytes(),
            b"/",
            key.service.as_str().as_bytes(),
            b"/",
            key.release_channel.as_str().as_bytes(),
        ]);
        digest.field(&[spec.version.as_str().as_bytes()]);
        digest.field(&[kind.as_str().as_bytes()]);
        digest.number(seq);
        digest.number(self.now.as_millisecond());
        // `<kind>-<20 hex digits>`, put together on the stack: the shared
        // text is the id's one allocation.
        let mut text = [0u8; 32];
        let digits = (kind.as_str().bytes().map(|b| b.to_ascii_lowercase()))
            .chain([b'-'])
            .chain(digest.hex().take(20));
        let mut len = 0;
        for (slot, digit) in text.iter_mut().zip(digits) {
            *slot = digit;
            len += 1;
        }
        let id = JobId(Arc::from(&*String::from_utf8_lossy(&text[..len])));
        let deadline = after(after(self.now, job_spec.timeout), LOST_JOB_SLACK);
        self.state.in_flight = Some(InFlightJob {
            job_id: id.clone(),
            seq,
            kind,
            version: spec.version.clone(),
            attempt,
            dispatched_at: self.now,
            deadline,
            protection: None,
            poll_every: poll_every(job_spec.runner.kind()),
            stop: None,
        });
        if let Some(every) = poll_every(job_spec.runner.kind()) {
            self.check_at(after(self.now, every));
        }
        // The apply of a version gets the plan its fetch produced.
        let inputs = match (&self.state.plan, kind) {
            (Some(plan), JobKind::Apply) if plan.version == spec.version => plan.artifacts.clone(),
            _ => Vec::new(),
        };
        self.check_at(deadline);
        JobRecord {
            id,
            instance: self.key.clone(),
            ids: Arc::clone(&spec.ids),
            kind,
            version: spec.version.clone(),
            attempt,
            spec: Arc::clone(job_spec),
            workspace_root: spec.workspace_root.clone(),
            inputs,
            created_at: self.now,
            deadline,
            state: JobState::Created,
        }
    }
}

/// How often a running job's runner is asked for its result: the safety net
/// under the reports that normally bring it (a lost platform event or agent
/// report then only delays a result). Local jobs report from this process.
fn poll_every(runner: RunnerKind) -> Option<SignedDuration> {
    match runner {
        RunnerKind::Local => None,
        // Task state change events usually arrive within seconds.
        RunnerKind::Ecs | RunnerKind::Kubernetes => Some(SignedDuration::from_secs(60)),
        // Cloud Run sends nothing: its executions are only ever polled.
        RunnerKind::CloudRun => Some(SignedDuration::from_secs(15)),
        // An asynchronous invocation reports nothing either: its result is
        // the wrapper's upload, looked for in the artifact store (one GET).
        RunnerKind::Lambda => Some(SignedDuration::from_secs(10)),
    }
}

/// For a first-class runtime's apply, the command that does the same by
/// hand, so an operator can reproduce it from the event.
fn reproduce(job: &JobSpec) -> String {
    match &job.builtin {
        Some(vergence_model::BuiltinJob::KubernetesApply(objects)) => {
            format!("; the same by hand: {}", objects.kubectl_apply())
        }
        Some(vergence_model::BuiltinJob::EcsApply(service)) => {
            format!("; the same by hand: {}", service.aws_cli())
        }
        Some(vergence_model::BuiltinJob::CloudRunApply(service)) => {
            format!("; the same by hand: {}", service.gcloud())
        }
        _ => String::new(),
    }
}
