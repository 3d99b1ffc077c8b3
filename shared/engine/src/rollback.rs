//! Rollbacks, decided: when an automatic rollback is due, which version a
//! requested one goes to, what starting one says, and how the status of a
//! service instance reads while one runs (ROLLING_BACK, then ROLLED_BACK).
//! Pure, like the gates: `decide()` applies them, and the rollback control
//! operation checks a request against the same choice of version.

use jiff::Timestamp;

use vergence_model::{
    CompiledInstance, InstanceState, Rollback, RollbackRequest, RollbackTarget, Status, Version,
};

/// The rollback due now, if the desired version failed here, automatic
/// rollback is on, no rollback is under way and an earlier version was good
/// here (converged and passed its checks).
pub(crate) fn automatic(
    state: &InstanceState,
    desired: &CompiledInstance,
    now: Timestamp,
) -> Option<Rollback> {
    if state.rollback.is_some() || !desired.auto_rollback {
        return None;
    }
    let target = state.target.as_ref()?;
    let good = state.last_good.as_ref()?;
    if target.version != desired.version || good.version == desired.version {
        return None;
    }
    Some(Rollback {
        failed_version: desired.version.clone(),
        to: good.clone(),
        reason: target.failed.clone()?,
        started_at: now,
        requested_by: None,
    })
}

/// The rollback a person asked for: to the version they named, else to
/// [`earlier_good`]. `None` when no earlier version converged here.
pub(crate) fn requested(
    request: &RollbackRequest,
    state: &InstanceState,
    desired: &CompiledInstance,
    now: Timestamp,
) -> Option<Rollback> {
    let to = request.to.clone().or_else(|| {
        earlier_good(state, Some(&desired.version)).map(|good| Box::new(good.clone()))
    })?;
    Some(Rollback {
        failed_version: desired.version.clone(),
        to,
        reason: format!("rollback requested by {}", request.actor),
        started_at: now,
        requested_by: Some(request.actor.clone()),
    })
}

/// Where a rollback without a version goes: the last good version, unless
/// that is what is desired now, then the good one before it.
pub(crate) fn earlier_good<'a>(
    state: &'a InstanceState,
    desired: Option<&Version>,
) -> Option<&'a RollbackTarget> {
    match &state.last_good {
        Some(good) if Some(&good.version) != desired => Some(good),
        _ => state.previous_good.as_deref(),
    }
}

/// What `plan` says of an instance rolled back from the version it still
/// desires: `up` leaves it where it is until a new version is pushed, so
/// the desired version is no update to make. `None` without such a rollback.
pub(crate) fn plan_note(state: &InstanceState, desired: Option<&Version>) -> Option<String> {
    let rollback = state.rollback.as_ref()?;
    if desired.map(Version::release) != Some(rollback.failed_version.release()) {
        return None;
    }
    let (failed, to) = (&rollback.failed_version, &rollback.to.version);
    let went = if state.status == Status::RolledBack {
        "rolled back"
    } else {
        "rolling back"
    };
    Some(match &rollback.requested_by {
        None => format!(
            "{went} to {to}; {failed} failed — push a new release, or release or approve {failed} again"
        ),
        Some(actor) => {
            format!("{went} to {to} as {actor} asked; push a new release to move on from {failed}")
        }
    })
}

/// What starting `rollback` says: the message of its event, and the
/// instance's reason until the rollback's first step shows.
pub(crate) fn announcement(rollback: &Rollback) -> (String, String) {
    let (failed, to, reason) = (
        &rollback.failed_version,
        &rollback.to.version,
        &rollback.reason,
    );
    match rollback.requested_by {
        None => (
            format!("rolling back to {to} because {failed} failed: {reason}"),
            format!("{failed} failed: {reason}"),
        ),
        Some(_) => (
            format!("rolling back from {failed} to {to}: {reason}"),
            reason.clone(),
        ),
    }
}

/// How a status reads during a rollback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    /// As it is: paused, drifted, or already rolled back.
    AsIs,
    /// Converged on the version it went back to: ROLLED_BACK until a new
    /// version is pushed. `message` is for the event that says so.
    RolledBack { message: String, reason: String },
    /// The rollback failed too: still FAILED, with a reason that says so.
    Failed { reason: String },
    /// On its way back: ROLLING_BACK, with the usual reason after why.
    RollingBack { reason: String },
    /// Held by a gate (an approval, a window): that status, with a reason
    /// that says it is a rollback that waits.
    Held { reason: String },
}

/// What keeps the version a rollback left from being applied again, and
/// what lets it be: the same words in the reason and in `explain`.
pub(crate) fn held(rollback: &Rollback) -> String {
    let failed = &rollback.failed_version;
    format!(
        "{} is held here (no check or config push applies it again) until it is released again, \
         approved with --version {failed}, or a newer version is pushed",
        failed.release()
    )
}

/// How `status` (with `reason`) reads while `rollback` runs.
pub(crate) fn shown(rollback: &Rollback, status: Status, reason: &str) -> Shown {
    let to = &rollback.to.version;
    let why = match &rollback.requested_by {
        Some(actor) => format!(
            "{actor} asked to roll back from {}",
            rollback.failed_version
        ),
        None => format!("{} failed ({})", rollback.failed_version, rollback.reason),
    };
    match status {
        Status::Converged => {
            let message = format!("rolled back to {to}: {why}");
            Shown::RolledBack {
                reason: format!("{message}; {}", held(rollback)),
                message,
            }
        }
        Status::Failed => Shown::Failed {
            reason: format!("rollback to {to} failed too: {reason}"),
        },
        Status::Paused | Status::Drifted | Status::RolledBack => Shown::AsIs,
        // Held by a gate like any apply: the status says what it waits on.
        Status::WaitingApproval | Status::Blocked => Shown::Held {
            reason: format!("rollback to {to} after {why}: {reason}"),
        },
        _ => Shown::RollingBack {
            reason: format!("rolling back to {to} after {why}: {reason}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{job_spec, n, spec};
    use vergence_model::TargetProgress;

    fn good(version: &str) -> Box<RollbackTarget> {
        let mut apply = spec("prod", version, None).apply;
        apply.job = job_spec(&format!("./apply-{version}")).into();
        Box::new(RollbackTarget {
            version: n(version),
            apply,
            fetch: None,
        })
    }

    fn now() -> Timestamp {
        n("2027-01-15T10:00:00Z")
    }

    /// v1 then v2 were good here; the target is `target`, failed when `failed`.
    fn state(target: &str, failed: Option<&str>) -> InstanceState {
        let mut state = InstanceState::new_pending("test");
        state.previous_good = Some(good("v1"));
        state.last_good = Some(good("v2"));
        let mut progress = TargetProgress::new(n(target), now());
        progress.failed = failed.map(str::to_owned);
        state.target = Some(progress);
        state
    }

    fn request(to: Option<&str>) -> RollbackRequest {
        RollbackRequest {
            to: to.map(good),
            actor: "cli:alice".into(),
            at: now(),
        }
    }

    #[test]
    fn a_failed_desired_version_rolls_back_to_the_last_good_one() {
        let desired = spec("prod", "v3", None);
        let rollback = automatic(&state("v3", Some("smoke failed")), &desired, now()).unwrap();
        assert_eq!(rollback.failed_version, "v3");
        assert_eq!(rollback.to.version, "v2");
        assert_eq!(rollback.reason, "smoke failed");
        assert_eq!(rollback.requested_by, None);
    }

    #[test]
    fn no_automatic_rollback_without_a_failure_an_earlier_good_version_or_the_policy() {
        let desired = spec("prod", "v3", None);
        assert_eq!(automatic(&state("v3", None), &desired, now()), None);
        // The failure is of another version than the desired one.
        assert_eq!(automatic(&state("v2", Some("x")), &desired, now()), None);
        // The last good version is the desired one: nothing earlier to go to.
        let v2 = spec("prod", "v2", None);
        assert_eq!(automatic(&state("v2", Some("x")), &v2, now()), None);
        let mut off = desired.clone();
        off.auto_rollback = false;
        assert_eq!(automatic(&state("v3", Some("x")), &off, now()), None);
        // One rollback at a time.
        let mut rolling = state("v3", Some("x"));
        rolling.rollback = automatic(&rolling, &desired, now());
        assert!(rolling.rollback.is_some());
        assert_eq!(automatic(&rolling, &desired, now()), None);
    }

    #[test]
    fn a_requested_rollback_goes_to_the_named_version_else_an_earlier_good_one() {
        let v3 = spec("prod", "v3", None);
        let named = requested(&request(Some("v1")), &state("v3", None), &v3, now()).unwrap();
        assert_eq!(named.to.version, "v1");
        assert_eq!(named.reason, "rollback requested by cli:alice");
        assert_eq!(named.requested_by.as_deref(), Some("cli:alice"));

        let last_good = requested(&request(None), &state("v3", None), &v3, now()).unwrap();
        assert_eq!(last_good.to.version, "v2");
        // v2, the last good version, is desired: the one before it.
        let v2 = spec("prod", "v2", None);
        let before = requested(&request(None), &state("v2", None), &v2, now()).unwrap();
        assert_eq!(before.to.version, "v1");

        let fresh = InstanceState::new_pending("new");
        assert_eq!(requested(&request(None), &fresh, &v3, now()), None);
        assert_eq!(earlier_good(&fresh, None), None);
    }

    #[test]
    fn plan_says_a_rolled_back_instance_stays_until_a_new_release() {
        let v3 = spec("prod", "v3", None);
        let mut failed = state("v3", Some("smoke failed"));
        assert_eq!(plan_note(&failed, Some(&n("v3"))), None);
        failed.rollback = automatic(&failed, &v3, now());
        failed.status = Status::RolledBack;
        assert_eq!(
            plan_note(&failed, Some(&n("v3"))).as_deref(),
            Some(
                "rolled back to v2; v3 failed — push a new release, or release or approve v3 again"
            )
        );
        // A newer desired version ends the rollback: an update again.
        assert_eq!(plan_note(&failed, Some(&n("v4"))), None);
        let mut asked = state("v3", None);
        asked.rollback = requested(&request(None), &asked, &v3, now());
        asked.status = Status::RollingBack;
        assert_eq!(
            plan_note(&asked, Some(&n("v3"))).as_deref(),
            Some("rolling back to v2 as cli:alice asked; push a new release to move on from v3")
        );
    }

    #[test]
    fn starting_a_rollback_says_why() {
        let v3 = spec("prod", "v3", None);
        let auto = automatic(&state("v3", Some("smoke failed")), &v3, now()).unwrap();
        assert_eq!(
            announcement(&auto),
            (
                "rolling back to v2 because v3 failed: smoke failed".to_owned(),
                "v3 failed: smoke failed".to_owned()
            )
        );
        let asked = requested(&request(None), &state("v3", None), &v3, now()).unwrap();
        assert_eq!(
            announcement(&asked),
            (
                "rolling back from v3 to v2: rollback requested by cli:alice".to_owned(),
                "rollback requested by cli:alice".to_owned()
            )
        );
    }

    #[test]
    fn statuses_read_as_rolling_back_then_rolled_back() {
        let v3 = spec("prod", "v3", None);
        let auto = automatic(&state("v3", Some("smoke failed")), &v3, now()).unwrap();
        assert_eq!(
            shown(&auto, Status::Applying, "applying v2 (attempt 1)"),
            Shown::RollingBack {
                reason:
                    "rolling back to v2 after v3 failed (smoke failed): applying v2 (attempt 1)"
                        .into()
            }
        );
        assert_eq!(
            shown(&auto, Status::Converged, "converged on v2"),
            Shown::RolledBack {
                message: "rolled back to v2: v3 failed (smoke failed)".into(),
                reason: "rolled back to v2: v3 failed (smoke failed); v3 is held here (no check \
                         or config push applies it again) until it is released again, approved \
                         with --version v3, or a newer version is pushed"
                    .into(),
            }
        );
        assert_eq!(
            shown(&auto, Status::Failed, "apply of v2 failed"),
            Shown::Failed {
                reason: "rollback to v2 failed too: apply of v2 failed".into()
            }
        );
        for status in [Status::Paused, Status::Drifted, Status::RolledBack] {
            assert_eq!(shown(&auto, status, "whatever"), Shown::AsIs);
        }
        let asked = requested(&request(None), &state("v3", None), &v3, now()).unwrap();
        let Shown::RolledBack { message, .. } = shown(&asked, Status::Converged, "") else {
            panic!("rolled back");
        };
        assert_eq!(
            message,
            "rolled back to v2: cli:alice asked to roll back from v3"
        );
    }
}
