//! `decide()` checked state by state, with an injected clock and job results
//! fed in by hand.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::*;
use vergence_model::*;

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
            job: job_spec("./apply"),
            retryable_exit_codes: vec![75],
            retry_policy: RetryPolicy {
                base_interval: SignedDuration::from_secs(10),
                max_interval: SignedDuration::from_mins(1),
                max_attempts: 3,
            },
        },
        fetch: fetch.map(|mode| FetchSpec {
            job: job_spec("./fetch"),
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
            spec: job_spec("x"),
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

const SEED_JSON: &str = r#"{"objects": [{"name": "my-service", "objectType": "my-type",
  "versions": [{"version": "svc-1", "active": true}], "status": "SUCCEEDED"}]}"#;

#[test]
fn apply_only_applies_once_per_desired_version() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    let d = sim.step();
    assert_eq!(d.jobs.len(), 1);
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(d.jobs[0].state, JobState::Created);
    assert_eq!(sim.status(), Status::Applying);
    assert_eq!(
        sim.event_kinds(),
        vec!["desiredVersionChanged", "jobStarted", "statusChanged"]
    );

    // Nothing new while the job runs: no write at all.
    let record = sim.record.clone();
    assert!(decide(&record, &sim.facts()).is_noop(&record));

    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
    assert_eq!(sim.record.state.current_version.as_deref(), Some("v1"));
    assert_eq!(sim.record.state.converged_at, Some(sim.now));
    assert_eq!(
        sim.event_kinds(),
        vec!["jobFinished", "converged", "statusChanged"]
    );
    assert_eq!(
        sim.record.next_check_at, None,
        "apply-only has nothing to poll"
    );

    // Asked to look again (a rerun of `vergence up`): still nothing to apply.
    sim.record.state.checks_requested = true;
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Converged);

    sim.set_desired(spec("staging", "v2", None));
    let d = sim.step();
    assert_eq!(d.jobs.len(), 1);
    assert_eq!(d.jobs[0].version, "v2");
    assert_eq!(sim.status(), Status::Applying);
}

#[test]
fn failed_applies_retry_with_backoff_then_fail_the_version() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    sim.step();
    sim.finish(1, "");
    assert_eq!(sim.status(), Status::Applying);
    assert!(
        sim.record.state.reason.contains("exited with 1: boom"),
        "{}",
        sim.record.state.reason
    );
    assert!(
        sim.record.state.reason.contains("retrying at"),
        "{}",
        sim.record.state.reason
    );
    let retry_at = sim.record.next_check_at.unwrap();
    assert_eq!(
        retry_at,
        sim.now.checked_add(SignedDuration::from_secs(10)).unwrap()
    );

    // Too early: nothing happens.
    sim.advance(SignedDuration::from_secs(5));
    assert!(sim.step().jobs.is_empty());

    sim.advance(SignedDuration::from_secs(5));
    let d = sim.step();
    assert_eq!(d.jobs[0].attempt, 2);
    sim.finish(1, "");
    assert_eq!(
        sim.record.next_check_at.unwrap(),
        sim.now.checked_add(SignedDuration::from_secs(20)).unwrap(),
        "backoff doubles"
    );
    sim.advance(SignedDuration::from_secs(20));
    sim.step();
    sim.finish(1, "");
    assert_eq!(sim.status(), Status::Failed);
    assert!(
        sim.record
            .state
            .reason
            .contains("gave up after 3 failed attempt(s)"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(sim.record.next_check_at, None);

    // Failed stays failed, without new jobs, until someone retries.
    sim.advance(SignedDuration::from_hours(1));
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::Failed);
}

#[test]
fn retryable_exit_codes_never_fail_the_version() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    sim.step();
    for round in 0..6 {
        sim.finish(75, "");
        assert_eq!(sim.status(), Status::Applying, "round {round}");
        assert!(
            sim.record.state.reason.contains("retryable"),
            "{}",
            sim.record.state.reason
        );
        let retry_at = sim.record.next_check_at.unwrap();
        sim.now = retry_at;
        assert_eq!(sim.step().jobs.len(), 1);
    }
    assert_eq!(sim.record.state.target.as_ref().unwrap().apply_failures, 0);
}

#[test]
fn exit_code_fetch_skips_apply_when_converged_and_heals_drift() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Fetch);
    assert_eq!(sim.status(), Status::Pending);
    assert!(sim.record.state.reason.contains("checking the runtime"));

    let d = sim.finish(0, "");
    assert!(d.jobs.is_empty(), "no apply when fetch says nothing to do");
    assert_eq!(sim.status(), Status::Converged);
    let steady = sim.now.checked_add(SignedDuration::from_mins(5)).unwrap();
    assert_eq!(sim.record.next_check_at, Some(steady));

    // Steady-state poll finds drift.
    sim.now = steady;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    assert_eq!(
        sim.status(),
        Status::Converged,
        "a routine check does not change the status"
    );
    let d = sim.finish(2, "file differs");
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(sim.status(), Status::Applying);
    assert!(
        sim.record
            .state
            .reason
            .contains("to remediate drift: fetch exited 2 (changes needed): file differs"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(
        sim.event_kinds(),
        vec![
            "jobFinished",
            "driftDetected",
            "jobStarted",
            "statusChanged"
        ]
    );

    // Apply, then a verification fetch.
    let d = sim.finish(0, "");
    assert_eq!(d.jobs[0].kind, JobKind::Fetch);
    assert_eq!(sim.status(), Status::Verifying);
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
}

#[test]
fn exit_code_fetch_errors_are_retried_and_never_treated_as_drift() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.step();
    let d = sim.finish(3, "");
    assert!(
        d.jobs.is_empty(),
        "an error is not drift: nothing is applied"
    );
    assert_eq!(sim.status(), Status::Pending);
    assert!(
        sim.record
            .state
            .reason
            .contains("fetch exited with 3: boom"),
        "{}",
        sim.record.state.reason
    );
    let retry = sim.record.next_check_at.unwrap();
    assert_eq!(
        retry,
        sim.now.checked_add(SignedDuration::from_secs(10)).unwrap()
    );
    for _ in 0..2 {
        sim.now = sim.record.next_check_at.unwrap();
        assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
        sim.finish(3, "");
    }
    assert_eq!(sim.status(), Status::Failed);
    assert!(
        sim.record
            .state
            .reason
            .starts_with("fetch failed 3 times in a row"),
        "{}",
        sim.record.state.reason
    );
    // It keeps looking, and recovers when the fetch works again.
    sim.now = sim.record.next_check_at.unwrap();
    sim.step();
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
}

#[test]
fn structured_fetch_follows_the_seed_output() {
    let mut sim = Sim::new(spec("staging", "svc-1", Some(FetchMode::Structured)));
    sim.step();
    let d = sim.finish(0, SEED_JSON);
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Converged);

    sim.set_desired(spec("staging", "svc-2", Some(FetchMode::Structured)));
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    let d = sim.finish(0, SEED_JSON);
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert!(
        sim.record
            .state
            .reason
            .contains("my-service runs svc-1 (desired svc-2)"),
        "{}",
        sim.record.state.reason
    );
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Verifying);
    let rolling = SEED_JSON
        .replace("svc-1", "svc-2")
        .replace("SUCCEEDED", "PENDING");
    sim.finish(0, &rolling);
    assert_eq!(sim.status(), Status::Verifying);
    assert!(sim.record.state.reason.contains("rolling out svc-2"));
    sim.now = sim.record.next_check_at.unwrap();
    sim.step();
    sim.finish(0, &SEED_JSON.replace("svc-1", "svc-2"));
    assert_eq!(sim.status(), Status::Converged);
    assert_eq!(sim.record.state.current_version.as_deref(), Some("svc-2"));
}

#[test]
fn malformed_structured_output_is_a_clear_fetch_error() {
    let mut sim = Sim::new(spec("staging", "svc-1", Some(FetchMode::Structured)));
    sim.step();
    let d = sim.finish(0, "all good!");
    assert!(d.jobs.is_empty());
    assert!(
        sim.record
            .state
            .reason
            .starts_with("fetch printed malformed output"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn not_converged_within_the_grace_period_applies_again() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.step();
    sim.finish(2, "");
    sim.finish(0, ""); // apply ok
    sim.finish(2, ""); // verification: still different
    assert_eq!(sim.status(), Status::Verifying);
    assert!(
        sim.record.state.reason.contains("waiting until"),
        "{}",
        sim.record.state.reason
    );
    // Polls at pollInterval without applying.
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    sim.finish(2, "");
    sim.advance(SignedDuration::from_mins(10));
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    sim.finish(2, "");
    assert_eq!(sim.status(), Status::Applying);
    assert!(
        sim.record
            .state
            .reason
            .contains("did not converge within the convergence grace period (10m)"),
        "{}",
        sim.record.state.reason
    );
    sim.now = sim.record.next_check_at.unwrap();
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(d.jobs[0].attempt, 2);
}

/// A rollout that never finishes (a revision that never gets Ready) fails
/// its attempts one grace period after another, then the version.
#[test]
fn a_rollout_in_progress_forever_fails_each_attempt_then_the_version() {
    let mut sim = Sim::new(spec("staging", "svc-1", Some(FetchMode::Structured)));
    let rolling = r#"{"objects":[{"name":"a","versions":[{"version":"svc-1","active":true}],"status":"PENDING"}]}"#;
    sim.step();
    sim.finish(0, r#"{"objects":[]}"#);
    for attempt in 1..=3 {
        let flight = sim.record.state.in_flight.clone().expect("a job");
        assert_eq!((flight.kind, flight.attempt), (JobKind::Apply, attempt));
        sim.finish(0, "");
        sim.finish(0, rolling);
        assert_eq!(sim.status(), Status::Verifying);
        // Past the grace period, still in progress: a failed attempt.
        sim.advance(SignedDuration::from_mins(11));
        assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
        sim.finish(0, rolling);
        if attempt < 3 {
            assert_eq!(
                sim.status(),
                Status::Applying,
                "{}",
                sim.record.state.reason
            );
            sim.now = sim.record.next_check_at.unwrap();
            let d = sim.step();
            assert_eq!(
                d.jobs.len(),
                1,
                "retried, not left VERIFYING: {}",
                sim.record.state.reason
            );
        }
    }
    assert_eq!(sim.status(), Status::Failed, "{}", sim.record.state.reason);
    assert!(
        sim.record
            .state
            .reason
            .contains("gave up after 3 failed attempt(s)"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn a_lost_job_counts_as_a_failed_attempt_after_its_deadline() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    sim.step();
    let deadline = sim.record.state.in_flight.as_ref().unwrap().deadline;
    assert_eq!(sim.record.next_check_at, Some(deadline));
    sim.now = deadline;
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert!(
        sim.record.state.reason.contains("lost"),
        "{}",
        sim.record.state.reason
    );
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].attempt, 2);
}

#[test]
fn prod_waits_for_staging_to_converge_on_the_same_version_then_for_approval() {
    let mut prod_spec = spec("prod", "v2", None);
    prod_spec.preconditions = vec![
        Precondition::ReleaseChannelStable {
            release_channel: n("staging"),
            duration: Some(SignedDuration::from_mins(10)),
        },
        Precondition::ManualApproval {
            name: "prod-gate".into(),
        },
    ];
    let mut sim = Sim::new(prod_spec);
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::WaitingPreconditions);
    assert_eq!(
        sim.record.state.reason,
        "waiting for release channel staging, where this service has no instance yet"
    );

    let mut staging = UpstreamView {
        status: Status::Applying,
        reason: "applying v2 (attempt 1)".into(),
        current_version: Some("v1".parse().unwrap()),
        converged_at: None,
        failed_version: None,
        checks_pending: false,
    };
    sim.upstream.insert(n("staging"), staging.clone());
    sim.step();
    assert_eq!(
        sim.record.state.reason,
        "waiting for staging to converge on v2 (staging is APPLYING: applying v2 (attempt 1))"
    );
    assert_eq!(
        sim.record.state.wait,
        Some(WaitCause::Upstream {
            release_channel: n("staging")
        })
    );

    staging.status = Status::Converged;
    staging.current_version = Some("v2".parse().unwrap());
    staging.converged_at = Some(sim.now);
    sim.upstream.insert(n("staging"), staging.clone());
    sim.advance(SignedDuration::from_mins(4));
    sim.step();
    assert_eq!(sim.record.state.reason, "staging stable for 4m of 10m");
    let soak_end = staging
        .converged_at
        .unwrap()
        .checked_add(SignedDuration::from_mins(10))
        .unwrap();
    assert_eq!(sim.record.next_check_at, Some(soak_end));

    sim.now = soak_end;
    sim.step();
    assert_eq!(sim.status(), Status::WaitingApproval);
    assert!(
        sim.record
            .state
            .reason
            .starts_with("waiting for manual approval prod-gate of v2 (vergence approve")
    );

    let (key, now) = (sim.record.key.clone(), sim.now);
    let approval = |version: &str| Approval {
        instance: key.clone(),
        version: version.parse().unwrap(),
        plan_sha256: None,
        actor: "cli:alice".into(),
        at: now,
    };
    let stale = approval("v1");
    sim.approvals.push(stale);
    sim.step();
    assert_eq!(
        sim.status(),
        Status::WaitingApproval,
        "an approval of another version does not count"
    );
    let fresh = approval("v2");
    sim.approvals.push(fresh);
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
}

#[test]
fn a_version_that_failed_upstream_is_not_promoted() {
    let mut prod_spec = spec("prod", "v2", None);
    prod_spec.preconditions = vec![Precondition::ReleaseChannelStable {
        release_channel: n("staging"),
        duration: None,
    }];
    let mut sim = Sim::new(prod_spec);
    sim.upstream.insert(
        n("staging"),
        UpstreamView {
            status: Status::Failed,
            reason: "apply of v2 exited with 1".into(),
            current_version: Some("v1".parse().unwrap()),
            converged_at: None,
            failed_version: Some("v2".parse().unwrap()),
            checks_pending: false,
        },
    );
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert!(
        sim.record
            .state
            .reason
            .starts_with("v2 failed in staging; it will not be promoted"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn converging_wakes_the_downstream_channels() {
    let mut staging = spec("staging", "v1", None);
    staging.downstream = vec![n("prod")];
    let mut sim = Sim::new(staging);
    assert_eq!(
        sim.step().wake,
        vec![n::<ReleaseChannelName>("prod")],
        "status changed"
    );
    let d = sim.finish(0, "");
    assert_eq!(d.wake, vec![n::<ReleaseChannelName>("prod")]);
}

#[test]
fn unresolved_instances_wait_for_a_release() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    sim.record.desired = Desired::Unresolved {
        reason: "waiting for a release: service parameter 'image' has no default".into(),
    };
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Pending);
    assert_eq!(sim.record.state.wait, Some(WaitCause::Release));
}

#[test]
fn a_requested_check_fetches_even_when_the_last_observation_is_fresh() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.step();
    sim.finish(0, "");
    assert!(sim.step().jobs.is_empty());
    sim.record.state.checks_requested = true;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Fetch);
    assert!(!sim.record.state.checks_requested);
}

#[test]
fn detect_only_drift_is_recorded_and_nothing_is_applied() {
    let mut s = spec("staging", "v1", Some(FetchMode::ExitCode));
    s.drift_policy = DriftPolicy::DetectOnly;
    let mut sim = Sim::new(s);
    sim.step();
    sim.finish(0, "");
    sim.record.state.checks_requested = true;
    sim.step();
    let d = sim.finish(2, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Drifted);
    assert!(sim.event_kinds().contains(&"driftDetected"));
}

#[test]
fn job_ids_are_unique_per_attempt() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    let first = sim.step().jobs[0].id.clone();
    sim.finish(1, "");
    sim.now = sim.record.next_check_at.unwrap();
    let second = sim.step().jobs[0].id.clone();
    assert_ne!(first, second);
    assert!(first.as_str().starts_with("apply-"));
}

#[test]
fn drift_after_a_verified_apply_is_remediated_not_mistaken_for_verification() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.step();
    assert_eq!(sim.finish(2, "missing").jobs[0].kind, JobKind::Apply);
    assert_eq!(sim.finish(0, "").jobs[0].kind, JobKind::Fetch);
    assert_eq!(sim.status(), Status::Verifying);
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);

    // A requested check (a rerun of `vergence up`) is routine, not verification.
    sim.record.state.checks_requested = true;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    assert_eq!(sim.status(), Status::Converged);
    let d = sim.finish(2, "file differs");
    assert_eq!(d.jobs[0].kind, JobKind::Apply, "drift is applied at once");
    assert!(sim.event_kinds().contains(&"driftDetected"));
    assert!(sim.record.state.reason.contains("to remediate drift"));
    assert_eq!(sim.finish(0, "").jobs[0].kind, JobKind::Fetch);
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
    assert_eq!(
        settled(&sim.record),
        Settled::Converged,
        "`vergence up` can stop here"
    );
}

#[test]
fn a_lost_apply_is_checked_with_a_fetch_before_it_is_applied_again() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.step();
    assert_eq!(sim.finish(2, "").jobs[0].kind, JobKind::Apply);
    // The worker ran the apply and died before recording its result.
    sim.now = sim.record.state.in_flight.as_ref().unwrap().deadline;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Fetch, "look before applying again");
    let d = sim.finish(0, "");
    assert!(d.jobs.is_empty(), "it had applied: no second apply");
    assert_eq!(sim.status(), Status::Converged);
}

#[test]
fn an_unavailable_runner_holds_the_instance_blocked_without_counting_attempts() {
    let mut sim = Sim::new(spec("staging", "v1", Some(FetchMode::ExitCode)));
    sim.unavailable_runners = vec![(
        RunnerSpec::Local,
        "agent prod-eu last seen 6m ago".to_owned(),
    )];
    let decision = sim.step().clone();
    assert!(decision.jobs.is_empty(), "nothing starts");
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record
            .state
            .reason
            .contains("waiting for the local runner: agent prod-eu last seen 6m ago"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(
        decision.next_check_at,
        Some(sim.now + SignedDuration::from_secs(30)),
        "looks again soon"
    );
    assert!(matches!(settled(&sim.record), Settled::Waiting));

    sim.unavailable_runners.clear();
    sim.advance(SignedDuration::from_secs(30));
    let decision = sim.step().clone();
    assert_eq!(
        decision.jobs.len(),
        1,
        "the fetch starts once the runner is back"
    );
    assert_eq!(decision.jobs[0].kind, JobKind::Fetch);
    assert_eq!(
        decision.jobs[0].attempt, 1,
        "no attempt was counted while blocked"
    );
}

#[test]
fn a_job_of_a_superseded_version_is_stopped_before_the_new_version_starts() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    let first = sim.step().clone();
    assert_eq!(first.jobs[0].kind, JobKind::Apply);
    sim.set_desired(spec("staging", "v2", None));
    let asked = sim.step().clone();
    assert!(asked.jobs.is_empty(), "nothing starts beside the old apply");
    let flight = sim.record.state.in_flight.clone().unwrap();
    assert_eq!(flight.version, "v1");
    assert_eq!(flight.stop.as_deref(), Some("v2 superseded it"));
    assert!(sim.event_kinds().contains(&"jobStopRequested"));
    let after_stop = sim.stop().clone();
    assert_eq!(after_stop.jobs.len(), 1, "the apply of v2 starts");
    assert_eq!(after_stop.jobs[0].version, "v2");
    let stopped = sim
        .record
        .state
        .last_jobs
        .iter()
        .find(|j| j.kind == JobKind::Apply)
        .unwrap();
    assert!(matches!(stopped.outcome, JobOutcome::Stopped { .. }));
    assert_eq!(
        sim.record.state.target.as_ref().unwrap().apply_failures,
        0,
        "a stopped job is no failure of the new version"
    );
}

#[test]
fn jobs_on_runners_whose_reports_can_be_lost_are_polled_while_they_run() {
    let mut ecs = spec("staging", "v1", None);
    ecs.apply.job.runner =
        serde_json::from_str(r#"{"kind":"ecs","cluster":"jobs","subnets":["subnet-1"]}"#).unwrap();
    let mut sim = Sim::new(ecs);
    let started = sim.step().clone();
    assert_eq!(started.jobs.len(), 1);
    assert_eq!(
        started.next_check_at,
        Some(sim.now + SignedDuration::from_secs(60)),
        "the safety net under the task-stopped event"
    );
    let mut local = Sim::new(spec("staging", "v1", None));
    let started = local.step().clone();
    assert_eq!(
        started.next_check_at,
        Some(started.jobs[0].deadline),
        "local jobs report from the same process"
    );
}

#[test]
fn an_apply_finishing_after_a_newer_release_counts_for_its_own_version_only() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
    // v2 is pushed while v1's apply runs, and the apply's result is seen
    // before any step saw v2: its success is v1's, not v2's.
    sim.set_desired(spec("staging", "v2", None));
    let after = sim.finish(0, "").clone();
    assert_eq!(sim.record.state.current_version.clone().unwrap(), "v1");
    assert_ne!(
        after.state.status,
        Status::Converged,
        "{}",
        after.state.reason
    );
    assert_eq!(after.jobs.len(), 1, "the apply of v2 starts");
    assert_eq!(after.jobs[0].kind, JobKind::Apply);
    assert_eq!(after.jobs[0].version, "v2");
}
