//! Rollouts in steps: a new version takes 25% of the traffic, holds it
//! for its bake while the channel's protection is checked, then takes all
//! of it; a protection failing mid-bake fails the version and sends the
//! traffic back (or a rollback takes it back).

use jiff::SignedDuration;

use super::job_protection;
use crate::tests::{Sim, spec};
use vergence_model::*;

/// What the runtime runs: the version its template names, and that
/// version's share of the traffic.
struct World {
    version: String,
    share: u8,
    /// Whether the protection's check passes.
    healthy: bool,
    /// The shares the applies asked for, in order (`None`: all of it).
    applied: Vec<(String, Option<u8>)>,
}

impl World {
    fn fetched(&self) -> String {
        serde_json::json!({"objects": [{
            "name": "web", "status": "SUCCEEDED",
            "versions": [{"version": self.version, "active": true, "trafficPercent": self.share}],
        }]})
        .to_string()
    }

    /// Answers the job the last decision started, if any; else moves the
    /// clock to the next check. Stops once `done` holds.
    fn run(&mut self, sim: &mut Sim, what: &str, done: impl Fn(&Sim) -> bool) {
        for _ in 0..200 {
            if done(sim) {
                return;
            }
            let Some(flight) = sim.record.state.in_flight.clone() else {
                sim.now = sim.record.next_check_at.expect("a next check");
                sim.step();
                continue;
            };
            match flight.kind {
                JobKind::Fetch => {
                    let out = self.fetched();
                    sim.finish(0, &out);
                }
                JobKind::Apply => {
                    let share = applied_share(sim);
                    self.applied.push((flight.version.to_string(), share));
                    self.version = flight.version.to_string();
                    self.share = share.unwrap_or(100);
                    sim.finish(0, "");
                }
                JobKind::Protection => {
                    sim.finish(if self.healthy { 0 } else { 1 }, "");
                }
                JobKind::GetInfo => {
                    sim.finish(0, "");
                }
            }
        }
        panic!(
            "{what}: still {} ({})",
            sim.status(),
            sim.record.state.reason
        );
    }
}

/// The traffic share of the apply the last decision started.
fn applied_share(sim: &Sim) -> Option<u8> {
    let job = sim.last_jobs().iter().find(|j| j.kind == JobKind::Apply)?;
    match &job.spec.builtin {
        Some(BuiltinJob::CloudRunApply(service)) => service.traffic_percent,
        _ => None,
    }
}

fn cloud_run_apply(version: &str) -> JobSpec {
    let mut job = crate::tests::job_spec("");
    job.builtin = Some(BuiltinJob::CloudRunApply(CloudRunService {
        project: "shop".into(),
        region: "europe-west1".into(),
        service_name: "web".into(),
        spec: "{}".into(),
        service_id: "svc-1".into(),
        version: version.into(),
        file: "run/web.yaml".into(),
        adopt: Default::default(),
        traffic_percent: None,
    }));
    job
}

fn release(version: &str, auto_rollback: bool) -> CompiledInstance {
    let mut s = spec("prod", version, Some(FetchMode::Structured));
    s.apply.job = cloud_run_apply(version).into();
    s.rollout = Some(Rollout {
        steps: vec![25, 100],
        bake: SignedDuration::from_mins(5),
    });
    s.protections = vec![job_protection(
        "errors",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        },
    )];
    s.auto_rollback = auto_rollback;
    s
}

/// v1 converged: a first deployment, which goes straight to 100%.
fn v1_converged(auto_rollback: bool) -> (Sim, World) {
    let mut sim = Sim::new(release("v1", auto_rollback));
    let mut world = World {
        version: String::new(),
        share: 0,
        healthy: true,
        applied: Vec::new(),
    };
    world.run(&mut sim, "v1 converges", |s| {
        s.status() == Status::Converged
    });
    assert_eq!(world.applied, [("v1".to_owned(), None)]);
    (sim, world)
}

#[test]
fn a_version_takes_each_step_after_its_bake_and_then_all_the_traffic() {
    let (mut sim, mut world) = v1_converged(true);
    sim.set_desired(release("v2", true));
    world.run(&mut sim, "v2 at 25%", |s| {
        s.record.state.reason.starts_with("v2 at 25% for")
    });
    assert_eq!(world.applied.last(), Some(&("v2".to_owned(), Some(25))));
    assert_eq!(sim.status(), Status::Verifying);
    let reached = sim.now;

    // Two minutes into the bake: the check has run and the step holds.
    world.run(&mut sim, "2m into the bake", |s| {
        s.now.duration_since(reached) >= SignedDuration::from_mins(2)
            && s.record.state.in_flight.is_none()
    });
    assert!(
        sim.record
            .state
            .reason
            .starts_with("v2 at 25% for 2m of 5m; checks: errors passing for 2m of 5m"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(world.applied.len(), 2, "no other apply during the bake");

    world.run(&mut sim, "v2 converges", |s| {
        s.status() == Status::Converged
    });
    assert_eq!(world.applied.last(), Some(&("v2".to_owned(), None)));
    assert!(
        sim.now.duration_since(reached) >= SignedDuration::from_mins(5),
        "100% only after the whole bake"
    );
    assert_eq!(world.share, 100);
    assert_eq!(
        sim.record
            .state
            .current_version
            .as_ref()
            .map(ToString::to_string),
        Some("v2".into())
    );
    assert!(sim.record.state.target.as_ref().unwrap().rollout.is_none());
}

#[test]
fn a_check_failing_mid_bake_fails_the_version_and_sends_the_traffic_back() {
    let (mut sim, mut world) = v1_converged(false);
    sim.set_desired(release("v2", false));
    world.run(&mut sim, "v2 at 25%", |s| {
        s.record.state.reason.starts_with("v2 at 25% for")
    });
    world.healthy = false;
    world.run(&mut sim, "v2 fails", |s| {
        s.status() == Status::Failed && s.record.state.in_flight.is_none()
    });
    assert_eq!(
        world.applied.last(),
        Some(&("v2".to_owned(), Some(0))),
        "the traffic goes back: {:?}",
        world.applied
    );
    assert_eq!(world.share, 0);
    let reason = &sim.record.state.reason;
    assert!(
        reason.starts_with(
            "the rollout of v2 stopped at 25% of the traffic: deployment check errors of v2 failed"
        ) && reason.contains("all the traffic was sent back to the version before"),
        "{reason}"
    );
    // Nothing more is applied: the version is held until asked for again.
    sim.advance(SignedDuration::from_hours(1));
    assert!(sim.step().jobs.is_empty());
}

#[test]
fn with_automatic_rollback_the_rollback_takes_the_traffic_back() {
    let (mut sim, mut world) = v1_converged(true);
    // v1's checks passed: it is the version to go back to.
    sim.set_desired(release("v2", true));
    world.run(&mut sim, "v2 at 25%", |s| {
        s.record.state.reason.starts_with("v2 at 25% for")
    });
    world.healthy = false;
    world.run(&mut sim, "the rollback waits", |s| {
        s.record.state.rollback.is_some() && s.status() == Status::Blocked
    });
    // The failing protection holds the rollback's apply, as it holds any
    // apply; the traffic went back to v1 before.
    assert_eq!((world.version.as_str(), world.share), ("v2", 0));
    world.healthy = true;
    world.run(&mut sim, "rolled back", |s| {
        s.status() == Status::RolledBack
    });
    assert_eq!(world.applied.last(), Some(&("v1".to_owned(), None)));
    assert_eq!((world.version.as_str(), world.share), ("v1", 100));
    assert_eq!(
        world.applied[world.applied.len() - 2..],
        [("v2".to_owned(), Some(0)), ("v1".to_owned(), None)],
        "the traffic goes back at once, then the rollback applies v1 when its gates open"
    );
}

#[test]
fn a_rollout_taken_out_of_the_config_mid_way_gives_the_version_all_the_traffic() {
    let (mut sim, mut world) = v1_converged(true);
    sim.set_desired(release("v2", true));
    world.run(&mut sim, "v2 at 25%", |s| {
        s.record.state.reason.starts_with("v2 at 25% for")
    });
    let mut without = release("v2", true);
    without.rollout = None;
    sim.set_desired(without);
    world.run(&mut sim, "v2 converges", |s| {
        s.status() == Status::Converged
    });
    assert_eq!(world.applied.last(), Some(&("v2".to_owned(), None)));
    assert_eq!(world.share, 100);
}
