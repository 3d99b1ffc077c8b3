//! The properties every decision is checked against: an apply passes every
//! gate (or is a rollback to a version that was good here), a version that
//! failed in staging never reaches prod, and the job and next-check
//! invariants hold.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::setup::{ALERT, Ch, SMOKE_POLL};
use super::world::World;
use crate::windows::evaluate;
use crate::{Decision, UpstreamView, human};
use vergence_model::*;

impl World {
    /// A stop is asked only for a job of a version no longer wanted, and
    /// starts nothing until the job has ended.
    pub(super) fn check_stop_request(
        &self,
        ch: Ch,
        before: &InstanceRecord,
        decision: &Decision,
    ) -> Result<(), TestCaseError> {
        let flight = decision.state.in_flight.as_ref();
        prop_assert!(
            decision.jobs.is_empty(),
            "{} started a job while stopping another\n{}",
            ch.name(),
            self.context()
        );
        prop_assert!(
            flight.map(|f| &f.job_id) == before.state.in_flight.as_ref().map(|f| &f.job_id),
            "{} asked to stop a job that was not in flight\n{}",
            ch.name(),
            self.context()
        );
        prop_assert!(
            flight.is_some_and(|f| decision
                .state
                .target
                .as_ref()
                .is_some_and(|t| t.version != f.version)),
            "{} stopped a job of the version it wants\n{}",
            ch.name(),
            self.context()
        );
        Ok(())
    }

    pub(super) fn check(
        &mut self,
        ch: Ch,
        before: &InstanceRecord,
        finished: bool,
        d: &Decision,
    ) -> Result<(), TestCaseError> {
        prop_assert!(
            d.jobs.len() <= 1,
            "{} jobs in one decision\n{}",
            d.jobs.len(),
            self.context()
        );
        if let Some(flight) = &d.state.in_flight {
            prop_assert!(
                d.next_check_at.is_some_and(|at| at <= flight.deadline),
                "a job is in flight but the next check is {:?}\n{}",
                d.next_check_at,
                self.context()
            );
        }
        // A check at or before the moment of deciding leaves the instance
        // due for ever: every scheduler tick steps it again for nothing.
        prop_assert!(
            d.next_check_at.is_none_or(|at| at > self.now),
            "{} asks to be checked again at {:?}, not after now\n{}",
            ch.name(),
            d.next_check_at,
            self.context()
        );
        if let Some(job) = d.jobs.first() {
            prop_assert_eq!(
                d.state.in_flight.as_ref().map(|f| &f.job_id),
                Some(&job.id),
                "the dispatched job is not the one in flight\n{}",
                self.context()
            );
            prop_assert!(
                self.job_ids.insert(job.id.as_str().to_owned()),
                "job id {} reused\n{}",
                job.id.as_str(),
                self.context()
            );
        }
        if let Some(flight) = &before.state.in_flight
            && !finished
            && self.now < flight.deadline
            && flight.stop.is_none()
        {
            prop_assert!(
                d.jobs.is_empty() && d.state.in_flight.as_ref() == Some(flight),
                "a job started while {} was still running\n{}",
                flight.job_id.as_str(),
                self.context()
            );
        }
        for job in d.jobs.iter().filter(|j| j.kind == JobKind::Apply) {
            self.check_apply(ch, before, d, &job.version)?;
        }
        Ok(())
    }

    /// Property 1 and 2: an apply of `v` decided for `ch` passes every gate.
    fn check_apply(
        &self,
        ch: Ch,
        before: &InstanceRecord,
        d: &Decision,
        v: &str,
    ) -> Result<(), TestCaseError> {
        let desired = before.desired.version().map_or("", |v| v.as_str());
        prop_assert!(
            !self.paused[ch.index()],
            "{} applies {v} while paused\n{}",
            ch.name(),
            self.context()
        );
        if ch == Ch::Prod {
            prop_assert!(
                UpstreamView::of(&self.sim(Ch::Staging).record)
                    .failed_version
                    .as_deref()
                    != Some(v),
                "prod applies {v}, which failed in staging\n{}",
                self.context()
            );
        }
        if let Some(rollback) = d.state.rollback.as_ref().filter(|r| r.to.version == v) {
            return self.check_rollback(ch, rollback, desired, v);
        }
        prop_assert_eq!(
            v,
            desired,
            "{} applies a version that is not desired\n{}",
            ch.name(),
            self.context()
        );
        if ch == Ch::Prod {
            self.check_promotion(v)?;
        }
        if self.setup.gated(ch) {
            self.check_windows_and_alert(ch, v)?;
        }
        Ok(())
    }

    /// A rollback passes no gate but the pause: it must go back from the
    /// desired version to one that was good here.
    fn check_rollback(
        &self,
        ch: Ch,
        rollback: &Rollback,
        desired: &str,
        v: &str,
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            rollback.failed_version.as_str(),
            desired,
            "a rollback away from a version that is not desired\n{}",
            self.context()
        );
        prop_assert!(
            self.good[ch.index()].contains(v),
            "{} rolls back to {v}, which never converged and passed its checks there\n{}",
            ch.name(),
            self.context()
        );
        Ok(())
    }

    /// Prod applies `v` only after staging: never a version that failed
    /// there, only once staging is converged on it (for the soak, with its
    /// checks passed), approved, and with a recent passing smoke check.
    fn check_promotion(&self, v: &str) -> Result<(), TestCaseError> {
        let (setup, now) = (&self.setup, self.now);
        prop_assert!(
            !self.failed_in_staging.contains(v),
            "prod applies {v}, which failed in staging earlier\n{}",
            self.context()
        );
        let up = &self.sim(Ch::Staging).record.state;
        prop_assert!(
            up.status == Status::Converged && up.current_version.as_deref() == Some(v),
            "prod applies {v} while staging is {} on {:?}\n{}",
            up.status,
            up.current_version,
            self.context()
        );
        if setup.checks.on(Ch::Staging) {
            prop_assert!(
                checks_passed(up, v),
                "prod applies {v} before staging's post-deployment checks passed ({:?})\n{}",
                up.post_deployment,
                self.context()
            );
        }
        if let Some(soak) = setup.soak {
            let since = self.converged_since[Ch::Staging.index()]
                .as_ref()
                .filter(|(seen, _)| seen == v)
                .map(|(_, since)| *since);
            prop_assert!(
                since.is_some_and(|since| now.duration_since(since) >= soak),
                "prod applies {v} with staging converged on it since {since:?}, soak {}\n{}",
                human(soak),
                self.context()
            );
        }
        if setup.approval {
            prop_assert!(
                self.approved.contains(v),
                "prod applies {v} without an approval\n{}",
                self.context()
            );
        }
        if setup.smoke {
            let fresh_pass = self.smoke_seen[Ch::Prod.index()]
                .is_some_and(|(at, passed)| passed && now.duration_since(at) < SMOKE_POLL);
            prop_assert!(
                fresh_pass,
                "prod applies {v} without a recent passing smoke check ({:?})\n{}",
                self.smoke_seen[Ch::Prod.index()],
                self.context()
            );
        }
        Ok(())
    }

    /// A gated channel applies only inside its allowed windows, outside
    /// freezes (by the reference predicate and by the engine's evaluation),
    /// and while the alert is not firing.
    fn check_windows_and_alert(&self, ch: Ch, v: &str) -> Result<(), TestCaseError> {
        let (setup, now) = (&self.setup, self.now);
        if setup.allowed.is_some() || setup.freeze.is_some() {
            let windows = setup.windows(self.t0);
            prop_assert!(
                setup.window_open(self.t0, now) && evaluate(&windows, now).is_open(),
                "{} applies {v} at {} (reference open: {}, windows: {:?})\n{}",
                ch.name(),
                now,
                setup.window_open(self.t0, now),
                evaluate(&windows, now),
                self.context()
            );
        }
        if setup.alert {
            prop_assert!(
                !self.alert_firing,
                "{} applies {v} while alert {ALERT} fires\n{}",
                ch.name(),
                self.context()
            );
        }
        Ok(())
    }
}

/// Post-deployment checks of `v` have passed in `state`.
pub(super) fn checks_passed(state: &InstanceState, v: &str) -> bool {
    state
        .post_deployment
        .as_ref()
        .is_some_and(|p| p.version == v && p.passed_at.is_some())
}
