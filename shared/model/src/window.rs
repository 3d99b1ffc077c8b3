//! Release-channel time rules: `allowedTimes` windows and deny windows
//! (freezes), compiled from config and evaluated by the engine on every
//! convergence step.
//!
//! Evaluation is boundary-based: each window is expanded into the exact
//! instants its occurrences start and end over a short horizon, and the
//! verdict, and when it next changes, is read off the merged intervals. The
//! engine schedules its next look at `opens_at`/`closes_at`, so those are
//! exact instants rather than samples. All calendar and time-zone math is
//! jiff's: windows are local civil time, and local times that a DST change
//! skips or repeats resolve with jiff's `compatible` disambiguation.

use std::iter;

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

/// How far ahead `opens_at` and `closes_at` are looked for.
pub const WINDOW_HORIZON: SignedDuration = SignedDuration::from_hours(14 * 24);

/// Local days expanded per window: two back (an occurrence containing `now`
/// may have started the day before, later still in another zone's terms),
/// today, and sixteen ahead (the 14-day horizon, a day for `now` being late
/// in its local day, and one for DST shifts).
const EXPANDED_DAYS: usize = 19;
const LOOKBACK_DAYS: i64 = 2;

const MINUTES_PER_DAY: u16 = 24 * 60;
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const FULL_DAY_NAMES: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const DAYS_HELP: &str =
    "use mon, tue, wed, thu, fri, sat, sun, ranges like mon-fri, or lists like sat,sun";
const HOURS_HELP: &str =
    "use hours like 9-17, 22-6 (past midnight) or 0-24, or times like 09:30-17:00";
const TIMEZONE_HELP: &str = "use an IANA name like Europe/Berlin, America/New_York or UTC";

/// Release-channel time rules, compiled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeWindows {
    /// When applies may run (union); empty = any time.
    #[serde(default)]
    pub allowed: Vec<RecurringWindow>,
    /// Freezes: when applies may not run, even inside an allowed window.
    #[serde(default)]
    pub denied: Vec<DenyWindow>,
}

/// "days + hours in a time zone", e.g. mon-fri 9-17 Europe/Berlin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecurringWindow {
    /// The local days an occurrence starts on.
    days: DaySet,
    /// Local time of day; `None` = the whole day.
    #[serde(default)]
    hours: Option<LocalHours>,
    /// IANA name, canonical spelling.
    timezone: String,
}

/// A deny window: applies may not run while it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum DenyWindow {
    /// A one-off freeze between two instants (`start` ≤ t < `end`).
    Between {
        name: Option<String>,
        start: Timestamp,
        end: Timestamp,
    },
    /// A recurring freeze, e.g. fri 16-24 Europe/Berlin.
    Recurring {
        name: Option<String>,
        window: RecurringWindow,
    },
}

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

/// A set of weekdays. Stored as short names in week order (`["mon","tue"]`)
/// so the compiled instance stays readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "Vec<String>", try_from = "Vec<String>")]
pub struct DaySet(u8);

/// Local time of day a window runs, in minutes since midnight. `end_minute`
/// is in `1..=1440`; when it is below `start_minute` the window runs past
/// midnight into the next day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    into = "LocalHoursRepr",
    try_from = "LocalHoursRepr"
)]
pub struct LocalHours {
    start_minute: u16,
    end_minute: u16,
}

/// The stored form of [`LocalHours`], validated on the way in so a
/// hand-edited instance cannot smuggle in 25:00.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LocalHoursRepr {
    start_minute: u16,
    end_minute: u16,
}

/// A half-open span of instants, `start` ≤ t < `end`.
type Interval = (Timestamp, Timestamp);

impl TimeWindows {
    /// No rules at all: applies may always run.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty() && self.denied.is_empty()
    }

    /// The verdict at `now`, with the exact instant it next changes (within
    /// [`WINDOW_HORIZON`]).
    pub fn evaluate(&self, now: Timestamp) -> WindowVerdict {
        if self.is_empty() {
            return WindowVerdict::Open { closes_at: None };
        }
        // A zone that was valid at compile time can vanish from a newer
        // time-zone database; hold applies rather than guess the rule.
        let allowed_zones = match self
            .allowed
            .iter()
            .map(RecurringWindow::zone)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(zones) => zones,
            Err(reason) => return unresolvable(reason),
        };
        let denied_zones = match self
            .denied
            .iter()
            .map(|deny| match deny {
                DenyWindow::Between { .. } => Ok(None),
                DenyWindow::Recurring { window, .. } => window.zone().map(Some),
            })
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(zones) => zones,
            Err(reason) => return unresolvable(reason),
        };

        let horizon = now.saturating_add(WINDOW_HORIZON).unwrap_or(Timestamp::MAX);
        let allowed = if self.allowed.is_empty() {
            vec![(Timestamp::MIN, Timestamp::MAX)]
        } else {
            merge(
                self.allowed
                    .iter()
                    .zip(&allowed_zones)
                    .flat_map(|(window, tz)| window.occurrences_around(tz, now))
                    .collect(),
            )
        };
        let denied = merge(
            self.denied
                .iter()
                .zip(&denied_zones)
                .flat_map(|(deny, tz)| {
                    let (one_off, recurring) = match (deny, tz) {
                        (DenyWindow::Between { start, end, .. }, _) => (Some((*start, *end)), None),
                        (DenyWindow::Recurring { window, .. }, Some(tz)) => {
                            (None, Some(window.occurrences_around(tz, now)))
                        }
                        // Zones were resolved per variant above.
                        (DenyWindow::Recurring { .. }, None) => (None, None),
                    };
                    one_off.into_iter().chain(recurring.into_iter().flatten())
                })
                .collect(),
        );
        let open = subtract(&allowed, &denied);

        match open.iter().find(|(_, end)| *end > now) {
            Some(&(start, end)) if start <= now => WindowVerdict::Open {
                closes_at: (end <= horizon).then_some(end),
            },
            next => {
                let opens_at = next.map(|&(start, _)| start).filter(|at| *at <= horizon);
                let reason = self.closed_reason(now, opens_at, &allowed_zones, &denied_zones);
                WindowVerdict::Closed { reason, opens_at }
            }
        }
    }

    /// Why applies are held at `now`: a freeze first (it is the deliberate
    /// rule), else being outside every allowed window.
    fn closed_reason(
        &self,
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
                self.allowed
                    .iter()
                    .zip(allowed_zones)
                    .find(|(window, tz)| window.contains_in(tz, at))
                    .map(|(_, tz)| tz)
            })
        };
        let freeze = self
            .denied
            .iter()
            .zip(denied_zones)
            .find(|(deny, tz)| match (deny, tz) {
                (DenyWindow::Between { start, end, .. }, _) => *start <= now && now < *end,
                (DenyWindow::Recurring { window, .. }, Some(tz)) => window.contains_in(tz, now),
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
                    self.allowed
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
}

impl RecurringWindow {
    /// Parses the config strings. Errors are short sentences naming what is
    /// wrong and what is accepted.
    pub fn parse(
        days: Option<&str>,
        hours: Option<&str>,
        timezone: Option<&str>,
    ) -> Result<Self, String> {
        let days = days.map_or(Ok(DaySet::ALL), DaySet::parse)?;
        let hours = match hours {
            Some(raw) => LocalHours::parse(raw)?,
            None => None,
        };
        let timezone = parse_timezone(timezone.unwrap_or("UTC"))?;
        Ok(Self {
            days,
            hours,
            timezone,
        })
    }

    /// As people read it: "mon-fri 09-17 Europe/Berlin".
    pub fn describe(&self) -> String {
        match self.hours {
            Some(hours) => format!(
                "{} {} {}",
                self.days.describe(),
                hours.describe(),
                self.timezone
            ),
            None => format!("{} {}", self.days.describe(), self.timezone),
        }
    }

    /// Whether `now` falls in an occurrence. False if the time zone is
    /// unknown to this build (see [`TimeWindows::evaluate`], which holds
    /// applies in that case).
    pub fn contains(&self, now: Timestamp) -> bool {
        self.zone().is_ok_and(|tz| self.contains_in(&tz, now))
    }

    pub fn days(&self) -> DaySet {
        self.days
    }

    pub fn hours(&self) -> Option<LocalHours> {
        self.hours
    }

    pub fn timezone(&self) -> &str {
        &self.timezone
    }

    fn zone(&self) -> Result<TimeZone, String> {
        TimeZone::get(&self.timezone).map_err(|_| {
            format!(
                "time zone {:?} of window {} is unknown to this build",
                self.timezone,
                self.describe()
            )
        })
    }

    fn contains_in(&self, tz: &TimeZone, now: Timestamp) -> bool {
        let today = tz.to_datetime(now).date();
        local_days(today.saturating_sub(LOOKBACK_DAYS.days()), 4)
            .filter_map(|date| self.occurrence(tz, date))
            .any(|(start, end)| start <= now && now < end)
    }

    /// Occurrences starting on the local days around `now`, enough to cover
    /// anything containing `now` and everything starting within the horizon.
    fn occurrences_around<'a>(
        &'a self,
        tz: &'a TimeZone,
        now: Timestamp,
    ) -> impl Iterator<Item = Interval> + 'a {
        let today = tz.to_datetime(now).date();
        local_days(today.saturating_sub(LOOKBACK_DAYS.days()), EXPANDED_DAYS)
            .filter_map(move |date| self.occurrence(tz, date))
    }

    /// The occurrence that starts on local `date`, if the window runs then
    /// and it is not empty (a window inside a DST gap collapses).
    fn occurrence(&self, tz: &TimeZone, date: Date) -> Option<Interval> {
        if !self.days.contains(date.weekday()) {
            return None;
        }
        let (start, end) = self
            .hours
            .map_or((0, MINUTES_PER_DAY), |h| (h.start_minute, h.end_minute));
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
}

impl DenyWindow {
    /// As people read it: "holiday-freeze (2026-12-20T00:00:00Z →
    /// 2027-01-02T00:00:00Z)" or "fri 16-24 Europe/Berlin".
    pub fn describe(&self) -> String {
        let (name, what) = match self {
            DenyWindow::Between { name, start, end } => (name, format!("{start} → {end}")),
            DenyWindow::Recurring { name, window } => (name, window.describe()),
        };
        match name {
            Some(name) => format!("{name} ({what})"),
            None => what,
        }
    }
}

impl DaySet {
    pub const ALL: DaySet = DaySet(0b111_1111);

    pub fn contains(self, day: Weekday) -> bool {
        self.0 & day_bit(day) != 0
    }

    fn parse(raw: &str) -> Result<Self, String> {
        let fail = |what: String| format!("days {raw:?}: {what}; {DAYS_HELP}");
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(fail("no days given".into()));
        }
        let mut set = 0u8;
        for item in trimmed.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(fail("empty item in the list".into()));
            }
            if item == "*" || item.eq_ignore_ascii_case("daily") {
                set = Self::ALL.0;
                continue;
            }
            let (first, last) = match item.split_once('-') {
                Some((first, last)) => (first.trim(), last.trim()),
                None => (item, item),
            };
            let first = day_index(first).ok_or_else(|| fail(format!("unknown day {first:?}")))?;
            let last = day_index(last).ok_or_else(|| fail(format!("unknown day {last:?}")))?;
            // Walk forward so a range like fri-mon wraps over the weekend.
            let mut day = first;
            loop {
                set |= 1 << day;
                if day == last {
                    break;
                }
                day = (day + 1) % 7;
            }
        }
        Ok(Self(set))
    }

    /// Canonical short form: "daily", "mon-fri", "sat,sun", "fri-mon".
    fn describe(self) -> String {
        if self == Self::ALL {
            return "daily".into();
        }
        if self.0 == 0 {
            return "no days".into();
        }
        let has = |day: usize| self.0 & (1 << (day % 7)) != 0;
        // Runs of consecutive days, each starting where the day before is
        // absent; since not every day is in the set, each run ends.
        let mut runs: Vec<(usize, usize)> = (0..7)
            .filter(|&day| has(day) && !has(day + 6))
            .map(|start| (start, (1..7).take_while(|&n| has(start + n)).count() + 1))
            .collect();
        // A run over the weekend (fri-mon) reads best first.
        runs.sort_by_key(|&(start, len)| if start + len > 7 { 0 } else { start + 1 });
        runs.iter()
            .map(|&(start, len)| {
                let (first, last) = (DAY_NAMES[start], DAY_NAMES[(start + len - 1) % 7]);
                match len {
                    1 => first.to_string(),
                    2 => format!("{first},{last}"),
                    _ => format!("{first}-{last}"),
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl From<DaySet> for Vec<String> {
    fn from(days: DaySet) -> Self {
        (0..7)
            .filter(|day| days.0 & (1 << day) != 0)
            .map(|day| DAY_NAMES[day].to_string())
            .collect()
    }
}

impl TryFrom<Vec<String>> for DaySet {
    type Error = String;

    fn try_from(names: Vec<String>) -> Result<Self, String> {
        let mut set = 0u8;
        for name in &names {
            let day = day_index(name).ok_or_else(|| format!("unknown day {name:?}"))?;
            set |= 1 << day;
        }
        if set == 0 {
            return Err("a window needs at least one day".into());
        }
        Ok(Self(set))
    }
}

impl LocalHours {
    /// Minutes since local midnight the window starts at.
    pub fn start_minute(self) -> u16 {
        self.start_minute
    }

    /// Minutes since local midnight the window ends at (`1..=1440`); below
    /// the start it is on the next day.
    pub fn end_minute(self) -> u16 {
        self.end_minute
    }

    /// `Ok(None)` for the whole day (`0-24`).
    fn parse(raw: &str) -> Result<Option<Self>, String> {
        let fail = |what: String| format!("hours {raw:?}: {what}; {HOURS_HELP}");
        let Some((start, end)) = raw.split_once('-') else {
            return Err(fail("expected a start and an end like 9-17".into()));
        };
        let (start, end) = (start.trim(), end.trim());
        let start_minute = parse_time_of_day(start)
            .ok_or_else(|| fail(format!("{start:?} is not a time of day")))?;
        let end_minute =
            parse_time_of_day(end).ok_or_else(|| fail(format!("{end:?} is not a time of day")))?;
        if start_minute == MINUTES_PER_DAY {
            return Err(fail("a window cannot start at 24".into()));
        }
        if start_minute == end_minute {
            return Err(format!(
                "hours {raw:?}: start and end are the same; use 0-24 for the whole day"
            ));
        }
        // Ending at 0 is the midnight that ends the start day: 22-0 = 22-24.
        let end_minute = if end_minute == 0 {
            MINUTES_PER_DAY
        } else {
            end_minute
        };
        if start_minute == 0 && end_minute == MINUTES_PER_DAY {
            return Ok(None);
        }
        Ok(Some(Self {
            start_minute,
            end_minute,
        }))
    }

    /// "09-17", or "09:30-17:00" when either end is not on the hour.
    fn describe(self) -> String {
        let (start, end) = (self.start_minute, self.end_minute);
        if start % 60 == 0 && end % 60 == 0 {
            format!("{:02}-{:02}", start / 60, end / 60)
        } else {
            format!(
                "{:02}:{:02}-{:02}:{:02}",
                start / 60,
                start % 60,
                end / 60,
                end % 60
            )
        }
    }
}

impl From<LocalHours> for LocalHoursRepr {
    fn from(hours: LocalHours) -> Self {
        Self {
            start_minute: hours.start_minute,
            end_minute: hours.end_minute,
        }
    }
}

impl TryFrom<LocalHoursRepr> for LocalHours {
    type Error = String;

    fn try_from(repr: LocalHoursRepr) -> Result<Self, String> {
        let LocalHoursRepr {
            start_minute,
            end_minute,
        } = repr;
        if start_minute >= MINUTES_PER_DAY
            || end_minute == 0
            || end_minute > MINUTES_PER_DAY
            || start_minute == end_minute
        {
            return Err(format!(
                "hours {start_minute}-{end_minute} (minutes) are not a window within a day"
            ));
        }
        Ok(Self {
            start_minute,
            end_minute,
        })
    }
}

fn unresolvable(reason: String) -> WindowVerdict {
    WindowVerdict::Closed {
        reason: format!("{reason}; applies are held until the window is fixed"),
        opens_at: None,
    }
}

fn day_bit(day: Weekday) -> u8 {
    1 << day.to_monday_zero_offset()
}

fn day_index(name: &str) -> Option<usize> {
    let name = name.to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .position(|short| *short == name)
        .or_else(|| FULL_DAY_NAMES.iter().position(|full| *full == name))
}

/// Minutes since midnight of "H", "HH", "H:MM" or "HH:MM"; 24 (24:00) is
/// allowed as the end of a day.
fn parse_time_of_day(raw: &str) -> Option<u16> {
    let (hour, minute) = raw.split_once(':').unwrap_or((raw, "00"));
    let digits = |s: &str, max_len: usize| {
        (!s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u16>().ok())
            .flatten()
    };
    let hour = digits(hour, 2)?;
    let minute = if minute.len() == 2 {
        digits(minute, 2)?
    } else {
        return None;
    };
    let total = hour * 60 + minute;
    (minute < 60 && total <= MINUTES_PER_DAY).then_some(total)
}

/// Resolves an IANA name to its canonical spelling ("europe/berlin" →
/// "Europe/Berlin").
fn parse_timezone(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(format!("timezone {raw:?}: empty; {TIMEZONE_HELP}"));
    }
    match TimeZone::get(name) {
        Ok(tz) => Ok(tz.iana_name().unwrap_or(name).to_string()),
        Err(_) => {
            let db = jiff::tz::db();
            let names: Vec<_> = db.available().collect();
            let hint = crate::diagnostics::suggest(name, names.iter().map(|n| n.as_str()))
                .map(|known| format!("did you mean {known}? "))
                .unwrap_or_default();
            Err(format!(
                "timezone {name:?}: unknown time zone; {hint}{TIMEZONE_HELP}"
            ))
        }
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
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// A local civil time in Europe/Berlin, e.g. "2026-11-20 17:00".
    fn berlin(s: &str) -> Timestamp {
        s.parse::<DateTime>()
            .unwrap()
            .in_tz("Europe/Berlin")
            .unwrap()
            .timestamp()
    }

    fn window(days: &str, hours: &str, tz: &str) -> RecurringWindow {
        RecurringWindow::parse(Some(days), Some(hours), Some(tz)).unwrap()
    }

    fn office() -> RecurringWindow {
        window("mon-fri", "9-17", "Europe/Berlin")
    }

    fn allowed(windows: Vec<RecurringWindow>) -> TimeWindows {
        TimeWindows {
            allowed: windows,
            denied: vec![],
        }
    }

    fn closed(reason: &str, opens_at: Option<&str>) -> WindowVerdict {
        WindowVerdict::Closed {
            reason: reason.into(),
            opens_at: opens_at.map(ts),
        }
    }

    fn open(closes_at: Option<&str>) -> WindowVerdict {
        WindowVerdict::Open {
            closes_at: closes_at.map(ts),
        }
    }

    #[test]
    fn the_test_calendar_is_what_the_tests_assume() {
        use jiff::civil::date;
        assert_eq!(date(2026, 11, 20).weekday(), Weekday::Friday);
        assert_eq!(date(2026, 3, 29).weekday(), Weekday::Sunday);
        assert_eq!(date(2026, 10, 25).weekday(), Weekday::Sunday);
        assert_eq!(date(2027, 1, 2).weekday(), Weekday::Saturday);
    }

    #[test]
    fn weekday_range_contains_office_hours_only() {
        let w = office();
        // Mon 2026-11-23, CET = UTC+1.
        assert!(!w.contains(ts("2026-11-23T07:59:59Z")));
        assert!(w.contains(ts("2026-11-23T08:00:00Z")));
        assert!(w.contains(ts("2026-11-23T15:59:59Z")));
        assert!(!w.contains(ts("2026-11-23T16:00:00Z")));
        assert!(w.contains(berlin("2026-11-27 12:00")));
        assert!(!w.contains(berlin("2026-11-21 12:00")));
        assert!(!w.contains(berlin("2026-11-22 12:00")));
    }

    #[test]
    fn weekend_list_and_wrapping_day_range() {
        let weekend = RecurringWindow::parse(Some("sat,sun"), None, None).unwrap();
        assert!(!weekend.contains(ts("2026-11-20T23:59:59Z")));
        assert!(weekend.contains(ts("2026-11-21T00:00:00Z")));
        assert!(weekend.contains(ts("2026-11-22T23:59:59Z")));
        assert!(!weekend.contains(ts("2026-11-23T00:00:00Z")));

        let long_weekend = RecurringWindow::parse(Some("Fri-MONDAY"), None, None).unwrap();
        for (day, expected) in [
            ("2026-11-19", false), // Thu
            ("2026-11-20", true),
            ("2026-11-21", true),
            ("2026-11-22", true),
            ("2026-11-23", true),
            ("2026-11-24", false), // Tue
        ] {
            assert_eq!(
                long_weekend.contains(ts(&format!("{day}T12:00:00Z"))),
                expected,
                "{day}"
            );
        }

        let mixed = RecurringWindow::parse(Some("mon,wed-fri"), None, None).unwrap();
        assert!(mixed.contains(ts("2026-11-23T12:00:00Z")));
        assert!(!mixed.contains(ts("2026-11-24T12:00:00Z")));
        assert!(mixed.contains(ts("2026-11-25T12:00:00Z")));
    }

    #[test]
    fn hours_past_midnight_belong_to_the_start_day() {
        let w = window("fri", "22-6", "UTC");
        assert!(!w.contains(ts("2026-11-20T21:59:59Z")));
        assert!(w.contains(ts("2026-11-20T22:00:00Z")));
        assert!(w.contains(ts("2026-11-21T05:59:59Z"))); // Saturday morning
        assert!(!w.contains(ts("2026-11-21T06:00:00Z")));
        assert!(!w.contains(ts("2026-11-21T22:00:00Z"))); // Saturday night
        assert!(!w.contains(ts("2026-11-20T03:00:00Z"))); // Thursday's night

        let verdict = allowed(vec![w]).evaluate(ts("2026-11-20T23:00:00Z"));
        assert_eq!(verdict, open(Some("2026-11-21T06:00:00Z")));
    }

    #[test]
    fn empty_rules_are_always_open() {
        let rules = TimeWindows::default();
        assert!(rules.is_empty());
        assert_eq!(rules.evaluate(ts("2026-11-20T12:00:00Z")), open(None));
    }

    #[test]
    fn opens_exactly_at_monday_nine_across_the_weekend() {
        let rules = allowed(vec![office()]);
        assert_eq!(
            rules.evaluate(berlin("2026-11-20 17:00")),
            closed(
                "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-11-23 09:00 CET",
                Some("2026-11-23T08:00:00Z"),
            )
        );
        // Exactly at the opening it is open, until 17:00 local.
        assert_eq!(
            rules.evaluate(ts("2026-11-23T08:00:00Z")),
            open(Some("2026-11-23T16:00:00Z"))
        );
    }

    #[test]
    fn closes_at_is_the_exact_end_of_the_window() {
        let rules = allowed(vec![office()]);
        assert_eq!(
            rules.evaluate(ts("2026-11-25T11:23:45.5Z")),
            open(Some("2026-11-25T16:00:00Z"))
        );
        assert_eq!(
            rules.evaluate(ts("2026-11-25T15:59:59.999Z")),
            open(Some("2026-11-25T16:00:00Z"))
        );
    }

    #[test]
    fn several_allowed_windows_are_a_union() {
        let rules = allowed(vec![office(), window("sat,sun", "10-12", "UTC")]);
        assert_eq!(
            rules.evaluate(berlin("2026-11-20 17:00")),
            closed(
                "outside allowed window mon-fri 09-17 Europe/Berlin or sat,sun 10-12 UTC; \
                 opens Sat 2026-11-21 10:00 UTC",
                Some("2026-11-21T10:00:00Z"),
            )
        );
        assert_eq!(
            rules.evaluate(ts("2026-11-22T11:00:00Z")),
            open(Some("2026-11-22T12:00:00Z"))
        );

        // Touching windows read as one stretch: no close at noon.
        let split_day = allowed(vec![
            window("mon", "9-12", "UTC"),
            window("mon", "12-17", "UTC"),
        ]);
        assert_eq!(
            split_day.evaluate(ts("2026-11-23T10:00:00Z")),
            open(Some("2026-11-23T17:00:00Z"))
        );

        // Every day, all day: open with nothing ahead.
        let always = allowed(vec![
            RecurringWindow::parse(None, Some("0-24"), None).unwrap(),
        ]);
        assert_eq!(always.evaluate(ts("2026-11-23T10:00:00Z")), open(None));
    }

    #[test]
    fn recurring_freeze_inside_allowed_window() {
        let rules = TimeWindows {
            allowed: vec![office()],
            denied: vec![DenyWindow::Recurring {
                name: None,
                window: window("fri", "16-24", "Europe/Berlin"),
            }],
        };
        // Friday afternoon the freeze, not 17:00, ends the window.
        assert_eq!(
            rules.evaluate(berlin("2026-11-20 14:00")),
            open(Some("2026-11-20T15:00:00Z"))
        );
        assert_eq!(
            rules.evaluate(berlin("2026-11-20 16:30")),
            closed(
                "in freeze fri 16-24 Europe/Berlin; opens Mon 2026-11-23 09:00 CET",
                Some("2026-11-23T08:00:00Z"),
            )
        );
        // Thursday is untouched.
        assert_eq!(
            rules.evaluate(berlin("2026-11-19 16:30")),
            open(Some("2026-11-19T16:00:00Z"))
        );
    }

    fn holiday_freeze() -> DenyWindow {
        DenyWindow::Between {
            name: Some("holiday-freeze".into()),
            start: ts("2026-12-20T00:00:00Z"),
            end: ts("2027-01-02T00:00:00Z"),
        }
    }

    #[test]
    fn one_off_freeze() {
        let freeze_only = TimeWindows {
            allowed: vec![],
            denied: vec![holiday_freeze()],
        };
        assert_eq!(
            freeze_only.evaluate(ts("2026-12-21T09:00:00Z")),
            closed(
                "in freeze holiday-freeze (2026-12-20T00:00:00Z → 2027-01-02T00:00:00Z); \
                 opens Sat 2027-01-02 00:00 UTC",
                Some("2027-01-02T00:00:00Z"),
            )
        );
        assert_eq!(freeze_only.evaluate(ts("2027-01-02T00:00:00Z")), open(None));
        // Ten days ahead the freeze start is within the horizon; nineteen is not.
        assert_eq!(
            freeze_only.evaluate(ts("2026-12-10T00:00:00Z")),
            open(Some("2026-12-20T00:00:00Z"))
        );
        assert_eq!(freeze_only.evaluate(ts("2026-12-01T00:00:00Z")), open(None));

        // With office hours it reopens the first working morning after, shown
        // in the allowed window's zone.
        let with_office = TimeWindows {
            allowed: vec![office()],
            denied: vec![holiday_freeze()],
        };
        assert_eq!(
            with_office.evaluate(berlin("2026-12-21 10:00")),
            closed(
                "in freeze holiday-freeze (2026-12-20T00:00:00Z → 2027-01-02T00:00:00Z); \
                 opens Mon 2027-01-04 09:00 CET",
                Some("2027-01-04T08:00:00Z"),
            )
        );
    }

    #[test]
    fn nothing_opens_within_the_horizon() {
        let rules = TimeWindows {
            allowed: vec![],
            denied: vec![DenyWindow::Between {
                name: None,
                start: ts("2026-12-01T00:00:00Z"),
                end: ts("2027-02-01T00:00:00Z"),
            }],
        };
        assert_eq!(
            rules.evaluate(ts("2026-12-05T00:00:00Z")),
            closed(
                "in freeze 2026-12-01T00:00:00Z → 2027-02-01T00:00:00Z; \
                 does not open within the next 14 days",
                None,
            )
        );
    }

    #[test]
    fn dst_spring_forward_keeps_local_hours() {
        // Berlin: 2026-03-29 02:00 CET → 03:00 CEST.
        let rules = allowed(vec![office()]);
        assert_eq!(
            rules.evaluate(ts("2026-03-26T08:30:00Z")), // Thu 09:30 CET
            open(Some("2026-03-26T16:00:00Z"))
        );
        assert_eq!(
            rules.evaluate(berlin("2026-03-27 17:00")),
            closed(
                "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-03-30 09:00 CEST",
                Some("2026-03-30T07:00:00Z"),
            )
        );
        assert_eq!(
            rules.evaluate(ts("2026-03-30T07:00:00Z")),
            open(Some("2026-03-30T15:00:00Z"))
        );

        // On the day of the change itself.
        let daily = allowed(vec![window("daily", "9-17", "Europe/Berlin")]);
        assert_eq!(
            daily.evaluate(ts("2026-03-28T16:00:00Z")),
            closed(
                "outside allowed window daily 09-17 Europe/Berlin; opens Sun 2026-03-29 09:00 CEST",
                Some("2026-03-29T07:00:00Z"),
            )
        );

        // 02:30 does not exist that night; it resolves to 03:30 CEST.
        let in_gap = allowed(vec![window("sun", "2:30-4", "Europe/Berlin")]);
        assert_eq!(
            in_gap.evaluate(ts("2026-03-28T12:00:00Z")),
            closed(
                "outside allowed window sun 02:30-04:00 Europe/Berlin; opens Sun 2026-03-29 03:30 CEST",
                Some("2026-03-29T01:30:00Z"),
            )
        );
        assert_eq!(
            in_gap.evaluate(ts("2026-03-29T01:30:00Z")),
            open(Some("2026-03-29T02:00:00Z"))
        );
    }

    #[test]
    fn dst_fall_back_keeps_local_hours() {
        // Berlin: 2026-10-25 03:00 CEST → 02:00 CET.
        let rules = allowed(vec![office()]);
        assert_eq!(
            rules.evaluate(ts("2026-10-23T14:00:00Z")), // Fri 16:00 CEST
            open(Some("2026-10-23T15:00:00Z"))
        );
        assert_eq!(
            rules.evaluate(ts("2026-10-23T15:00:00Z")),
            closed(
                "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-10-26 09:00 CET",
                Some("2026-10-26T08:00:00Z"),
            )
        );
        assert_eq!(
            rules.evaluate(ts("2026-10-26T08:00:00Z")),
            open(Some("2026-10-26T16:00:00Z"))
        );

        // 02:30 happens twice that night; the window starts at the first.
        let in_fold = allowed(vec![window("sun", "2:30-4", "Europe/Berlin")]);
        assert_eq!(
            in_fold.evaluate(ts("2026-10-24T12:00:00Z")),
            closed(
                "outside allowed window sun 02:30-04:00 Europe/Berlin; opens Sun 2026-10-25 02:30 CEST",
                Some("2026-10-25T00:30:00Z"),
            )
        );
        assert_eq!(
            in_fold.evaluate(ts("2026-10-25T00:30:00Z")),
            open(Some("2026-10-25T03:00:00Z"))
        );
    }

    #[test]
    fn parse_errors_say_what_is_wrong_and_what_is_accepted() {
        let err = |days: Option<&str>, hours: Option<&str>, tz: Option<&str>| {
            RecurringWindow::parse(days, hours, tz).unwrap_err()
        };
        assert_eq!(
            err(Some("mon-fryday"), None, None),
            "days \"mon-fryday\": unknown day \"fryday\"; use mon, tue, wed, thu, fri, sat, sun, \
             ranges like mon-fri, or lists like sat,sun"
        );
        assert_eq!(
            err(Some("mon,,fri"), None, None),
            "days \"mon,,fri\": empty item in the list; use mon, tue, wed, thu, fri, sat, sun, \
             ranges like mon-fri, or lists like sat,sun"
        );
        assert_eq!(
            err(None, Some("9-25"), None),
            "hours \"9-25\": \"25\" is not a time of day; use hours like 9-17, 22-6 (past \
             midnight) or 0-24, or times like 09:30-17:00"
        );
        assert_eq!(
            err(None, Some("9"), None),
            "hours \"9\": expected a start and an end like 9-17; use hours like 9-17, 22-6 (past \
             midnight) or 0-24, or times like 09:30-17:00"
        );
        assert_eq!(
            err(None, Some("9:75-17"), None),
            "hours \"9:75-17\": \"9:75\" is not a time of day; use hours like 9-17, 22-6 (past \
             midnight) or 0-24, or times like 09:30-17:00"
        );
        assert_eq!(
            err(None, Some("24-6"), None),
            "hours \"24-6\": a window cannot start at 24; use hours like 9-17, 22-6 (past \
             midnight) or 0-24, or times like 09:30-17:00"
        );
        assert_eq!(
            err(None, Some("9-9"), None),
            "hours \"9-9\": start and end are the same; use 0-24 for the whole day"
        );
        assert_eq!(
            err(None, None, Some("Europe/Berln")),
            "timezone \"Europe/Berln\": unknown time zone; did you mean Europe/Berlin? use an \
             IANA name like Europe/Berlin, America/New_York or UTC"
        );
        assert_eq!(
            err(None, None, Some("Mars/Olympus_Mons")),
            "timezone \"Mars/Olympus_Mons\": unknown time zone; use an IANA name like \
             Europe/Berlin, America/New_York or UTC"
        );
    }

    #[test]
    fn describe_is_canonical() {
        let describe = |days: Option<&str>, hours: Option<&str>, tz: Option<&str>| {
            RecurringWindow::parse(days, hours, tz).unwrap().describe()
        };
        assert_eq!(
            describe(Some("mon-fri"), Some("9-17"), Some("Europe/Berlin")),
            "mon-fri 09-17 Europe/Berlin"
        );
        assert_eq!(
            describe(
                Some("Monday-Friday"),
                Some("09:00-17:00"),
                Some("europe/berlin")
            ),
            "mon-fri 09-17 Europe/Berlin"
        );
        assert_eq!(describe(Some("fri"), Some("16-24"), None), "fri 16-24 UTC");
        assert_eq!(describe(Some("fri"), Some("16-0"), None), "fri 16-24 UTC");
        assert_eq!(
            describe(Some("fri-mon"), Some("22-6"), None),
            "fri-mon 22-06 UTC"
        );
        assert_eq!(
            describe(
                Some("mon,wed-fri"),
                Some("9:30-17"),
                Some("America/New_York")
            ),
            "mon,wed-fri 09:30-17:00 America/New_York"
        );
        assert_eq!(describe(Some("sun,sat"), None, None), "sat,sun UTC");
        assert_eq!(describe(Some("sun,mon,wed"), None, None), "sun,mon,wed UTC");
        assert_eq!(describe(Some("*"), Some("0-24"), None), "daily UTC");
        assert_eq!(describe(None, None, None), "daily UTC");
        assert_eq!(describe(Some("mon-sun"), None, None), "daily UTC");
    }

    #[test]
    fn stored_form_round_trips() {
        let rules = TimeWindows {
            allowed: vec![office()],
            denied: vec![
                holiday_freeze(),
                DenyWindow::Recurring {
                    name: Some("friday".into()),
                    window: window("fri", "22-6", "UTC"),
                },
            ],
        };
        let json = serde_json::to_value(&rules).unwrap();
        assert_eq!(
            json["allowed"][0],
            serde_json::json!({
                "days": ["mon", "tue", "wed", "thu", "fri"],
                "hours": {"startMinute": 540, "endMinute": 1020},
                "timezone": "Europe/Berlin",
            })
        );
        let back: TimeWindows = serde_json::from_value(json).unwrap();
        assert_eq!(back, rules);

        let bad = serde_json::json!({"days": ["mon"], "hours": {"startMinute": 540, "endMinute": 2000}, "timezone": "UTC"});
        assert!(serde_json::from_value::<RecurringWindow>(bad).is_err());
    }

    #[test]
    fn unknown_zone_in_stored_rules_holds_applies() {
        let mut w = office();
        w.timezone = "Gone/Away".into();
        assert!(!w.contains(ts("2026-11-23T10:00:00Z")));
        assert_eq!(
            allowed(vec![w]).evaluate(ts("2026-11-23T10:00:00Z")),
            closed(
                "time zone \"Gone/Away\" of window mon-fri 09-17 Gone/Away is unknown to this \
                 build; applies are held until the window is fixed",
                None,
            )
        );
    }
}
