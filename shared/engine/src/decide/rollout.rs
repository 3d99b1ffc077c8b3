//! A rollout in steps: a new version takes `rollout.steps` of the traffic
//! in turn, each step held for `bake` while the channel's deployment and
//! post-deployment protections are checked at their poll intervals. A step
//! that bakes clean leads to the next (through the same gates as any
//! apply); the last step (100%) is an ordinary convergence, followed by
//! the post-deployment checks as always. A check that fails during a bake
//! fails the version; unless a rollback takes over, the traffic is sent
//! back to the version before by one more apply (the new version at 0%).
//!
//! A version rolls out in steps only where an earlier version converged
//! and serves the traffic: a first deployment, and a rollback, go straight
//! to 100%.

use std::sync::Arc;

use super::{Decider, after, moment};
use crate::gates::human;
use crate::post_deployment::{self, Verdict};
use vergence_model::{
    CompiledInstance, CompiledProtection, EventKind, FetchObservation, JobSpec, LifecycleKind,
    ProtectionCheck, RolloutProgress, Status, TargetProgress,
};

impl Decider<'_> {
    /// The rollout a new target starts, if it goes in steps.
    pub(super) fn start_rollout(&self, spec: &CompiledInstance) -> Option<RolloutProgress> {
        spec.rollout.as_ref()?;
        let serving = self.state.current_version.as_ref()?;
        (self.state.rollback.is_none() && serving != &spec.version).then(RolloutProgress::start)
    }

    /// The apply job for the target's step, and the share of the traffic
    /// it gives the version (`None`: all of it, as the spec says).
    pub(super) fn step_apply(&self, spec: &CompiledInstance) -> (Arc<JobSpec>, Option<u8>) {
        let plain = (Arc::clone(&spec.apply.job), None);
        let (Some(rollout), Some(progress)) = (
            spec.rollout.as_ref(),
            self.state.target.as_ref().and_then(|t| t.rollout.as_ref()),
        ) else {
            return plain;
        };
        let percent = if progress.traffic_back_at.is_some() {
            0
        } else if rollout.is_last(progress.step) {
            return plain;
        } else {
            rollout.percent(progress.step)
        };
        let Some(builtin) = spec
            .apply
            .job
            .builtin
            .as_ref()
            .and_then(|b| b.at_traffic(percent))
        else {
            return plain;
        };
        let mut job = JobSpec::clone(&spec.apply.job);
        job.builtin = Some(builtin);
        (Arc::new(job), Some(percent))
    }

    /// The fetch found the version ready while it rolls out: apply the
    /// step if the traffic is not there yet, else bake it, go on to the
    /// next, or finish at 100%.
    pub(super) fn rollout_observed(
        &mut self,
        spec: &CompiledInstance,
        target: &TargetProgress,
        observation: &FetchObservation,
    ) {
        let (Some(rollout), Some(progress)) = (spec.rollout.as_ref(), target.rollout.as_ref())
        else {
            // The rollout was taken out of the config mid-way: the version
            // gets all the traffic at once.
            self.target().rollout = None;
            match observation.traffic_percent.filter(|share| *share < 100) {
                Some(share) => {
                    let seen = format!(
                        "{} has {share}% of the traffic and no rollout any more",
                        spec.version
                    );
                    self.want_apply(spec, target, Some((false, seen)));
                }
                None => {
                    self.converged(spec);
                    self.post_deployment(spec);
                }
            }
            return;
        };
        let want = rollout.percent(progress.step);
        let share = observation.traffic_percent.unwrap_or(100);
        if share != want {
            let seen = format!(
                "{} has {share}% of the traffic, step {} of its rollout gives it {want}%",
                spec.version,
                progress.step + 1
            );
            self.want_apply(spec, target, Some((false, seen)));
            return;
        }
        if rollout.is_last(progress.step) {
            self.target().rollout = None;
            self.step_event(spec, want);
            self.converged(spec);
            self.post_deployment(spec);
            return;
        }
        let reached = match progress.reached_at {
            Some(at) => at,
            None => {
                self.step_event(spec, want);
                let now = self.now;
                if let Some(p) = self.target().rollout.as_mut() {
                    p.reached_at = Some(now);
                }
                now
            }
        };
        self.bake(spec, want, reached);
    }

    fn step_event(&mut self, spec: &CompiledInstance, percent: u8) {
        self.event(
            EventKind::RolloutStep {
                version: spec.version.clone(),
                percent,
            },
            format!("{} has {percent}% of the traffic", spec.version),
        );
    }

    /// Holds the step at `percent`, reached at `reached`, for the bake
    /// while its checks run; then the next step's apply.
    fn bake(&mut self, spec: &CompiledInstance, percent: u8, reached: jiff::Timestamp) {
        let Some(rollout) = spec.rollout.as_ref() else {
            return;
        };
        let end = after(reached, rollout.bake);
        let checks: Vec<&CompiledProtection> = spec
            .protections
            .iter()
            .filter(|p| p.lifecycle.kind() != LifecycleKind::PreApproval)
            .collect();
        if let Some(reason) = self.firing_alert(&checks) {
            return self.rollout_failed(spec, percent, reason);
        }
        let jobs: Vec<&CompiledProtection> = checks
            .into_iter()
            .filter(|p| matches!(p.check, ProtectionCheck::Job { .. }))
            .collect();
        let verdict = post_deployment::bake_verdict(
            &jobs,
            &spec.version,
            (reached, end),
            &self.state.protections,
            self.now,
        );
        match verdict {
            Verdict::Failed { reason } => self.rollout_failed(spec, percent, reason),
            Verdict::Passed { .. } => {
                let next = self.target().rollout.as_mut().map(|p| {
                    p.step += 1;
                    p.reached_at = None;
                    p.step
                });
                let next = rollout.percent(next.unwrap_or_default());
                let seen = format!(
                    "{} held {percent}% for {} with its checks passing; going to {next}%",
                    spec.version,
                    human(rollout.bake)
                );
                if let Some(target) = self.state.target.clone() {
                    self.want_apply(spec, &target, Some((false, seen)));
                }
            }
            Verdict::Running {
                run,
                look_again_at,
                notes,
            } => {
                self.run_checks(spec, &run, look_again_at);
                let checks = if notes.is_empty() {
                    String::new()
                } else {
                    format!("; checks: {}", notes.join(", "))
                };
                self.set_status(
                    Status::Verifying,
                    format!(
                        "{} at {percent}% for {} of {}{checks}",
                        spec.version,
                        human(self.now.duration_since(reached)),
                        human(rollout.bake)
                    ),
                    None,
                );
            }
        }
    }

    /// A firing alert among the checks fails the step, as a failing job
    /// check does.
    fn firing_alert(&self, checks: &[&CompiledProtection]) -> Option<String> {
        checks.iter().find_map(|p| match &p.check {
            ProtectionCheck::Alert { alert } => {
                self.facts.alerts.get(alert).filter(|a| a.firing).map(|a| {
                    format!(
                        "alert {alert} of {} is firing since {}",
                        p.name,
                        moment(a.since)
                    )
                })
            }
            ProtectionCheck::Job { .. } => None,
        })
    }

    fn rollout_failed(&mut self, spec: &CompiledInstance, percent: u8, reason: String) {
        self.fail_version(format!(
            "the rollout of {} stopped at {percent}% of the traffic: {reason}",
            spec.version
        ));
    }

    /// After a failed step: one apply sends all the traffic back to the
    /// version before, before anything else (a rollback) runs. Only a
    /// pause holds it: it undoes a step the gates already let through, and
    /// a window or an approval must not keep a failing version serving.
    /// Whether it is still to be done (the rollback waits for it).
    pub(super) fn take_traffic_back(&mut self, spec: &CompiledInstance) -> bool {
        let Some(target) = self.state.target.as_ref() else {
            return false;
        };
        let pending = target.failed.is_some()
            && target.version == spec.version
            && target
                .rollout
                .as_ref()
                .is_some_and(|p| p.traffic_back_at.is_none());
        if !pending {
            return false;
        }
        if self.state.in_flight.is_some() || self.controls.paused.is_some() {
            return true;
        }
        let now = self.now;
        let set_back = |decider: &mut Self, at| {
            if let Some(p) = decider.target().rollout.as_mut() {
                p.traffic_back_at = at;
            }
        };
        // The apply's traffic is read from the progress: set it first.
        set_back(self, Some(now));
        let (status, reason) = (self.state.status, self.state.reason.clone());
        let started = self.jobs.len();
        self.dispatch_apply(
            spec,
            ": sending all the traffic back to the version before".into(),
        );
        if self.jobs.len() == started {
            // The runner cannot take it now; the next step tries again.
            set_back(self, None);
            return true;
        }
        self.set_status(
            status,
            format!("{reason}; sending all the traffic back to the version before"),
            None,
        );
        true
    }
}
