//! Approvals: bound to the plan they approve (a new plan needs a new one),
//! given afresh for a rollback or a drift remediation on a runtime that
//! requires them; and Terraform plans, whose approval binds to the changes
//! and whose state lock is waited out.

use jiff::SignedDuration;

use crate::Decision;
use crate::tests::{Sim, spec};
use vergence_model::*;

#[test]
fn an_approval_binds_to_the_plan_and_a_new_plan_needs_a_new_one() {
    let mut s = spec("prod", "v1", Some(FetchMode::ExitCode));
    s.require_approval_before_apply = true;
    std::sync::Arc::make_mut(&mut s.fetch.as_mut().unwrap().job).outputs = vec!["plan".into()];
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
