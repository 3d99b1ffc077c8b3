//! Applying a version: one apply per desired version, retries with backoff,
//! the grace period, lost, superseded and polled jobs, and runners that
//! cannot take jobs.

use jiff::SignedDuration;

use super::{Sim, spec};
use crate::*;
use vergence_model::*;

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
fn a_lost_apply_is_applied_again_at_once_and_counts_only_when_lost_again_and_again() {
    let mut sim = Sim::new(spec("staging", "v1", None));
    sim.step();
    let deadline = sim.record.state.in_flight.as_ref().unwrap().deadline;
    assert_eq!(sim.record.next_check_at, Some(deadline));
    let failures = |sim: &Sim| sim.record.state.target.as_ref().unwrap().apply_failures;
    // Its process died, not the deploy: applied again, nothing counted.
    for attempt in 2..=3 {
        sim.now = sim.record.state.in_flight.as_ref().unwrap().deadline;
        let d = sim.step();
        assert_eq!(d.jobs[0].attempt, attempt, "applied again at once");
        assert_eq!(failures(&sim), 0, "{}", sim.record.state.reason);
    }
    // Lost a third time in a row: that one counts, with its backoff.
    sim.now = sim.record.state.in_flight.as_ref().unwrap().deadline;
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(failures(&sim), 1);
    assert!(
        sim.record.state.reason.contains("lost"),
        "{}",
        sim.record.state.reason
    );
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].attempt, 4);
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
    std::sync::Arc::make_mut(&mut ecs.apply.job).runner =
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
