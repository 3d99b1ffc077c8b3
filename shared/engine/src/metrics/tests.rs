//! The four measures over hand-built event histories, every number
//! checked.

use std::borrow::Cow;

use serde_json::json;

use super::*;

const T0: i64 = 1_900_000_000;
const MIN: i64 = 60;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

fn n<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: fmt::Debug,
{
    s.parse().unwrap()
}

fn at(offset: i64) -> Timestamp {
    Timestamp::from_second(T0 + offset).unwrap()
}

/// A window of `days` from T0.
fn days_from_t0(days: i64) -> Window {
    Window {
        since: at(0),
        until: at(days * DAY),
    }
}

/// shop: staging → prod.
fn shop_channels() -> BTreeMap<ApplicationName, ReleaseChannelName> {
    [(n("shop"), n("prod"))].into()
}

/// An event log written as the engine and the control operations write
/// it, one call per event; times are seconds after T0.
struct History {
    application: &'static str,
    events: Vec<Event>,
}

impl History {
    fn of(application: &'static str) -> Self {
        Self {
            application,
            events: Vec::new(),
        }
    }

    fn push(&mut self, offset: i64, service: &str, channel: Option<&str>, kind: EventKind) {
        self.events.push(Event {
            id: String::new(),
            at: at(offset),
            application: n(self.application),
            service: Some(n(service)),
            release_channel: channel.map(n),
            actor: Cow::Borrowed("test"),
            kind,
            message: String::new(),
        });
    }

    fn release(&mut self, offset: i64, service: &str, version: &str) {
        let version = n(version);
        self.push(offset, service, None, EventKind::ReleaseCreated { version });
    }

    fn desired(&mut self, offset: i64, service: &str, channel: &str, version: &str) {
        let kind = EventKind::DesiredVersionChanged {
            from: None,
            to: n(version),
        };
        self.push(offset, service, Some(channel), kind);
    }

    fn converged(&mut self, offset: i64, service: &str, channel: &str, version: &str) {
        let version = n(version);
        self.push(
            offset,
            service,
            Some(channel),
            EventKind::Converged { version },
        );
    }

    /// Asked for `version` at `offset`, converged on it `took` later.
    fn deploy(&mut self, offset: i64, took: i64, service: &str, channel: &str, version: &str) {
        self.desired(offset, service, channel, version);
        self.converged(offset + took, service, channel, version);
    }

    fn failed(&mut self, offset: i64, service: &str, channel: &str) {
        let kind = EventKind::StatusChanged {
            from: Status::Applying,
            to: Status::Failed,
        };
        self.push(offset, service, Some(channel), kind);
    }

    fn rollback(&mut self, offset: i64, service: &str, channel: &str, failed: &str, to: &str) {
        let kind = EventKind::RollbackStarted {
            failed_version: n(failed),
            to: n(to),
        };
        self.push(offset, service, Some(channel), kind);
    }

    fn rolled_back(&mut self, offset: i64, service: &str, channel: &str, to: &str) {
        self.converged(offset, service, channel, to);
        let kind = EventKind::RolledBack { to: n(to) };
        self.push(offset, service, Some(channel), kind);
    }

    fn measure(
        &self,
        channels: &BTreeMap<ApplicationName, ReleaseChannelName>,
        w: Window,
    ) -> DeliveryMetrics {
        measure(&self.events, channels, w)
    }
}

/// Five releases of shop/web over four days: v3 fails in staging and is
/// replaced by v4, v5 reaches prod and is rolled back there.
fn four_days_of_web() -> History {
    let mut h = History::of("shop");
    // v1: 30 minutes from push to prod.
    h.release(0, "web", "v1");
    h.deploy(0, 10 * MIN, "web", "staging", "v1");
    h.deploy(10 * MIN, 20 * MIN, "web", "prod", "v1");
    // v2: an hour.
    h.release(DAY, "web", "v2");
    h.deploy(DAY, 10 * MIN, "web", "staging", "v2");
    h.deploy(DAY + 10 * MIN, 50 * MIN, "web", "prod", "v2");
    // v3 fails in staging 5 minutes in; v4, pushed two hours later,
    // converges there 10 minutes after: restored after 7500 s.
    h.release(2 * DAY, "web", "v3");
    h.desired(2 * DAY, "web", "staging", "v3");
    h.failed(2 * DAY + 5 * MIN, "web", "staging");
    h.release(2 * DAY + 2 * HOUR, "web", "v4");
    h.deploy(2 * DAY + 2 * HOUR, 10 * MIN, "web", "staging", "v4");
    h.deploy(2 * DAY + 2 * HOUR + 10 * MIN, 20 * MIN, "web", "prod", "v4");
    // v5 converges in prod after 20 minutes, is rolled back 5 minutes
    // later, and prod is on v4 again 5 minutes after that.
    h.release(3 * DAY, "web", "v5");
    h.deploy(3 * DAY, 10 * MIN, "web", "staging", "v5");
    h.deploy(3 * DAY + 10 * MIN, 10 * MIN, "web", "prod", "v5");
    h.rollback(3 * DAY + 25 * MIN, "web", "prod", "v5", "v4");
    h.rolled_back(3 * DAY + 30 * MIN, "web", "prod", "v4");
    h
}

#[test]
fn a_history_of_releases_failures_and_a_rollback_gives_every_measure() {
    let metrics = four_days_of_web().measure(&shop_channels(), days_from_t0(10));
    assert_eq!(
        metrics,
        DeliveryMetrics {
            application: None,
            since: at(0),
            until: at(10 * DAY),
            window_days: 10.0,
            last_release_channels: shop_channels(),
            // v1, v2, v4 and v5 reached prod; v4 again after the rollback
            // is no new deployment.
            deployment_frequency_per_day: 0.4,
            deployments: 4,
            // 1200, 1800, 1800, 3600: the mean of the middle two, and the
            // 4th of 4 (ceil(3.6)).
            lead_time_seconds: LeadTime {
                median: Some(1800.0),
                p90: Some(3600.0),
                count: 4,
            },
            // v3 failed in staging, v5 was rolled back from in prod.
            change_failure_rate: Some(0.4),
            releases: 5,
            failed_releases: 2,
            // staging 7500 s, prod 300 s.
            time_to_restore_seconds: TimeToRestore {
                median: Some(3900.0),
                count: 2,
            },
        }
    );
}

#[test]
fn a_window_counts_what_happened_in_it_with_the_history_before_it() {
    let mut h = History::of("shop");
    // v0 was deployed before the window; prod goes back to it within.
    h.release(-3 * DAY, "web", "v0");
    h.deploy(-3 * DAY, MIN, "web", "prod", "v0");
    // Pushed a day before the window, deployed an hour into it.
    h.release(-DAY, "web", "v1");
    h.deploy(-DAY, HOUR, "web", "staging", "v1");
    h.deploy(-DAY + HOUR, DAY, "web", "prod", "v1");
    // Failed before the window, restored 2 hours into it (3 hours).
    h.desired(-HOUR, "api", "staging", "cfg-1");
    h.failed(-HOUR, "api", "staging");
    h.converged(2 * HOUR, "api", "staging", "cfg-1");
    // Pushed within the window and rolled back from (2 hours).
    h.release(3 * HOUR, "web", "v2");
    h.desired(3 * HOUR, "web", "prod", "v2");
    h.rollback(3 * HOUR, "web", "prod", "v2", "v0");
    h.rolled_back(5 * HOUR, "web", "prod", "v0");
    // Failing within the window, never restored: not measured yet.
    h.failed(DAY, "api", "staging");
    // After the window's end: not seen.
    h.release(2 * DAY + MIN, "web", "v3");
    h.deploy(2 * DAY + MIN, MIN, "web", "prod", "v3");

    let metrics = h.measure(&shop_channels(), days_from_t0(2));

    assert_eq!(metrics.window_days, 2.0);
    assert_eq!(metrics.deployments, 1, "v1; v0 was deployed before");
    assert_eq!(metrics.deployment_frequency_per_day, 0.5);
    assert_eq!(
        metrics.lead_time_seconds,
        LeadTime {
            median: Some(90_000.0),
            p90: Some(90_000.0),
            count: 1
        },
        "v1: a day and an hour, though pushed before the window"
    );
    assert_eq!((metrics.releases, metrics.failed_releases), (1, 1), "v2");
    assert_eq!(metrics.change_failure_rate, Some(1.0));
    assert_eq!(
        metrics.time_to_restore_seconds,
        TimeToRestore {
            median: Some(9000.0),
            count: 2
        },
        "3 hours (api in staging) and 2 hours (web in prod)"
    );
}

#[test]
fn versions_made_from_the_config_are_deployments_without_a_lead_time_or_a_release() {
    let mut h = History::of("shop");
    h.deploy(0, MIN, "web", "prod", "cfg-aaaa");
    h.release(HOUR, "web", "v2");
    h.deploy(HOUR, 2 * MIN, "web", "prod", "v2");
    // A config change on top of v2: a new version of the same release.
    h.deploy(2 * HOUR, 3 * MIN, "web", "prod", "v2+cfg-bbbb");
    // A config-only version of api fails and is restored by the next.
    h.desired(3 * HOUR, "api", "prod", "cfg-cccc");
    h.failed(3 * HOUR, "api", "prod");
    h.deploy(4 * HOUR, 0, "api", "prod", "cfg-dddd");

    let metrics = h.measure(&shop_channels(), days_from_t0(1));

    assert_eq!(
        metrics.deployments, 4,
        "cfg-aaaa, v2, v2+cfg-bbbb, cfg-dddd"
    );
    assert_eq!(metrics.deployment_frequency_per_day, 4.0);
    assert_eq!(
        metrics.lead_time_seconds,
        LeadTime {
            median: Some(120.0),
            p90: Some(120.0),
            count: 1
        },
        "only v2 was pushed; it arrived with its first version"
    );
    assert_eq!((metrics.releases, metrics.failed_releases), (1, 0));
    assert_eq!(metrics.change_failure_rate, Some(0.0));
    assert_eq!(
        metrics.time_to_restore_seconds,
        TimeToRestore {
            median: Some(3600.0),
            count: 1
        }
    );
}

#[test]
fn a_release_under_a_later_config_pairs_with_its_push() {
    let mut h = History::of("shop");
    h.release(0, "web", "v2");
    // The config changed before v2 reached prod: prod runs v2+cfg-….
    h.deploy(0, MIN, "web", "staging", "v2");
    h.deploy(10 * MIN, 5 * MIN, "web", "prod", "v2+cfg-eeee");
    let metrics = h.measure(&shop_channels(), days_from_t0(1));
    assert_eq!(metrics.lead_time_seconds.median, Some(900.0));
    assert_eq!(metrics.deployments, 1);
}

#[test]
fn a_failure_during_a_rollback_is_the_rollbacks_and_one_incident_until_converged() {
    let mut h = History::of("shop");
    h.release(0, "web", "v1");
    h.deploy(0, MIN, "web", "prod", "v1");
    h.release(HOUR, "web", "v2");
    // Pushed again (the same version, asked for again): one release,
    // timed from its first push.
    h.release(2 * HOUR, "web", "v2");
    h.desired(2 * HOUR, "web", "prod", "v2");
    h.failed(2 * HOUR + MIN, "web", "prod");
    h.rollback(2 * HOUR + MIN, "web", "prod", "v2", "v1");
    // Going back to v1 fails too: still v2's incident; v1 is not blamed.
    h.failed(2 * HOUR + 2 * MIN, "web", "prod");
    h.rolled_back(2 * HOUR + 11 * MIN, "web", "prod", "v1");

    let metrics = h.measure(&shop_channels(), days_from_t0(1));

    assert_eq!((metrics.releases, metrics.failed_releases), (2, 1), "v2");
    assert_eq!(metrics.change_failure_rate, Some(0.5));
    assert_eq!(
        metrics.time_to_restore_seconds,
        TimeToRestore {
            median: Some(600.0),
            count: 1
        }
    );
    assert_eq!(metrics.deployments, 1, "v1 once");
    assert_eq!(metrics.lead_time_seconds.count, 1, "v2 never arrived");
}

#[test]
fn each_application_is_measured_by_its_own_last_channel() {
    let mut shop = History::of("shop");
    shop.release(0, "web", "v1");
    shop.deploy(0, 10 * MIN, "web", "staging", "v1");
    shop.deploy(10 * MIN, 10 * MIN, "web", "prod", "v1");
    let mut blog = History::of("blog");
    blog.release(0, "site", "v1");
    blog.deploy(0, 40 * MIN, "site", "live", "v1");
    // Not in the config in force: not measured.
    let mut gone = History::of("gone");
    gone.release(0, "old", "v1");
    gone.deploy(0, MIN, "old", "prod", "v1");
    let events: Vec<Event> = [shop.events, blog.events, gone.events].concat();
    let channels: BTreeMap<ApplicationName, ReleaseChannelName> =
        [(n("shop"), n("prod")), (n("blog"), n("live"))].into();

    let metrics = measure(&events, &channels, days_from_t0(1));

    assert_eq!(metrics.deployments, 2);
    assert_eq!(
        metrics.lead_time_seconds,
        LeadTime {
            median: Some(1800.0),
            p90: Some(2400.0),
            count: 2
        }
    );
    assert_eq!(metrics.releases, 2);
    assert_eq!(metrics.last_release_channels, channels);
}

#[test]
fn no_events_measure_zero_deployments_and_nothing_else_as_json_nulls() {
    let metrics = measure(&[], &shop_channels(), days_from_t0(30));
    assert_eq!(
        serde_json::to_value(&metrics).unwrap(),
        json!({
            "application": null,
            "since": "2030-03-17T17:46:40Z",
            "until": "2030-04-16T17:46:40Z",
            "windowDays": 30.0,
            "lastReleaseChannels": {"shop": "prod"},
            "deploymentFrequencyPerDay": 0.0,
            "deployments": 0,
            "leadTimeSeconds": {"median": null, "p90": null, "count": 0},
            "changeFailureRate": null,
            "releases": 0,
            "failedReleases": 0,
            "timeToRestoreSeconds": {"median": null, "count": 0}
        })
    );
    let back: DeliveryMetrics =
        serde_json::from_value(serde_json::to_value(&metrics).unwrap()).unwrap();
    assert_eq!(back, metrics);
}

#[test]
fn the_median_averages_the_middle_two_and_p90_is_the_nearest_rank() {
    let secs = |values: &[i64]| -> Vec<SignedDuration> {
        values
            .iter()
            .map(|s| SignedDuration::from_secs(*s))
            .collect()
    };
    let ten: Vec<i64> = (1..=10).rev().collect();
    assert_eq!(median(&secs(&ten)), Some(5.5));
    assert_eq!(p90(&secs(&ten)), Some(9.0), "the 9th of 10");
    let eleven: Vec<i64> = (1..=11).collect();
    assert_eq!(median(&secs(&eleven)), Some(6.0));
    assert_eq!(p90(&secs(&eleven)), Some(10.0), "the 10th of 11 (ceil 9.9)");
    assert_eq!(
        (median(&secs(&[7])), p90(&secs(&[7]))),
        (Some(7.0), Some(7.0))
    );
    assert_eq!((median(&[]), p90(&[])), (None, None));
    let millis = [
        SignedDuration::from_millis(1001),
        SignedDuration::from_millis(1002),
    ];
    assert_eq!(median(&millis), Some(1.0015));
}

#[test]
fn a_lookback_is_days_hours_or_weeks_and_displays_as_it_parses() {
    let parsed = |raw: &str| raw.parse::<Lookback>().map(|l| l.to_string());
    assert_eq!(parsed("30d").as_deref(), Ok("30d"));
    assert_eq!(parsed("2w").as_deref(), Ok("14d"));
    assert_eq!(parsed("1d12h").as_deref(), Ok("36h"));
    assert_eq!(parsed("90m").as_deref(), Ok("90m"));
    assert_eq!(parsed("P7D").as_deref(), Ok("7d"));
    assert_eq!(Lookback::DEFAULT, "30d".parse().unwrap());
    assert_eq!(
        "36h".parse::<Lookback>().unwrap().duration(),
        SignedDuration::from_hours(36)
    );
    for wrong in ["", "30", "soon", "1mo", "1y", "0d", "3651d"] {
        assert!(wrong.parse::<Lookback>().is_err(), "{wrong:?}");
    }
    assert!(
        "1mo"
            .parse::<Lookback>()
            .unwrap_err()
            .contains("not months or years")
    );
    assert_eq!(
        Lookback::days(3650).map(|l| l.to_string()).as_deref(),
        Ok("3650d")
    );
}
