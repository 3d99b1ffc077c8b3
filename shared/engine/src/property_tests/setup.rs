//! The setup: what the two channels are configured with (runtime tier,
//! soak, approval, windows and freezes, alert and job protections,
//! post-deployment checks), and reference predicates for its windows
//! written here, independent of the engine's.

use jiff::civil::{DateTime, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::tests::{job_spec, n, spec};
use vergence_model::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tier {
    ApplyOnly,
    ExitCode,
    Structured,
}

/// Allowed windows, each with a reference predicate written here.
#[derive(Clone, Copy, Debug)]
pub(super) enum Allowed {
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
pub(super) enum Freeze {
    /// A one-off freeze from `start_h` hours after the start (negative:
    /// before) for `hours`.
    Between { start_h: i64, hours: i64 },
    /// fri 16-24 Europe/Berlin
    FridayEveningsBerlin,
}

/// Where the channels are when the events start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Warm {
    /// Nothing ran yet.
    Cold,
    /// Both channels converged on v1 (there is a version to roll back to).
    V1,
    /// Then v2 was pushed and converged in staging: prod is next.
    V2InStaging,
}

/// Where post-deployment checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Checks {
    None,
    Staging,
    Prod,
    Both,
}

#[derive(Clone, Debug)]
pub(super) struct Setup {
    pub(super) tier: Tier,
    /// prod's `releaseChannelStable { releaseChannel: staging, duration }`.
    pub(super) soak: Option<SignedDuration>,
    /// prod's `manualApproval`.
    pub(super) approval: bool,
    pub(super) allowed: Option<Allowed>,
    pub(super) freeze: Option<Freeze>,
    /// A deployment BLOCK protection on alert `errors`.
    pub(super) alert: bool,
    /// A deployment BLOCK job protection `smoke` on prod.
    pub(super) smoke: bool,
    /// A postDeployment job check `canary`.
    pub(super) checks: Checks,
    /// Windows and the alert protection apply to staging too.
    pub(super) gate_staging: bool,
    /// How far things got before the events.
    pub(super) warm: Warm,
    /// The clock starts this many hours after Fri 2027-01-15 08:00 UTC,
    /// so windows start open or closed.
    pub(super) start_h: i64,
}

pub(super) const ALERT: &str = "errors";
pub(super) const SMOKE_KEY: &str = "smoke@deployment";
pub(super) const SMOKE_POLL: SignedDuration = SignedDuration::from_mins(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ch {
    Staging,
    Prod,
}

impl Ch {
    pub(super) fn name(self) -> &'static str {
        match self {
            Ch::Staging => "staging",
            Ch::Prod => "prod",
        }
    }

    pub(super) fn index(self) -> usize {
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
    pub(super) fn on(self, ch: Ch) -> bool {
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
    pub(super) fn gated(&self, ch: Ch) -> bool {
        ch == Ch::Prod || self.gate_staging
    }

    pub(super) fn windows(&self, t0: Timestamp) -> TimeWindows {
        TimeWindows {
            allowed: self.allowed.iter().map(|a| a.window()).collect(),
            denied: self.freeze.iter().map(|f| f.window(t0)).collect(),
        }
    }

    /// Reference: may applies run at `now`?
    pub(super) fn window_open(&self, t0: Timestamp, now: Timestamp) -> bool {
        self.allowed.is_none_or(|a| a.contains(now))
            && !self.freeze.is_some_and(|f| f.contains(t0, now))
    }

    pub(super) fn compiled(&self, ch: Ch, version: &str, t0: Timestamp) -> CompiledInstance {
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
                            job: std::sync::Arc::new(job_spec("./smoke")),
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
                    job: std::sync::Arc::new(job_spec("./canary")),
                },
            ));
        }
        s
    }
}
