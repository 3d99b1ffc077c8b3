//! Delivery operations: pushing a release, approving, asking for fresh
//! checks, and reading status and events.

use std::collections::BTreeMap;

use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    self, CompiledConfig, InstanceFilter, MAX_CONFLICT_RETRIES, ReleasePush,
};
use vergence_model::{
    ApplicationName, Approval, Event, EventFilter, EventKind, InstanceKey, InstanceRecord,
    InstanceState, ParamValue, Release, RetryRequest, ServiceName, Version,
};

use super::Control;
use super::config::apply::follow;

/// A release as asked for.
struct Asked<'a> {
    application: Option<ApplicationName>,
    service: &'a ServiceName,
    version: &'a Version,
    params: &'a BTreeMap<String, String>,
    actor: &'a str,
    at: jiff::Timestamp,
}

impl Control {
    /// Records a release (a new service version with its parameter values)
    /// and makes it the desired version of the service in every channel,
    /// in one write with the instances' new desired states (see
    /// [`vergence_model::ports::ReleaseStore::push_release`]).
    ///
    /// A process that compiled the config before (the api function keeps
    /// its control for its container's life) compiles the release with it
    /// without reading which config is in force: the write is conditional
    /// on it, and a push refused because another config was applied since,
    /// or rejected by the config it knew, is tried again on the one in
    /// force.
    pub async fn push_release(
        &self,
        application: Option<ApplicationName>,
        service: &ServiceName,
        version: &Version,
        params: &BTreeMap<String, String>,
        actor: &str,
    ) -> Result<Release> {
        let asked = Asked {
            application,
            service,
            version,
            params,
            actor,
            at: self.clock.now(),
        };
        let mut known = self.last_compiled();
        let mut refused = None;
        for _ in 0..MAX_CONFLICT_RETRIES {
            let trusted = known.take();
            let model = match &trusted {
                Some(model) => model.clone(),
                None => self.require_model().await?,
            };
            let (push, keys) = match self.release_push(model.as_ref(), &asked).await {
                Ok(built) => built,
                Err(_) if trusted.is_some() => continue,
                Err(e) => return Err(e),
            };
            match self.store.push_release(&push).await {
                Ok(()) => {
                    self.wake(&keys).await?;
                    return Ok(push.release);
                }
                Err(conflict @ Error::Conflict { .. }) => {
                    let why = self.why_refused(&push.release, conflict).await;
                    if !matches!(why, Error::Conflict { .. }) {
                        return Err(why);
                    }
                    refused = Some(why);
                }
                Err(e) => return Err(e),
            }
        }
        // Still refused: what the store said the last time (a version
        // pushed with other parameters too long ago for `why_refused` to
        // find says so itself).
        Err(refused.unwrap_or_else(|| Error::Conflict {
            what: format!(
                "service {service} (still changing after {MAX_CONFLICT_RETRIES} attempts)"
            ),
        }))
    }

    /// The release `asked` for, compiled with `model`, with the service's
    /// instances (read in one request) that take it, and their keys.
    async fn release_push(
        &self,
        model: &dyn CompiledConfig,
        asked: &Asked<'_>,
    ) -> Result<(ReleasePush, Vec<InstanceKey>)> {
        let Asked {
            service, version, ..
        } = *asked;
        let application = match &asked.application {
            Some(app) => app.clone(),
            None => model.application_of(service)?,
        };
        let typed = model.release_params(&application, service, asked.params)?;
        let release = Release {
            application: application.clone(),
            service: service.clone(),
            version: version.clone(),
            config_fingerprint: model.fingerprint(&application, service, &typed)?,
            params: typed,
            created_at: asked.at,
            actor: asked.actor.to_owned(),
        };
        let desired = model.compile_service(&application, service, Some(&release))?;
        let filter = InstanceFilter {
            application: Some(application.clone()),
            service: Some(service.clone()),
            release_channel: None,
        };
        let mut read: BTreeMap<InstanceKey, InstanceRecord> = self
            .store
            .list_instances(&filter)
            .await?
            .into_iter()
            .map(|record| (record.key.clone(), record))
            .collect();
        let now = self.clock.now();
        let mut instances = Vec::new();
        let mut asked_again = Vec::new();
        for (key, state) in desired {
            let mut record = read
                .remove(&key)
                .ok_or_else(|| Error::not_found(format!("instance {key}")))?;
            let followed = follow(&mut record, &state, model.hash());
            let again = ask_again(&mut record, version, asked.actor, now);
            if followed || again.is_some() {
                ports::changed_now(&mut record, now);
                instances.push(record);
            }
            asked_again.extend(again);
        }
        let keys = instances.iter().map(|r| r.key.clone()).collect();
        let mut events = vec![Event {
            id: String::new(),
            at: release.created_at,
            application: application.clone(),
            service: Some(service.clone()),
            release_channel: None,
            actor: asked.actor.to_owned().into(),
            kind: EventKind::ReleaseCreated {
                version: version.clone(),
            },
            message: format!("release {version} of {service} pushed"),
        }];
        events.extend(asked_again);
        let scope = format!(
            "release-{application}-{service}-{version}-{}",
            release.created_at.as_millisecond()
        );
        Event::assign_ids(&mut events, &scope);
        let push = ReleasePush {
            release,
            config_hash: model.hash().to_owned(),
            instances,
            events,
        };
        Ok((push, keys))
    }

    /// Why the store refused a release: a version pushed before with other
    /// parameters is said as such. It is looked up only after the refusal,
    /// so that a push costs no read of its own.
    async fn why_refused(&self, release: &Release, refused: Error) -> Error {
        if !matches!(refused, Error::Conflict { .. }) {
            return refused;
        }
        let earlier = self
            .store
            .list_releases(
                &release.application,
                &release.service,
                super::policy::RELEASE_LOOKBACK,
            )
            .await;
        match earlier {
            Ok(earlier) => earlier
                .into_iter()
                .find(|r| r.version == release.version && r.params != release.params)
                .map_or(refused, |earlier| other_params(&earlier, &release.params)),
            Err(_) => refused,
        }
    }

    /// Records an approval for one instance, bound to a version (when not
    /// given: the one a rollback goes back to while one runs, else the
    /// desired one).
    pub async fn approve(
        &self,
        key: &InstanceKey,
        version: Option<&Version>,
        actor: &str,
    ) -> Result<Approval> {
        let record = self
            .store
            .get_instance(key)
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {key}")))?;
        let explicit = version.cloned();
        let version = match version {
            // The desired version (one made from the config alone has no
            // release), the one a rollback goes to, or a release.
            Some(v) => {
                let known = record.desired.version() == Some(v)
                    || record
                        .state
                        .rollback
                        .as_ref()
                        .is_some_and(|r| &r.to.version == v)
                    || self.release(key, v).await?.is_some();
                if !known {
                    return Err(super::policy::unknown_release(&key.service, v));
                }
                v.clone()
            }
            None => match &record.state.rollback {
                Some(rollback) => Some(rollback.to.version.clone()),
                None => record.desired.version().cloned(),
            }
            .ok_or_else(|| {
                Error::invalid(
                    "version",
                    format!("{key} has no desired version yet; pass --version"),
                )
            })?,
        };
        // Approving the version that has a plan approves that exact plan.
        let plan = record.state.plan.as_ref().filter(|p| p.version == version);
        let approval = Approval {
            instance: key.clone(),
            version: version.clone(),
            plan_sha256: plan.map(|p| p.sha256.clone()),
            actor: actor.to_owned(),
            at: self.clock.now(),
        };
        self.store.put_approval(&approval).await?;
        // Approving by name the version that failed here is asking for it
        // again: the hold of a failed version ends.
        if let Some(asked) = explicit.filter(|v| failed_here(&record.state, v)) {
            let actor = actor.to_owned();
            let at = approval.at;
            self.update_instance(key, |r| {
                ask_again(r, &asked, &actor, at).into_iter().collect()
            })
            .await?;
        }
        let event = Event::for_instance(
            key,
            approval.at,
            actor,
            EventKind::ApprovalRecorded {
                version: version.clone(),
            },
            match plan {
                Some(p) => format!(
                    "{actor} approved {version} with plan {} for {}",
                    p.short(),
                    key.release_channel
                ),
                None => format!("{actor} approved {version} for {}", key.release_channel),
            },
        );
        let scope = format!(
            "{}@approval-{}",
            key.storage_id(),
            approval.at.as_millisecond()
        );
        self.append_events(vec![event], &scope).await?;
        self.wake_everywhere(std::slice::from_ref(key)).await?;
        Ok(approval)
    }

    /// Asks the engine to look at instances afresh: fetch again instead of
    /// trusting the last observation, and retry versions that failed.
    pub async fn request_checks(
        &self,
        filter: &InstanceFilter,
        actor: &str,
    ) -> Result<Vec<InstanceKey>> {
        let records = self.store.list_instances(filter).await?;
        let mut keys = Vec::new();
        for record in records {
            let now = self.clock.now();
            let actor = actor.to_owned();
            self.update_instance(&record.key, |r| {
                r.state.checks_requested = true;
                // Failing protections are checked again too, not trusted
                // until their poll interval says so.
                r.state.protections.retain(|_, seen| seen.passed);
                let mut events = Vec::new();
                if let Some(target) = r.state.target.as_mut().filter(|t| t.failed.is_some()) {
                    target.retry_from_start();
                    events.push(Event::for_instance(
                        &r.key,
                        now,
                        actor.clone(),
                        EventKind::ChecksRequested,
                        format!("{actor} asked to retry {} after it failed", target.version),
                    ));
                }
                events
            })
            .await?;
            keys.push(record.key);
        }
        self.wake(&keys).await?;
        Ok(keys)
    }

    /// Instances in a stable order: application, service, promotion order
    /// (as stored with the config pointer: reads never compile).
    pub async fn status(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>> {
        let mut records = self.store.list_instances(filter).await?;
        let current = self.store.current_config().await?;
        records.sort_by_key(|r| {
            let rank = current
                .as_ref()
                .and_then(|c| c.rank(&r.key.application, &r.key.release_channel));
            (
                r.key.application.clone(),
                r.key.service.clone(),
                rank.unwrap_or(usize::MAX),
                r.key.release_channel.clone(),
            )
        });
        Ok(records)
    }

    pub async fn events(&self, filter: &EventFilter) -> Result<Vec<Event>> {
        self.store.list_events(filter).await
    }
}

/// Asks for `version` again where it failed: released again, or approved
/// by name. The instance then drops the hold of that version (its
/// rollback) or retries it from its first attempt (when it failed with
/// nothing to roll back to); the event says who asked. `None` where the
/// version did not fail.
fn ask_again(
    record: &mut InstanceRecord,
    version: &Version,
    actor: &str,
    at: jiff::Timestamp,
) -> Option<Event> {
    if !failed_here(&record.state, version) {
        return None;
    }
    record.state.retry_request = Some(RetryRequest {
        version: version.clone(),
        actor: actor.to_owned(),
        at,
    });
    Some(Event::for_instance(
        &record.key,
        at,
        actor,
        EventKind::ChecksRequested,
        format!(
            "{actor} asked for {version} again in {}, where it failed: it is applied again",
            record.key.release_channel
        ),
    ))
}

/// Whether `version` failed in this instance: it rolled back from it, or
/// it failed with nothing to roll back to (a config pushed on top of it
/// is the same release).
fn failed_here(state: &InstanceState, version: &Version) -> bool {
    state
        .failed_version()
        .is_some_and(|failed| failed.release() == version.release())
}

/// Pushing a version again with other parameters: versions are immutable.
fn other_params(earlier: &Release, asked: &BTreeMap<String, ParamValue>) -> Error {
    let shown = |value: Option<&ParamValue>| match value {
        Some(value) => format!("{:?}", vergence_model::text::clip(value.to_string(), 40)),
        None => "unset".to_owned(),
    };
    let names: std::collections::BTreeSet<&String> =
        earlier.params.keys().chain(asked.keys()).collect();
    let differing: Vec<String> = names
        .into_iter()
        .filter(|name| earlier.params.get(*name) != asked.get(*name))
        .map(|name| {
            format!(
                "{name} (released {}, now {})",
                shown(earlier.params.get(name)),
                shown(asked.get(name))
            )
        })
        .collect();
    Error::Exists {
        message: format!(
            "release {} of {} was already pushed (by {} at {}) with other parameters: {}; a version's parameters never change: release the new ones as a new version",
            earlier.version,
            earlier.service,
            earlier.actor,
            earlier.created_at,
            differing.join(", ")
        ),
    }
}
