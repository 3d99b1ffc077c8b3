//! `decide()` checked state by state, with an injected clock and job results
//! fed in by hand.
//!
//! This module holds the fixture the engine's unit tests share ([`Sim`] and
//! the compiled instances it drives); its submodules check one area each.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::*;
use vergence_model::*;

mod adoption;
mod applying;
mod fetching;
mod promotion;

const T0: i64 = 1_800_000_000;

pub(super) fn n<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

pub(super) fn job_spec(cmd: &str) -> JobSpec {
    JobSpec {
        runner: RunnerSpec::Local,
        image: None,
        cmd: vec![cmd.to_owned()],
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        working_dir: String::new(),
        timeout: SignedDuration::from_mins(5),
        outputs: Vec::new(),
        builtin: None,
    }
}

/// A compiled instance of service `web` in `channel`, at `version`.
pub(super) fn spec(channel: &str, version: &str, fetch: Option<FetchMode>) -> CompiledInstance {
    let key = InstanceKey::new(n("shop"), n("web"), n(channel));
    CompiledInstance {
        ids: InstanceIds::of(&key),
        key,
        version: version.parse().unwrap(),
        runtime: n("rt"),
        workspace_root: None,
        apply: ApplySpec {
            job: job_spec("./apply").into(),
            retryable_exit_codes: vec![75],
            retry_policy: RetryPolicy {
                base_interval: SignedDuration::from_secs(10),
                max_interval: SignedDuration::from_mins(1),
                max_attempts: 3,
            },
        },
        fetch: fetch.map(|mode| FetchSpec {
            job: job_spec("./fetch").into(),
            mode,
            poll_interval: SignedDuration::from_secs(30),
            steady_state_poll_interval: SignedDuration::from_mins(5),
        }),
        get_info: None,
        convergence_grace_period: SignedDuration::from_mins(10),
        require_approval_before_apply: false,
        preconditions: Vec::new(),
        downstream: Vec::new(),
        drift_policy: DriftPolicy::Remediate,
        protections: Vec::new(),
        auto_rollback: true,
        windows: TimeWindows::default(),
        rollout: None,
    }
}

/// Drives one instance through decisions, applying each like `step` would.
pub(super) struct Sim {
    pub(super) record: InstanceRecord,
    pub(super) now: Timestamp,
    pub(super) upstream: BTreeMap<ReleaseChannelName, UpstreamView>,
    pub(super) approvals: Vec<Approval>,
    pub(super) alerts: BTreeMap<String, AlertState>,
    pub(super) unavailable_runners: Vec<(RunnerSpec, String)>,
    /// The plan the next finished job's fetch made (what the step reads
    /// from its `plan.json`).
    plan: Option<PlanContent>,
    last: Option<Decision>,
}

impl Sim {
    pub(super) fn new(spec: CompiledInstance) -> Self {
        let now = Timestamp::from_second(T0).unwrap();
        Self {
            record: InstanceRecord {
                key: spec.key.clone(),
                revision: 1,
                config_hash: "h".into(),
                desired: Desired::Ready(Box::new(spec)),
                state: InstanceState::new_pending("new"),
                next_check_at: Some(now),
                controls: InstanceControls::default(),
                updated_at: now,
                watchdog_at: None,
                quiet_checks: 0,
            },
            now,
            upstream: BTreeMap::new(),
            approvals: Vec::new(),
            alerts: BTreeMap::new(),
            unavailable_runners: Vec::new(),
            plan: None,
            last: None,
        }
    }

    pub(super) fn facts(&self) -> Facts {
        Facts {
            now: self.now,
            finished_job: None,
            upstream: self.upstream.clone(),
            approvals: self.approvals.clone(),
            alerts: self.alerts.clone(),
            unavailable_runners: self.unavailable_runners.clone(),
            plan: None,
        }
    }

    pub(super) fn apply(&mut self, decision: Decision) -> &Decision {
        self.record.state = decision.state.clone();
        self.record.next_check_at = decision.next_check_at;
        self.record.revision += 1;
        self.last = Some(decision);
        self.last.as_ref().unwrap()
    }

    /// A step with nothing new.
    pub(super) fn step(&mut self) -> &Decision {
        let decision = decide(&self.record, &self.facts());
        self.apply(decision)
    }

    /// The in-flight job finishes with `exit_code` and `stdout`.
    pub(super) fn finish(&mut self, exit_code: i32, stdout: &str) -> &Decision {
        self.finish_with(exit_code, stdout, Vec::new())
    }

    /// Like `finish`, with output files (a plan).
    pub(super) fn finish_with(
        &mut self,
        exit_code: i32,
        stdout: &str,
        outputs: Vec<Artifact>,
    ) -> &Decision {
        let result = JobResult {
            outcome: JobOutcome::Exited,
            exit_code: Some(exit_code),
            stdout: stdout.to_owned(),
            stderr_tail: if exit_code == 0 {
                String::new()
            } else {
                "boom\n".into()
            },
            duration_ms: 1200,
            outputs,
            finished_at: self.now,
        };
        self.end_with(result)
    }

    /// The engine stops the in-flight job, as it does when a decision asks
    /// for a superseded job to be stopped.
    pub(super) fn stop(&mut self) -> &Decision {
        let reason = self
            .record
            .state
            .in_flight
            .as_ref()
            .and_then(|f| f.stop.clone())
            .expect("a job to stop");
        self.end_with(JobResult::without_output(
            JobOutcome::Stopped { reason },
            self.now,
        ))
    }

    /// The in-flight job ends with `result`; the next decision sees it.
    pub(super) fn end_with(&mut self, result: JobResult) -> &Decision {
        let flight = self
            .record
            .state
            .in_flight
            .clone()
            .expect("a job in flight");
        let spec = self.record.desired.compiled().unwrap();
        let job = JobRecord {
            id: flight.job_id.clone(),
            instance: self.record.key.clone(),
            ids: spec.ids.clone(),
            kind: flight.kind,
            version: flight.version.clone(),
            attempt: flight.attempt,
            spec: job_spec("x").into(),
            workspace_root: None,
            inputs: Vec::new(),
            created_at: flight.dispatched_at,
            deadline: flight.deadline,
            state: JobState::Finished { result },
        };
        let mut facts = self.facts();
        facts.finished_job = Some(job);
        facts.plan = self.plan.take().map(Ok);
        let decision = decide(&self.record, &facts);
        self.apply(decision)
    }

    /// The next finished fetch made a plan of these changes.
    pub(super) fn plan_next(&mut self, content: PlanContent) {
        self.plan = Some(content);
    }

    pub(super) fn advance(&mut self, by: SignedDuration) {
        self.now = self.now.checked_add(by).unwrap();
    }

    pub(super) fn status(&self) -> Status {
        self.record.state.status
    }

    pub(super) fn set_desired(&mut self, spec: CompiledInstance) {
        self.record.desired = Desired::Ready(Box::new(spec));
    }

    /// The jobs the last decision started.
    pub(super) fn last_jobs(&self) -> &[JobRecord] {
        self.last.as_ref().map_or(&[], |d| d.jobs.as_slice())
    }

    pub(super) fn event_kinds(&self) -> Vec<&'static str> {
        self.last
            .as_ref()
            .unwrap()
            .events
            .iter()
            .map(|e| e.kind.name())
            .collect()
    }
}
