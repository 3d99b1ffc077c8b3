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
//!
//! [`setup`] and [`events`] describe what is generated, [`strategies`]
//! generates it; [`world`] drives the two channels and keeps the
//! bookkeeping, [`properties`] checks each decision against it and
//! [`liveness`] runs the good world.

use proptest::prelude::*;

use world::World;

mod events;
mod liveness;
mod properties;
mod setup;
mod strategies;
mod world;

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
        setup in strategies::setup(),
        actions in prop::collection::vec(strategies::action(), 0..60),
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
