//! Release-channel time rules: `allowedTimes` windows and deny windows
//! (freezes) as the compiler parses them from config and as compiled
//! instances store them, with their grammar, its error messages and how the
//! rules read for people. The engine evaluates them (its `windows` module)
//! on every convergence step.

use jiff::Timestamp;
use jiff::civil::Weekday;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

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

impl TimeWindows {
    /// No rules at all: applies may always run.
    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty() && self.denied.is_empty()
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

    pub fn days(&self) -> DaySet {
        self.days
    }

    pub fn hours(&self) -> Option<LocalHours> {
        self.hours
    }

    pub fn timezone(&self) -> &str {
        &self.timezone
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(days: &str, hours: &str, tz: &str) -> RecurringWindow {
        RecurringWindow::parse(Some(days), Some(hours), Some(tz)).unwrap()
    }

    fn office() -> RecurringWindow {
        window("mon-fri", "9-17", "Europe/Berlin")
    }

    fn holiday_freeze() -> DenyWindow {
        DenyWindow::Between {
            name: Some("holiday-freeze".into()),
            start: ts("2026-12-20T00:00:00Z"),
            end: ts("2027-01-02T00:00:00Z"),
        }
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
}
