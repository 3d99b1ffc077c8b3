//! The convergence engine: [`decide`] (pure) and [`Engine::step`], which
//! loads an instance, decides, persists with a revision check and only then
//! dispatches jobs; and the [`control`] operations people and CI drive it
//! with.
//!
//! The engine knows the config only as compiled desired states and the
//! [`Compiler`](vergence_model::ports::Compiler) port: it depends on no
//! YAML, cloud, Kubernetes or HTTP library.

// The core stays readable: no function over 80 lines (clippy.toml).
#![warn(clippy::too_many_lines)]

mod artifacts;
pub mod control;
mod decide;
pub mod fetch;
pub mod gates;
mod interrupted;
pub mod metrics;
mod post_deployment;
mod rollback;
mod runners;
mod step;
pub mod windows;

use std::collections::BTreeMap;

use jiff::Timestamp;

pub use artifacts::prune_artifacts;
pub use decide::{ACTOR, decide, moment};
pub use gates::{Gate, UpstreamView, human};
pub use interrupted::note_interrupted;
pub use runners::RunnerRouter;
pub use step::{
    Engine, JobCompletion, QuietChecks, StepReport, UpstreamHints, enqueue_due, load_facts,
};

use vergence_model::terraform::PlanContent;
use vergence_model::{
    AlertState, Approval, Event, InstanceRecord, InstanceState, JobRecord, ReleaseChannelName,
    RunnerSpec, Status, WaitCause,
};

/// Everything outside the instance that a decision depends on.
#[derive(Clone, Debug)]
pub struct Facts {
    pub now: Timestamp,
    /// The instance's in-flight job, if it has finished.
    pub finished_job: Option<JobRecord>,
    /// The same service in the release channels its preconditions name.
    pub upstream: BTreeMap<ReleaseChannelName, UpstreamView>,
    /// Approvals recorded for this instance.
    pub approvals: Vec<Approval>,
    /// Alerts its protections refer to.
    pub alerts: BTreeMap<String, AlertState>,
    /// Runners its jobs use that cannot take jobs now, with the reason.
    pub unavailable_runners: Vec<(RunnerSpec, String)>,
    /// The changes of the plan the finished Terraform fetch made, read from
    /// its `plan.json` (`Err`: why they could not be read).
    pub plan: Option<Result<PlanContent, String>>,
}

impl Facts {
    pub fn at(now: Timestamp) -> Self {
        Self {
            now,
            finished_job: None,
            upstream: BTreeMap::new(),
            approvals: Vec::new(),
            alerts: BTreeMap::new(),
            unavailable_runners: Vec::new(),
            plan: None,
        }
    }

    /// Why jobs on `runner` cannot start now, if they cannot.
    pub fn unavailable(&self, runner: &RunnerSpec) -> Option<&str> {
        self.unavailable_runners
            .iter()
            .find(|(spec, _)| spec == runner)
            .map(|(_, reason)| reason.as_str())
    }
}

/// What `decide` wants done.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub state: InstanceState,
    /// Jobs to record, then dispatch.
    pub jobs: Vec<JobRecord>,
    pub events: Vec<Event>,
    /// When to look at this instance again, if nothing else happens first.
    pub next_check_at: Option<Timestamp>,
    /// Release channels of the same service to look at now (this one moved).
    pub wake: Vec<ReleaseChannelName>,
}

impl Decision {
    /// True when nothing would change: no write is needed.
    pub fn is_noop(&self, record: &InstanceRecord) -> bool {
        self.jobs.is_empty()
            && self.events.is_empty()
            && self.state == record.state
            && self.next_check_at == record.next_check_at
    }
}

/// Whether an instance can get further without anyone doing anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    Converged,
    Failed,
    /// Only a person or the passing of time can move it.
    Waiting,
    /// Waits for the same service in another release channel.
    Upstream(ReleaseChannelName),
    /// The engine is still working on it.
    Progressing,
}

/// Classifies an instance for callers that run until nothing more can happen
/// (`vergence up`).
pub fn settled(record: &InstanceRecord) -> Settled {
    let state = &record.state;
    if state.in_flight.is_some() || state.checks_requested || state.rollback_request.is_some() {
        return Settled::Progressing;
    }
    // Post-deployment checks finish by themselves; `up` waits for them.
    if state.status == Status::Converged
        && state
            .post_deployment
            .as_ref()
            .is_some_and(|p| p.passed_at.is_none())
    {
        return Settled::Progressing;
    }
    match (state.status, &state.wait) {
        (Status::Converged, _) => Settled::Converged,
        (Status::Failed, _) => Settled::Failed,
        (_, Some(WaitCause::Upstream { release_channel })) => {
            Settled::Upstream(release_channel.clone())
        }
        (_, Some(WaitCause::Person | WaitCause::Time { .. } | WaitCause::Release)) => {
            Settled::Waiting
        }
        (Status::Drifted | Status::Paused | Status::RolledBack, _) => Settled::Waiting,
        _ => Settled::Progressing,
    }
}

#[cfg(test)]
mod papercut_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod tests;
