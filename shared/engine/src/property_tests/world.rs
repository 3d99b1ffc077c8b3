//! The world: two instances, one clock, and the reference bookkeeping kept
//! independent of the engine's gate code.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use jiff::{SignedDuration, Timestamp};
use proptest::test_runner::TestCaseError;

use super::events::{Action, Outcome, job_output};
use super::properties::checks_passed;
use super::setup::{ALERT, Ch, SMOKE_KEY, Setup};
use crate::tests::{Sim, n, spec};
use crate::{UpstreamView, human};
use vergence_model::*;

pub(super) struct World {
    pub(super) setup: Setup,
    pub(super) t0: Timestamp,
    pub(super) now: Timestamp,
    pub(super) sims: [Sim; 2],
    /// The version each runtime runs: the last one applied successfully.
    running: [Option<String>; 2],
    versions: u32,
    pub(super) alert_firing: bool,
    pub(super) paused: [bool; 2],
    /// Versions approved for prod.
    pub(super) approved: BTreeSet<String>,
    /// Every job id handed out, in both channels.
    pub(super) job_ids: HashSet<String>,
    /// Every version staging ever reported as failed or rolled back.
    pub(super) failed_in_staging: BTreeSet<String>,
    /// Per channel: the version it has been CONVERGED on without a break,
    /// and since when (for the soak).
    pub(super) converged_since: [Option<(String, Timestamp)>; 2],
    /// Per channel: versions seen CONVERGED with their checks passed.
    pub(super) good: [BTreeSet<String>; 2],
    /// Per channel: the latest result of the `smoke` protection, as reported.
    pub(super) smoke_seen: [Option<(Timestamp, bool)>; 2],
    pub(super) trace: Vec<String>,
    /// Off during the warm-up, which only gets one line.
    pub(super) tracing: bool,
}
impl World {
    pub(super) fn new(setup: Setup) -> Self {
        let t0 =
            Sim::new(spec("staging", "v1", None)).now + SignedDuration::from_hours(setup.start_h);
        let sims = [Ch::Staging, Ch::Prod].map(|ch| Sim::new(setup.compiled(ch, "v1", t0)));
        Self {
            setup,
            t0,
            now: t0,
            sims,
            running: [None, None],
            versions: 1,
            alert_firing: false,
            paused: [false; 2],
            approved: BTreeSet::new(),
            job_ids: HashSet::new(),
            failed_in_staging: BTreeSet::new(),
            converged_since: [None, None],
            good: [BTreeSet::new(), BTreeSet::new()],
            smoke_seen: [None, None],
            trace: Vec::new(),
            tracing: true,
        }
    }

    pub(super) fn sim(&self, ch: Ch) -> &Sim {
        &self.sims[ch.index()]
    }

    pub(super) fn desired(&self, ch: Ch) -> String {
        self.sim(ch).record.desired.version().unwrap().to_string()
    }

    pub(super) fn run(&mut self, action: Action) -> Result<(), TestCaseError> {
        self.trace.push(format!("{action:?}"));
        match action {
            Action::Step(ch) => self.decide(ch, None),
            Action::Finish(ch, outcome) => self.decide(ch, Some(outcome)),
            Action::Run(ch) => {
                for _ in 0..8 {
                    self.decide(ch, Some(Outcome::Ok))?;
                    if self.sim(ch).record.state.in_flight.is_none() {
                        break;
                    }
                }
                Ok(())
            }
            Action::Advance(by) => {
                self.now += by;
                Ok(())
            }
            Action::Alert(firing) => {
                self.alert_firing = firing;
                Ok(())
            }
            Action::Approve => {
                self.approve();
                Ok(())
            }
            Action::Push => {
                self.push();
                Ok(())
            }
            Action::Pause(ch, paused) => {
                self.paused[ch.index()] = paused;
                Ok(())
            }
        }
    }

    pub(super) fn note(&mut self, line: String) {
        if self.tracing {
            self.trace.push(line);
        }
    }

    pub(super) fn approve(&mut self) {
        let version = self.desired(Ch::Prod);
        if self.approved.insert(version.clone()) {
            let (key, now) = (self.sim(Ch::Prod).record.key.clone(), self.now);
            self.sims[Ch::Prod.index()].approvals.push(Approval {
                instance: key,
                version: version.parse().unwrap(),
                plan_sha256: None,
                actor: "cli:alice".into(),
                at: now,
            });
        }
    }

    pub(super) fn push(&mut self) {
        self.versions += 1;
        let version = format!("v{}", self.versions);
        for ch in [Ch::Staging, Ch::Prod] {
            let compiled = self.setup.compiled(ch, &version, self.t0);
            self.sims[ch.index()].set_desired(compiled);
        }
    }

    /// Hands the facts of the moment to `ch`'s simulator, like `load_facts`.
    fn sync(&mut self, ch: Ch) {
        let upstream = UpstreamView::of(&self.sim(Ch::Staging).record);
        let alerts: BTreeMap<String, AlertState> = [(
            ALERT.to_owned(),
            AlertState {
                name: ALERT.into(),
                firing: self.alert_firing,
                since: self.t0,
                actor: "alertmanager".into(),
                summary: None,
            },
        )]
        .into();
        let (now, paused) = (self.now, self.paused[ch.index()]);
        let sim = &mut self.sims[ch.index()];
        sim.now = now;
        sim.alerts = alerts;
        sim.record.controls.paused = paused.then(|| ControlMark {
            actor: "cli:bob".into(),
            at: now,
        });
        if ch == Ch::Prod {
            sim.upstream.insert(n("staging"), upstream);
        }
    }

    /// One decision for `ch`, finishing its in-flight job with `outcome`.
    pub(super) fn decide(&mut self, ch: Ch, outcome: Option<Outcome>) -> Result<(), TestCaseError> {
        self.sync(ch);
        let tier = self.setup.tier;
        let before = self.sim(ch).record.clone();
        let flight = before.state.in_flight.clone();
        let running = self.running[ch.index()].clone();
        let (decision, finished) = match (outcome, &flight) {
            (Some(outcome), Some(flight)) => {
                let (exit, stdout) = job_output(
                    tier,
                    flight.kind,
                    &flight.version,
                    running.as_deref(),
                    outcome,
                );
                let converged = flight.kind == JobKind::Fetch && outcome == Outcome::Converged;
                if converged || (flight.kind == JobKind::Apply && exit == 0) {
                    self.running[ch.index()] = Some(flight.version.to_string());
                }
                (self.sims[ch.index()].finish(exit, &stdout).clone(), true)
            }
            _ => (self.sims[ch.index()].step().clone(), false),
        };
        // A decision that supersedes the job in flight is followed at once
        // by its stop and a second decision, as Engine::step does.
        let (decision, finished) = if decision
            .state
            .in_flight
            .as_ref()
            .is_some_and(|f| f.stop.is_some())
        {
            self.check_stop_request(ch, &before, &decision)?;
            (self.sims[ch.index()].stop().clone(), true)
        } else {
            (decision, finished)
        };
        if finished
            && let Some(flight) = &flight
            && flight
                .protection
                .as_ref()
                .map(ToString::to_string)
                .as_deref()
                == Some(SMOKE_KEY)
        {
            let passed = matches!(outcome, Some(Outcome::Ok | Outcome::Converged));
            self.smoke_seen[ch.index()] = Some((self.now, passed));
        }
        let state = &decision.state;
        if self.tracing {
            self.trace.push(format!(
                "  +{} {}: {} on {:?}{} — {}",
                human(self.now.duration_since(self.t0)),
                ch.name(),
                state.status,
                state.current_version.as_deref().unwrap_or("-"),
                decision
                    .jobs
                    .iter()
                    .map(|j| format!(" [{} {}]", j.kind.as_str(), j.version))
                    .collect::<String>(),
                state.reason
            ));
        }
        self.check(ch, &before, finished, &decision)?;
        self.observe(ch);
        Ok(())
    }

    /// Updates the reference bookkeeping after a decision for `ch`.
    fn observe(&mut self, ch: Ch) {
        let record = &self.sims[ch.index()].record;
        let state = &record.state;
        let converged_on = match (state.status, &state.current_version) {
            (Status::Converged, Some(v)) => Some(v.clone()),
            _ => None,
        };
        let i = ch.index();
        self.converged_since[i] = match (converged_on, self.converged_since[i].take()) {
            (Some(v), Some((seen, since))) if seen == v => Some((seen, since)),
            (Some(v), _) => Some((v.to_string(), self.now)),
            (None, _) => None,
        };
        if let Some((v, _)) = &self.converged_since[i]
            && (!self.setup.checks.on(ch) || checks_passed(state, v))
        {
            self.good[i].insert(v.clone());
        }
        if ch == Ch::Staging
            && let Some(failed) = UpstreamView::of(record).failed_version
        {
            self.failed_in_staging.insert(failed.to_string());
        }
    }

    pub(super) fn context(&self) -> String {
        let mut lines = vec![format!("setup: {:?}", self.setup)];
        // The whole random phase, and the end of the good world.
        let good = self
            .trace
            .iter()
            .rposition(|l| l.starts_with("-- good world"))
            .unwrap_or(self.trace.len());
        let skip = self.trace.len().saturating_sub(30).max(good);
        lines.extend(self.trace[..good].iter().cloned());
        if skip > good {
            lines.push(format!("  ... {} lines ...", skip - good));
        }
        lines.extend(self.trace[skip..].iter().cloned());
        for ch in [Ch::Staging, Ch::Prod] {
            let state = &self.sim(ch).record.state;
            lines.push(format!(
                "{} now: {} on {:?} (desired {}), in flight {:?}: {}",
                ch.name(),
                state.status,
                state.current_version,
                self.desired(ch),
                state.in_flight.as_ref().map(|f| (f.kind, &f.version)),
                state.reason
            ));
        }
        lines.join("\n")
    }
}
