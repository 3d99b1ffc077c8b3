//! The `runner` block of runtimes and protections, and of a release
//! channel's override of a runtime's runner: `runner: local`, or a mapping
//! with exactly one of `local`, `ecs`, `cloudRun`, `kubernetes`, `lambda`.
//!
//! Every setting is optional here: a release channel's override gives only
//! the settings it changes, and a runtime's missing settings are reported
//! by the checker (all of them, with their lines) instead of stopping the
//! reading of the document at the first.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::config::yaml::snake_to_camel;
use vergence_model::RunnerKind;
use vergence_model::diagnostics::suggest;

/// The forms a runner is written in, for messages.
const RUNNER_FORMS: &str = "write `runner: local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}";

/// Where a runtime's or protection's jobs run.
#[derive(Clone, Debug)]
pub enum RunnerDoc {
    Local(LocalRunnerDoc),
    Kubernetes(KubernetesRunnerDoc),
    Ecs(EcsRunnerDoc),
    CloudRun(CloudRunRunnerDoc),
    Lambda(LambdaRunnerDoc),
}

impl RunnerDoc {
    pub fn kind(&self) -> RunnerKind {
        match self {
            RunnerDoc::Local(_) => RunnerKind::Local,
            RunnerDoc::Kubernetes(_) => RunnerKind::Kubernetes,
            RunnerDoc::Ecs(_) => RunnerKind::Ecs,
            RunnerDoc::CloudRun(_) => RunnerKind::CloudRun,
            RunnerDoc::Lambda(_) => RunnerKind::Lambda,
        }
    }

    /// This runner with the settings `over` gives replacing its own, field
    /// by field (a list replaces the whole list); `None` when `over` is of
    /// another kind.
    pub fn overridden_by(&self, over: &RunnerDoc) -> Option<RunnerDoc> {
        Some(match (self, over) {
            (RunnerDoc::Local(_), RunnerDoc::Local(_)) => RunnerDoc::Local(LocalRunnerDoc {}),
            (RunnerDoc::Kubernetes(base), RunnerDoc::Kubernetes(over)) => {
                RunnerDoc::Kubernetes(KubernetesRunnerDoc {
                    agent: either(&over.agent, &base.agent),
                    namespace: either(&over.namespace, &base.namespace),
                    service_account: either(&over.service_account, &base.service_account),
                })
            }
            (RunnerDoc::Ecs(base), RunnerDoc::Ecs(over)) => RunnerDoc::Ecs(EcsRunnerDoc {
                cluster: either(&over.cluster, &base.cluster),
                region: either(&over.region, &base.region),
                subnets: either(&over.subnets, &base.subnets),
                security_groups: either(&over.security_groups, &base.security_groups),
                assign_public_ip: over.assign_public_ip.or(base.assign_public_ip),
                task_role_arn: either(&over.task_role_arn, &base.task_role_arn),
                execution_role_arn: either(&over.execution_role_arn, &base.execution_role_arn),
                cpu: either(&over.cpu, &base.cpu),
                memory: either(&over.memory, &base.memory),
                log_group: either(&over.log_group, &base.log_group),
            }),
            (RunnerDoc::CloudRun(base), RunnerDoc::CloudRun(over)) => {
                RunnerDoc::CloudRun(CloudRunRunnerDoc {
                    project: either(&over.project, &base.project),
                    region: either(&over.region, &base.region),
                    service_account: either(&over.service_account, &base.service_account),
                    cpu: either(&over.cpu, &base.cpu),
                    memory: either(&over.memory, &base.memory),
                })
            }
            (RunnerDoc::Lambda(base), RunnerDoc::Lambda(over)) => {
                RunnerDoc::Lambda(LambdaRunnerDoc {
                    function: either(&over.function, &base.function),
                    region: either(&over.region, &base.region),
                    qualifier: either(&over.qualifier, &base.qualifier),
                })
            }
            _ => return None,
        })
    }
}

fn either<T: Clone>(over: &Option<T>, base: &Option<T>) -> Option<T> {
    over.as_ref().or(base.as_ref()).cloned()
}

/// `local: {}`: a process (or a container, when the program names an
/// image) where Vergence runs.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalRunnerDoc {}

/// `kubernetes: {agent, namespace, serviceAccount}`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesRunnerDoc {
    pub agent: Option<String>,
    pub namespace: Option<String>,
    pub service_account: Option<String>,
}

/// `ecs: {cluster, region, subnets, …}`. CPU and memory are read as
/// written and parsed by the checker, so a wrong one gets a message that
/// lists the Fargate sizes.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EcsRunnerDoc {
    pub cluster: Option<String>,
    pub region: Option<String>,
    pub subnets: Option<Vec<String>>,
    pub security_groups: Option<Vec<String>>,
    pub assign_public_ip: Option<bool>,
    pub task_role_arn: Option<String>,
    pub execution_role_arn: Option<String>,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub log_group: Option<String>,
}

/// `cloudRun: {project, region, serviceAccount, cpu, memory}`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudRunRunnerDoc {
    pub project: Option<String>,
    pub region: Option<String>,
    pub service_account: Option<String>,
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

/// `lambda: {function, region, qualifier}`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LambdaRunnerDoc {
    pub function: Option<String>,
    pub region: Option<String>,
    pub qualifier: Option<String>,
}

/// `runner: local`, or a mapping with exactly one runner kind, as the reader
/// below takes it.
impl JsonSchema for RunnerDoc {
    fn schema_name() -> Cow<'static, str> {
        "Runner".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Where jobs run: `local`, or exactly one of local, ecs, cloudRun, kubernetes, lambda with its settings.",
            "oneOf": [
                {"type": "string", "enum": ["local"]},
                {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "properties": {
                        "local": generator.subschema_for::<LocalRunnerDoc>(),
                        "ecs": generator.subschema_for::<EcsRunnerDoc>(),
                        "cloudRun": generator.subschema_for::<CloudRunRunnerDoc>(),
                        "kubernetes": generator.subschema_for::<KubernetesRunnerDoc>(),
                        "lambda": generator.subschema_for::<LambdaRunnerDoc>(),
                    },
                },
            ],
        })
    }
}

impl<'de> Deserialize<'de> for RunnerDoc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RunnerVisitor)
    }
}

/// Reads `runner: local` (a scalar) or a mapping with one runner kind.
struct RunnerVisitor;

impl<'de> Visitor<'de> for RunnerVisitor {
    type Value = RunnerDoc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a runner: `local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}",
        )
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<RunnerDoc, E> {
        match runner_kind(raw).map_err(E::custom)? {
            RunnerKind::Local => Ok(RunnerDoc::Local(LocalRunnerDoc {})),
            kind => Err(E::custom(format!(
                "the {kind} runner needs its settings: write `runner: {{{kind}: {{{}}}}}`",
                required_settings(kind)
            ))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RunnerDoc, A::Error> {
        let Some(RunnerKey(kind)) = map.next_key()? else {
            return Err(de::Error::custom(format!(
                "the runner mapping is empty; {RUNNER_FORMS}"
            )));
        };
        let doc = match kind {
            RunnerKind::Local => RunnerDoc::Local(map.next_value()?),
            RunnerKind::Kubernetes => RunnerDoc::Kubernetes(map.next_value()?),
            RunnerKind::Ecs => RunnerDoc::Ecs(map.next_value()?),
            RunnerKind::CloudRun => RunnerDoc::CloudRun(map.next_value()?),
            RunnerKind::Lambda => RunnerDoc::Lambda(map.next_value()?),
        };
        if let Some(other) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "a runner is exactly one of local, ecs, cloudRun, kubernetes or lambda; found {kind} and {other}"
            )));
        }
        Ok(doc)
    }
}

/// The key of a runner mapping (`ecs`, `cloudRun`, …), so an unknown one is
/// reported at its own line with the nearest kind.
struct RunnerKey(RunnerKind);

impl<'de> Deserialize<'de> for RunnerKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        runner_kind(&raw).map(RunnerKey).map_err(de::Error::custom)
    }
}

/// The runner kind written as `raw` (camelCase or snake_case).
fn runner_kind(raw: &str) -> Result<RunnerKind, String> {
    let camel = snake_to_camel(raw);
    let names = RunnerKind::ALL.map(RunnerKind::as_str);
    if let Some(kind) = RunnerKind::ALL
        .into_iter()
        .find(|k| k.as_str() == raw || k.as_str() == camel)
    {
        return Ok(kind);
    }
    let hint = suggest(raw, names)
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Err(format!("unknown runner '{raw}'{hint}; {RUNNER_FORMS}"))
}

/// The settings a runner of `kind` cannot do without, as written in config.
fn required_settings(kind: RunnerKind) -> &'static str {
    match kind {
        RunnerKind::Local => "",
        RunnerKind::Kubernetes => "agent: NAME",
        RunnerKind::Ecs => "cluster: NAME, subnets: [subnet-…]",
        RunnerKind::CloudRun => "project: PROJECT, region: REGION",
        RunnerKind::Lambda => "function: NAME_OR_ARN",
    }
}
