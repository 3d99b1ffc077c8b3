//! Evaluating release-channel time rules: whether applies may run at an
//! instant under the `allowedTimes` windows and deny windows (freezes) the
//! compiler produced, and when that next changes. The rules themselves,
//! their grammar and how they read live with the model
//! ([`vergence_model::TimeWindows`]); the time-windows gate asks this module
//! on every convergence step.
//!
//! Evaluation is boundary-based: each window is expanded into the exact
//! instants its occurrences start and end over a short horizon, and the
//! verdict, and when it next changes, is read off the merged intervals. The
//! engine schedules its next look at `opens_at`/`closes_at`, so those are
//! exact instants rather than samples. All calendar and time-zone math is
//! jiff's: windows are local civil time, and local times that a DST change
//! skips or repeats resolve with jiff's `compatible` disambiguation.

use std::iter;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

use vergence_model::{DenyWindow, RecurringWindow, TimeWindows};

/// How far ahead `opens_at` and `closes_at` are looked for.
pub const WINDOW_HORIZON: SignedDuration = SignedDuration::from_hours(14 * 24);

/// Local days expanded per window: two back (an occurrence containing `now`
/// may have started the day before, later still in another zone's terms),
/// today, and sixteen ahead (the 14-day horizon, a day for `now` being late
/// in its local day, and one for DST shifts).
const EXPANDED_DAYS: usize = 19;
const LOOKBACK_DAYS: i64 = 2;

/// A window's hours end at most at the midnight that ends its start day.
const MINUTES_PER_DAY: u16 = 24 * 60;

/// Whether applies may run at an instant, and until when that holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum WindowVerdict {
    /// Applies may run now. `closes_at`: when that stops (None = not within
    /// the horizon).
    #[serde(rename_all = "camelCase")]
    Open { closes_at: Option<Timestamp> },
    /// Applies may not run; `reason` is a sentence for people; `opens_at` is
    /// the next instant they may (None if none within the horizon).
    #[serde(rename_all = "camelCase")]
    Closed {
        reason: String,
        opens_at: Option<Timestamp>,
    },
}

impl WindowVerdict {
    pub fn is_open(&self) -> bool {
        matches!(self, WindowVerdict::Open { .. })
    }
}

/// A half-open span of instants, `start` ≤ t < `end`.
type Interval = (Timestamp, Timestamp);

/// The verdict of `windows` at `now`, with the exact instant it next
/// changes (within [`WINDOW_HORIZON`]).
pub fn evaluate(windows: &TimeWindows, now: Timestamp) -> WindowVerdict {
    if windows.is_empty() {
        return WindowVerdict::Open { closes_at: None };
    }
    let zones = match Zones::of(windows) {
        Ok(zones) => zones,
        Err(reason) => return unresolvable(reason),
    };
    let horizon = now.saturating_add(WINDOW_HORIZON).unwrap_or(Timestamp::MAX);
    let open = subtract(
        &allowed_intervals(windows, &zones, now),
        &denied_intervals(windows, &zones, now),
    );
    match open.iter().find(|(_, end)| *end > now) {
        Some(&(start, end)) if start <= now => WindowVerdict::Open {
            closes_at: (end <= horizon).then_some(end),
        },
        next => {
            let opens_at = next.map(|&(start, _)| start).filter(|at| *at <= horizon);
            let reason = closed_reason(windows, now, opens_at, &zones.allowed, &zones.denied);
            WindowVerdict::Closed { reason, opens_at }
        }
    }
}

/// The time zones of the windows, in their order; a one-off freeze has
/// none.
struct Zones {
    allowed: Vec<TimeZone>,
    denied: Vec<Option<TimeZone>>,
}

impl Zones {
    /// A zone that was valid at compile time can vanish from a newer
    /// time-zone database; the error says which, and applies are held
    /// rather than the rule guessed.
    fn of(windows: &TimeWindows) -> Result<Self, String> {
        let allowed = windows
            .allowed
            .iter()
            .map(zone)
            .collect::<Result<Vec<_>, _>>()?;
        let denied = windows
            .denied
            .iter()
            .map(|deny| match deny {
                DenyWindow::Between { .. } => Ok(None),
                DenyWindow::Recurring { window, .. } => zone(window).map(Some),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { allowed, denied })
    }
}

/// When the allowed windows let applies run around `now`: all the time
/// when there are none.
fn allowed_intervals(windows: &TimeWindows, zones: &Zones, now: Timestamp) -> Vec<Interval> {
    if windows.allowed.is_empty() {
        return vec![(Timestamp::MIN, Timestamp::MAX)];
    }
    merge(
        windows
            .allowed
            .iter()
            .zip(&zones.allowed)
            .flat_map(|(window, tz)| occurrences_around(window, tz, now))
            .collect(),
    )
}

/// When freezes hold around `now`.
fn denied_intervals(windows: &TimeWindows, zones: &Zones, now: Timestamp) -> Vec<Interval> {
    merge(
        windows
            .denied
            .iter()
            .zip(&zones.denied)
            .flat_map(|(deny, tz)| {
                let (one_off, recurring) = match (deny, tz) {
                    (DenyWindow::Between { start, end, .. }, _) => (Some((*start, *end)), None),
                    (DenyWindow::Recurring { window, .. }, Some(tz)) => {
                        (None, Some(occurrences_around(window, tz, now)))
                    }
                    // Zones were resolved per variant above.
                    (DenyWindow::Recurring { .. }, None) => (None, None),
                };
                one_off.into_iter().chain(recurring.into_iter().flatten())
            })
            .collect(),
    )
}

/// Why applies are held at `now`: a freeze first (it is the deliberate
/// rule), else being outside every allowed window.
fn closed_reason(
    windows: &TimeWindows,
    now: Timestamp,
    opens_at: Option<Timestamp>,
    allowed_zones: &[TimeZone],
    denied_zones: &[Option<TimeZone>],
) -> String {
    // The opening is shown in the zone of the window that caused the
    // closure. A one-off freeze has none; the allowed window that opens
    // then is what people plan around, else UTC like its endpoints.
    let allowed_zone_at = |at: Option<Timestamp>| {
        at.and_then(|at| {
            windows
                .allowed
                .iter()
                .zip(allowed_zones)
                .find(|(window, tz)| contains_in(window, tz, at))
                .map(|(_, tz)| tz)
        })
    };
    let freeze = windows
        .denied
        .iter()
        .zip(denied_zones)
        .find(|(deny, tz)| match (deny, tz) {
            (DenyWindow::Between { start, end, .. }, _) => *start <= now && now < *end,
            (DenyWindow::Recurring { window, .. }, Some(tz)) => contains_in(window, tz, now),
            (DenyWindow::Recurring { .. }, None) => false,
        });
    let (what, zone) = match freeze {
        Some((deny, tz)) => (
            format!("in freeze {}", deny.describe()),
            tz.as_ref().or_else(|| allowed_zone_at(opens_at)),
        ),
        None => (
            format!(
                "outside allowed window {}",
                windows
                    .allowed
                    .iter()
                    .map(RecurringWindow::describe)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
            allowed_zone_at(opens_at).or(allowed_zones.first()),
        ),
    };
    match opens_at {
        Some(at) => format!(
            "{what}; opens {}",
            format_local(at, zone.unwrap_or(&TimeZone::UTC))
        ),
        None => format!(
            "{what}; does not open within the next {} days",
            WINDOW_HORIZON.as_hours() / 24
        ),
    }
}

/// Whether `now` falls in an occurrence of `window`. False if the time zone
/// is unknown to this build (see [`evaluate`], which holds applies in that
/// case).
pub fn contains(window: &RecurringWindow, now: Timestamp) -> bool {
    zone(window).is_ok_and(|tz| contains_in(window, &tz, now))
}

fn zone(window: &RecurringWindow) -> Result<TimeZone, String> {
    TimeZone::get(window.timezone()).map_err(|_| {
        format!(
            "time zone {:?} of window {} is unknown to this build",
            window.timezone(),
            window.describe()
        )
    })
}

fn contains_in(window: &RecurringWindow, tz: &TimeZone, now: Timestamp) -> bool {
    let today = tz.to_datetime(now).date();
    local_days(today.saturating_sub(LOOKBACK_DAYS.days()), 4)
        .filter_map(|date| occurrence(window, tz, date))
        .any(|(start, end)| start <= now && now < end)
}

/// Occurrences starting on the local days around `now`, enough to cover
/// anything containing `now` and everything starting within the horizon.
fn occurrences_around<'a>(
    window: &'a RecurringWindow,
    tz: &'a TimeZone,
    now: Timestamp,
) -> impl Iterator<Item = Interval> + 'a {
    let today = tz.to_datetime(now).date();
    local_days(today.saturating_sub(LOOKBACK_DAYS.days()), EXPANDED_DAYS)
        .filter_map(move |date| occurrence(window, tz, date))
}

/// The occurrence that starts on local `date`, if the window runs then
/// and it is not empty (a window inside a DST gap collapses).
fn occurrence(window: &RecurringWindow, tz: &TimeZone, date: Date) -> Option<Interval> {
    if !window.days().contains(date.weekday()) {
        return None;
    }
    let (start, end) = window
        .hours()
        .map_or((0, MINUTES_PER_DAY), |h| (h.start_minute(), h.end_minute()));
    // Ending at or past midnight means ending on the next local day.
    let (end_date, end) = if end < start || end == MINUTES_PER_DAY {
        (date.tomorrow().ok()?, end % MINUTES_PER_DAY)
    } else {
        (date, end)
    };
    let start = local_instant(tz, date, start)?;
    let end = local_instant(tz, end_date, end)?;
    (start < end).then_some((start, end))
}

fn unresolvable(reason: String) -> WindowVerdict {
    WindowVerdict::Closed {
        reason: format!("{reason}; applies are held until the window is fixed"),
        opens_at: None,
    }
}

/// `count` consecutive local dates from `first`.
fn local_days(first: Date, count: usize) -> impl Iterator<Item = Date> {
    iter::successors(Some(first), |date| date.tomorrow().ok()).take(count)
}

/// The instant local `minute` of `date` names in `tz`; a time a DST change
/// skips or repeats resolves the way jiff's `compatible` does (later for a
/// gap, earlier for a fold).
fn local_instant(tz: &TimeZone, date: Date, minute: u16) -> Option<Timestamp> {
    let hour = i8::try_from(minute / 60).ok()?;
    let minute = i8::try_from(minute % 60).ok()?;
    let time = Time::new(hour, minute, 0, 0).ok()?;
    tz.to_ambiguous_timestamp(DateTime::from_parts(date, time))
        .compatible()
        .ok()
}

/// "Mon 2026-11-23 09:00 CET".
fn format_local(at: Timestamp, tz: &TimeZone) -> String {
    let zoned = at.to_zoned(tz.clone());
    jiff::fmt::strtime::format("%a %Y-%m-%d %H:%M %Z", &zoned).unwrap_or_else(|_| at.to_string())
}

/// Sorted, disjoint intervals covering the same instants; touching ones
/// join, so back-to-back days read as one stretch.
fn merge(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.retain(|(start, end)| start < end);
    intervals.sort_unstable();
    let mut merged: Vec<Interval> = Vec::with_capacity(intervals.len());
    for (start, end) in intervals {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// `from` minus `remove`; both sorted and disjoint.
fn subtract(from: &[Interval], remove: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::with_capacity(from.len());
    let mut first = 0;
    for &(start, end) in from {
        while remove.get(first).is_some_and(|r| r.1 <= start) {
            first += 1;
        }
        let mut cursor = start;
        for &(r_start, r_end) in remove[first..].iter().take_while(|r| r.0 < end) {
            if r_start > cursor {
                out.push((cursor, r_start));
            }
            cursor = cursor.max(r_end);
        }
        if cursor < end {
            out.push((cursor, end));
        }
    }
    out
}

#[cfg(test)]
mod tests;
