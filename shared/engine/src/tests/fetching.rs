//! Fetching: exit-code and structured fetches, fetch errors, requested
//! checks, and drift detected, remediated or only recorded.

use jiff::SignedDuration;

use super::{Sim, spec};
use crate::*;
use vergence_model::*;

const SEED_JSON: &str = r#"{"objects": [{"name": "my-service", "objectType": "my-type",
  "versions": [{"version": "svc-1", "active": true}], "status": "SUCCEEDED"}]}"#;

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
