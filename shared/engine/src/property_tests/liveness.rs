//! Liveness: the warm-up before the events, and the good world after them,
//! in which both channels must converge on the desired version.

use jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::events::Outcome;
use super::setup::{Ch, Warm};
use super::world::World;
use crate::{Settled, UpstreamView, human, settled};
use vergence_model::*;

impl World {
    /// `ch` converged on its desired version, checks passed, nothing running.
    fn done_in(&self, ch: Ch) -> bool {
        let record = &self.sim(ch).record;
        record.state.status == Status::Converged
            && record.state.current_version.as_deref() == Some(self.desired(ch).as_str())
            && settled(record) == Settled::Converged
    }

    fn done(&self) -> bool {
        self.done_in(Ch::Staging) && self.done_in(Ch::Prod)
    }

    /// Quietly, in a good world: both channels converge on v1; for
    /// `Warm::V2InStaging` v2 is then pushed and converges in staging only.
    pub(super) fn warm_up(&mut self, warm: Warm) -> Result<(), TestCaseError> {
        if warm == Warm::Cold {
            return Ok(());
        }
        self.tracing = false;
        self.good_world()?;
        let mut line = format!(
            "(warm-up: both converged on v1 at +{}",
            human(self.now.duration_since(self.t0))
        );
        if warm == Warm::V2InStaging {
            self.push();
            for _ in 0..200 {
                if self.done_in(Ch::Staging) {
                    break;
                }
                let running = self.sim(Ch::Staging).record.state.in_flight.is_some();
                self.decide(Ch::Staging, running.then_some(Outcome::Converged))?;
                let record = &self.sim(Ch::Staging).record;
                if record.state.in_flight.is_none()
                    && let Some(at) = record.next_check_at.filter(|at| *at > self.now)
                {
                    self.now = at;
                }
            }
            prop_assert!(
                self.done_in(Ch::Staging),
                "staging did not converge on v2 in the warm-up\n{}",
                self.context()
            );
            line += &format!(
                ", staging on v2 at +{}",
                human(self.now.duration_since(self.t0))
            );
        }
        self.tracing = true;
        self.trace.push(line + ")");
        Ok(())
    }

    /// Alerts resolve, pauses lift, approvals come, every job succeeds and
    /// fetches find the version they look for: both channels must converge
    /// on the desired version (a fresh one if the desired version already
    /// failed somewhere) within 200 rounds.
    pub(super) fn good_world(&mut self) -> Result<(), TestCaseError> {
        self.note("-- good world --".into());
        let start = self.now;
        self.alert_firing = false;
        self.paused = [false; 2];
        let mut fresh = 0;
        for round in 0..200 {
            // A desired version that failed somewhere never converges: push
            // a fresh one. Every job succeeds from here on, so the failure
            // must come from a result reported before the good world began
            // (a check that failed or got lost, a fetch that saw no
            // convergence), which the engine may only act on a little later.
            let desired = self.desired(Ch::Prod);
            let failed = [Ch::Staging, Ch::Prod].into_iter().find(|&ch| {
                UpstreamView::of(&self.sim(ch).record)
                    .failed_version
                    .as_deref()
                    == Some(desired.as_str())
            });
            if let Some(ch) = failed {
                let state = &self.sim(ch).record.state;
                prop_assert!(
                    round == 0 || failure_predates(state, start),
                    "{desired} failed in {} in a good world\n{}",
                    ch.name(),
                    self.context()
                );
                prop_assert!(fresh < 3, "fresh versions keep failing\n{}", self.context());
                fresh += 1;
                self.note(format!(
                    "{desired} failed in {}: push a new version",
                    ch.name()
                ));
                self.push();
            }
            if self.setup.approval {
                self.approve();
            }
            for ch in [Ch::Staging, Ch::Prod] {
                let running = self.sim(ch).record.state.in_flight.is_some();
                self.decide(ch, running.then_some(Outcome::Converged))?;
            }
            if self.done() {
                return Ok(());
            }
            if self.sims.iter().all(|s| s.record.state.in_flight.is_none()) {
                let next = self
                    .sims
                    .iter()
                    .filter_map(|s| s.record.next_check_at)
                    .min();
                match next {
                    Some(at) if at > self.now => {
                        self.note(format!("advance to +{}", human(at.duration_since(self.t0))));
                        self.now = at;
                    }
                    Some(_) => {}
                    None => prop_assert!(
                        false,
                        "stuck: nothing in flight and nothing scheduled\n{}",
                        self.context()
                    ),
                }
            }
        }
        prop_assert!(
            false,
            "not converged after 200 rounds in a good world\n{}",
            self.context()
        );
        Ok(())
    }
}

/// Whether `state` holds a bad result reported by `start`: a failed or
/// lost post-deployment check, or a fetch that did not see convergence.
fn failure_predates(state: &InstanceState, start: Timestamp) -> bool {
    state
        .protections
        .get(&"canary@postDeployment".parse().unwrap())
        .is_some_and(|o| !o.passed && o.at <= start)
        || state
            .last_fetch
            .as_ref()
            .is_some_and(|o| o.at <= start && o.verdict != FetchVerdict::Converged)
}
