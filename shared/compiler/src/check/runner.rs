//! Checks runners: the `runner` of a runtime or protection (complete, each
//! setting of the right shape, a Fargate or Cloud Run size that exists),
//! and a release channel's override of a runtime's runner, merged field by
//! field over the runtime's own and of the same kind.
//!
//! Every runner the config names is remembered with where it is written,
//! for [`CompiledConfig::runner_uses`](vergence_model::ports::CompiledConfig::runner_uses).

use super::Checker;
use super::field_path::FieldPath;
use super::runner_fields::{
    check_aws_region, check_dns_label, check_dns_subdomain, check_ecs_cluster, check_gcp_project,
    check_gcp_region, check_gcp_service_account, check_lambda_function, check_lambda_qualifier,
    check_log_group, check_role_arn, check_security_group, check_subnet, cloud_run_cpu,
    cloud_run_memory, cloud_run_size, fargate_cpu, fargate_memory, fargate_size, lambda_arn_parts,
};
use crate::config::schema::{
    CloudRunRunnerDoc, EcsRunnerDoc, KubernetesRunnerDoc, LambdaRunnerDoc, LocalRunnerDoc,
    RunnerDoc,
};
use vergence_model::{
    CloudRunRunnerSpec, EcsRunnerSpec, KubernetesRunnerSpec, LambdaRunnerSpec, RunnerKind,
    RunnerSpec, RunnerUse, RunnerUser, RuntimeName, Source,
};

/// A runtime's runner as written, which release channels may override.
#[derive(Clone, Copy)]
pub(super) struct RuntimeRunner<'a> {
    pub(super) doc: Option<&'a RunnerDoc>,
    pub(super) source: &'a Source,
}

impl RuntimeRunner<'_> {
    /// "the ecs runner (runtimes.yaml:3)", "the local runner (the default)".
    fn describe(&self) -> String {
        match self.doc {
            None => "the local runner (the default)".to_owned(),
            Some(doc) => format!(
                "the {} runner ({})",
                doc.kind(),
                self.source.location("runtime.runner")
            ),
        }
    }
}

impl Checker<'_> {
    /// The runner of the runtime or protection at `owner` (its `runner`
    /// key), the local runner when none is written. `None` when anything in
    /// it is wrong, all of it reported.
    pub(super) fn runner(
        &mut self,
        source: &Source,
        owner: &FieldPath,
        doc: Option<&RunnerDoc>,
        by: RunnerUser,
    ) -> Option<RunnerSpec> {
        let path = owner.key("runner");
        let at = source.location(if doc.is_some() { &path } else { owner });
        let kind = doc.map_or(RunnerKind::Local, RunnerDoc::kind);
        self.runner_uses.push(RunnerUse { kind, by, at });
        let Some(doc) = doc else {
            return Some(RunnerSpec::Local);
        };
        let before = self.errors.len();
        let kind_path = path.key(kind.as_str());
        self.runner_settings(source, &kind_path, doc);
        self.required_runner_settings(source, &kind_path, doc);
        self.runner_size(source, &kind_path, doc, doc);
        let spec = runner_spec(doc);
        if self.errors.len() == before {
            spec
        } else {
            None
        }
    }

    /// The runner of `runtime` in a release channel whose entry for it (at
    /// `entry`) overrides settings of the runtime's runner: the runtime's
    /// own with the given settings replacing its. `None` when the override
    /// is wrong (reported) or the runtime's runner is (reported there).
    pub(super) fn runner_override(
        &mut self,
        source: &Source,
        entry: &FieldPath,
        runtime: &RuntimeName,
        base: RuntimeRunner<'_>,
        over: &RunnerDoc,
    ) -> Option<RunnerSpec> {
        let path = entry.key("runner");
        self.runner_uses.push(RunnerUse {
            kind: over.kind(),
            by: RunnerUser::Runtime(runtime.clone()),
            at: source.location(&path),
        });
        let kind_path = path.key(over.kind().as_str());
        let local = RunnerDoc::Local(LocalRunnerDoc {});
        let Some(merged) = base.doc.unwrap_or(&local).overridden_by(over) else {
            let message = format!(
                "runtime {runtime} runs on {}; a release channel can change that runner's settings, \
                 not switch it to {}: set the runner on the runtime, or define another runtime for this channel",
                base.describe(),
                over.kind()
            );
            self.err(source, &kind_path, message);
            return None;
        };
        let before = self.errors.len();
        self.runner_settings(source, &kind_path, over);
        self.runner_size(source, &kind_path, over, &merged);
        let spec = runner_spec(&merged)?;
        (self.errors.len() == before).then_some(spec)
    }

    /// Checks the shape of each setting `doc` gives (at `path`, the
    /// mapping of its kind).
    fn runner_settings(&mut self, source: &Source, path: &FieldPath, doc: &RunnerDoc) {
        match doc {
            RunnerDoc::Local(_) => {}
            RunnerDoc::Kubernetes(k) => self.kubernetes_settings(source, path, k),
            RunnerDoc::Ecs(ecs) => self.ecs_settings(source, path, ecs),
            RunnerDoc::CloudRun(run) => self.cloud_run_settings(source, path, run),
            RunnerDoc::Lambda(lambda) => self.lambda_settings(source, path, lambda),
        }
    }

    fn lambda_settings(&mut self, source: &Source, path: &FieldPath, doc: &LambdaRunnerDoc) {
        let function = doc.function.as_deref();
        self.setting(source, path, "function", function, check_lambda_function);
        let region = doc.region.as_deref();
        self.setting(source, path, "region", region, check_aws_region);
        let qualifier = doc.qualifier.as_deref();
        self.setting(source, path, "qualifier", qualifier, check_lambda_qualifier);
        // An ARN says where the function is and may name its version: a
        // second answer that differs would be ignored by one side or the
        // other, so it is refused.
        let Some((arn_region, qualified)) = function.and_then(lambda_arn_parts) else {
            return;
        };
        if let Some(region) = region.filter(|r| *r != arn_region) {
            let message = format!(
                "region {region:?} differs from the region of the function's ARN ({arn_region}): remove region, or name the function by its name"
            );
            self.err(source, &path.key("region"), message);
        }
        if qualified && qualifier.is_some() {
            self.err(
                source,
                &path.key("qualifier"),
                "the function's ARN already names a version or alias: remove qualifier, or the version from the ARN",
            );
        }
    }

    pub(super) fn kubernetes_settings(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &KubernetesRunnerDoc,
    ) {
        let agent = doc.agent.as_deref();
        self.setting(source, path, "agent", agent, vergence_model::check_name);
        self.setting(source, path, "namespace", doc.namespace.as_deref(), |raw| {
            check_dns_label("namespace", raw)
        });
        let account = doc.service_account.as_deref();
        self.setting(source, path, "serviceAccount", account, |raw| {
            check_dns_subdomain("serviceAccount", raw)
        });
    }

    fn ecs_settings(&mut self, source: &Source, path: &FieldPath, doc: &EcsRunnerDoc) {
        let cluster = doc.cluster.as_deref();
        self.setting(source, path, "cluster", cluster, check_ecs_cluster);
        self.setting(
            source,
            path,
            "region",
            doc.region.as_deref(),
            check_aws_region,
        );
        if doc.subnets.as_ref().is_some_and(Vec::is_empty) {
            self.err(
                source,
                &path.key("subnets"),
                "subnets is empty: an ECS task on Fargate gets its network interface (awsvpc) in one of these subnets; list at least one",
            );
        }
        let lists = [
            ("subnets", &doc.subnets, check_subnet as fn(&str) -> _),
            ("securityGroups", &doc.security_groups, check_security_group),
        ];
        for (key, list, check) in lists {
            for (i, raw) in list.iter().flatten().enumerate() {
                if let Err(e) = check(raw) {
                    self.err(source, &path.key(key).index(i), e);
                }
            }
        }
        for (key, arn) in [
            ("taskRoleArn", &doc.task_role_arn),
            ("executionRoleArn", &doc.execution_role_arn),
        ] {
            self.setting(source, path, key, arn.as_deref(), |raw| {
                check_role_arn(key, raw)
            });
        }
        self.setting(source, path, "cpu", doc.cpu.as_deref(), |raw| {
            fargate_cpu(raw).map(drop)
        });
        self.setting(source, path, "memory", doc.memory.as_deref(), |raw| {
            fargate_memory(raw).map(drop)
        });
        let log_group = doc.log_group.as_deref();
        self.setting(source, path, "logGroup", log_group, check_log_group);
    }

    fn cloud_run_settings(&mut self, source: &Source, path: &FieldPath, doc: &CloudRunRunnerDoc) {
        let project = doc.project.as_deref();
        self.setting(source, path, "project", project, check_gcp_project);
        self.setting(
            source,
            path,
            "region",
            doc.region.as_deref(),
            check_gcp_region,
        );
        let account = doc.service_account.as_deref();
        self.setting(
            source,
            path,
            "serviceAccount",
            account,
            check_gcp_service_account,
        );
        self.setting(source, path, "cpu", doc.cpu.as_deref(), |raw| {
            cloud_run_cpu(raw).map(drop)
        });
        self.setting(source, path, "memory", doc.memory.as_deref(), |raw| {
            cloud_run_memory(raw).map(drop)
        });
    }

    /// Checks one setting (`key` under `path`) when it is given.
    fn setting(
        &mut self,
        source: &Source,
        path: &FieldPath,
        key: &str,
        value: Option<&str>,
        check: impl Fn(&str) -> Result<(), String>,
    ) {
        if let Some(Err(e)) = value.map(check) {
            self.err(source, &path.key(key), e);
        }
    }

    /// Reports each setting a runner cannot run a job without.
    fn required_runner_settings(&mut self, source: &Source, path: &FieldPath, doc: &RunnerDoc) {
        let required: Vec<(bool, &str, &str)> = match doc {
            RunnerDoc::Local(_) => Vec::new(),
            RunnerDoc::Kubernetes(k) => vec![(
                k.agent.is_none(),
                "agent",
                "the name of the vergence-agent that runs the jobs in the cluster",
            )],
            RunnerDoc::Ecs(ecs) => vec![
                (
                    ecs.cluster.is_none(),
                    "cluster",
                    "the name or ARN of the ECS cluster that runs the jobs",
                ),
                (
                    ecs.subnets.is_none(),
                    "subnets",
                    "an ECS task on Fargate gets its network interface (awsvpc) in one of them; write subnets: [subnet-…]",
                ),
            ],
            RunnerDoc::Lambda(lambda) => vec![(
                lambda.function.is_none(),
                "function",
                "the name or ARN of the Lambda function (carrying vergence-wrapper) that runs the jobs",
            )],
            RunnerDoc::CloudRun(run) => vec![
                (
                    run.project.is_none(),
                    "project",
                    "the id of the Google Cloud project the jobs run in",
                ),
                (
                    run.region.is_none(),
                    "region",
                    "the region the jobs run in, like europe-west1",
                ),
            ],
        };
        for (_, key, what) in required.into_iter().filter(|(missing, _, _)| *missing) {
            let message = format!("the {} runner needs {key}: {what}", doc.kind());
            self.err(source, &path.key(key), message);
        }
    }

    /// Checks the CPU and memory of `effective` against each other, when
    /// `given` (the runner or override being checked) sets either; the
    /// error is at the one it sets (memory first).
    fn runner_size(
        &mut self,
        source: &Source,
        path: &FieldPath,
        given: &RunnerDoc,
        effective: &RunnerDoc,
    ) {
        let (checked, blamed) = match (given, effective) {
            (RunnerDoc::Ecs(given), RunnerDoc::Ecs(ecs)) => {
                let cpu = ecs
                    .cpu
                    .as_deref()
                    .map_or(Ok(EcsRunnerSpec::DEFAULT_CPU), fargate_cpu);
                let memory = ecs.memory.as_deref().map(fargate_memory).transpose();
                let checked = match (cpu, memory) {
                    (Ok(cpu), Ok(memory)) => fargate_size(cpu, memory).map(drop),
                    // Reported as a setting.
                    _ => Ok(()),
                };
                (
                    checked,
                    blamed_size(given.cpu.is_some(), given.memory.is_some()),
                )
            }
            (RunnerDoc::CloudRun(given), RunnerDoc::CloudRun(run)) => {
                let cpu = run.cpu.as_deref().map(cloud_run_cpu).transpose();
                let memory = run.memory.as_deref().map(cloud_run_memory).transpose();
                let checked = match (cpu, memory) {
                    (Ok(cpu), Ok(memory)) => cloud_run_size(cpu, memory),
                    _ => Ok(()),
                };
                (
                    checked,
                    blamed_size(given.cpu.is_some(), given.memory.is_some()),
                )
            }
            _ => return,
        };
        if let (Err(e), Some(key)) = (checked, blamed) {
            self.err(source, &path.key(key), e);
        }
    }
}

/// Which of CPU and memory a size error is reported at: the one the block
/// being checked sets, memory first; none when it sets neither (then the
/// size is the runtime's, checked there, or the defaults, which fit).
fn blamed_size(cpu: bool, memory: bool) -> Option<&'static str> {
    match (cpu, memory) {
        (_, true) => Some("memory"),
        (true, false) => Some("cpu"),
        (false, false) => None,
    }
}

/// The runner a complete, valid runner block describes, with the defaults
/// for what it leaves out; `None` when something is missing or invalid.
fn runner_spec(doc: &RunnerDoc) -> Option<RunnerSpec> {
    Some(match doc {
        RunnerDoc::Local(_) => RunnerSpec::Local,
        RunnerDoc::Kubernetes(k) => RunnerSpec::Kubernetes(KubernetesRunnerSpec {
            agent: k.agent.clone()?,
            namespace: k.namespace.clone(),
            service_account: k.service_account.clone(),
        }),
        RunnerDoc::Ecs(ecs) => {
            let cpu = ecs
                .cpu
                .as_deref()
                .map_or(Ok(EcsRunnerSpec::DEFAULT_CPU), fargate_cpu);
            let memory = ecs.memory.as_deref().map(fargate_memory).transpose();
            let cpu = cpu.ok()?;
            RunnerSpec::Ecs(EcsRunnerSpec {
                cluster: ecs.cluster.clone()?,
                region: ecs.region.clone(),
                subnets: ecs.subnets.clone().filter(|s| !s.is_empty())?,
                security_groups: ecs.security_groups.clone().unwrap_or_default(),
                assign_public_ip: ecs.assign_public_ip.unwrap_or(false),
                task_role_arn: ecs.task_role_arn.clone(),
                execution_role_arn: ecs.execution_role_arn.clone(),
                cpu,
                memory: fargate_size(cpu, memory.ok()?).ok()?,
                log_group: ecs
                    .log_group
                    .clone()
                    .unwrap_or_else(|| EcsRunnerSpec::DEFAULT_LOG_GROUP.to_owned()),
            })
        }
        RunnerDoc::Lambda(lambda) => RunnerSpec::Lambda(LambdaRunnerSpec {
            function: lambda.function.clone()?,
            region: lambda.region.clone(),
            qualifier: lambda.qualifier.clone(),
        }),
        RunnerDoc::CloudRun(run) => RunnerSpec::CloudRun(CloudRunRunnerSpec {
            project: run.project.clone()?,
            region: run.region.clone()?,
            service_account: run.service_account.clone(),
            cpu: run.cpu.clone(),
            memory: run.memory.clone(),
        }),
    })
}
