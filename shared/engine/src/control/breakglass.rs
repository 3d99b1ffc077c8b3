//! Break-glass: `vergence override` lets one version of one instance apply
//! through its freezes and closed windows, with a reason on the record.
//! Nothing else is opened (approvals, protections and a pause still hold),
//! and it ends by itself: once the version converges, or at its expiry.

use jiff::SignedDuration;
use vergence_model::error::{Error, Result};
use vergence_model::{Event, EventKind, InstanceKey, Version, WindowOverride};

use super::Control;
use crate::{gates::human, moment};

/// How long an override lasts unless the request says.
pub const DEFAULT_OVERRIDE: SignedDuration = SignedDuration::from_hours(2);
/// The longest an override may last: a freeze is a decision of its own,
/// and glass broken for longer than a day is a config change.
pub const MAX_OVERRIDE: SignedDuration = SignedDuration::from_hours(24);

impl Control {
    /// Lets `version` (default: the version the instance is headed for)
    /// through the instance's freezes and closed windows, for `lasting`
    /// (default [`DEFAULT_OVERRIDE`]) or until it converges. Refuses an
    /// empty reason, a version the instance is not headed for, and a
    /// duration past [`MAX_OVERRIDE`]; stores nothing then.
    pub async fn override_windows(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        reason: &str,
        lasting: Option<SignedDuration>,
        actor: &str,
    ) -> Result<WindowOverride> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(Error::invalid(
                "reason",
                "a break-glass override needs a reason (--reason \"incident 123\"): it goes on the record",
            ));
        }
        let lasting = lasting.unwrap_or(DEFAULT_OVERRIDE);
        if lasting <= SignedDuration::ZERO || lasting > MAX_OVERRIDE {
            return Err(Error::invalid(
                "for",
                format!(
                    "an override lasts more than 0s and at most {}; got {}",
                    human(MAX_OVERRIDE),
                    human(lasting)
                ),
            ));
        }
        let record = self.instance(key).await?;
        // A rollback under way applies the version it goes back to.
        let headed_for = match &record.state.rollback {
            Some(rollback) => Some(rollback.to.version.clone()),
            None => record.desired.version().cloned(),
        };
        let Some(headed_for) = headed_for else {
            return Err(Error::invalid(
                "version",
                format!("{key} has no desired version yet: there is nothing to let through"),
            ));
        };
        if let Some(asked) = version.filter(|v| **v != headed_for) {
            return Err(Error::invalid(
                "version",
                format!(
                    "{key} is headed for {headed_for}, not {asked}: an override lets through the version about to be applied"
                ),
            ));
        }
        if record.state.status == vergence_model::Status::Converged
            && record.state.current_version.as_ref() == Some(&headed_for)
        {
            return Err(Error::invalid(
                "version",
                format!(
                    "{key} already converged on {headed_for}: nothing waits for a freeze (an override lets a version through that is still to be applied, or drift to be repaired)"
                ),
            ));
        }
        let now = self.clock.now();
        let granted = WindowOverride {
            version: headed_for.clone(),
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            at: now,
            expires_at: now.checked_add(lasting).unwrap_or(now),
        };
        let stored = granted.clone();
        self.update_instance(key, move |r| {
            r.controls.window_override = Some(stored.clone());
            vec![Event::for_instance(
                &r.key,
                now,
                &stored.actor,
                EventKind::Overridden {
                    version: stored.version.clone(),
                },
                format!(
                    "{} overrode the freezes and windows of {} for {} until {} (or until it converges): {}",
                    stored.actor,
                    r.key,
                    stored.version,
                    moment(stored.expires_at),
                    stored.reason
                ),
            )]
        })
        .await?;
        self.wake(std::slice::from_ref(key)).await?;
        Ok(granted)
    }
}
