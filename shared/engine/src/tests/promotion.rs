//! Promotion between release channels: prod waits for staging and for its
//! approval, a version that failed upstream is not promoted, converging
//! wakes the channels downstream; and instances waiting for a release.

use jiff::SignedDuration;

use super::{Sim, n, spec};
use crate::*;
use vergence_model::*;

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
