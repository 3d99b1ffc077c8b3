//! Operator actions on delivery: pause and resume, pin and unpin, manual
//! rollback, alert states. Each records who did it as an event and wakes
//! the instances it touches.

use vergence_model::error::{Error, Result};
use vergence_model::ports::InstanceFilter;
use vergence_model::{
    AlertState, ControlMark, Desired, Event, EventKind, InstanceKey, InstanceRecord, Pin,
    ProtectionCheck, Release, RollbackRequest, RollbackTarget, Version,
};

use super::Control;

/// How far back `pin`, `rollback --version`, `approve --version` and a
/// repeated release look for a release.
pub(super) const RELEASE_LOOKBACK: usize = 1000;

/// The error for a version never released to `service`.
pub(super) fn unknown_release(service: &vergence_model::ServiceName, version: &Version) -> Error {
    Error::not_found(format!(
        "release {version} of {service} (push it with `vergence release {service} {version}`)"
    ))
}

/// What an operator does to the applies of some instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseAction {
    /// Stop applies; fetches go on, so drift is still seen.
    Pause,
    /// Let applies run again.
    Resume,
}

impl PauseAction {
    /// The past tense, for messages: "paused", "resumed".
    pub fn done(self) -> &'static str {
        match self {
            PauseAction::Pause => "paused",
            PauseAction::Resume => "resumed",
        }
    }
}

/// Why the engine stopped stepping an instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepFailure {
    /// An error retrying cannot fix.
    Permanent,
    /// A retryable error that kept failing until the message was given up
    /// on (it goes to the dead-letter queue).
    GaveUp,
}

impl Control {
    /// Pauses or resumes applies on every instance matching `filter`.
    pub async fn pause(
        &self,
        filter: &InstanceFilter,
        action: PauseAction,
        actor: &str,
    ) -> Result<Vec<InstanceKey>> {
        let pause = action == PauseAction::Pause;
        let records = self.store.list_instances(filter).await?;
        if records.is_empty() {
            return Err(Error::not_found("instances matching the filter"));
        }
        let now = self.clock.now();
        let mut keys = Vec::new();
        for record in records {
            self.update_instance(&record.key, |r| {
                if r.controls.paused.is_some() == pause {
                    return Vec::new();
                }
                r.controls.paused = pause.then(|| ControlMark {
                    actor: actor.to_owned(),
                    at: now,
                });
                let (kind, verb) = match action {
                    PauseAction::Pause => (EventKind::Paused, "paused applies"),
                    PauseAction::Resume => (EventKind::Resumed, "resumed applies"),
                };
                vec![Event::for_instance(
                    &r.key,
                    now,
                    actor,
                    kind,
                    format!("{actor} {verb}"),
                )]
            })
            .await?;
            keys.push(record.key);
        }
        self.wake(&keys).await?;
        Ok(keys)
    }

    /// Holds one instance on a released version until unpinned.
    pub async fn pin(&self, key: &InstanceKey, version: &Version, actor: &str) -> Result<()> {
        let desired = self.desired_for_release(key, version).await?;
        let model = self.require_model().await?;
        let now = self.clock.now();
        self.update_instance(key, |r| {
            r.controls.pinned = Some(Pin {
                version: version.clone(),
                actor: actor.to_owned(),
                at: now,
            });
            r.desired = desired.clone();
            r.config_hash = model.hash().to_owned();
            vec![Event::for_instance(
                &r.key,
                now,
                actor,
                EventKind::Pinned {
                    version: version.clone(),
                },
                format!("{actor} pinned {} to {version}", r.key.release_channel),
            )]
        })
        .await?;
        self.wake(std::slice::from_ref(key)).await
    }

    /// Lets an instance follow its service's latest release again.
    pub async fn unpin(&self, key: &InstanceKey, actor: &str) -> Result<()> {
        let model = self.require_model().await?;
        let latest = self
            .store
            .latest_release(&key.application, &key.service)
            .await?;
        let desired = desired_of(model.as_ref(), key, latest.as_ref())?;
        let now = self.clock.now();
        self.update_instance(key, |r| {
            if r.controls.pinned.take().is_none() {
                return Vec::new();
            }
            r.desired = desired.clone();
            r.config_hash = model.hash().to_owned();
            vec![Event::for_instance(
                &r.key,
                now,
                actor,
                EventKind::Unpinned,
                format!("{actor} unpinned {}", r.key.release_channel),
            )]
        })
        .await?;
        self.wake(std::slice::from_ref(key)).await
    }

    /// Asks the engine to roll one instance back: to `version` (a release)
    /// or, without one, to the last version that converged there.
    pub async fn rollback(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        actor: &str,
    ) -> Result<()> {
        let record = self.instance(key).await?;
        let desired = record.desired.version().cloned();
        let to = match version {
            Some(v) => {
                let Desired::Ready(spec) = self.desired_for_release(key, v).await? else {
                    return Err(Error::invalid(
                        "version",
                        format!("release {v} cannot be compiled for {key} with the current config"),
                    ));
                };
                Some(Box::new(RollbackTarget {
                    version: spec.version.clone(),
                    apply: spec.apply.clone(),
                    fetch: spec.fetch.clone(),
                }))
            }
            None => None,
        };
        let good = crate::rollback::earlier_good(&record.state, desired.as_ref());
        let target_version = match (&to, good) {
            (Some(t), _) => t.version.clone(),
            (None, Some(good)) => good.version.clone(),
            (None, None) => {
                return Err(Error::invalid(
                    "version",
                    format!(
                        "no version has converged in {} yet; give one with --version",
                        key.release_channel
                    ),
                ));
            }
        };
        if Some(&target_version) == desired.as_ref() {
            return Err(Error::invalid(
                "version",
                format!("{key} already wants {target_version}; a rollback goes to another version"),
            ));
        }
        let desired = desired.as_ref().map_or("-", Version::as_str);
        let now = self.clock.now();
        self.update_instance(key, |r| {
            r.state.rollback_request = Some(RollbackRequest {
                to: to.clone(),
                actor: actor.to_owned(),
                at: now,
            });
            vec![Event::for_instance(
                &r.key,
                now,
                actor,
                EventKind::RollbackRequested {
                    to: Some(target_version.clone()),
                },
                format!("{actor} asked to roll back from {desired} to {target_version}"),
            )]
        })
        .await?;
        self.wake(std::slice::from_ref(key)).await
    }

    /// Records an alert's state and wakes the instances whose protections
    /// refer to it. Returns those instances.
    pub async fn set_alert(
        &self,
        name: &str,
        firing: bool,
        summary: Option<String>,
        actor: &str,
    ) -> Result<Vec<InstanceKey>> {
        vergence_model::check_name(name).map_err(|e| Error::invalid("alert", e))?;
        let now = self.clock.now();
        let previous = self.store.get_alert(name).await?;
        let changed = previous.as_ref().is_none_or(|p| p.firing != firing);
        let alert = AlertState {
            name: name.to_owned(),
            firing,
            since: match &previous {
                Some(p) if !changed => p.since,
                _ => now,
            },
            actor: actor.to_owned(),
            summary,
        };
        self.store.put_alert(&alert).await?;
        let watching: Vec<InstanceRecord> = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?
            .into_iter()
            .filter(|r| refers_to_alert(r, name))
            .collect();
        let keys: Vec<InstanceKey> = watching.iter().map(|r| r.key.clone()).collect();
        if changed {
            let state = if firing { "firing" } else { "resolved" };
            let events: Vec<Event> = watching
                .iter()
                .map(|r| {
                    Event::for_instance(
                        &r.key,
                        now,
                        actor,
                        EventKind::AlertChanged {
                            alert: name.to_owned(),
                            firing,
                        },
                        format!("alert {name} is {state} (set by {actor})"),
                    )
                })
                .collect();
            self.append_events(events, &format!("alert-{name}-{}", now.as_millisecond()))
                .await?;
        }
        self.wake_everywhere(&keys).await?;
        Ok(keys)
    }

    pub async fn alerts(&self) -> Result<Vec<AlertState>> {
        self.store.list_alerts().await
    }

    /// The desired state of `key` when running release `version`.
    async fn desired_for_release(&self, key: &InstanceKey, version: &Version) -> Result<Desired> {
        let model = self.require_model().await?;
        let release = self
            .release(key, version)
            .await?
            .ok_or_else(|| unknown_release(&key.service, version))?;
        desired_of(model.as_ref(), key, Some(&release))
    }

    /// Release `version` of the instance's service, if it was pushed.
    pub(super) async fn release(
        &self,
        key: &InstanceKey,
        version: &Version,
    ) -> Result<Option<Release>> {
        Ok(self
            .store
            .list_releases(&key.application, &key.service, RELEASE_LOOKBACK)
            .await?
            .into_iter()
            .find(|r| &r.version == version))
    }

    pub(crate) async fn instance(&self, key: &InstanceKey) -> Result<InstanceRecord> {
        self.store
            .get_instance(key)
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {key}")))
    }
}

/// The desired state of `key` under `model`, running `release` (or the
/// config-derived version without one).
pub(super) fn desired_of(
    model: &dyn vergence_model::ports::CompiledConfig,
    key: &InstanceKey,
    release: Option<&Release>,
) -> Result<Desired> {
    model
        .compile_service(&key.application, &key.service, release)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, d)| d)
        .ok_or_else(|| Error::not_found(format!("instance {key} in the config")))
}

fn refers_to_alert(record: &InstanceRecord, alert: &str) -> bool {
    record.desired.compiled().is_some_and(|spec| {
        spec.protections
            .iter()
            .any(|p| matches!(&p.check, ProtectionCheck::Alert { alert: a } if a == alert))
    })
}

impl Control {
    /// The instance of `service` in `channel`; the application may be left
    /// out when only one application has the service.
    pub async fn instance_key(
        &self,
        application: Option<vergence_model::ApplicationName>,
        service: vergence_model::ServiceName,
        channel: vergence_model::ReleaseChannelName,
    ) -> Result<InstanceKey> {
        let application = match application {
            Some(app) => app,
            None => self.require_model().await?.application_of(&service)?,
        };
        Ok(InstanceKey::new(application, service, channel))
    }
}

impl Control {
    /// Records that stepping an instance failed for good (a permanent error,
    /// or a message given up on): the instance shows FAILED with the error
    /// as its reason until someone looks at it, and the audit trail says so.
    pub async fn record_step_failure(
        &self,
        key: &InstanceKey,
        error: &str,
        failure: StepFailure,
        actor: &str,
    ) -> Result<()> {
        let now = self.clock.now();
        let result = self
            .update_instance(key, |r| {
                let from = r.state.status;
                r.state.status = vergence_model::Status::Failed;
                r.state.reason = vergence_model::text::sentence(match failure {
                    StepFailure::GaveUp => format!(
                        "Vergence gave up stepping this instance after repeated failures: {error}"
                    ),
                    StepFailure::Permanent => {
                        format!("Vergence cannot step this instance: {error}")
                    }
                });
                r.state.since = Some(now);
                vec![Event::for_instance(
                    &r.key,
                    now,
                    actor,
                    EventKind::StepFailed {
                        dead_lettered: failure == StepFailure::GaveUp,
                    },
                    format!("{} (was {from})", r.state.reason),
                )]
            })
            .await;
        match result {
            // The instance is gone (removed by a config): nothing to record.
            Err(Error::NotFound { .. }) => Ok(()),
            other => other.map(|_| ()),
        }
    }
}
