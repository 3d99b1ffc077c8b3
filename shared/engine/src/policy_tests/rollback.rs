//! Rolling back: a failed post-deployment check or an apply failing past
//! its retry policy brings the previous good version back, as does a
//! manual rollback request.

use jiff::SignedDuration;

use super::job_protection;
use crate::tests::{Sim, spec};
use vergence_model::*;

/// Converges `v1` with a 5-minute post-deployment check that passes, so v1
/// is the version to roll back to.
fn converged_v1_with_checks() -> Sim {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "smoke",
        Lifecycle::PostDeployment {
            delay: SignedDuration::from_secs(30),
            duration: SignedDuration::from_mins(5),
        },
    )];
    let mut sim = Sim::new(s);
    sim.step();
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
    assert!(sim.record.state.reason.contains("post-deployment checks"));
    assert_eq!(crate::settled(&sim.record), crate::Settled::Progressing);
    // Checks start after the delay and run each minute until 5m have passed.
    let start = sim.record.next_check_at.unwrap();
    assert_eq!(
        start,
        sim.now.checked_add(SignedDuration::from_secs(30)).unwrap()
    );
    let mut checks = 0;
    while sim
        .record
        .state
        .post_deployment
        .as_ref()
        .unwrap()
        .passed_at
        .is_none()
    {
        sim.now = sim.record.next_check_at.unwrap();
        let d = sim.step();
        if d.jobs
            .first()
            .is_some_and(|j| j.kind == JobKind::Protection)
        {
            checks += 1;
            sim.finish(0, "");
        }
        assert!(checks < 20, "post-deployment checks never finished");
    }
    assert_eq!(checks, 6, "at 0, 1, 2, 3, 4 and 5 minutes");
    assert!(sim.event_kinds().contains(&"checksPassed"));
    assert_eq!(sim.record.state.last_good.as_ref().unwrap().version, "v1");
    assert_eq!(crate::settled(&sim.record), crate::Settled::Converged);
    sim
}

#[test]
fn a_failed_post_deployment_check_rolls_back_to_the_previous_version() {
    let mut sim = converged_v1_with_checks();
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    v2.apply.job = crate::tests::job_spec("./apply-v2").into();
    sim.set_desired(v2);
    let d = sim.step();
    assert_eq!(d.jobs[0].version, "v2");
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Protection);
    let d = sim.finish(1, "").clone();
    assert_eq!(sim.status(), Status::RollingBack);
    assert!(d.events.iter().any(|e| e.kind.name() == "rollbackStarted"));
    let job = &d.jobs[0];
    assert_eq!((job.kind, job.version.as_str()), (JobKind::Apply, "v1"));
    assert_eq!(
        job.spec.cmd,
        vec!["./apply".to_owned()],
        "the old version's own apply"
    );

    sim.finish(0, "");
    assert_eq!(sim.status(), Status::RolledBack);
    assert_eq!(sim.record.state.current_version.as_deref(), Some("v1"));
    assert!(
        sim.record.state.reason.contains("rolled back to v1"),
        "{}",
        sim.record.state.reason
    );
    assert!(sim.event_kinds().contains(&"rolledBack"));
    // Downstream sees v2 as failed here: it is not promoted.
    let view = crate::UpstreamView::of(&sim.record);
    assert_eq!(view.failed_version.as_deref(), Some("v2"));
    // Nothing more happens until a new version comes.
    sim.advance(SignedDuration::from_hours(1));
    assert!(sim.step().jobs.is_empty());
    assert_eq!(crate::settled(&sim.record), crate::Settled::Waiting);

    let mut v3 = sim.record.desired.compiled().unwrap().clone();
    v3.version = "v3".parse().unwrap();
    sim.set_desired(v3);
    let d = sim.step();
    assert_eq!(
        d.jobs[0].version, "v3",
        "a new version moves on from the rollback"
    );
}

#[test]
fn apply_failing_past_its_retry_policy_rolls_back_unless_disabled() {
    for auto in [true, false] {
        let mut sim = converged_v1_with_checks();
        let mut v2 = sim.record.desired.compiled().unwrap().clone();
        v2.version = "v2".parse().unwrap();
        v2.auto_rollback = auto;
        sim.set_desired(v2);
        sim.step();
        for _ in 0..3 {
            sim.finish(1, "");
            if sim.record.state.in_flight.is_none() && sim.status() != Status::RollingBack {
                sim.now = sim.record.next_check_at.unwrap_or(sim.now);
                sim.step();
            }
        }
        if auto {
            assert_eq!(sim.status(), Status::RollingBack);
            assert_eq!(sim.record.state.in_flight.as_ref().unwrap().version, "v1");
        } else {
            assert_eq!(sim.status(), Status::Failed);
            assert!(sim.record.state.in_flight.is_none());
        }
    }
}

#[test]
fn a_manual_rollback_request_goes_back_to_the_last_good_version() {
    let mut sim = converged_v1_with_checks();
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    sim.set_desired(v2);
    sim.step();
    sim.finish(0, "");
    sim.record.state.rollback_request = Some(RollbackRequest {
        to: None,
        actor: "cli:bob".into(),
        at: sim.now,
    });
    let d = sim.step();
    assert_eq!(d.jobs[0].version, "v1");
    assert_eq!(sim.status(), Status::RollingBack);
    assert!(
        sim.record.state.reason.contains("cli:bob"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn a_failing_post_deployment_check_starts_no_other_check_beside_the_rollback() {
    let mut sim = converged_v1_with_checks();
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    let check = |name| {
        job_protection(
            name,
            Lifecycle::PostDeployment {
                delay: SignedDuration::ZERO,
                duration: SignedDuration::from_mins(10),
            },
        )
    };
    v2.protections = vec![check("first"), check("second")];
    sim.set_desired(v2);
    sim.step();
    // The apply converges v2 and starts the first check at once.
    let d = sim.finish(0, "").clone();
    assert_eq!(d.jobs[0].spec.cmd, vec!["./first".to_owned()]);
    let d = sim.finish(0, "").clone();
    assert_eq!(d.jobs[0].spec.cmd, vec!["./second".to_owned()]);
    // The second check takes two minutes and fails: by then the first one
    // is due again, but the version has failed and rolls back.
    sim.advance(SignedDuration::from_mins(2));
    let d = sim.finish(1, "").clone();
    assert_eq!(sim.status(), Status::RollingBack);
    let jobs: Vec<_> = d
        .jobs
        .iter()
        .map(|j| (j.kind, j.version.as_str()))
        .collect();
    assert_eq!(jobs, [(JobKind::Apply, "v1")], "only the rollback's apply");
}

/// v2 failed its post-deployment check in prod and rolled back to v1.
fn rolled_back_from_v2() -> Sim {
    let mut sim = converged_v1_with_checks();
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    v2.apply.job = crate::tests::job_spec("./apply-v2").into();
    sim.set_desired(v2);
    sim.step();
    sim.finish(0, "");
    sim.now = sim.record.next_check_at.unwrap();
    sim.step();
    sim.finish(1, "");
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::RolledBack);
    sim
}

#[test]
fn a_version_that_failed_is_held_through_drift_checks_and_config_pushes() {
    let mut sim = rolled_back_from_v2();
    assert!(
        sim.record
            .state
            .reason
            .contains("v2 is held here (no check or config push applies it again)"),
        "{}",
        sim.record.state.reason
    );
    // Drift found by a fetch is healed with the version rolled back to.
    sim.advance(SignedDuration::from_hours(2));
    assert!(sim.step().jobs.iter().all(|j| j.version == "v1"));
    // A config pushed under the same release (a new command) keeps v2 held.
    let mut pushed = sim.record.desired.compiled().unwrap().clone();
    pushed.version = "v2+cfg-0a1b2c".parse().unwrap();
    pushed.apply.job = crate::tests::job_spec("./apply-v2-fixed").into();
    sim.set_desired(pushed);
    let d = sim.step();
    assert!(d.jobs.iter().all(|j| j.version == "v1"), "{:?}", d.jobs);
    assert!(sim.record.state.rollback.is_some());
}

#[test]
fn a_version_that_failed_is_applied_again_when_asked_for_again() {
    let mut sim = rolled_back_from_v2();
    // A request older than the rollback (an approval given before v2
    // failed) asks for nothing.
    sim.record.state.retry_request = Some(RetryRequest {
        version: "v2".parse().unwrap(),
        actor: "ci".into(),
        at: sim.record.state.rollback.as_ref().unwrap().started_at - SignedDuration::from_secs(1),
    });
    assert!(sim.step().jobs.is_empty());
    assert!(sim.record.state.rollback.is_some());
    assert!(sim.record.state.retry_request.is_none(), "taken up");

    sim.record.state.retry_request = Some(RetryRequest {
        version: "v2".parse().unwrap(),
        actor: "ci".into(),
        at: sim.now,
    });
    let d = sim.step();
    assert_eq!(
        (d.jobs[0].kind, d.jobs[0].version.as_str()),
        (JobKind::Apply, "v2"),
        "released again: applied again"
    );
    assert!(sim.record.state.rollback.is_none());
}
