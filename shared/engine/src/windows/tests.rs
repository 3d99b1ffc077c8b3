//! The evaluation of time rules, against exact instants: office hours,
//! weekends and ranges over them, hours past midnight, unions of allowed
//! windows, freezes (recurring and one-off), the horizon, DST changes and
//! zones unknown to this build.

use jiff::Timestamp;
use jiff::civil::{DateTime, Weekday};

use super::*;
use vergence_model::{DenyWindow, RecurringWindow, TimeWindows};

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
    assert!(!contains(&w, ts("2026-11-23T07:59:59Z")));
    assert!(contains(&w, ts("2026-11-23T08:00:00Z")));
    assert!(contains(&w, ts("2026-11-23T15:59:59Z")));
    assert!(!contains(&w, ts("2026-11-23T16:00:00Z")));
    assert!(contains(&w, berlin("2026-11-27 12:00")));
    assert!(!contains(&w, berlin("2026-11-21 12:00")));
    assert!(!contains(&w, berlin("2026-11-22 12:00")));
}

#[test]
fn weekend_list_and_wrapping_day_range() {
    let weekend = RecurringWindow::parse(Some("sat,sun"), None, None).unwrap();
    assert!(!contains(&weekend, ts("2026-11-20T23:59:59Z")));
    assert!(contains(&weekend, ts("2026-11-21T00:00:00Z")));
    assert!(contains(&weekend, ts("2026-11-22T23:59:59Z")));
    assert!(!contains(&weekend, ts("2026-11-23T00:00:00Z")));

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
            contains(&long_weekend, ts(&format!("{day}T12:00:00Z"))),
            expected,
            "{day}"
        );
    }

    let mixed = RecurringWindow::parse(Some("mon,wed-fri"), None, None).unwrap();
    assert!(contains(&mixed, ts("2026-11-23T12:00:00Z")));
    assert!(!contains(&mixed, ts("2026-11-24T12:00:00Z")));
    assert!(contains(&mixed, ts("2026-11-25T12:00:00Z")));
}

#[test]
fn hours_past_midnight_belong_to_the_start_day() {
    let w = window("fri", "22-6", "UTC");
    assert!(!contains(&w, ts("2026-11-20T21:59:59Z")));
    assert!(contains(&w, ts("2026-11-20T22:00:00Z")));
    assert!(contains(&w, ts("2026-11-21T05:59:59Z"))); // Saturday morning
    assert!(!contains(&w, ts("2026-11-21T06:00:00Z")));
    assert!(!contains(&w, ts("2026-11-21T22:00:00Z"))); // Saturday night
    assert!(!contains(&w, ts("2026-11-20T03:00:00Z"))); // Thursday's night

    let verdict = evaluate(&allowed(vec![w]), ts("2026-11-20T23:00:00Z"));
    assert_eq!(verdict, open(Some("2026-11-21T06:00:00Z")));
}

#[test]
fn empty_rules_are_always_open() {
    let rules = TimeWindows::default();
    assert!(rules.is_empty());
    assert_eq!(evaluate(&rules, ts("2026-11-20T12:00:00Z")), open(None));
}

#[test]
fn opens_exactly_at_monday_nine_across_the_weekend() {
    let rules = allowed(vec![office()]);
    assert_eq!(
        evaluate(&rules, berlin("2026-11-20 17:00")),
        closed(
            "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-11-23 09:00 CET",
            Some("2026-11-23T08:00:00Z"),
        )
    );
    // Exactly at the opening it is open, until 17:00 local.
    assert_eq!(
        evaluate(&rules, ts("2026-11-23T08:00:00Z")),
        open(Some("2026-11-23T16:00:00Z"))
    );
}

#[test]
fn closes_at_is_the_exact_end_of_the_window() {
    let rules = allowed(vec![office()]);
    assert_eq!(
        evaluate(&rules, ts("2026-11-25T11:23:45.5Z")),
        open(Some("2026-11-25T16:00:00Z"))
    );
    assert_eq!(
        evaluate(&rules, ts("2026-11-25T15:59:59.999Z")),
        open(Some("2026-11-25T16:00:00Z"))
    );
}

#[test]
fn several_allowed_windows_are_a_union() {
    let rules = allowed(vec![office(), window("sat,sun", "10-12", "UTC")]);
    assert_eq!(
        evaluate(&rules, berlin("2026-11-20 17:00")),
        closed(
            "outside allowed window mon-fri 09-17 Europe/Berlin or sat,sun 10-12 UTC; \
             opens Sat 2026-11-21 10:00 UTC",
            Some("2026-11-21T10:00:00Z"),
        )
    );
    assert_eq!(
        evaluate(&rules, ts("2026-11-22T11:00:00Z")),
        open(Some("2026-11-22T12:00:00Z"))
    );

    // Touching windows read as one stretch: no close at noon.
    let split_day = allowed(vec![
        window("mon", "9-12", "UTC"),
        window("mon", "12-17", "UTC"),
    ]);
    assert_eq!(
        evaluate(&split_day, ts("2026-11-23T10:00:00Z")),
        open(Some("2026-11-23T17:00:00Z"))
    );

    // Every day, all day: open with nothing ahead.
    let always = allowed(vec![
        RecurringWindow::parse(None, Some("0-24"), None).unwrap(),
    ]);
    assert_eq!(evaluate(&always, ts("2026-11-23T10:00:00Z")), open(None));
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
        evaluate(&rules, berlin("2026-11-20 14:00")),
        open(Some("2026-11-20T15:00:00Z"))
    );
    assert_eq!(
        evaluate(&rules, berlin("2026-11-20 16:30")),
        closed(
            "in freeze fri 16-24 Europe/Berlin; opens Mon 2026-11-23 09:00 CET",
            Some("2026-11-23T08:00:00Z"),
        )
    );
    // Thursday is untouched.
    assert_eq!(
        evaluate(&rules, berlin("2026-11-19 16:30")),
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
        evaluate(&freeze_only, ts("2026-12-21T09:00:00Z")),
        closed(
            "in freeze holiday-freeze (2026-12-20T00:00:00Z → 2027-01-02T00:00:00Z); \
             opens Sat 2027-01-02 00:00 UTC",
            Some("2027-01-02T00:00:00Z"),
        )
    );
    assert_eq!(
        evaluate(&freeze_only, ts("2027-01-02T00:00:00Z")),
        open(None)
    );
    // Ten days ahead the freeze start is within the horizon; nineteen is not.
    assert_eq!(
        evaluate(&freeze_only, ts("2026-12-10T00:00:00Z")),
        open(Some("2026-12-20T00:00:00Z"))
    );
    assert_eq!(
        evaluate(&freeze_only, ts("2026-12-01T00:00:00Z")),
        open(None)
    );

    // With office hours it reopens the first working morning after, shown
    // in the allowed window's zone.
    let with_office = TimeWindows {
        allowed: vec![office()],
        denied: vec![holiday_freeze()],
    };
    assert_eq!(
        evaluate(&with_office, berlin("2026-12-21 10:00")),
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
        evaluate(&rules, ts("2026-12-05T00:00:00Z")),
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
        evaluate(&rules, ts("2026-03-26T08:30:00Z")), // Thu 09:30 CET
        open(Some("2026-03-26T16:00:00Z"))
    );
    assert_eq!(
        evaluate(&rules, berlin("2026-03-27 17:00")),
        closed(
            "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-03-30 09:00 CEST",
            Some("2026-03-30T07:00:00Z"),
        )
    );
    assert_eq!(
        evaluate(&rules, ts("2026-03-30T07:00:00Z")),
        open(Some("2026-03-30T15:00:00Z"))
    );

    // On the day of the change itself.
    let daily = allowed(vec![window("daily", "9-17", "Europe/Berlin")]);
    assert_eq!(
        evaluate(&daily, ts("2026-03-28T16:00:00Z")),
        closed(
            "outside allowed window daily 09-17 Europe/Berlin; opens Sun 2026-03-29 09:00 CEST",
            Some("2026-03-29T07:00:00Z"),
        )
    );

    // 02:30 does not exist that night; it resolves to 03:30 CEST.
    let in_gap = allowed(vec![window("sun", "2:30-4", "Europe/Berlin")]);
    assert_eq!(
        evaluate(&in_gap, ts("2026-03-28T12:00:00Z")),
        closed(
            "outside allowed window sun 02:30-04:00 Europe/Berlin; opens Sun 2026-03-29 03:30 CEST",
            Some("2026-03-29T01:30:00Z"),
        )
    );
    assert_eq!(
        evaluate(&in_gap, ts("2026-03-29T01:30:00Z")),
        open(Some("2026-03-29T02:00:00Z"))
    );
}

#[test]
fn dst_fall_back_keeps_local_hours() {
    // Berlin: 2026-10-25 03:00 CEST → 02:00 CET.
    let rules = allowed(vec![office()]);
    assert_eq!(
        evaluate(&rules, ts("2026-10-23T14:00:00Z")), // Fri 16:00 CEST
        open(Some("2026-10-23T15:00:00Z"))
    );
    assert_eq!(
        evaluate(&rules, ts("2026-10-23T15:00:00Z")),
        closed(
            "outside allowed window mon-fri 09-17 Europe/Berlin; opens Mon 2026-10-26 09:00 CET",
            Some("2026-10-26T08:00:00Z"),
        )
    );
    assert_eq!(
        evaluate(&rules, ts("2026-10-26T08:00:00Z")),
        open(Some("2026-10-26T16:00:00Z"))
    );

    // 02:30 happens twice that night; the window starts at the first.
    let in_fold = allowed(vec![window("sun", "2:30-4", "Europe/Berlin")]);
    assert_eq!(
        evaluate(&in_fold, ts("2026-10-24T12:00:00Z")),
        closed(
            "outside allowed window sun 02:30-04:00 Europe/Berlin; opens Sun 2026-10-25 02:30 CEST",
            Some("2026-10-25T00:30:00Z"),
        )
    );
    assert_eq!(
        evaluate(&in_fold, ts("2026-10-25T00:30:00Z")),
        open(Some("2026-10-25T03:00:00Z"))
    );
}

#[test]
fn unknown_zone_in_stored_rules_holds_applies() {
    // Stored rules whose zone this build's time-zone database lacks.
    let w: RecurringWindow = serde_json::from_value(serde_json::json!({
        "days": ["mon", "tue", "wed", "thu", "fri"],
        "hours": {"startMinute": 540, "endMinute": 1020},
        "timezone": "Gone/Away",
    }))
    .unwrap();
    assert!(!contains(&w, ts("2026-11-23T10:00:00Z")));
    assert_eq!(
        evaluate(&allowed(vec![w]), ts("2026-11-23T10:00:00Z")),
        closed(
            "time zone \"Gone/Away\" of window mon-fri 09-17 Gone/Away is unknown to this \
             build; applies are held until the window is fixed",
            None,
        )
    );
}
