//! What holds an apply until it may run: allowed windows and freezes,
//! block and fail protections, alerts, pauses; and getInfo, which runs on
//! a converged instance without ever holding it.

use jiff::{SignedDuration, Timestamp};

use super::job_protection;
use crate::tests::{Sim, n, spec};
use vergence_model::*;

fn alert_protection(alert: &str) -> CompiledProtection {
    CompiledProtection {
        name: n("no-firing-alerts"),
        lifecycle: Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        },
        check: ProtectionCheck::Alert {
            alert: alert.into(),
        },
        poll_interval: SignedDuration::from_mins(1),
        attached_to: "release channel prod".into(),
    }
}

fn at(civil: &str, zone: &str) -> Timestamp {
    civil
        .parse::<jiff::civil::DateTime>()
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::get(zone).unwrap())
        .unwrap()
        .timestamp()
}

#[test]
fn outside_the_allowed_window_the_instance_is_blocked_until_it_opens() {
    let mut s = spec("prod", "v1", None);
    s.windows = TimeWindows {
        allowed: vec![
            RecurringWindow::parse(Some("mon-fri"), Some("9-17"), Some("Europe/Berlin")).unwrap(),
        ],
        denied: Vec::new(),
    };
    let mut sim = Sim::new(s);
    // Saturday noon in Berlin.
    sim.now = at("2026-11-28T12:00", "Europe/Berlin");
    let d = sim.step();
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    let reason = &sim.record.state.reason;
    assert!(reason.contains("mon-fri 09-17 Europe/Berlin"), "{reason}");
    let opens = at("2026-11-30T09:00", "Europe/Berlin");
    assert_eq!(
        sim.record.next_check_at,
        Some(opens),
        "looks again exactly when it opens"
    );
    assert_eq!(
        sim.record.state.wait,
        Some(WaitCause::Time { until: opens })
    );

    sim.now = opens;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply, "resumes by itself");
}

#[test]
fn a_freeze_inside_the_allowed_window_blocks_and_lifts() {
    let mut s = spec("prod", "v1", None);
    let start: Timestamp = "2026-12-20T00:00:00Z".parse().unwrap();
    let end: Timestamp = "2027-01-02T00:00:00Z".parse().unwrap();
    s.windows = TimeWindows {
        allowed: Vec::new(),
        denied: vec![DenyWindow::Between {
            name: Some("holidays".into()),
            start,
            end,
        }],
    };
    let mut sim = Sim::new(s);
    sim.now = "2026-12-24T10:00:00Z".parse().unwrap();
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("holidays"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(sim.record.next_check_at, Some(end));
    sim.now = end;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
}

/// In the holiday freeze, at `version`, with an approval before apply.
fn frozen(version: &str) -> Sim {
    let mut s = spec("prod", version, None);
    s.windows = TimeWindows {
        allowed: Vec::new(),
        denied: vec![DenyWindow::Between {
            name: Some("holidays".into()),
            start: "2026-12-20T00:00:00Z".parse().unwrap(),
            end: "2027-01-02T00:00:00Z".parse().unwrap(),
        }],
    };
    let mut sim = Sim::new(s);
    sim.now = "2026-12-24T10:00:00Z".parse().unwrap();
    sim
}

fn glass(version: &str, sim: &Sim, hours: i64) -> WindowOverride {
    WindowOverride {
        version: n(version),
        actor: "alice".into(),
        reason: "incident 123".into(),
        at: sim.now,
        expires_at: sim.now + SignedDuration::from_hours(hours),
    }
}

#[test]
fn a_break_glass_override_lets_its_version_through_a_freeze_and_nothing_else() {
    // Another version's override, or an expired one, opens nothing.
    let mut sim = frozen("v1");
    sim.record.controls.window_override = Some(glass("v0", &sim, 2));
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    sim.record.controls.window_override = Some(glass("v1", &sim, 2));
    sim.advance(SignedDuration::from_hours(3));
    assert!(sim.step().jobs.is_empty(), "expired");

    // v1's own override: v1 applies in the freeze.
    sim.record.controls.window_override = Some(glass("v1", &sim, 2));
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
    sim.finish(0, "");
    assert_eq!(sim.status(), Status::Converged);

    // Converged, the override is spent: drift waits for the freeze to end
    // like any apply.
    let mut s = sim.record.desired.compiled().unwrap().clone();
    s.fetch = spec("prod", "v1", Some(FetchMode::ExitCode)).fetch;
    sim.set_desired(s);
    sim.advance(SignedDuration::from_mins(1));
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch);
    sim.finish(2, "drifted");
    assert!(sim.last_jobs().is_empty(), "{:?}", sim.last_jobs());
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("holidays"),
        "{}",
        sim.record.state.reason
    );

    // A pause and an approval are not opened by it.
    let mut sim = frozen("v2");
    let mut s = sim.record.desired.compiled().unwrap().clone();
    s.require_approval_before_apply = true;
    sim.set_desired(s);
    sim.record.controls.window_override = Some(glass("v2", &sim, 2));
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::WaitingApproval);
    let mut sim = frozen("v2");
    sim.record.controls.window_override = Some(glass("v2", &sim, 2));
    sim.record.controls.paused = Some(ControlMark {
        actor: "bob".into(),
        at: sim.now,
    });
    assert!(sim.step().jobs.is_empty());
    assert_eq!(sim.status(), Status::Paused);
}

#[test]
fn a_block_protection_runs_before_the_apply_and_holds_it_while_failing() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "smoke",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Block,
        },
    )];
    let mut sim = Sim::new(s);
    let d = sim.step();
    assert_eq!(
        d.jobs[0].kind,
        JobKind::Protection,
        "checked before applying"
    );
    let d = sim.finish(1, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("protection smoke"),
        "{}",
        sim.record.state.reason
    );
    let recheck = sim.record.next_check_at.unwrap();
    assert_eq!(
        recheck,
        sim.now.checked_add(SignedDuration::from_mins(1)).unwrap()
    );

    sim.now = recheck;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Protection);
    let d = sim.finish(0, "");
    assert_eq!(
        d.jobs[0].kind,
        JobKind::Apply,
        "passes, so the apply goes ahead"
    );
}

#[test]
fn a_fail_protection_fails_the_version() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "guard",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Fail,
        },
    )];
    let mut sim = Sim::new(s);
    sim.step();
    let d = sim.finish(3, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Failed);
    assert!(
        sim.record.state.reason.contains("FAIL"),
        "{}",
        sim.record.state.reason
    );
}

#[test]
fn a_fail_protection_that_cannot_read_its_source_blocks_and_never_fails() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![job_protection(
        "errors",
        Lifecycle::Deployment {
            failure_behavior: FailureBehavior::Fail,
        },
    )];
    let mut sim = Sim::new(s);
    sim.step();
    let unread = JobOutcome::Inconclusive {
        message: "cannot reach Prometheus at http://prom:9090: connection refused".into(),
    };
    let d = sim.end_with(JobResult::without_output(unread, sim.now));
    assert!(d.jobs.is_empty(), "no apply while unread");
    assert_eq!(sim.status(), Status::Blocked, "{}", sim.record.state.reason);
    assert!(
        sim.record.state.reason.contains(
            "protection errors (deployment, of release channel prod) cannot be evaluated: \
             inconclusive: cannot reach Prometheus"
        ),
        "{}",
        sim.record.state.reason
    );
    // Read again at its poll interval; once it reads a pass, the apply goes.
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::Protection);
    assert_eq!(sim.finish(0, "").jobs[0].kind, JobKind::Apply);
}

#[test]
fn an_alert_firing_mid_rollout_pauses_the_next_apply_and_resolving_resumes_it() {
    let mut s = spec("prod", "v1", None);
    s.protections = vec![alert_protection("high-errors")];
    let mut sim = Sim::new(s);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply, "quiet: applies");
    // The first attempt fails; meanwhile the alert fires.
    sim.finish(1, "");
    sim.alerts.insert(
        "high-errors".into(),
        AlertState {
            name: "high-errors".into(),
            firing: true,
            since: sim.now,
            actor: "alertmanager".into(),
            summary: Some("5xx above 2%".into()),
        },
    );
    sim.now = sim.record.next_check_at.unwrap();
    let d = sim.step();
    assert!(d.jobs.is_empty(), "no second attempt while the alert fires");
    assert_eq!(sim.status(), Status::Blocked);
    assert!(
        sim.record.state.reason.contains("high-errors is firing"),
        "{}",
        sim.record.state.reason
    );
    assert_eq!(sim.record.state.wait, Some(WaitCause::Person));

    sim.alerts.get_mut("high-errors").unwrap().firing = false;
    let d = sim.step();
    assert_eq!(d.jobs[0].kind, JobKind::Apply);
    assert_eq!(d.jobs[0].attempt, 2);
}

#[test]
fn paused_instances_fetch_but_never_apply() {
    let mut sim = Sim::new(spec("prod", "v1", Some(FetchMode::ExitCode)));
    sim.record.controls.paused = Some(ControlMark {
        actor: "cli:alice".into(),
        at: sim.now,
    });
    assert_eq!(sim.step().jobs[0].kind, JobKind::Fetch, "fetches go on");
    let d = sim.finish(2, "");
    assert!(d.jobs.is_empty());
    assert_eq!(sim.status(), Status::Paused);
    assert!(sim.record.state.reason.contains("vergence resume"));
    sim.record.controls.paused = None;
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
}

#[test]
fn get_info_outputs_are_kept_and_never_change_convergence() {
    let mut s = spec("prod", "v1", None);
    s.get_info = Some(GetInfoSpec {
        job: crate::tests::job_spec("./info").into(),
        poll_interval: SignedDuration::from_mins(5),
    });
    let mut sim = Sim::new(s);
    assert_eq!(sim.step().jobs[0].kind, JobKind::Apply);
    let d = sim.finish(0, "");
    assert_eq!(
        d.jobs[0].kind,
        JobKind::GetInfo,
        "after converging, when idle"
    );
    assert_eq!(sim.status(), Status::Converged);
    sim.finish(
        0,
        r#"{"outputs":[{"name":"url","text":"https://shop.example"}]}"#,
    );
    assert_eq!(sim.status(), Status::Converged);
    assert_eq!(
        sim.record.state.info,
        vec![InfoOutput {
            name: "url".into(),
            text: "https://shop.example".into()
        }]
    );
    let next = sim.record.next_check_at.unwrap();
    assert_eq!(
        next,
        sim.now.checked_add(SignedDuration::from_mins(5)).unwrap()
    );
    sim.now = next;
    assert_eq!(sim.step().jobs[0].kind, JobKind::GetInfo);
    sim.finish(0, "console: https://console.example/shop\n");
    assert_eq!(sim.status(), Status::Converged, "freeform info is shown");
    assert!(
        sim.record.state.info.is_empty(),
        "no structured outputs now"
    );
    assert_eq!(
        sim.record.state.info_text.as_deref(),
        Some("console: https://console.example/shop")
    );
    assert_eq!(sim.record.state.info_failure, None);
    sim.now = sim.record.next_check_at.unwrap();
    assert_eq!(sim.step().jobs[0].kind, JobKind::GetInfo);
    sim.finish(3, "half a report");
    assert_eq!(
        sim.status(),
        Status::Converged,
        "a failing getInfo never fails the instance"
    );
    assert_eq!(sim.record.state.info_text.as_deref(), Some("half a report"));
    assert_eq!(
        sim.record.state.info_failure.as_deref(),
        Some("getInfo exited with 3: boom")
    );
}
