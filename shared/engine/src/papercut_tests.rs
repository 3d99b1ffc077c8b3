//! Engine papercuts found by trying Vergence (issue 15), driven through
//! `decide()`: what a rolled-back instance records while nothing changes,
//! and what a job that could not start says about a bare script name.

use jiff::SignedDuration;

use super::tests::{Sim, job_spec, n, spec};
use vergence_model::*;

/// Runs the jobs in flight to their end as a runtime that deploys v1
/// fine and fails every apply of v2 would, until nothing is in flight.
/// `deployed` is the version the runtime runs.
fn settle(sim: &mut Sim, deployed: &mut Option<String>) {
    for _ in 0..20 {
        let Some(flight) = sim.record.state.in_flight.clone() else {
            return;
        };
        let version = flight.version.as_str();
        let code = match flight.kind {
            JobKind::Apply if version == "v2" => 1,
            JobKind::Apply => {
                *deployed = Some(version.to_owned());
                0
            }
            JobKind::Fetch if deployed.as_deref() == Some(version) => 0,
            JobKind::Fetch => 2,
            _ => 0,
        };
        sim.finish(code, "");
    }
    panic!("the instance never settled: {:?}", sim.record.state);
}

/// v1 converged here; v2 failed its only apply and was rolled back to v1.
fn rolled_back_to_v1() -> Sim {
    let mut v1 = spec("prod", "v1", Some(FetchMode::ExitCode));
    v1.apply.retry_policy.max_attempts = 1;
    let mut sim = Sim::new(v1.clone());
    let mut deployed = None;
    sim.step();
    settle(&mut sim, &mut deployed);
    assert_eq!(sim.status(), Status::Converged);
    let mut v2 = v1;
    v2.version = n("v2");
    v2.apply.job = job_spec("./apply-v2").into();
    sim.set_desired(v2);
    sim.step();
    settle(&mut sim, &mut deployed);
    assert_eq!(
        sim.status(),
        Status::RolledBack,
        "{}",
        sim.record.state.reason
    );
    sim
}

#[test]
fn a_rolled_back_instance_records_nothing_on_steady_state_fetches_that_find_it_unchanged() {
    let mut sim = rolled_back_to_v1();
    for _ in 0..3 {
        sim.advance(SignedDuration::from_mins(5));
        let fetch = sim.step();
        assert_eq!(fetch.jobs.len(), 1, "a steady-state fetch");
        assert_eq!(fetch.jobs[0].kind, JobKind::Fetch);
        sim.finish(0, "");
        assert_eq!(sim.event_kinds(), Vec::<&str>::new());
        assert_eq!(sim.status(), Status::RolledBack);
    }
}

#[test]
fn a_job_that_cannot_start_a_bare_script_name_suggests_dot_slash() {
    let mut s = spec("prod", "v1", None);
    s.apply.job = job_spec("deploy.sh").into();
    s.apply.retry_policy.max_attempts = 1;
    let mut sim = Sim::new(s);
    sim.step();
    sim.end_with(JobResult::not_started(
        "cannot run deploy.sh in /srv/config: No such file or directory (os error 2)",
        sim.now,
    ));
    assert_eq!(sim.status(), Status::Failed);
    let reason = &sim.record.state.reason;
    assert!(reason.contains("./deploy.sh"), "{reason}");
    assert!(reason.contains("PATH"), "{reason}");
}

#[test]
fn a_job_that_cannot_start_a_path_gets_no_suggestion() {
    let mut s = spec("prod", "v1", None);
    s.apply.job = job_spec("./deploy.sh").into();
    s.apply.retry_policy.max_attempts = 1;
    let mut sim = Sim::new(s);
    sim.step();
    sim.end_with(JobResult::not_started(
        "cannot run ./deploy.sh in /srv/config: No such file or directory (os error 2)",
        sim.now,
    ));
    assert!(!sim.record.state.reason.contains("PATH"));
}
