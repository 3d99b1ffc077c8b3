//! Strategies: random setups and event sequences, weighted towards jobs
//! finishing well.

use jiff::SignedDuration;
use proptest::prelude::*;

use super::events::{Action, Outcome};
use super::setup::{Allowed, Ch, Checks, Freeze, Setup, Tier, Warm};

pub(super) fn setup() -> impl Strategy<Value = Setup> {
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

pub(super) fn action() -> impl Strategy<Value = Action> {
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
