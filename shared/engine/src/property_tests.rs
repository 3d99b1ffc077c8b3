//! A property test over random event sequences: one service in two release
//! channels, staging → prod, driven through `decide()` the way `step()`
//! would drive it (prod sees staging through [`UpstreamView::of`] before
//! every decision).
//!
//! The generator picks a delivery setup (runtime tier, soak, manual
//! approval, allowed windows, a freeze, an alert and a job protection,
//! post-deployment checks, whether staging is gated too, where the clock
//! starts, and how far things got before: nothing, v1 everywhere, or v2
//! already in staging) and up to 60 events: steps, job results, the
//! clock, alerts, approvals, pauses and new versions. Fetches report a
//! small runtime model: `Ok` means the truth (the version applied last is
//! what runs), the other outcomes are the runtime misbehaving.
//!
//! Every decision is checked against bookkeeping kept here, independent of
//! the engine's gate code:
//!
//! 1. an apply (other than a rollback to a version that was good here) runs
//!    only when its gates pass at that moment: staging converged on the same
//!    version without a break for the soak and its checks passed; approved;
//!    inside the allowed windows and outside freezes (by a reference
//!    predicate, and by `windows::evaluate`); no alert firing; the
//!    deployment protection passed within its poll interval; not paused;
//!    a rollback only goes back from the desired version to a version that
//!    converged and passed its checks in that channel;
//! 2. a version that failed in staging is never applied to prod;
//! 3. invariants: at most one job per decision, the dispatched job is the
//!    one in flight, no job starts over a running one, a next check
//!    (before the deadline) whenever a job is in flight, never a next check
//!    at or before now, job ids never reused.
//!
//! After the sequence, in a good world (alerts resolved, pauses lifted,
//! approvals given, every job succeeding, fetches finding the version they
//! look for), both channels must converge on the desired version within
//! 200 rounds of "finish or step each instance, then move the clock to the
//! next check" — after a fresh version if the desired one already failed.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use jiff::civil::{DateTime, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::tests::{Sim, job_spec, n, spec};
use super::windows::evaluate;
use super::{Decision, Settled, UpstreamView, human, settled};
use vergence_model::*;

// ---------------------------------------------------------------------------
// The setup: what the two channels are configured with.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    ApplyOnly,
    ExitCode,
    Structured,
}

/// Allowed windows, each with a reference predicate written here.
#[derive(Clone, Copy, Debug)]
enum Allowed {
    /// mon-fri 9-17 Europe/Berlin
    WeekdaysBerlin,
    /// sat,sun (whole days) UTC
    WeekendsUtc,
    /// every day 22-6 America/New_York (past midnight)
    NightsNewYork,
    /// tue,thu 09:30-17:00 Asia/Kolkata
    HalfHoursKolkata,
}

/// Freezes (deny windows).
#[derive(Clone, Copy, Debug)]
enum Freeze {
    /// A one-off freeze from `start_h` hours after the start (negative:
    /// before) for `hours`.
    Between { start_h: i64, hours: i64 },
    /// fri 16-24 Europe/Berlin
    FridayEveningsBerlin,
}

/// Where the channels are when the events start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Warm {
    /// Nothing ran yet.
    Cold,
    /// Both channels converged on v1 (there is a version to roll back to).
    V1,
    /// Then v2 was pushed and converged in staging: prod is next.
    V2InStaging,
}

/// Where post-deployment checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checks {
    None,
    Staging,
    Prod,
    Both,
}

#[derive(Clone, Debug)]
struct Setup {
    tier: Tier,
    /// prod's `releaseChannelStable { releaseChannel: staging, duration }`.
    soak: Option<SignedDuration>,
    /// prod's `manualApproval`.
    approval: bool,
    allowed: Option<Allowed>,
    freeze: Option<Freeze>,
    /// A deployment BLOCK protection on alert `errors`.
    alert: bool,
    /// A deployment BLOCK job protection `smoke` on prod.
    smoke: bool,
    /// A postDeployment job check `canary`.
    checks: Checks,
    /// Windows and the alert protection apply to staging too.
    gate_staging: bool,
    /// How far things got before the events.
    warm: Warm,
    /// The clock starts this many hours after Fri 2027-01-15 08:00 UTC,
    /// so windows start open or closed.
    start_h: i64,
}

const ALERT: &str = "errors";
const SMOKE_KEY: &str = "smoke@deployment";
const SMOKE_POLL: SignedDuration = SignedDuration::from_mins(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ch {
    Staging,
    Prod,
}

impl Ch {
    fn name(self) -> &'static str {
        match self {
            Ch::Staging => "staging",
            Ch::Prod => "prod",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

fn local(now: Timestamp, zone: &str) -> DateTime {
    now.to_zoned(TimeZone::get(zone).unwrap()).datetime()
}

fn weekend(day: Weekday) -> bool {
    matches!(day, Weekday::Saturday | Weekday::Sunday)
}

impl Allowed {
    fn window(self) -> RecurringWindow {
        let (days, hours, zone) = match self {
            Allowed::WeekdaysBerlin => (Some("mon-fri"), Some("9-17"), "Europe/Berlin"),
            Allowed::WeekendsUtc => (Some("sat,sun"), None, "UTC"),
            Allowed::NightsNewYork => (None, Some("22-6"), "America/New_York"),
            Allowed::HalfHoursKolkata => (Some("tue,thu"), Some("09:30-17:00"), "Asia/Kolkata"),
        };
        RecurringWindow::parse(days, hours, Some(zone)).unwrap()
    }

    /// Reference: is `now` inside the window?
    fn contains(self, now: Timestamp) -> bool {
        match self {
            Allowed::WeekdaysBerlin => {
                let t = local(now, "Europe/Berlin");
                !weekend(t.weekday()) && (9..17).contains(&t.hour())
            }
            Allowed::WeekendsUtc => weekend(local(now, "UTC").weekday()),
            Allowed::NightsNewYork => {
                let t = local(now, "America/New_York");
                t.hour() >= 22 || t.hour() < 6
            }
            Allowed::HalfHoursKolkata => {
                let t = local(now, "Asia/Kolkata");
                let minute = i32::from(t.hour()) * 60 + i32::from(t.minute());
                matches!(t.weekday(), Weekday::Tuesday | Weekday::Thursday)
                    && (570..1020).contains(&minute)
            }
        }
    }
}

impl Freeze {
    fn bounds(self, t0: Timestamp) -> Option<(Timestamp, Timestamp)> {
        match self {
            Freeze::Between { start_h, hours } => {
                let start = t0 + SignedDuration::from_hours(start_h);
                Some((start, start + SignedDuration::from_hours(hours)))
            }
            Freeze::FridayEveningsBerlin => None,
        }
    }

    fn window(self, t0: Timestamp) -> DenyWindow {
        match self.bounds(t0) {
            Some((start, end)) => DenyWindow::Between {
                name: Some("launch-freeze".into()),
                start,
                end,
            },
            None => DenyWindow::Recurring {
                name: Some("weekend-freeze".into()),
                window: RecurringWindow::parse(Some("fri"), Some("16-24"), Some("Europe/Berlin"))
                    .unwrap(),
            },
        }
    }

    /// Reference: is `now` inside the freeze?
    fn contains(self, t0: Timestamp, now: Timestamp) -> bool {
        match self.bounds(t0) {
            Some((start, end)) => start <= now && now < end,
            None => {
                let t = local(now, "Europe/Berlin");
                t.weekday() == Weekday::Friday && t.hour() >= 16
            }
        }
    }
}

impl Checks {
    fn on(self, ch: Ch) -> bool {
        matches!(
            (self, ch),
            (Checks::Both, _) | (Checks::Staging, Ch::Staging) | (Checks::Prod, Ch::Prod)
        )
    }
}

fn protection(name: &str, lifecycle: Lifecycle, check: ProtectionCheck) -> CompiledProtection {
    CompiledProtection {
        name: n(name),
        lifecycle,
        check,
        poll_interval: if name == "smoke" {
            SMOKE_POLL
        } else {
            SignedDuration::from_mins(1)
        },
        attached_to: "release channel prod".into(),
    }
}

impl Setup {
    fn gated(&self, ch: Ch) -> bool {
        ch == Ch::Prod || self.gate_staging
    }

    fn windows(&self, t0: Timestamp) -> TimeWindows {
        TimeWindows {
            allowed: self.allowed.iter().map(|a| a.window()).collect(),
            denied: self.freeze.iter().map(|f| f.window(t0)).collect(),
        }
    }

    /// Reference: may applies run at `now`?
    fn window_open(&self, t0: Timestamp, now: Timestamp) -> bool {
        self.allowed.is_none_or(|a| a.contains(now))
            && !self.freeze.is_some_and(|f| f.contains(t0, now))
    }

    fn compiled(&self, ch: Ch, version: &str, t0: Timestamp) -> CompiledInstance {
        let mode = match self.tier {
            Tier::ApplyOnly => None,
            Tier::ExitCode => Some(FetchMode::ExitCode),
            Tier::Structured => Some(FetchMode::Structured),
        };
        let mut s = spec(ch.name(), version, mode);
        if self.gated(ch) {
            s.windows = self.windows(t0);
            if self.alert {
                s.protections.push(protection(
                    "no-alerts",
                    Lifecycle::Deployment {
                        failure_behavior: FailureBehavior::Block,
                    },
                    ProtectionCheck::Alert {
                        alert: ALERT.into(),
                    },
                ));
            }
        }
        match ch {
            Ch::Staging => s.downstream = vec![n("prod")],
            Ch::Prod => {
                s.preconditions.push(Precondition::ReleaseChannelStable {
                    release_channel: n("staging"),
                    duration: self.soak,
                });
                if self.approval {
                    s.preconditions.push(Precondition::ManualApproval {
                        name: "prod-gate".into(),
                    });
                }
                if self.smoke {
                    s.protections.push(protection(
                        "smoke",
                        Lifecycle::Deployment {
                            failure_behavior: FailureBehavior::Block,
                        },
                        ProtectionCheck::Job {
                            job: Box::new(job_spec("./smoke")),
                        },
                    ));
                }
            }
        }
        if self.checks.on(ch) {
            s.protections.push(protection(
                "canary",
                Lifecycle::PostDeployment {
                    delay: SignedDuration::from_secs(30),
                    duration: SignedDuration::from_mins(2),
                },
                ProtectionCheck::Job {
                    job: Box::new(job_spec("./canary")),
                },
            ));
        }
        s
    }
}

// ---------------------------------------------------------------------------
// Events.

/// How the in-flight job ends; what that means depends on the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// apply/check exit 0; fetch: the truth, converged if and only if the
    /// last successful apply here was of the version fetched.
    Ok,
    /// apply/check exit 1; exitCode fetch: error (3); structured: FAILED.
    Fail,
    /// apply exit 75 (retryable); fetch exit 75 (an error).
    Retryable,
    /// exitCode fetch exit 2; structured: the desired version, drifted.
    Drift,
    /// exitCode fetch exit 2; structured: another version is active.
    OtherVersion,
    /// exitCode fetch exit 2; structured: the desired version, PENDING.
    Rolling,
    /// exitCode fetch exit 3; structured: malformed output.
    Error,
    /// Only in the good world: like `Ok`, but a fetch finds the version it
    /// looks for running (whoever put it there), so nothing is polled for
    /// hours while a gate holds.
    Converged,
}

#[derive(Clone, Copy)]
enum Action {
    /// A step with nothing new.
    Step(Ch),
    /// The in-flight job finishes (a plain step when nothing is in flight).
    Finish(Ch, Outcome),
    /// Shorthand for up to 8 `Finish(ch, Ok)` in a row, until nothing is in
    /// flight: the instance works as far as its gates let it right now.
    Run(Ch),
    Advance(SignedDuration),
    /// Alert `errors` fires (true) or resolves (false).
    Alert(bool),
    /// Someone approves prod's desired version.
    Approve,
    /// A new version for both channels.
    Push,
    /// Pause (true) or resume (false) an instance.
    Pause(Ch, bool),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Step(ch) => write!(f, "step {}", ch.name()),
            Action::Finish(ch, outcome) => write!(f, "finish {} {outcome:?}", ch.name()),
            Action::Run(ch) => write!(f, "run {}", ch.name()),
            Action::Advance(by) => write!(f, "advance {}", human(*by)),
            Action::Alert(true) => f.write_str("alert fires"),
            Action::Alert(false) => f.write_str("alert resolves"),
            Action::Approve => f.write_str("approve prod"),
            Action::Push => f.write_str("push a new version"),
            Action::Pause(ch, true) => write!(f, "pause {}", ch.name()),
            Action::Pause(ch, false) => write!(f, "resume {}", ch.name()),
        }
    }
}

/// Exit code and stdout for a job of `kind` at `version` ending with
/// `outcome`, on a runtime where `running` was applied last.
fn job_output(
    tier: Tier,
    kind: JobKind,
    version: &str,
    running: Option<&str>,
    outcome: Outcome,
) -> (i32, String) {
    let json = |version: &str, status: &str, drifted: bool| {
        format!(
            r#"{{"objects":[{{"name":"web","objectType":"Deployment","versions":[{{"version":"{version}","active":true,"drifted":{drifted}}}],"status":"{status}"}}]}}"#
        )
    };
    match (kind, tier, outcome) {
        (JobKind::Apply, _, Outcome::Ok | Outcome::Converged) => (0, String::new()),
        (JobKind::Apply, _, Outcome::Retryable) => (75, String::new()),
        (JobKind::Apply, _, _) => (1, String::new()),
        (JobKind::Fetch, Tier::Structured, outcome) => match outcome {
            Outcome::Converged => (0, json(version, "SUCCEEDED", false)),
            Outcome::Ok => match running {
                Some(running) => (0, json(running, "SUCCEEDED", false)),
                None => (0, r#"{"objects":[]}"#.to_owned()),
            },
            Outcome::Fail => (0, json(version, "FAILED", false)),
            Outcome::Retryable => (75, String::new()),
            Outcome::Drift => (0, json(version, "SUCCEEDED", true)),
            Outcome::OtherVersion => (0, json("v0", "SUCCEEDED", false)),
            Outcome::Rolling => (0, json(version, "PENDING", false)),
            Outcome::Error => (0, "deploying... done".to_owned()),
        },
        (JobKind::Fetch, _, outcome) => match outcome {
            Outcome::Converged => (0, String::new()),
            Outcome::Ok if running == Some(version) => (0, String::new()),
            Outcome::Ok => (2, format!("web runs {}", running.unwrap_or("nothing"))),
            Outcome::Drift | Outcome::OtherVersion | Outcome::Rolling => {
                (2, "web differs".to_owned())
            }
            Outcome::Retryable => (75, String::new()),
            Outcome::Fail | Outcome::Error => (3, String::new()),
        },
        (JobKind::Protection | JobKind::GetInfo, _, Outcome::Ok | Outcome::Converged) => {
            (0, String::new())
        }
        (JobKind::Protection | JobKind::GetInfo, _, _) => (1, String::new()),
    }
}

// ---------------------------------------------------------------------------
// The world: two instances, one clock, and the reference bookkeeping.

struct World {
    setup: Setup,
    t0: Timestamp,
    now: Timestamp,
    sims: [Sim; 2],
    /// The version each runtime runs: the last one applied successfully.
    running: [Option<String>; 2],
    versions: u32,
    alert_firing: bool,
    paused: [bool; 2],
    /// Versions approved for prod.
    approved: BTreeSet<String>,
    /// Every job id handed out, in both channels.
    job_ids: HashSet<String>,
    /// Every version staging ever reported as failed or rolled back.
    failed_in_staging: BTreeSet<String>,
    /// Per channel: the version it has been CONVERGED on without a break,
    /// and since when (for the soak).
    converged_since: [Option<(String, Timestamp)>; 2],
    /// Per channel: versions seen CONVERGED with their checks passed.
    good: [BTreeSet<String>; 2],
    /// Per channel: the latest result of the `smoke` protection, as reported.
    smoke_seen: [Option<(Timestamp, bool)>; 2],
    trace: Vec<String>,
    /// Off during the warm-up, which only gets one line.
    tracing: bool,
}

impl World {
    fn new(setup: Setup) -> Self {
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

    fn sim(&self, ch: Ch) -> &Sim {
        &self.sims[ch.index()]
    }

    fn desired(&self, ch: Ch) -> String {
        self.sim(ch).record.desired.version().unwrap().to_string()
    }

    fn run(&mut self, action: Action) -> Result<(), TestCaseError> {
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

    fn note(&mut self, line: String) {
        if self.tracing {
            self.trace.push(line);
        }
    }

    fn approve(&mut self) {
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

    fn push(&mut self) {
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
    fn decide(&mut self, ch: Ch, outcome: Option<Outcome>) -> Result<(), TestCaseError> {
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

    /// A stop is asked only for a job of a version no longer wanted, and
    /// starts nothing until the job has ended.
    fn check_stop_request(
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

    fn context(&self) -> String {
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

    // -----------------------------------------------------------------------
    // The properties.

    fn check(
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

    // -----------------------------------------------------------------------
    // Liveness.

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
    fn warm_up(&mut self, warm: Warm) -> Result<(), TestCaseError> {
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
    fn good_world(&mut self) -> Result<(), TestCaseError> {
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

/// Post-deployment checks of `v` have passed in `state`.
fn checks_passed(state: &InstanceState, v: &str) -> bool {
    state
        .post_deployment
        .as_ref()
        .is_some_and(|p| p.version == v && p.passed_at.is_some())
}

// ---------------------------------------------------------------------------
// Strategies.

fn setup() -> impl Strategy<Value = Setup> {
    let tier = prop_oneof![
        Just(Tier::ApplyOnly),
        Just(Tier::ExitCode),
        Just(Tier::Structured)
    ];
    let soak = prop_oneof![
        Just(None),
        Just(Some(SignedDuration::from_mins(5))),
        Just(Some(SignedDuration::from_mins(30))),
        Just(Some(SignedDuration::from_hours(2))),
    ];
    let allowed = prop::option::of(prop_oneof![
        Just(Allowed::WeekdaysBerlin),
        Just(Allowed::WeekendsUtc),
        Just(Allowed::NightsNewYork),
        Just(Allowed::HalfHoursKolkata),
    ]);
    let freeze = prop::option::of(prop_oneof![
        (-24..72i64, 1..72i64).prop_map(|(start_h, hours)| Freeze::Between { start_h, hours }),
        Just(Freeze::FridayEveningsBerlin),
    ]);
    let checks = prop_oneof![
        Just(Checks::None),
        Just(Checks::Staging),
        Just(Checks::Prod),
        Just(Checks::Both)
    ];
    (
        tier,
        soak,
        any::<bool>(),
        allowed,
        freeze,
        any::<bool>(),
        any::<bool>(),
        checks,
        any::<bool>(),
        prop_oneof![Just(Warm::Cold), Just(Warm::V1), Just(Warm::V2InStaging)],
        0..168i64,
    )
        .prop_map(
            |(
                tier,
                soak,
                approval,
                allowed,
                freeze,
                alert,
                smoke,
                checks,
                gate_staging,
                warm,
                start_h,
            )| {
                Setup {
                    start_h,
                    tier,
                    soak,
                    approval,
                    allowed,
                    freeze,
                    alert,
                    smoke,
                    checks,
                    gate_staging,
                    warm,
                }
            },
        )
}

fn channel() -> impl Strategy<Value = Ch> {
    prop_oneof![Just(Ch::Staging), Just(Ch::Prod)]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        10 => Just(Outcome::Ok),
        1 => Just(Outcome::Fail),
        1 => Just(Outcome::Retryable),
        1 => Just(Outcome::Drift),
        1 => Just(Outcome::OtherVersion),
        1 => Just(Outcome::Rolling),
        1 => Just(Outcome::Error),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    let by = prop_oneof![
        2 => (1..60i64).prop_map(SignedDuration::from_secs),
        2 => (1..60i64).prop_map(SignedDuration::from_mins),
        1 => (1..12i64).prop_map(SignedDuration::from_hours),
    ];
    prop_oneof![
        4 => channel().prop_map(Action::Step),
        10 => (channel(), outcome()).prop_map(|(ch, o)| Action::Finish(ch, o)),
        8 => channel().prop_map(Action::Run),
        8 => by.prop_map(Action::Advance),
        2 => any::<bool>().prop_map(Action::Alert),
        3 => Just(Action::Approve),
        1 => Just(Action::Push),
        1 => channel().prop_map(|ch| Action::Pause(ch, true)),
        3 => channel().prop_map(|ch| Action::Pause(ch, false)),
    ]
}

/// 1024 cases take about 2 s in a debug build. Fewer would be thin: only
/// about one case in six gets prod to an apply while gates are flipping;
/// `PROPTEST_CASES` runs more (or fewer).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    ProptestConfig {
        cases,
        // Minimal failures are printed; keep the source tree free of
        // regression files.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn property_two_channels_never_skip_a_gate_and_converge_in_a_good_world(
        setup in setup(),
        actions in prop::collection::vec(action(), 0..60),
    ) {
        let warm = setup.warm;
        let mut world = World::new(setup);
        world.warm_up(warm)?;
        for action in actions {
            world.run(action)?;
        }
        world.good_world()?;
    }
}
