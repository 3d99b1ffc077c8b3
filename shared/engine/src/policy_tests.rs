//! Delivery policies driven through `decide()` with an injected clock:
//! windows open and close, protections block and fail, alerts fire and
//! resolve mid-rollout, post-deployment checks fail and the previous
//! version comes back, plans bind approvals.

use jiff::{SignedDuration, Timestamp};

use super::Decision;
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

fn approve(sim: &mut Sim, version: &str, plan: Option<&str>) {
    sim.approvals.push(Approval {
        instance: sim.record.key.clone(),
        version: version.parse().unwrap(),
        plan_sha256: plan.map(str::to_owned),
        actor: "cli:alice".into(),
        at: sim.now,
    });
}

/// v1 converged on a runtime that requires approval before apply, then v2
/// applied (approved) and failing: the rollback to v1 must not use v1's
/// old approval.
#[test]
fn a_rollback_on_an_approval_gated_runtime_waits_for_a_fresh_approval() {
    let mut s = spec("prod", "v1", None);
    s.require_approval_before_apply = true;
    let mut sim = Sim::new(s);
    sim.step();
    assert_eq!(sim.status(), Status::WaitingApproval);
    approve(&mut sim, "v1", None);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);

    sim.advance(SignedDuration::from_mins(10));
    let mut v2 = sim.record.desired.compiled().unwrap().clone();
    v2.version = "v2".parse().unwrap();
    sim.set_desired(v2);
    approve(&mut sim, "v2", None);
    sim.step();
    for _ in 0..3 {
        sim.finish(1, "");
        if sim.record.state.in_flight.is_none() && sim.record.state.rollback.is_none() {
            sim.now = sim.record.next_check_at.unwrap_or(sim.now);
            sim.step();
        }
    }
    assert!(
        sim.record.state.rollback.is_some(),
        "v2 failed: a rollback starts"
    );
    assert!(
        sim.record.state.in_flight.is_none(),
        "and applies nothing yet"
    );
    assert_eq!(sim.status(), Status::WaitingApproval);
    let reason = sim.record.state.reason.clone();
    assert!(
        reason.starts_with("rollback to v1 after v2 failed")
            && reason.contains("requires approval before applying v1"),
        "{reason}"
    );
    // An approval given now lets the rollback apply v1.
    sim.advance(SignedDuration::from_secs(5));
    approve(&mut sim, "v1", None);
    let d = sim.step();
    assert_eq!(
        (d.jobs[0].kind, d.jobs[0].version.as_str()),
        (JobKind::Apply, "v1")
    );
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::RolledBack);
}

#[test]
fn drift_remediation_on_an_approval_gated_runtime_needs_an_approval_given_since_it_converged() {
    let mut s = spec("prod", "v1", Some(FetchMode::ExitCode));
    s.require_approval_before_apply = true;
    let mut sim = Sim::new(s);
    approve(&mut sim, "v1", None);
    sim.step();
    assert_eq!(sim.finish(2, "").jobs[0].kind, JobKind::Apply);
    sim.advance(SignedDuration::from_mins(1));
    sim.finish(0, "");
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);

    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    let d = sim.finish(2, "someone scaled it by hand").clone();
    assert!(
        d.jobs.is_empty(),
        "the old approval does not cover remediation"
    );
    assert_eq!(sim.status(), Status::WaitingApproval);
    assert!(
        sim.record.state.reason.starts_with("drifted ("),
        "{}",
        sim.record.state.reason
    );
    assert!(d.events.iter().any(|e| e.kind.name() == "driftDetected"));
    approve(&mut sim, "v1", None);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
}

fn terraform_sim() -> Sim {
    let mut s = spec("prod", "v1", Some(FetchMode::TerraformPlan));
    s.require_approval_before_apply = true;
    Sim::new(s)
}

fn plan_finished(sim: &mut Sim, changes: &str) -> Decision {
    let json = format!(
        r#"{{"resource_changes":[{{"address":"terraform_data.app","change":{{"actions":["update"],"before":{{"input":"{changes}"}},"after":{{"input":"v1"}}}}}}]}}"#
    );
    let content = terraform::plan_content(json.as_bytes()).unwrap();
    let flight = sim.record.state.in_flight.clone().unwrap();
    assert_eq!(flight.kind, JobKind::Fetch);
    let result = JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(2),
        stdout: "Plan: 0 to add, 1 to change, 0 to destroy.".into(),
        stderr_tail: String::new(),
        duration_ms: 900,
        // Every plan file is byte-different; only the changes count.
        outputs: vec![Artifact::of(
            "tfplan",
            "jobs/x/outputs/tfplan",
            sim.now.to_string().as_bytes(),
        )],
        finished_at: sim.now,
    };
    sim.plan_next(content);
    sim.end_with(result).clone()
}

#[test]
fn a_terraform_approval_binds_to_the_changes_and_survives_a_replan() {
    let mut sim = terraform_sim();
    sim.step();
    let d = plan_finished(&mut sim, "v0");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::WaitingApproval);
    let plan = sim.record.state.plan.clone().unwrap();
    assert_eq!(
        plan.summary().as_deref(),
        Some("+0 ~1 -0: ~ terraform_data.app")
    );
    let finished = d
        .events
        .iter()
        .find(|e| e.kind.name() == "jobFinished")
        .unwrap();
    assert_eq!(
        finished.message,
        "fetch: terraform plan +0 ~1 -0: ~ terraform_data.app"
    );
    approve(&mut sim, "v1", Some(&plan.sha256));
    // A re-plan of the same changes (another file) keeps the approval.
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    sim.advance(SignedDuration::from_secs(3));
    let d = plan_finished(&mut sim, "v0");
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(
        d.jobs[0].inputs,
        sim.record.state.plan.as_ref().unwrap().artifacts
    );

    // The state changed under the plan: stale, not a failure; plan again.
    let stale = JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(1),
        stdout: String::new(),
        stderr_tail: "\nError: Saved plan is stale\n\nThe given plan file can no longer be applied because the state was changed by\nanother operation after the plan was created.\n".into(),
        duration_ms: 300,
        outputs: Vec::new(),
        finished_at: sim.now,
    };
    let d = sim.end_with(stale).clone();
    assert_eq!(d.jobs[0].kind, JobKind::Fetch, "planned again at once");
    assert_eq!(sim.record.state.target.as_ref().unwrap().apply_failures, 0);
    assert!(d.events.iter().any(|e| e.message.contains("is stale")));
    // Other changes now (someone set it by hand): a new approval is needed.
    let d = plan_finished(&mut sim, "by-hand");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::WaitingApproval);
}

#[test]
fn a_terraform_state_lock_is_waited_out_without_counting_failures() {
    let mut sim = terraform_sim();
    sim.step();
    let locked = |sim: &Sim| {
        JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(1),
        stdout: String::new(),
        stderr_tail: "\nError: Error acquiring the state lock\n\nError message: resource temporarily unavailable\nLock Info:\n  ID: 1\n\nTerraform acquires a state lock to protect the state from being written\nby multiple users at the same time. Please resolve the issue above and try\nagain. For most commands, you can disable locking with the \"-lock=false\"\nflag, but this is not recommended.\n".into(),
        duration_ms: 300,
        outputs: Vec::new(),
        finished_at: sim.now,
    }
    };
    let mut waits = Vec::new();
    for _ in 0..5 {
        let result = locked(&sim);
        let d = sim.end_with(result).clone();
        assert!(d.jobs.is_empty());
        assert_ne!(sim.status(), Status::Failed, "a lock is never a failure");
        let reason = &sim.record.state.reason;
        assert!(
            reason.contains("Error: Error acquiring the state lock"),
            "{reason}"
        );
        assert!(!reason.contains("not recommended"), "{reason}");
        let next = sim.record.next_check_at.unwrap();
        waits.push((next - sim.now).get_seconds());
        sim.now = next;
        assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    }
    assert_eq!(waits, [10, 20, 40, 60, 60], "backoff without failing");
    assert_eq!(sim.record.state.target.as_ref().unwrap().fetch_failures, 0);
}
