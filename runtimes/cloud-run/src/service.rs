//! The first-class Cloud Run runtime: each instance is one Cloud Run
//! service whose spec comes from the service's file. Its apply and fetch
//! are Cloud Run Admin API calls made by whoever runs the engine; no
//! container of the user's runs.
//!
//! - **apply** replaces the service's spec (creating the service when it is
//!   missing) and returns as soon as Cloud Run has accepted the change. The
//!   long-running operation is not awaited: the rollout takes minutes, and
//!   a step must not hold a worker that long. The fetches that follow read
//!   how it goes.
//! - **fetch** reads the service and reports it as one structured-fetch
//!   object: the version of its `vergence.dev/version` annotation, the
//!   Ready condition (succeeded, failed, or still reconciling), the latest
//!   ready revision against the latest created one, and the traffic. A
//!   field the apply set with another value live is drift (the server's
//!   defaults and its own fields are not).

use std::time::Instant;

use google_cloud_gax::error::rpc::Code;
use google_cloud_run_v2::client::Services;
use google_cloud_run_v2::model::Service;
use google_cloud_run_v2::model::condition::State;
use jiff::Timestamp;
use serde_json::{Value, json};
use tracing::instrument;
use vergence_model::cloud_run::{CloudRunService, VERSION};
use vergence_model::{JobOutcome, JobResult};

/// Applies and reads the Cloud Run services of first-class Cloud Run
/// runtimes.
#[derive(Clone, Debug)]
pub struct CloudRunServices {
    services: Services,
}

impl CloudRunServices {
    pub fn new(services: Services) -> Self {
        Self { services }
    }

    /// Replaces the service's spec with `service`'s, creating it if
    /// missing; exit 0 once Cloud Run accepted the change.
    #[instrument(name = "cloud_run.apply", skip_all, fields(service = %service.full_name()))]
    pub async fn apply(&self, service: &CloudRunService) -> JobResult {
        let started = Instant::now();
        let name = service.full_name();
        let spec = match spec_of(service) {
            Ok(spec) => spec,
            Err(e) => return exited(1, String::new(), e, started),
        };
        let sent = self
            .services
            .update_service()
            .set_service(spec)
            .set_allow_missing(true)
            .send()
            .await;
        match sent {
            Ok(operation) => exited(
                0,
                format!(
                    "Cloud Run accepted {} for {name} (operation {}); its rollout is followed by the fetch\n",
                    service.version, operation.name
                ),
                String::new(),
                started,
            ),
            Err(e) => exited(
                1,
                String::new(),
                format!("Error: updating Cloud Run service {name}: {e}\n"),
                started,
            ),
        }
    }

    /// Reads the service as one structured-fetch object.
    #[instrument(name = "cloud_run.fetch", skip_all, fields(service = %service.full_name()))]
    pub async fn fetch(&self, service: &CloudRunService) -> JobResult {
        let started = Instant::now();
        let name = service.full_name();
        let read = self.services.get_service().set_name(&name).send().await;
        let live = match read {
            Ok(live) => live,
            Err(e) if e.status().is_some_and(|s| s.code == Code::NotFound) => {
                return exited(
                    0,
                    json!({"objects": []}).to_string(),
                    String::new(),
                    started,
                );
            }
            Err(e) => {
                return exited(
                    1,
                    String::new(),
                    format!("Error: reading Cloud Run service {name}: {e}\n"),
                    started,
                );
            }
        };
        let applied = spec_of(service)
            .ok()
            .and_then(|spec| serde_json::to_value(spec).ok())
            .unwrap_or(Value::Null);
        let object = observed(service, &live, &applied);
        exited(
            0,
            json!({"objects": [object]}).to_string(),
            String::new(),
            started,
        )
    }
}

/// The spec to apply: the rendered resource, named for the instance, read
/// as a Cloud Run `Service` (what the API accepts).
fn spec_of(service: &CloudRunService) -> Result<Service, String> {
    let mut spec: Value = serde_json::from_str(&service.spec).map_err(|e| {
        format!(
            "Error: the spec rendered from {} is not JSON: {e}\n",
            service.source
        )
    })?;
    spec["name"] = Value::from(service.full_name());
    serde_json::from_value(spec).map_err(|e| {
        format!(
            "Error: the spec rendered from {} is not a Cloud Run service: {e}\n",
            service.source
        )
    })
}

/// The structured-fetch object of the live service.
fn observed(service: &CloudRunService, live: &Service, applied: &Value) -> Value {
    let live_json = serde_json::to_value(live).unwrap_or(Value::Null);
    // What identifies the service is not drift; everything else the
    // apply set is compared.
    let mut applied = applied.clone();
    if let Some(fields) = applied.as_object_mut() {
        fields.remove("name");
    }
    let drift = first_difference(&applied, &live_json, "");
    let versions = match live.annotations.get(VERSION) {
        Some(version) => vec![json!({
            "version": version,
            "active": true,
            "drifted": drift.is_some(),
        })],
        None => Vec::new(),
    };
    let (status, mut message) = rollout(live);
    if let Some(path) = drift {
        message = format!("{path} was changed outside Vergence; {message}");
    }
    json!({
        "name": service.name,
        "objectType": "CloudRunService",
        "versions": versions,
        "status": status,
        "message": message,
    })
}

/// The rollout as the Ready condition and the revisions tell it.
fn rollout(live: &Service) -> (&'static str, String) {
    let ready = live.terminal_condition.as_ref();
    let state = ready.map(|c| c.state.clone());
    let traffic = traffic(live);
    if state == Some(State::ConditionFailed) {
        let why = ready.map(|c| c.message.as_str()).unwrap_or_default();
        return ("FAILED", format!("not Ready: {why}"));
    }
    let settled = state == Some(State::ConditionSucceeded)
        && !live.reconciling
        && !live.latest_ready_revision.is_empty()
        && live.latest_ready_revision == live.latest_created_revision;
    if settled {
        return (
            "SUCCEEDED",
            format!(
                "Ready; latest ready revision {}; traffic {traffic}",
                short(&live.latest_ready_revision)
            ),
        );
    }
    let created = if live.latest_created_revision.is_empty() {
        "its first revision".to_owned()
    } else {
        format!("revision {}", short(&live.latest_created_revision))
    };
    (
        "PENDING",
        format!("rolling out {created}; traffic {traffic}"),
    )
}

/// `web-00002-abc 100%`, or `none` before any revision serves.
fn traffic(live: &Service) -> String {
    let parts: Vec<String> = live
        .traffic_statuses
        .iter()
        .filter(|t| t.percent > 0)
        .map(|t| {
            let revision = if t.revision.is_empty() {
                "latest".to_owned()
            } else {
                short(&t.revision).to_owned()
            };
            format!("{revision} {}%", t.percent)
        })
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// A revision's id without its service's path.
fn short(revision: &str) -> &str {
    revision.rsplit('/').next().unwrap_or(revision)
}

/// The path of the first value `applied` sets that `live` does not have
/// (fields `applied` leaves out are the server's); `None` when every one
/// is there. Lists are compared item by item.
fn first_difference(applied: &Value, live: &Value, path: &str) -> Option<String> {
    match (applied, live) {
        (Value::Object(want), Value::Object(have)) => want.iter().find_map(|(key, value)| {
            let at = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match have.get(key) {
                Some(found) => first_difference(value, found, &at),
                None if is_empty(value) => None,
                None => Some(at),
            }
        }),
        (Value::Array(want), Value::Array(have)) => {
            if want.len() != have.len() {
                return Some(path.to_owned());
            }
            want.iter()
                .zip(have)
                .enumerate()
                .find_map(|(i, (w, h))| first_difference(w, h, &format!("{path}[{i}]")))
        }
        (want, have) if want == have => None,
        _ => Some(path.to_owned()),
    }
}

/// A value the server leaves out when it is the default.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
    }
}

fn exited(code: i32, stdout: String, stderr: String, started: Instant) -> JobResult {
    JobResult {
        outcome: JobOutcome::Exited,
        exit_code: Some(code),
        stdout,
        stderr_tail: stderr,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        outputs: Vec::new(),
        finished_at: Timestamp::now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_the_apply_set_count_as_drift() {
        let applied = json!({"template": {"containers": [{"image": "web:2", "ports": []}]}, "labels": {"team": "shop"}});
        let live = json!({"template": {"containers": [{"image": "web:2", "resources": {"limits": {"cpu": "1"}}}], "timeout": "300s"}, "labels": {"team": "shop"}, "ingress": "INGRESS_TRAFFIC_ALL"});
        assert_eq!(first_difference(&applied, &live, ""), None);
        let edited = json!({"template": {"containers": [{"image": "web:hotfix"}]}, "labels": {"team": "shop"}});
        assert_eq!(
            first_difference(&applied, &edited, "").as_deref(),
            Some("template.containers[0].image")
        );
        let dropped = json!({"template": {"containers": [{"image": "web:2"}]}});
        assert_eq!(
            first_difference(&applied, &dropped, "").as_deref(),
            Some("labels")
        );
    }
}
