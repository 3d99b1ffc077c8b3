//! Delivery metrics: the four DORA measures of an application, computed
//! from its event log alone (`vergence metrics`, the API's metrics route
//! and the status page all show this).
//!
//! Pure: [`measure`] reads a slice of events, the last release channel of
//! each application and a time window, and counts; it never reads a clock
//! or a store. The definitions, with their edge cases, are in `docs/cli.md`
//! (`vergence metrics`) and on each field of [`DeliveryMetrics`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use jiff::{SignedDuration, SpanRelativeTo, Timestamp};
use serde::{Deserialize, Serialize};

use vergence_model::{
    ApplicationName, Event, EventKind, ReleaseChannelName, ServiceName, Status, Version,
};

const MILLIS_PER_DAY: f64 = 86_400_000.0;
const SECONDS_PER_DAY: i64 = 86_400;

/// How far back a measurement looks from now: `30d`, `12h`, `2w`, `1d12h`
/// (days are 24 hours, weeks 7 days; months and years are refused, since
/// their length depends on the date).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookback(SignedDuration);

impl Lookback {
    /// What the CLI, the API and the status page use when none is given.
    pub const DEFAULT: Lookback = Lookback(SignedDuration::from_secs(30 * SECONDS_PER_DAY));
    /// Ten years: longer than any event log is kept, and a bound that keeps
    /// the window's start far from the limits of a timestamp.
    const MAX: SignedDuration = SignedDuration::from_secs(3650 * SECONDS_PER_DAY);

    pub fn days(days: i64) -> Result<Self, String> {
        Self::of(SignedDuration::from_secs(
            days.saturating_mul(SECONDS_PER_DAY),
        ))
    }

    pub fn of(duration: SignedDuration) -> Result<Self, String> {
        if duration.is_negative() || duration.is_zero() {
            return Err("give a duration longer than zero".to_owned());
        }
        if duration > Self::MAX {
            return Err("at most 3650d (ten years)".to_owned());
        }
        Ok(Self(duration))
    }

    pub fn duration(self) -> SignedDuration {
        self.0
    }
}

impl std::str::FromStr for Lookback {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let span: jiff::Span = raw
            .trim()
            .parse()
            .map_err(|_| format!("{raw:?} is not a duration such as 30d, 12h or 2w"))?;
        let duration = span
            .to_duration(SpanRelativeTo::days_are_24_hours())
            .map_err(|_| format!("{raw:?}: give days or weeks (30d, 2w), not months or years"))?;
        Self::of(duration).map_err(|e| format!("{raw:?}: {e}"))
    }
}

/// The largest whole unit that says it exactly (`30d`, `36h`, `90m`), so
/// that what is displayed parses back to the same lookback.
impl fmt::Display for Lookback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
        ] {
            if millis % size == 0 {
                return write!(f, "{}{unit}", millis / size);
            }
        }
        write!(f, "{millis}ms")
    }
}

/// The time a measurement covers: events at `since` or later, up to
/// `until` (now), both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub since: Timestamp,
    pub until: Timestamp,
}

impl Window {
    fn contains(&self, at: Timestamp) -> bool {
        self.since <= at && at <= self.until
    }

    fn days(&self) -> f64 {
        self.until.duration_since(self.since).as_millis() as f64 / MILLIS_PER_DAY
    }
}

/// The four measures over a window, with the counts each is computed
/// from. A measure with nothing to measure is `null` (never `NaN`), its
/// count 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryMetrics {
    /// The application measured; `null`: every application of the config
    /// in force (locally, without `--app`).
    pub application: Option<ApplicationName>,
    pub since: Timestamp,
    pub until: Timestamp,
    /// The window's length in days (24 hours each).
    pub window_days: f64,
    /// Where each application measured deploys last (the last release
    /// channel of its promotion order): where deployments are counted and
    /// lead times end.
    pub last_release_channels: BTreeMap<ApplicationName, ReleaseChannelName>,
    /// `deployments / windowDays`: 0 when nothing was deployed.
    pub deployment_frequency_per_day: f64,
    /// Versions that converged in the last release channel for the first
    /// time within the window.
    pub deployments: usize,
    /// Release pushed → first converged in the last release channel.
    pub lead_time_seconds: LeadTime,
    /// `failedReleases / releases`; `null` when nothing was released.
    pub change_failure_rate: Option<f64>,
    /// Versions released (pushed) within the window.
    pub releases: usize,
    /// Of those, the ones that failed or were rolled back from in any
    /// release channel.
    pub failed_releases: usize,
    /// A failure or rollback → the next version converged in that channel.
    pub time_to_restore_seconds: TimeToRestore,
}

/// Lead times of the releases that reached the last release channel
/// within the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeadTime {
    pub median: Option<f64>,
    /// By nearest rank: the `ceil(0.9 × count)`-th shortest.
    pub p90: Option<f64>,
    pub count: usize,
}

/// Times to restore of the failures restored within the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeToRestore {
    pub median: Option<f64>,
    pub count: usize,
}

/// A service of an application.
type ServiceOf = (ApplicationName, ServiceName);
/// A release (`Version::release`) of a service.
type ReleaseOf = (ApplicationName, ServiceName, String);
/// A version of a service (config changes on top of a release included).
type VersionOf = (ApplicationName, ServiceName, Version);
/// A service instance.
type InstanceOf = (ApplicationName, ServiceName, ReleaseChannelName);

/// Measures the applications of `last_channels` (each by its own last
/// release channel) from `events`; events of other applications are
/// ignored. Events before the window count as history: a release pushed
/// before it and deployed within it has its lead time measured.
pub fn measure(
    events: &[Event],
    last_channels: &BTreeMap<ApplicationName, ReleaseChannelName>,
    window: Window,
) -> DeliveryMetrics {
    // The store lists events oldest first; a stable sort keeps the order
    // of events recorded together (a failure before its rollback).
    let mut ordered: Vec<&Event> = events
        .iter()
        .filter(|e| last_channels.contains_key(&e.application) && e.at <= window.until)
        .collect();
    ordered.sort_by_key(|e| e.at);
    let mut tally = Tally::default();
    for event in ordered {
        tally.record(event, last_channels);
    }
    tally.finish(last_channels, window)
}

/// What a walk through the event log has seen so far.
#[derive(Default)]
struct Tally {
    /// When each release was first pushed.
    released: BTreeMap<ReleaseOf, Timestamp>,
    /// When each version first converged in its last release channel.
    deployed: BTreeMap<VersionOf, Timestamp>,
    /// When each release first converged in its last release channel after
    /// it was pushed (under any config).
    arrived: BTreeMap<ReleaseOf, Timestamp>,
    /// Releases that failed or were rolled back from after they were pushed.
    failed: BTreeSet<ReleaseOf>,
    instances: BTreeMap<InstanceOf, InstanceTrack>,
    /// How long each restored failure took, by when it was restored.
    restores: Vec<(Timestamp, SignedDuration)>,
}

/// One service instance as its events tell it.
#[derive(Default)]
struct InstanceTrack {
    /// The version it was last asked to run.
    desired: Option<Version>,
    /// A rollback is under way or holds it (until a new desired version):
    /// a failure then is the rollback's, not the release's.
    rolling_back: bool,
    /// When its open failure began: the first failure or rollback since it
    /// last converged.
    failing_since: Option<Timestamp>,
}

impl Tally {
    fn record(
        &mut self,
        event: &Event,
        last_channels: &BTreeMap<ApplicationName, ReleaseChannelName>,
    ) {
        let Some(service) = &event.service else {
            return;
        };
        let service: ServiceOf = (event.application.clone(), service.clone());
        let Some(channel) = &event.release_channel else {
            if let EventKind::ReleaseCreated { version } = &event.kind {
                let release = release_of(&service, version);
                self.released.entry(release).or_insert(event.at);
            }
            return;
        };
        let last = last_channels.get(&event.application) == Some(channel);
        // Built only for the events that count: most are about jobs.
        let key = || (service.0.clone(), service.1.clone(), channel.clone());
        match &event.kind {
            EventKind::DesiredVersionChanged { to, .. } => {
                let track = self.instances.entry(key()).or_default();
                track.desired = Some(to.clone());
                track.rolling_back = false;
            }
            EventKind::Converged { version } => {
                self.converged(&service, key(), version, last, event.at);
            }
            EventKind::StatusChanged {
                to: Status::Failed, ..
            } => {
                let track = self.instances.entry(key()).or_default();
                track.failing_since.get_or_insert(event.at);
                let blamed = (!track.rolling_back).then(|| track.desired.clone());
                if let Some(version) = blamed.flatten() {
                    self.blame(&service, &version);
                }
            }
            EventKind::RollbackStarted { failed_version, .. } => {
                let track = self.instances.entry(key()).or_default();
                track.failing_since.get_or_insert(event.at);
                track.rolling_back = true;
                self.blame(&service, failed_version);
            }
            _ => {}
        }
    }

    fn converged(
        &mut self,
        service: &ServiceOf,
        key: InstanceOf,
        version: &Version,
        last: bool,
        at: Timestamp,
    ) {
        let track = self.instances.entry(key).or_default();
        if let Some(since) = track.failing_since.take() {
            self.restores.push((at, at.duration_since(since)));
        }
        if !last {
            return;
        }
        let deployed = (service.0.clone(), service.1.clone(), version.clone());
        self.deployed.entry(deployed).or_insert(at);
        let release = release_of(service, version);
        if self.released.contains_key(&release) {
            self.arrived.entry(release).or_insert(at);
        }
    }

    /// A version failed: its release counts as a change failure if it was
    /// pushed (a version made from the config alone never was).
    fn blame(&mut self, service: &ServiceOf, version: &Version) {
        let release = release_of(service, version);
        if self.released.contains_key(&release) {
            self.failed.insert(release);
        }
    }

    fn finish(
        self,
        last_channels: &BTreeMap<ApplicationName, ReleaseChannelName>,
        window: Window,
    ) -> DeliveryMetrics {
        let deployments = self
            .deployed
            .values()
            .filter(|at| window.contains(**at))
            .count();
        let lead_times: Vec<SignedDuration> = self
            .arrived
            .iter()
            .filter(|(_, at)| window.contains(**at))
            .filter_map(|(release, at)| Some(at.duration_since(*self.released.get(release)?)))
            .collect();
        let released: Vec<&ReleaseOf> = self
            .released
            .iter()
            .filter(|(_, at)| window.contains(**at))
            .map(|(release, _)| release)
            .collect();
        let failed = released.iter().filter(|r| self.failed.contains(*r)).count();
        let restores: Vec<SignedDuration> = self
            .restores
            .iter()
            .filter(|(at, _)| window.contains(*at))
            .map(|(_, took)| *took)
            .collect();
        let days = window.days();
        DeliveryMetrics {
            application: None,
            since: window.since,
            until: window.until,
            window_days: days,
            last_release_channels: last_channels.clone(),
            deployment_frequency_per_day: if days > 0.0 {
                deployments as f64 / days
            } else {
                0.0
            },
            deployments,
            lead_time_seconds: LeadTime {
                median: median(&lead_times),
                p90: p90(&lead_times),
                count: lead_times.len(),
            },
            change_failure_rate: (!released.is_empty())
                .then(|| failed as f64 / released.len() as f64),
            releases: released.len(),
            failed_releases: failed,
            time_to_restore_seconds: TimeToRestore {
                median: median(&restores),
                count: restores.len(),
            },
        }
    }
}

fn release_of(service: &ServiceOf, version: &Version) -> ReleaseOf {
    (
        service.0.clone(),
        service.1.clone(),
        version.release().to_owned(),
    )
}

/// Milliseconds, sorted: events are recorded to the millisecond, and whole
/// milliseconds keep the seconds exact to three decimals.
fn sorted_millis(durations: &[SignedDuration]) -> Vec<i128> {
    let mut millis: Vec<i128> = durations.iter().map(|d| d.as_millis()).collect();
    millis.sort_unstable();
    millis
}

/// The middle value, or the mean of the two middle ones; in seconds.
fn median(durations: &[SignedDuration]) -> Option<f64> {
    let millis = sorted_millis(durations);
    let n = millis.len();
    if n == 0 {
        return None;
    }
    let middle = if n % 2 == 1 {
        millis[n / 2] as f64
    } else {
        (millis[n / 2 - 1] + millis[n / 2]) as f64 / 2.0
    };
    Some(middle / 1000.0)
}

/// The 90th percentile by nearest rank (the `ceil(0.9 n)`-th smallest, a
/// value that was measured); in seconds.
fn p90(durations: &[SignedDuration]) -> Option<f64> {
    let millis = sorted_millis(durations);
    let rank = (9 * millis.len()).div_ceil(10);
    let value = millis.get(rank.checked_sub(1)?)?;
    Some(*value as f64 / 1000.0)
}

#[cfg(test)]
mod tests;
