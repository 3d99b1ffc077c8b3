//! The Decider's side of the pure sub-decisions made beside the gates: it
//! applies the post-deployment verdict ([`crate::post_deployment`]) once a
//! version converged, remembers good versions, and starts and shows
//! rollbacks as [`crate::rollback`] chooses them.

use jiff::Timestamp;

use super::Decider;
use crate::{post_deployment, rollback};
use vergence_model::{
    CompiledInstance, CompiledProtection, EventKind, LifecycleKind, PostDeployment, Rollback,
    RollbackTarget, Status, Version, WaitCause,
};

impl Decider<'_> {
    /// After convergence: post-deployment checks run from `delay` after
    /// converging, at their poll interval, until `duration` has passed with
    /// no failure. Only then is the version good here (promotable, and where
    /// a later rollback goes).
    pub(super) fn post_deployment(&mut self, spec: &CompiledInstance) {
        if self.state.rollback.is_some() {
            return;
        }
        let checks: Vec<&CompiledProtection> =
            spec.protections_at(LifecycleKind::PostDeployment).collect();
        if checks.is_empty() {
            self.state.post_deployment = None;
            self.mark_good(spec);
            return;
        }
        let progress = match &self.state.post_deployment {
            Some(p) if p.version == spec.version => p.clone(),
            _ => {
                let p = PostDeployment {
                    version: spec.version.clone(),
                    converged_at: self.state.converged_at.unwrap_or(self.now),
                    passed_at: None,
                };
                self.state.post_deployment = Some(p.clone());
                p
            }
        };
        if progress.passed_at.is_some() {
            return;
        }
        match post_deployment::verdict(&checks, &progress, &self.state.protections, self.now) {
            post_deployment::Verdict::Failed { reason } => self.fail_version(reason),
            post_deployment::Verdict::Passed { notes } => self.checks_passed(spec, &notes),
            post_deployment::Verdict::Running {
                run,
                look_again_at,
                notes,
            } => {
                self.run_checks(spec, &run, look_again_at);
                self.set_status(
                    Status::Converged,
                    format!(
                        "converged on {}; post-deployment checks: {}",
                        spec.version,
                        notes.join(", ")
                    ),
                    None,
                );
            }
        }
    }

    /// Starts the first of the checks due now (one job at a time), and
    /// looks again when the next one is due.
    pub(super) fn run_checks(
        &mut self,
        spec: &CompiledInstance,
        run: &[vergence_model::ProtectionKey],
        look_again_at: Option<Timestamp>,
    ) {
        for key in run {
            if self.state.in_flight.is_none() {
                self.dispatch_protection(spec, key);
            }
        }
        if let Some(at) = look_again_at {
            self.check_at(at);
        }
    }

    /// Every post-deployment check passed: the version is good here.
    fn checks_passed(&mut self, spec: &CompiledInstance, notes: &[String]) {
        if let Some(p) = self.state.post_deployment.as_mut() {
            p.passed_at = Some(self.now);
        }
        self.event(
            EventKind::ChecksPassed {
                version: spec.version.clone(),
            },
            format!(
                "post-deployment checks of {} passed: {}",
                spec.version,
                notes.join(", ")
            ),
        );
        self.mark_good(spec);
        self.set_status(
            Status::Converged,
            format!("converged on {}", spec.version),
            None,
        );
    }

    /// Remembers a version that converged and passed its checks.
    fn mark_good(&mut self, spec: &CompiledInstance) {
        if self.state.rollback.is_some()
            || self
                .state
                .last_good
                .as_ref()
                .is_some_and(|g| g.version == spec.version && g.apply == spec.apply)
        {
            return;
        }
        self.state.previous_good = self.state.last_good.take();
        self.state.last_good = Some(Box::new(RollbackTarget {
            version: spec.version.clone(),
            apply: spec.apply.clone(),
            fetch: spec.fetch.clone(),
        }));
    }

    /// A rollback someone asked for starts now, whatever the instance is
    /// doing; without an earlier version to go to, the request is dropped
    /// with an event saying so.
    pub(super) fn take_rollback_request(&mut self, desired: &CompiledInstance) {
        let Some(request) = self.state.rollback_request.take() else {
            return;
        };
        match rollback::requested(&request, &self.state, desired, self.now) {
            Some(rollback) => self.start_rollback(rollback),
            None => self.event(
                EventKind::RollbackRequested { to: None },
                format!(
                    "{} asked for a rollback, but no earlier version converged here",
                    request.actor
                ),
            ),
        }
    }

    /// A rollback, and with it the hold of the version it left, ends when
    /// another release is desired (a config pushed under the same release
    /// keeps it), or when someone asks for that version again: released
    /// again, or approved explicitly. Nothing else applies a version that
    /// failed here again: no drift check, no config push, no `up`. Asked
    /// for again where it failed with nothing to roll back to, it is
    /// retried from its first attempt.
    pub(super) fn end_rollback(&mut self, desired: &CompiledInstance) {
        let retry = self.state.retry_request.take();
        let asked = |failed: &Version, after: Timestamp| {
            retry
                .as_ref()
                .is_some_and(|r| r.version.release() == failed.release() && r.at >= after)
        };
        match &self.state.rollback {
            Some(rollback) => {
                if asked(&rollback.failed_version, rollback.started_at)
                    || desired.version.release() != rollback.failed_version.release()
                {
                    self.state.rollback = None;
                }
            }
            None => {
                if let Some(target) = self.state.target.as_mut()
                    && target.failed.is_some()
                    && asked(&target.version, Timestamp::MIN)
                {
                    target.retry_from_start();
                }
            }
        }
    }

    pub(super) fn start_rollback(&mut self, rollback: Rollback) {
        let (message, reason) = rollback::announcement(&rollback);
        self.event(
            EventKind::RollbackStarted {
                failed_version: rollback.failed_version.clone(),
                to: rollback.to.version.clone(),
            },
            message,
        );
        self.set_status(Status::Pending, reason, None);
        self.state.rollback = Some(rollback);
    }

    /// During a rollback the usual statuses read as ROLLING_BACK, and
    /// converging on the old version as ROLLED_BACK.
    pub(super) fn rollback_status(&mut self, before: Status) {
        let Some(rollback) = self.state.rollback.clone() else {
            return;
        };
        match rollback::shown(&rollback, self.state.status, &self.state.reason) {
            rollback::Shown::AsIs => {}
            rollback::Shown::RolledBack { message, reason } => {
                if before != Status::RolledBack {
                    self.event(
                        EventKind::RolledBack {
                            to: rollback.to.version.clone(),
                        },
                        message,
                    );
                }
                self.set_status(Status::RolledBack, reason, Some(WaitCause::Release));
            }
            rollback::Shown::Failed { reason } | rollback::Shown::Held { reason } => {
                self.state.reason = vergence_model::text::sentence(reason);
            }
            rollback::Shown::RollingBack { reason } => {
                self.state.status = Status::RollingBack;
                self.state.reason = vergence_model::text::sentence(reason);
            }
        }
    }
}
