//! The JSON bodies of the API, as the server writes them and clients (the
//! CLI's remote mode) read them. One definition per shape, so `vergence
//! status --output json` locally and `GET …/status` remotely cannot drift
//! apart. Field names are camelCase; `docs/openapi.json` describes them.
//!
//! The views are made by one function each (`InstanceView::of`, …), which
//! the CLI calls on its local state too: one printer serves both.

mod operations;
mod progress;
mod tokens;

pub use operations::{InstancesRequest, InstancesResponse, OverrideRequest, PinRequest};

pub use progress::{
    InstanceProgress, PlanActionName, PlanEntryView, PlanResponse, RolloutResponse, Standing,
};
pub use tokens::{TokenCreated, TokenRequest, TokenView, TokensResponse};

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use vergence_model::ConfigError;
use vergence_model::ports::CompiledConfig;
use vergence_model::{
    AgentName, AgentState, ApplicationName, Event, InfoOutput, InstanceKey, InstanceRecord,
    PlanRecord, ReleaseChannelName, ServiceName, Status, Version,
};

/// One instance in a status answer (and in `vergence status --output json`,
/// a contract for scripts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub application: ApplicationName,
    pub service: ServiceName,
    pub release_channel: ReleaseChannelName,
    pub desired_version: Option<Version>,
    pub current_version: Option<Version>,
    pub status: Status,
    pub reason: String,
    /// What getInfo reported in the structured form, for people.
    pub info: Vec<InfoOutput>,
    /// What getInfo printed when it was not the structured form: as
    /// printed, at most 8 KiB (a cut is marked), secrets masked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_text: Option<String>,
    /// How the last getInfo failed, shown with what it printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_failure: Option<String>,
    /// The plan the next apply would use (and an approval binds to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanView>,
    /// Where the desired version's rollout in steps stands, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutView>,
    /// A break-glass override of freezes and windows, until its version
    /// converges (`expiresAt` says when it ends otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override: Option<vergence_model::WindowOverride>,
}

/// A rollout in steps as people read it: `v2 at 50% (step 1 of 2)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    pub version: Version,
    /// The step being applied or held, from 1.
    pub step: usize,
    /// The share of the traffic each step gives the version.
    pub steps: Vec<u8>,
    /// This step's share.
    pub percent: u8,
    /// When the runtime reached this step (the bake runs from then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_at: Option<Timestamp>,
    /// How long each step short of 100% is held, in seconds.
    pub bake_seconds: i64,
    /// When a failed check sent the traffic back to the version before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_back_at: Option<Timestamp>,
}

impl RolloutView {
    fn of(record: &InstanceRecord) -> Option<Self> {
        let rollout = record.desired.compiled()?.rollout.as_ref()?;
        let target = record.state.target.as_ref()?;
        let progress = target.rollout.as_ref()?;
        Some(Self {
            version: target.version.clone(),
            step: progress.step + 1,
            steps: rollout.steps.clone(),
            percent: rollout.percent(progress.step),
            reached_at: progress.reached_at,
            bake_seconds: rollout.bake.as_secs(),
            traffic_back_at: progress.traffic_back_at,
        })
    }
}

/// A plan as people read it: its digest, a Terraform plan's changes, and
/// its files by name, size and digest (a plan file may be binary).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub version: Version,
    /// What an approval binds to.
    pub digest: String,
    pub at: Timestamp,
    /// `+1 ~2 -0` for a Terraform plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<String>,
    /// `+ terraform_data.app`, one per changed resource.
    #[serde(default)]
    pub changes: Vec<String>,
    pub files: Vec<String>,
}

impl PlanView {
    pub fn of(plan: &PlanRecord) -> Self {
        Self {
            version: plan.version.clone(),
            digest: plan.sha256.clone(),
            at: plan.at,
            counts: plan.content.as_ref().map(|c| c.counts.clone()),
            changes: plan
                .content
                .as_ref()
                .map(|c| c.changes.clone())
                .unwrap_or_default(),
            files: plan.files(),
        }
    }
}

impl InstanceView {
    pub fn of(record: &InstanceRecord) -> Self {
        // The plan of what the instance is headed for: its desired version,
        // or the one a rollback goes back to. A plan of another version (the
        // desired version moved on before the apply) is no plan of its next
        // apply.
        let headed_for = match &record.state.rollback {
            Some(rollback) => Some(&rollback.to.version),
            None => record.desired.version(),
        };
        let plan = record
            .state
            .plan
            .as_ref()
            .filter(|plan| Some(&plan.version) == headed_for);
        Self {
            application: record.key.application.clone(),
            service: record.key.service.clone(),
            release_channel: record.key.release_channel.clone(),
            desired_version: record.desired.version().cloned(),
            current_version: record.state.current_version.clone(),
            status: record.state.status,
            reason: record.state.reason.clone(),
            info: record.state.info.clone(),
            info_text: record.state.info_text.clone(),
            info_failure: record.state.info_failure.clone(),
            plan: plan.map(PlanView::of),
            rollout: RolloutView::of(record),
            // Spent once its version converged; past its expiry it is
            // still shown, with the time it ended.
            window_override: record
                .controls
                .window_override
                .clone()
                .filter(|o| o.opens(&o.version, &record.state, Timestamp::MIN)),
        }
    }
}

/// `GET /v1/applications/{app}/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    pub instances: Vec<InstanceView>,
    /// Every agent that ever called, with its last contact: instances on
    /// the kubernetes runner wait for theirs.
    #[serde(default)]
    pub agents: Vec<AgentView>,
}

/// An agent as status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub name: AgentName,
    pub last_seen: Timestamp,
    /// "last seen 45s ago", as of the answer.
    pub last_contact: String,
    /// Whether it called recently enough to be given work.
    pub alive: bool,
    pub version: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

impl AgentView {
    pub fn of(agent: &AgentState, now: Timestamp) -> Self {
        Self {
            name: agent.name.clone(),
            last_seen: agent.last_seen,
            last_contact: agent.last_contact(now),
            alive: agent.is_alive(now),
            version: agent.version.clone(),
            namespace: agent.namespace.clone(),
        }
    }
}

/// `GET /v1/agents`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsResponse {
    pub agents: Vec<AgentView>,
}

/// `GET /v1/applications/{app}/events`, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsResponse {
    pub events: Vec<Event>,
}

/// `POST /v1/configs`: the YAML files of a config directory, keyed by path
/// relative to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigPushRequest {
    pub files: Option<BTreeMap<String, String>>,
}

/// What `POST /v1/configs?validateOnly=true` answers for a valid config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationReport {
    pub hash: String,
    pub applications: Vec<ApplicationName>,
    pub runtimes: usize,
    pub instances: usize,
}

impl ValidationReport {
    pub fn of(model: &dyn CompiledConfig) -> Self {
        Self {
            hash: model.hash().to_owned(),
            applications: model.applications(),
            runtimes: model.runtime_count(),
            instances: model.instance_keys().len(),
        }
    }
}

/// `POST /v1/applications/{app}/services/{service}/releases`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseRequest {
    pub version: Option<String>,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

/// `POST /v1/applications/{app}/services/{service}/release-channels/{rc}/approvals`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The version approved; default: the instance's desired version.
    pub version: Option<String>,
}

/// An alert's state as the API spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStateName {
    Firing,
    Resolved,
}

impl AlertStateName {
    pub fn of(firing: bool) -> Self {
        if firing {
            AlertStateName::Firing
        } else {
            AlertStateName::Resolved
        }
    }

    pub fn is_firing(self) -> bool {
        self == AlertStateName::Firing
    }
}

/// `PUT /v1/alerts/{name}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertRequest {
    pub state: Option<AlertStateName>,
    pub summary: Option<String>,
}

/// An alert after it was set: the instances of the caller's application
/// whose protections refer to it (they are looked at again now).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertResponse {
    pub name: String,
    pub state: AlertStateName,
    pub instances: Vec<InstanceKey>,
}

/// `POST /v1/alerts/alertmanager`: every alert of the payload, by Vergence name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertsResponse {
    pub alerts: Vec<AlertResponse>,
}

/// `GET /v1/healthz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
}

/// Every error answer: `{"error": {...}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// Stable, machine-readable: `invalidRequest`, `invalidConfig`,
    /// `unauthorized`, `forbidden`, `notFound`, `methodNotAllowed`,
    /// `conflict`, `payloadTooLarge`, `unavailable`, `internal`.
    pub code: String,
    /// One sentence for people.
    pub message: String,
    /// The input at fault (`version`, `params.replicas`, `body`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `invalidConfig`: the problems, with file, line and field path;
    /// the first [`MAX_LISTED_ERRORS`](vergence_model::MAX_LISTED_ERRORS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ConfigError>,
    /// For `invalidConfig`: how many problems there are beyond those
    /// listed in `errors` (absent when they are all listed).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_errors: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `GET /v1/whoami`: what the presented token is, so a client (the status
/// page) can tell its application and which actions to offer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenInfo {
    /// The first characters of the token id, as events name the actor.
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    pub scopes: Vec<vergence_model::Scope>,
    /// Who the caller's actions are recorded as in events: `api:token-<id>`,
    /// or `oidc:<issuer host>:<subject>` for a CI job's OIDC token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

/// An alert as `GET /v1/alerts` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AlertView {
    pub name: String,
    pub state: AlertStateName,
    /// When it last changed state.
    pub since: Timestamp,
    /// Who set it last.
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl AlertView {
    pub fn of(alert: &vergence_model::AlertState) -> Self {
        Self {
            name: alert.name.clone(),
            state: AlertStateName::of(alert.firing),
            since: alert.since,
            actor: alert.actor.clone(),
            summary: alert.summary.clone(),
        }
    }
}

/// `GET /v1/alerts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertListResponse {
    pub alerts: Vec<AlertView>,
}

/// `GET /v1/applications/{app}/services/{service}/release-channels/{rc}`:
/// one instance in full, as the status page's instance view shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceDetail {
    pub instance: InstanceView,
    /// The lines of `vergence explain`: status, controls, every gate in
    /// order, checks, the last jobs, what runs now, the next check.
    pub explain: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<vergence_model::ControlMark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<vergence_model::Pin>,
    /// The job running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<RunningJobView>,
    /// The last finished job of each kind, with the end of its output.
    pub last_jobs: Vec<JobView>,
}

/// A job that was dispatched and has not reported yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningJobView {
    pub kind: vergence_model::JobKind,
    pub version: Version,
    pub attempt: u32,
    pub since: Timestamp,
}

/// A finished job as people read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub kind: vergence_model::JobKind,
    pub version: Version,
    pub attempt: u32,
    /// `exited`, `timed out`, `lost`, … as `explain` says it.
    pub outcome: String,
    #[serde(default)]
    pub exit_code: Option<i32>,
    pub finished_at: Timestamp,
    pub duration_ms: u64,
    /// The end of the job's stderr.
    pub output: String,
}

impl JobView {
    pub fn of(job: &vergence_model::JobSummary) -> Self {
        Self {
            kind: job.kind,
            version: job.version.clone(),
            attempt: job.attempt,
            outcome: job.outcome.to_string(),
            exit_code: job.exit_code,
            finished_at: job.finished_at,
            duration_ms: job.duration_ms,
            output: job.stderr_tail.clone(),
        }
    }
}

/// `POST …/rollback`: roll back to this released version; without one, to
/// the last version that converged in the release channel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackBody {
    pub version: Option<String>,
}
