//! [`CloudRunServices`]: the first-class Cloud Run runtime. Its apply and
//! fetch are Cloud Run Admin API calls made in-process by whoever runs the
//! engine, with no job to run:
//!
//! - apply creates or updates the service from its rendered file, with the
//!   instance's service id and version as annotations on the service and
//!   its revision template, and a revision name derived from the spec and
//!   version (`{service}-{digest}`), so a repeated apply changes nothing.
//!   It returns once Cloud Run has accepted the change: the long-running
//!   operation is not awaited; later fetches watch it settle.
//! - fetch reads the service: the version annotated on the revision the
//!   service's template names, whether Cloud Run is still reconciling,
//!   the Ready condition of its latest created revision, the latest ready
//!   revision and the traffic, as the structured fetch JSON every runtime
//!   reports.
//!
//! A service Vergence did not make (brownfield) that has every field of
//! the file's spec is adopted: annotated as Vergence's (on the service, so
//! no revision is made) and reported at the desired version, nothing
//! applied. One that differs is reported as a takeover with its
//! differences, for the engine to ask for an approval first (unless the
//! runtime says `adopt: apply`).
//!
//! Results go to the [`JobResultSink`] at once; `poll` does the job again,
//! which both operations allow, for a result that was lost.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use google_cloud_run_v2::model::condition::State;
use google_cloud_run_v2::model::{Service, TrafficTarget, TrafficTargetAllocationType};
use google_cloud_wkt::FieldMask;
use jiff::Timestamp;
use serde_json::{Value, json};
use tracing::{info, instrument, warn};
use vergence_model::adoption::{self, Adopt, Takeover};
use vergence_model::cloud_run::annotations;
use vergence_model::hashing::sha256_hex;
use vergence_model::ports::{JobProgress, JobResultSink, Runner};
use vergence_model::{BuiltinJob, CloudRunService, JobHandle, JobRecord, JobResult};

use crate::clients::CloudRunClients;
use crate::error::CloudRunError;

/// Characters of the spec's digest in the revision name.
const REVISION_DIGEST_LEN: usize = 10;

/// Applies and reads the services of first-class Cloud Run runtimes.
pub struct CloudRunServices {
    clients: CloudRunClients,
    sink: Arc<dyn JobResultSink>,
}

impl std::fmt::Debug for CloudRunServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudRunServices").finish_non_exhaustive()
    }
}

impl CloudRunServices {
    pub fn new(clients: CloudRunClients, sink: Arc<dyn JobResultSink>) -> Self {
        Self { clients, sink }
    }

    /// Carries out one job of a Cloud Run runtime; what Cloud Run refused
    /// is the result's exit 1 and stderr, as a program's failure would be.
    #[instrument(name = "cloud_run.service", skip_all, fields(job = %job.id, kind = %job.kind))]
    pub async fn carry_out(&self, job: &JobRecord) -> JobResult {
        let started = Instant::now();
        let done = match &job.spec.builtin {
            Some(BuiltinJob::CloudRunApply(service)) => self.apply(service).await,
            Some(BuiltinJob::CloudRunFetch(service)) => self.fetch(service).await,
            _ => Err(CloudRunError::WrongRunner {
                job: job.id.to_string(),
                runner: "(not a Cloud Run runtime's job)",
            }),
        };
        let done = done.map_err(|e| {
            warn!(error = %e, "the Cloud Run runtime's job failed");
            e.to_string()
        });
        JobResult::of_call(done, started.elapsed(), Timestamp::now())
    }

    async fn apply(&self, wanted: &CloudRunService) -> Result<String, CloudRunError> {
        let name = wanted.name();
        let mut spec = desired_spec(wanted)?;
        let existing = match self.get(&name).await {
            Ok(existing) => Some(existing),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let revision = revision_name(wanted);
        let split = match (wanted.traffic_percent, &existing) {
            (Some(percent), Some(live)) => split_traffic(&mut spec, live, &revision, percent)?,
            (Some(0), None) => {
                return Err(CloudRunError::Launch(format!(
                    "cannot send the traffic of {name} back to the revision before: the service does not exist"
                )));
            }
            _ => String::new(),
        };
        match existing {
            None => {
                let operation = self
                    .clients
                    .services
                    .create_service()
                    .set_parent(wanted.parent())
                    .set_service_id(&wanted.service_name)
                    .set_service(spec)
                    .send()
                    .await
                    .map_err(CloudRunError::api("creating Cloud Run service", &name))?;
                info!(service = %name, %revision, "creating the Cloud Run service");
                Ok(format!(
                    "started creating service {name} with revision {revision} (operation {})",
                    operation.name
                ))
            }
            Some(existing)
                if existing.template.as_ref().map(|t| t.revision.as_str())
                    == Some(revision.as_str())
                    && same_traffic(&spec, &existing) =>
            {
                Ok(format!(
                    "service {name} already names revision {revision} for {}{split}",
                    wanted.version
                ))
            }
            Some(existing) => {
                spec.name = name.clone();
                spec.etag = existing.etag.clone();
                let operation = self
                    .clients
                    .services
                    .update_service()
                    .set_service(spec)
                    .send()
                    .await
                    .map_err(CloudRunError::api("updating Cloud Run service", &name))?;
                info!(service = %name, %revision, %split, "updating the Cloud Run service");
                Ok(format!(
                    "started updating service {name} to revision {revision}{split} (operation {})",
                    operation.name
                ))
            }
        }
    }

    async fn fetch(&self, wanted: &CloudRunService) -> Result<String, CloudRunError> {
        let name = wanted.name();
        let object = match self.get(&name).await {
            Err(e) if e.is_not_found() => json!({
                "name": wanted.service_name,
                "objectType": "CloudRun",
                "versions": [],
                "status": "PENDING",
                "message": format!("there is no Cloud Run service {name}"),
            }),
            Err(e) => return Err(e),
            Ok(found) => {
                let differences = differences(wanted, &found)?;
                let owner = match owner(wanted, &found) {
                    Owner::Vergence => Owner::Vergence,
                    Owner::Someone if differences.is_empty() => {
                        self.mark(wanted, &found).await?;
                        Owner::Adopted
                    }
                    Owner::Someone if wanted.adopt == Adopt::Approve => Owner::Takeover,
                    other => other,
                };
                observe(wanted, &found, owner, differences)
            }
        };
        Ok(json!({ "objects": [object] }).to_string())
    }

    /// Marks a service Vergence did not make, which runs the file's spec,
    /// as Vergence's: the annotations its own services carry, on the
    /// service only (a change of the template would make a revision).
    async fn mark(&self, wanted: &CloudRunService, found: &Service) -> Result<(), CloudRunError> {
        let name = wanted.name();
        let mut marked = found.clone();
        marked
            .annotations
            .insert(annotations::SERVICE_ID.into(), wanted.service_id.clone());
        marked
            .annotations
            .insert(annotations::VERSION.into(), wanted.version.clone());
        self.clients
            .services
            .update_service()
            .set_service(marked)
            .set_update_mask(FieldMask::default().set_paths(["annotations"]))
            .send()
            .await
            .map_err(CloudRunError::api("marking Cloud Run service", &name))?;
        info!(service = %name, version = %wanted.version, "adopted the Cloud Run service");
        Ok(())
    }

    async fn get(&self, name: &str) -> Result<Service, CloudRunError> {
        self.clients
            .services
            .get_service()
            .set_name(name)
            .send()
            .await
            .map_err(CloudRunError::api("getting Cloud Run service", name))
    }
}

#[async_trait]
impl Runner for CloudRunServices {
    async fn dispatch(&self, job: &JobRecord) -> vergence_model::Result<Option<JobHandle>> {
        let result = self.carry_out(job).await;
        // A result that cannot be recorded now is found again by `poll`.
        if let Err(e) = self.sink.job_finished(job, result).await {
            warn!(job = %job.id, error = %e, "recording the Cloud Run runtime's result failed; a later check carries the job out again");
        }
        Ok(None)
    }

    async fn poll(&self, job: &JobRecord) -> vergence_model::Result<JobProgress> {
        Ok(JobProgress::Finished(self.carry_out(job).await))
    }
}

/// The tags of a rollout's two revisions: each gets its own URL
/// (`https://canary---{service}-….run.app`) for checks to reach it.
const CANARY_TAG: &str = "canary";
const STABLE_TAG: &str = "stable";

/// Splits the traffic of `spec` for a rollout's step: `percent` to the new
/// revision, the rest to the revision that serves most of the traffic now
/// (the one before). Says what it did, for the result.
fn split_traffic(
    spec: &mut Service,
    live: &Service,
    new: &str,
    percent: u8,
) -> Result<String, CloudRunError> {
    let latest = short(&live.latest_ready_revision);
    let previous = live
        .traffic_statuses
        .iter()
        .map(|t| (served_revision(&t.revision, latest), t.percent))
        .filter(|(revision, share)| *revision != new && !revision.is_empty() && *share > 0)
        .max_by_key(|(_, share)| *share)
        .map(|(revision, _)| revision.to_owned());
    let Some(previous) = previous else {
        if percent == 0 {
            return Err(CloudRunError::Launch(format!(
                "cannot send the traffic of {} back: no other revision serves traffic",
                short(&live.name)
            )));
        }
        // Nothing else serves: the whole of it goes to the new revision.
        return Ok("; no earlier revision serves traffic, so all of it goes to the new one".into());
    };
    let target = |revision: &str, share: u8, tag: &str| {
        TrafficTarget::new()
            .set_type(TrafficTargetAllocationType::Revision)
            .set_revision(revision)
            .set_percent(i32::from(share))
            .set_tag(tag)
    };
    spec.traffic = vec![
        target(new, percent, CANARY_TAG),
        target(&previous, 100 - percent.min(100), STABLE_TAG),
    ];
    Ok(format!(
        " with {percent}% of the traffic, {}% staying on {previous}",
        100 - percent.min(100)
    ))
}

/// Whether the live service routes traffic as `spec` asks; an empty
/// `traffic` is Cloud Run's default, all of it to the latest revision.
fn same_traffic(spec: &Service, live: &Service) -> bool {
    let routes = |traffic: &[TrafficTarget]| -> Vec<(i32, String, i32, String)> {
        if traffic.is_empty() {
            let latest = TrafficTargetAllocationType::Latest
                .value()
                .unwrap_or_default();
            return vec![(latest, String::new(), 100, String::new())];
        }
        let mut routes: Vec<_> = traffic
            .iter()
            .map(|t| {
                let kind = t.r#type.value().unwrap_or_default();
                (
                    kind,
                    short(&t.revision).to_owned(),
                    t.percent,
                    t.tag.clone(),
                )
            })
            .collect();
        routes.sort();
        routes
    };
    routes(&spec.traffic) == routes(&live.traffic)
}

/// The revision a traffic status names, a `LATEST` one resolved.
fn served_revision<'a>(revision: &'a str, latest: &'a str) -> &'a str {
    if revision.is_empty() {
        latest
    } else {
        short(revision)
    }
}

/// The revision Vergence names for the wanted spec and version.
fn revision_name(wanted: &CloudRunService) -> String {
    let digest = sha256_hex(format!("{}\n{}", wanted.version, wanted.spec).as_bytes());
    format!(
        "{}-v{}",
        wanted.service_name,
        &digest[..REVISION_DIGEST_LEN]
    )
}

/// The rendered spec with Vergence's annotations and revision name.
fn desired_spec(wanted: &CloudRunService) -> Result<Service, CloudRunError> {
    let mut spec: Value = serde_json::from_str(&wanted.spec).map_err(|e| {
        CloudRunError::Launch(format!(
            "the spec of Cloud Run service {} is not JSON: {e}",
            wanted.service_name
        ))
    })?;
    let ours = json!({
        annotations::SERVICE_ID: wanted.service_id,
        annotations::VERSION: wanted.version,
    });
    annotate(&mut spec, &ours);
    if !spec["template"].is_object() {
        spec["template"] = json!({});
    }
    annotate(&mut spec["template"], &ours);
    spec["template"]["revision"] = json!(revision_name(wanted));
    serde_json::from_value(spec).map_err(|e| {
        CloudRunError::Launch(format!(
            "the spec of Cloud Run service {} is not a Cloud Run service: {e}",
            wanted.service_name
        ))
    })
}

fn annotate(resource: &mut Value, ours: &Value) {
    if !resource["annotations"].is_object() {
        resource["annotations"] = json!({});
    }
    if let (Some(into), Some(from)) = (resource["annotations"].as_object_mut(), ours.as_object()) {
        into.extend(from.clone());
    }
}

/// Whose a live service is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Vergence made it, or adopted it before.
    Vergence,
    /// Someone else made it and it differs from the file (`adopt: apply`).
    Someone,
    /// Someone else made it and it ran the file's spec: marked now.
    Adopted,
    /// Someone else made it and it differs: applying takes it over.
    Takeover,
}

/// Vergence's when the service or its template carries the instance's
/// service id (applies annotate both; an adoption the service).
fn owner(wanted: &CloudRunService, found: &Service) -> Owner {
    let id = Some(&wanted.service_id);
    let on_template = found
        .template
        .as_ref()
        .and_then(|t| t.annotations.get(annotations::SERVICE_ID));
    if on_template == id || found.annotations.get(annotations::SERVICE_ID) == id {
        Owner::Vergence
    } else {
        Owner::Someone
    }
}

/// How the live service differs from the file's spec, field by field:
/// the drift check, and whether a service Vergence did not make can be
/// adopted as it is.
fn differences(wanted: &CloudRunService, found: &Service) -> Result<Vec<String>, CloudRunError> {
    let spec: Value = serde_json::from_str(&wanted.spec).map_err(|e| {
        CloudRunError::Launch(format!(
            "the spec of Cloud Run service {} is not JSON: {e}",
            wanted.service_name
        ))
    })?;
    let live = serde_json::to_value(found).map_err(|e| {
        CloudRunError::Launch(format!(
            "Cloud Run service {} could not be read as JSON: {e}",
            wanted.service_name
        ))
    })?;
    Ok(adoption::differences(&spec, &live))
}

/// The version a service runs by Vergence's annotations: its template's,
/// on a revision Vergence named; else, on a template Vergence never
/// annotated, the service's own, which an adopted service carries (its
/// template is as its owner made it until Vergence's first apply).
fn annotated_version(wanted: &CloudRunService, found: &Service) -> Option<(String, bool)> {
    let template = found.template.as_ref();
    let named = template.map(|t| t.revision.as_str()).unwrap_or_default();
    let annotated = |key: &str| {
        template
            .and_then(|t| t.annotations.get(key))
            .map(String::as_str)
    };
    let id = Some(wanted.service_id.as_str());
    if annotated(annotations::SERVICE_ID) == id {
        // The desired version's tags on another template: edited by hand.
        return annotated(annotations::VERSION)
            .filter(|_| named.starts_with(&format!("{}-v", wanted.service_name)))
            .map(|version| (version.to_owned(), named != revision_name(wanted)));
    }
    found
        .annotations
        .get(annotations::VERSION)
        .filter(|_| {
            found
                .annotations
                .get(annotations::SERVICE_ID)
                .map(String::as_str)
                == id
        })
        .map(|version| (version.clone(), false))
}

/// What the service says about the wanted version.
fn observe(
    wanted: &CloudRunService,
    found: &Service,
    owner: Owner,
    differences: Vec<String>,
) -> Value {
    let annotated = match owner {
        Owner::Adopted => Some((wanted.version.clone(), false)),
        Owner::Vergence => annotated_version(wanted, found),
        Owner::Someone | Owner::Takeover => None,
    };
    let (version, renamed) = annotated.unwrap_or_else(|| {
        (
            format!(
                "revision {} not made by Vergence",
                short(&found.latest_created_revision)
            ),
            false,
        )
    });
    let drifted = version == wanted.version && (renamed || !differences.is_empty());
    // The share of the traffic the wanted revision has: what a rollout's
    // step is measured by.
    let ours = revision_name(wanted);
    let latest_ready_id = short(&found.latest_ready_revision);
    let share: i32 = found
        .traffic_statuses
        .iter()
        .filter(|t| served_revision(&t.revision, latest_ready_id) == ours)
        .map(|t| t.percent)
        .sum();
    // Said only of Vergence's own revision: an adopted service's is not.
    let named_ours = found.template.as_ref().is_some_and(|t| t.revision == ours);
    let share = named_ours.then(|| u8::try_from(share.clamp(0, 100)).unwrap_or(100));
    let latest_created = short(&found.latest_created_revision);
    let latest_ready = short(&found.latest_ready_revision);
    let ready = found.terminal_condition.as_ref();
    let (status, reason) = if found.reconciling {
        (
            "PENDING",
            format!("reconciling; revision {latest_created} is not ready yet"),
        )
    } else {
        match ready.map(|c| &c.state) {
            Some(State::ConditionSucceeded) if latest_ready == latest_created => {
                ("SUCCEEDED", format!("revision {latest_ready} is ready"))
            }
            Some(State::ConditionFailed) => (
                "FAILED",
                format!(
                    "revision {latest_created} failed: {}",
                    ready.map(|c| c.message.as_str()).unwrap_or_default()
                ),
            ),
            _ => (
                "PENDING",
                format!("revision {latest_created} is not ready yet"),
            ),
        }
    };
    let traffic: Vec<String> = found
        .traffic_statuses
        .iter()
        .map(|t| {
            format!(
                "{}% to {}",
                t.percent,
                if t.revision.is_empty() {
                    "latest"
                } else {
                    &t.revision
                }
            )
        })
        .collect();
    let ownership = match owner {
        Owner::Adopted => format!(
            "; adopted: it runs the spec of {}, so it is annotated as Vergence's",
            wanted.file
        ),
        Owner::Takeover => format!(
            "; not Vergence's; applying changes {}",
            differences.join(", ")
        ),
        _ => String::new(),
    };
    let takeover = (owner == Owner::Takeover).then(|| Takeover {
        object: format!("Cloud Run service {}", wanted.service_name),
        differences,
    });
    json!({
        "name": wanted.service_name,
        "objectType": "CloudRun",
        "versions": [{"version": version, "active": true, "drifted": drifted, "trafficPercent": share}],
        "adopted": owner == Owner::Adopted,
        "takeover": takeover,
        "status": status,
        "message": format!("{reason}; latest ready revision {}; traffic: {}{ownership}", if latest_ready.is_empty() { "none" } else { latest_ready }, if traffic.is_empty() { "none".to_owned() } else { traffic.join(", ") }),
        "externalLinks": [{
            "type": "DETAIL",
            "name": "Cloud Run console",
            "url": format!("https://console.cloud.google.com/run/detail/{}/{}/revisions?project={}", wanted.region, wanted.service_name, wanted.project),
        }],
    })
}

/// A revision's id from its full name.
fn short(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}
