//! Jobs that run no program of the user's: the first-class runtimes, and
//! the metric protections (`checks`).
//! The Kubernetes runtime's apply and fetch are carried out by
//! `vergence-agent` itself (server-side apply, and a watch-backed read of
//! the live objects); the ECS and Cloud Run runtimes' by whoever runs the
//! engine, with the platform's API. The job spec carries what to apply instead of a command.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a first-class runtime's job does instead of running a command.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum BuiltinJob {
    /// Server-side apply of the objects (field manager `vergence`), then
    /// prune the instance's objects that are no longer among them.
    KubernetesApply(KubernetesObjects),
    /// Report the live state of the objects as a structured fetch.
    KubernetesFetch(KubernetesObjects),
    /// Register the task definition and create or update the ECS service.
    EcsApply(crate::ecs::EcsService),
    /// Report the ECS service's deployment as a structured fetch.
    EcsFetch(crate::ecs::EcsService),
    /// Create or update the Cloud Run service (its operation not awaited).
    CloudRunApply(crate::cloud_run::CloudRunService),
    /// Report the Cloud Run service's readiness as a structured fetch.
    CloudRunFetch(crate::cloud_run::CloudRunService),
    /// A protection's PromQL query, held to its threshold.
    Prometheus(crate::checks::PrometheusCheck),
    /// A protection's CloudWatch alarms, none of which may be in ALARM.
    CloudwatchAlarm(crate::checks::CloudwatchAlarmCheck),
}

impl BuiltinJob {
    /// The Kubernetes objects of a Kubernetes runtime's job.
    pub fn kubernetes_objects(&self) -> Option<&KubernetesObjects> {
        match self {
            BuiltinJob::KubernetesApply(objects) | BuiltinJob::KubernetesFetch(objects) => {
                Some(objects)
            }
            BuiltinJob::EcsApply(_)
            | BuiltinJob::EcsFetch(_)
            | BuiltinJob::CloudRunApply(_)
            | BuiltinJob::CloudRunFetch(_)
            | BuiltinJob::Prometheus(_)
            | BuiltinJob::CloudwatchAlarm(_) => None,
        }
    }

    /// Where the job is carried out in-process, by whoever runs the engine;
    /// `None` for the Kubernetes runtime, whose jobs go to the agent its
    /// runner names.
    pub fn platform(&self) -> Option<BuiltinPlatform> {
        match self {
            BuiltinJob::KubernetesApply(_) | BuiltinJob::KubernetesFetch(_) => None,
            BuiltinJob::EcsApply(_) | BuiltinJob::EcsFetch(_) => Some(BuiltinPlatform::Ecs),
            BuiltinJob::CloudRunApply(_) | BuiltinJob::CloudRunFetch(_) => {
                Some(BuiltinPlatform::CloudRun)
            }
            BuiltinJob::Prometheus(_) => Some(BuiltinPlatform::Prometheus),
            BuiltinJob::CloudwatchAlarm(_) => Some(BuiltinPlatform::CloudWatch),
        }
    }

    /// This apply giving the new version `percent` of the traffic and the
    /// version before the rest: a rollout's step. `None` for a job of a
    /// runtime that cannot split traffic.
    pub fn at_traffic(&self, percent: u8) -> Option<BuiltinJob> {
        match self {
            BuiltinJob::CloudRunApply(service) => {
                let mut service = service.clone();
                service.traffic_percent = Some(percent);
                Some(BuiltinJob::CloudRunApply(service))
            }
            _ => None,
        }
    }
}

/// The platforms whose first-class runtime jobs are API calls made by the
/// process running the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BuiltinPlatform {
    Ecs,
    CloudRun,
    /// Metric protections' PromQL queries.
    Prometheus,
    /// Metric protections' CloudWatch alarms.
    CloudWatch,
}

impl BuiltinPlatform {
    /// The runtime's key in config (`runtime: {ecs: …}`) and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            BuiltinPlatform::Ecs => "ecs",
            BuiltinPlatform::CloudRun => "cloudRun",
            BuiltinPlatform::Prometheus => "prometheus",
            BuiltinPlatform::CloudWatch => "cloudwatchAlarm",
        }
    }

    /// What the platform's jobs are, for messages.
    pub fn jobs(self) -> String {
        match self {
            BuiltinPlatform::Ecs | BuiltinPlatform::CloudRun => {
                format!("the jobs of first-class {} runtimes", self.as_str())
            }
            BuiltinPlatform::Prometheus | BuiltinPlatform::CloudWatch => {
                format!("{} protections", self.as_str())
            }
        }
    }
}

/// The rendered objects of one service instance, as they are applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesObjects {
    /// Each object as compact JSON, already carrying Vergence's labels and
    /// annotations (kept as text so specs stay hashable and byte-stable).
    pub objects: Vec<String>,
    /// Where namespaced objects that name none go; `None`: the agent's own.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The labels every object of the instance carries: what prune and the
    /// agent's drift reports select by.
    pub selector: BTreeMap<String, String>,
    /// The version written to each object's [`VERSION_ANNOTATION`].
    pub version: String,
    /// Where the manifests came from (for people): `manifests/web`.
    pub source: String,
    /// What to do with a live object Vergence did not make that differs
    /// from this (the runtime's `adopt`); one that matches is adopted.
    #[serde(default, skip_serializing_if = "crate::adoption::Adopt::is_default")]
    pub adopt: crate::adoption::Adopt,
}

impl KubernetesObjects {
    /// The label selector of the instance's objects: `k=v,k=v`.
    pub fn selector_text(&self) -> String {
        self.selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What an operator runs to do by hand what the apply does.
    pub fn kubectl_apply(&self) -> String {
        let namespace = self
            .namespace
            .as_deref()
            .map(|n| format!(" -n {n}"))
            .unwrap_or_default();
        format!(
            "kubectl apply --server-side --field-manager={} --force-conflicts{namespace} -f {} (rendered for {}) --prune -l {}",
            object_labels::FIELD_MANAGER,
            self.source,
            self.version,
            self.selector_text()
        )
    }
}

/// Names on the objects the Kubernetes runtime applies.
pub mod object_labels {
    /// `app.kubernetes.io/managed-by` on every applied object.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// Its value: distinct from the agent's own Jobs (`vergence-agent`).
    pub const MANAGED_BY_VALUE: &str = "vergence";
    /// The service version an object was applied for (annotation).
    pub const VERSION: &str = "vergence.dev/version";
    /// The instance's service id (annotation).
    pub const SERVICE_ID: &str = "vergence.dev/service-id";
    /// The field manager of every server-side apply.
    pub const FIELD_MANAGER: &str = "vergence";
}

pub use object_labels::VERSION as VERSION_ANNOTATION;
