//! Brownfield adoption as the engine reads it from a structured fetch: an
//! adopted object converges with an `adopted` event and no apply; a
//! takeover waits for an approval of the version that shows what differs.

use super::{Sim, spec};
use crate::*;
use vergence_model::*;

const ADOPTED: &str = r#"{"objects": [{"name": "web", "objectType": "ECSService", "adopted": true,
  "versions": [{"version": "svc-1", "active": true}], "status": "SUCCEEDED"}]}"#;
const TAKEOVER: &str = r#"{"objects": [{"name": "web", "objectType": "ECSService",
  "versions": [{"version": "web:7, not registered by Vergence", "active": true}], "status": "SUCCEEDED",
  "takeover": {"object": "ECS service web", "differences": ["containerDefinitions[web].image: web:0 live, web:1 wanted"]}}]}"#;
const OURS: &str = r#"{"objects": [{"name": "web", "versions": [{"version": "svc-1", "active": true}], "status": "SUCCEEDED"}]}"#;

#[test]
fn an_adopted_object_converges_with_an_adopted_event_and_no_apply() {
    let mut sim = Sim::new(spec("staging", "svc-1", Some(FetchMode::Structured)));
    sim.step();
    let d = sim.finish(0, ADOPTED);
    assert!(d.jobs.is_empty(), "{:?}", d.jobs);
    assert_eq!(sim.status(), Status::Converged);
    assert!(
        sim.event_kinds().contains(&"adopted"),
        "{:?}",
        sim.event_kinds()
    );
}

#[test]
fn a_takeover_waits_for_an_approval_of_the_version_then_applies_once() {
    let mut sim = Sim::new(spec("staging", "svc-1", Some(FetchMode::Structured)));
    sim.step();
    let d = sim.finish(0, TAKEOVER);
    assert!(d.jobs.is_empty(), "{:?}", d.jobs);
    assert_eq!(sim.status(), Status::WaitingApproval);
    let reason = &sim.record.state.reason;
    assert!(
        reason.starts_with("waiting for approval to take over the existing ECS service web: containerDefinitions[web].image: web:0 live, web:1 wanted (applying svc-1 changes it: vergence approve --app"),
        "{reason}"
    );
    let facts = sim.facts();
    let spec = sim.record.desired.compiled().unwrap().clone();
    let gates = gates::all(&spec, &facts, &sim.record.state, &sim.record.controls);
    assert!(
        gates
            .iter()
            .any(|(name, gate)| name == "adopt (take over what runs)"
                && matches!(gate, Gate::Closed { .. })),
        "{gates:?}"
    );
    sim.step();
    assert_eq!(sim.status(), Status::WaitingApproval, "still waiting");

    sim.approvals.push(Approval {
        instance: sim.record.key.clone(),
        version: "svc-1".parse().unwrap(),
        plan_sha256: None,
        actor: "cli:alice".into(),
        at: sim.now,
    });
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    sim.finish(0, "");
    let d = sim.finish(0, OURS);
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Converged);
    assert!(!sim.event_kinds().contains(&"adopted"));
}
