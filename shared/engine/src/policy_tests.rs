//! Delivery policies driven through `decide()` with an injected clock:
//! windows open and close, protections block and fail, alerts fire and
//! resolve mid-rollout, post-deployment checks fail and the previous
//! version comes back, plans bind approvals.

use jiff::{SignedDuration, Timestamp};

use super::tests::{Sim, n, spec};
use vergence_model::*;

fn job_protection(name: &str, lifecycle: Lifecycle) -> CompiledProtection {
    CompiledProtection {
        name: n(name),
        lifecycle,
        check: ProtectionCheck::Job {
            job: Box::new(super::tests::job_spec(&format!("./{name}"))),
        },
        poll_interval: SignedDuration::from_mins(1),
        attached_to: "release channel prod".into(),
    }
}

fn alert_protection(alert: &str) -> CompiledProtection {
    CompiledProtection {
        name: n("no-firing-alerts"),
        lifecycle: Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        },
        check: ProtectionCheck::Alert {
            alert: alert.into(),
        },
        poll_interval: SignedDuration::from_mins(1),
        attached_to: "release channel prod".into(),
    }
}

fn at(civil: &str, zone: &str) -> Timestamp {
    civil
        .parse::<jiff::civil::DateTime>()
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get(zone).unwrap())
        .unwrap()
        .timestamp()
}

#[test]
fn outside_the_allowed_window_the_instance_is_blocked_until_it_opens() {
    let mut s = spec("prod", "v1", None);
    s.windows = TimeWindows {
        allowed: vec![
            RecurringWindow::parse(Some("mon-fri"), Some("9-17"), Some("Europe/Berlin")).unwrap(),
        ],
        denied: Vec::new(),
    };
    let mut sim = Sim::new(s);
    // Saturday noon in Berlin.
    sim.now = at("2026-11-28T12:00", "Europe/Berlin");
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    let reason = &sim.record.state.reason;
    assert!(reason.contains("mon-fri 09-17 Europe/Berlin"), "{reason}");
    let opens = at("2026-11-30T09:00", "Europe/Berlin");
    assert_eq!(
        sim.record.next_check_at,
        Some(opens),
        "looks again exactly when it opens"
    );
    assert_eq!(
        sim.record.state.wait,
        Some(WaitCause::Time { until: opens })
    );

    sim.now = opens;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply, "resumes by itself");
}

#[test]
fn a_freeze_inside_the_allowed_window_blocks_and_lifts() {
    let mut s = spec("prod", "v1", None);
    let start: Timestamp = "2026-12-20T00:00:00Z".parse().unwrap();
    let end: Timestamp = "2027-01-02T00:00:00Z".parse().unwrap();
    s.windows = TimeWindows {
        allowed: Vec::new(),
        denied: vec![DenyWindow::Between {
            name: Some("holidays".into()),
            start,
            end,
        }],
    };
    let mut sim = Sim::new(s);
    sim.now = "2026-12-24T10:00:00Z".parse().unwrap();
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("holidays"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(sim.record.next_check_at, Some(end));
    sim.now = end;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
}

#[test]
fn a_block_protection_runs_before_the_apply_and_holds_it_while_failing() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "smoke",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        },
    )];
    let mut sim = Sim::new(s);
    let d = sim.step();
    assert_eq!(
        d.jobs[0].kind,
        JobKind::Protection,
        "checked before applying"
    );
    let d = sim.finish(1, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("protection smoke"),
        "{}",
        sim.record.state.reason
    );
    let recheck = sim.record.next_check_at.unwrap();
    assert_eq!(
        recheck,
        sim.now.checked_add(SignedDuration::from_mins(1)).unwrap()
    );

    sim.now = recheck;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Protection);
    let d = sim.finish(0, "");
    assert_eq!(
        d.jobs[0].kind,
        JobKind::Apply,
        "passes, so the apply goes ahead"
    );
}

#[test]
fn a_fail_protection_fails_the_version() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "guard",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Fail,
        },
    )];
    let mut sim = Sim::new(s);
    sim.step();
    let d = sim.finish(3, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Failed);
    assert!(
        sim.record.state.reason.contains("FAIL"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn an_alert_firing_mid_rollout_pauses_the_next_apply_and_resolving_resumes_it() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![alert_protection("high-errors")];
    let mut sim = Sim::new(s);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply, "quiet: applies");
    // The first attempt fails; meanwhile the alert fires.
    sim.finish(1, "");
    sim.alerts.insert(
        "high-errors".into(),
        AlertState {
            name: "high-errors".into(),
            firing: true,
            since: sim.now,
            actor: "alertmanager".into(),
            summary: Some("5xx above 2%".into()),
        },
    );
    sim.now = sim.record.next_check_at.unwrap();
    let d = sim.step();
    assert!(d.jobs.is_empty(), "no second attempt while the alert fires");
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("high-errors is firing"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(sim.record.state.wait, Some(WaitCause::Person));

    sim.alerts.get_mut("high-errors").unwrap().firing = false;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(d.jobs[0].attempt, 2);
}

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
    assert_eq!(super::settled(&sim.record), super::Settled::Progressing);
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
    assert_eq!(super::settled(&sim.record), super::Settled::Converged);
    sim
}

#[test]
fn a_failed_post_deployment_check_rolls_back_to_the_previous_version() {
    let mut sim = converged_v1_with_checks();
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    v2.apply.job = super::tests::job_spec("./apply-v2");
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
    let view = super::UpstreamView::of(&sim.record);
    assert_eq!(view.failed_version.as_deref(), Some("v2"));
    // Nothing more happens until a new version comes.
    sim.advance(SignedDuration::from_hours(1));
    assert!(sim.step().jobs.is_empty());
    assert_eq!(super::settled(&sim.record), super::Settled::Waiting);

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
fn paused_instances_fetch_but_never_apply() {
    let mut sim = Sim::new(spec("prod", "v1", Some(FetchMode::ExitCode)));
    sim.record.controls.paused = Some(ControlMark {
        actor: "cli:alice".into(),
        at: sim.now,
    });
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch, "fetches go on");
    let d = sim.finish(2, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Paused);
    assert!(sim.record.state.reason.contains("vergence resume"));
    sim.record.controls.paused = None;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
}

#[test]
fn an_approval_binds_to_the_plan_and_a_new_plan_needs_a_new_one() {
    let mut s = spec("prod", "v1", Some(FetchMode::ExitCode));
    s.require_approval_before_apply = true;
    s.fetch.as_mut().unwrap().job.outputs = vec!["plan".into()];
    let mut sim = Sim::new(s);
    sim.step();
    sim.finish_with(
        2,
        "",
        vec![Artifact::of(
            "plan",
            "jobs/j/outputs/plan",
            b"+ create bucket",
        )],
    );
    assert_eq!(sim.status(), Status::WaitingApproval);
    let plan = sim.record.state.plan.clone().unwrap();
    assert!(
        sim.record.state.reason.contains(plan.short()),
        "{}",
        sim.record.state.reason
    );
    sim.approvals.push(Approval {
        instance: sim.record.key.clone(),
        version: "v1".parse().unwrap(),
        plan_sha256: Some(plan.sha256.clone()),
        actor: "cli:alice".into(),
        at: sim.now,
    });

    // Before the approval is seen, the poll fetches again: the plan changed.
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    let d = sim.finish_with(
        2,
        "",
        vec![Artifact::of(
            "plan",
            "jobs/j/outputs/plan",
            b"+ create bucket\n- delete db",
        )],
    );
    assert!(d.jobs.is_empty(), "the approval was for another plan");
    assert_eq!(sim.status(), Status::WaitingApproval);

    // The same plan again: the approval counts and the apply gets the plan.
    sim.now = sim.record.next_check_at.unwrap();
    sim.step();
    let d = sim.finish_with(
        2,
        "",
        vec![Artifact::of(
            "plan",
            "jobs/j/outputs/plan",
            b"+ create bucket",
        )],
    );
    let apply = &d.jobs[0];
    assert_eq!(apply.kind, JobKind::Apply);
    assert_eq!(
        apply.inputs,
        vec![Artifact::of(
            "plan",
            "jobs/j/outputs/plan",
            b"+ create bucket"
        )]
    );
}

#[test]
fn get_info_outputs_are_kept_and_never_change_convergence() {
    let mut s = spec("prod", "v1", None);
    s.get_info = Some(GetInfoSpec {
        job: super::tests::job_spec("./info"),
        poll_interval: SignedDuration::from_mins(5),
    });
    let mut sim = Sim::new(s);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
    let d = sim.finish(0, "");
    assert_eq!(
        d.jobs[0].kind,
        JobKind::GetInfo,
        "after converging, when idle"
    );
    assert_eq!(sim.status(), Status::Converged);
    sim.finish(
        0,
        r#"{"outputs":[{"name":"url","text":"https://shop.example"}]}"#,
    );
    assert_eq!(sim.status(), Status::Converged);
    assert_eq!(
        sim.record.state.info,
        vec![InfoOutput {
            name: "url".into(),
            text: "https://shop.example".into()
        }]
    );
    let next = sim.record.next_check_at.unwrap();
    assert_eq!(
        next,
        sim.now.checked_add(SignedDuration::from_mins(5)).unwrap()
    );
    sim.now = next;
    assert_eq!(sim.step().jobs[0].kind, JobKind::GetInfo);
    sim.finish(0, "not json");
    assert_eq!(
        sim.status(),
        Status::Converged,
        "bad info never fails the instance"
    );
    assert!(sim.record.state.info[0].text.contains("outputs"));
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
