//! RunTask for one job: the shared task definition, the job's command and
//! plain environment as overrides of the `job` container, the network of
//! the runner settings, and the job id as `startedBy` (how the runner
//! finds the task again) and as `clientToken` (so ECS itself starts one
//! task per job however often the dispatch is retried).

use aws_sdk_ecs::operation::run_task::builders::RunTaskFluentBuilder;
use aws_sdk_ecs::operation::run_task::{RunTaskError, RunTaskOutput};
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, ContainerOverride, KeyValuePair, LaunchType,
    NetworkConfiguration, Tag, TaskOverride,
};
use vergence_container::Launch;
use vergence_model::{EcsRunnerSpec, JobRecord};

use crate::error::{EcsError, describe};
use crate::task_definition::CONTAINER;

/// RunTask takes at most this many characters of overrides, JSON included.
pub const MAX_OVERRIDES: usize = 8192;

/// ECS keeps at most this many characters of `startedBy`.
pub const MAX_STARTED_BY: usize = 36;

/// The tag that names a task's job, and the one that names its instance.
pub const JOB_TAG: &str = "vergence:job-id";
pub const INSTANCE_TAG: &str = "vergence:instance";

/// Fails unless the job id fits `startedBy`. The engine's ids are a kind
/// and 20 hex digits, at most 31 characters.
pub fn check_job_id(job: &JobRecord) -> Result<(), EcsError> {
    let len = job.id.as_str().len();
    if len > MAX_STARTED_BY {
        return Err(EcsError::JobIdTooLong {
            job: job.id.to_string(),
            len,
        });
    }
    Ok(())
}

/// The overrides of the `job` container: the program's arguments (the
/// program itself is the task definition's entrypoint) and every plain
/// variable.
/// Fails when they exceed what RunTask takes.
pub fn overrides(launch: &Launch) -> Result<TaskOverride, EcsError> {
    let size = overrides_size(launch);
    if size > MAX_OVERRIDES {
        return Err(EcsError::OverridesTooLarge {
            size,
            limit: MAX_OVERRIDES,
        });
    }
    let environment = launch
        .env
        .iter()
        .map(|(name, value)| KeyValuePair::builder().name(name).value(value).build())
        .collect();
    let container = ContainerOverride::builder()
        .name(CONTAINER)
        .set_command(Some(arguments(launch)).filter(|c| !c.is_empty()))
        .set_environment(Some(environment))
        .build();
    Ok(TaskOverride::builder()
        .container_overrides(container)
        .build())
}

/// What follows the program in the job's command.
fn arguments(launch: &Launch) -> Vec<String> {
    launch.command.get(1..).unwrap_or_default().to_vec()
}

/// The overrides as ECS counts them: their JSON.
fn overrides_size(launch: &Launch) -> usize {
    let environment: Vec<_> = launch
        .env
        .iter()
        .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
        .collect();
    serde_json::json!({
        "containerOverrides": [{
            "name": CONTAINER,
            "command": arguments(launch),
            "environment": environment,
        }]
    })
    .to_string()
    .len()
}

/// The awsvpc network of the runner settings.
pub fn network(spec: &EcsRunnerSpec) -> Result<NetworkConfiguration, EcsError> {
    let public_ip = if spec.assign_public_ip {
        AssignPublicIp::Enabled
    } else {
        AssignPublicIp::Disabled
    };
    let awsvpc = AwsVpcConfiguration::builder()
        .set_subnets(Some(spec.subnets.clone()))
        .set_security_groups(Some(spec.security_groups.clone()).filter(|g| !g.is_empty()))
        .assign_public_ip(public_ip)
        .build()
        .map_err(EcsError::build("RunTask"))?;
    Ok(NetworkConfiguration::builder()
        .awsvpc_configuration(awsvpc)
        .build())
}

/// The RunTask request of `job`, on `task_definition` (an ARN).
pub fn request(
    request: RunTaskFluentBuilder,
    spec: &EcsRunnerSpec,
    job: &JobRecord,
    task_definition: &str,
    overrides: TaskOverride,
) -> Result<RunTaskFluentBuilder, EcsError> {
    Ok(request
        .cluster(&spec.cluster)
        .task_definition(task_definition)
        .launch_type(LaunchType::Fargate)
        .count(1)
        .network_configuration(network(spec)?)
        .overrides(overrides)
        .started_by(job.id.as_str())
        .client_token(job.id.as_str())
        .tags(Tag::builder().key(JOB_TAG).value(job.id.as_str()).build())
        .tags(
            Tag::builder()
                .key(INSTANCE_TAG)
                .value(job.instance.storage_id())
                .build(),
        ))
}

/// The task RunTask started, or the one it started earlier for the same
/// client token (a retried dispatch whose URLs differ, which ECS answers
/// with a conflict naming the task); an error with ECS's reasons when it
/// started nothing.
pub fn started_task(
    outcome: Result<RunTaskOutput, aws_sdk_ecs::error::SdkError<RunTaskError>>,
    cluster: &str,
    family: &str,
) -> Result<String, EcsError> {
    let output = match outcome {
        Ok(output) => output,
        Err(e) => {
            if let Some(RunTaskError::ConflictException(conflict)) = e.as_service_error()
                && let Some(task) = conflict.resource_ids().first()
            {
                return Ok(task.clone());
            }
            return Err(EcsError::RunTask {
                cluster: cluster.to_owned(),
                family: family.to_owned(),
                detail: describe(&e),
                source: Box::new(e),
            });
        }
    };
    if let Some(arn) = output.tasks().iter().find_map(|t| t.task_arn()) {
        return Ok(arn.to_owned());
    }
    let reasons = output
        .failures()
        .iter()
        .map(|f| {
            let mut reason = f.reason().unwrap_or("no reason given").to_owned();
            if let Some(detail) = f.detail() {
                reason.push_str(&format!(" ({detail})"));
            }
            match f.arn() {
                Some(arn) => format!("{arn}: {reason}"),
                None => reason,
            }
        })
        .collect::<Vec<_>>();
    Err(EcsError::RunTaskRefused {
        cluster: cluster.to_owned(),
        family: family.to_owned(),
        reasons: if reasons.is_empty() {
            "ECS returned neither a task nor a failure".to_owned()
        } else {
            reasons.join("; ")
        },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use aws_sdk_ecs::types::{Failure, Task};

    use super::*;

    fn launch(env: &[(&str, &str)]) -> Launch {
        Launch {
            image: "deploy:1".into(),
            command: vec!["./check.sh".into(), "--quick".into()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            secrets: BTreeMap::new(),
        }
    }

    #[test]
    fn overrides_carry_the_command_and_every_variable_of_the_job_container() {
        let overrides = overrides(&launch(&[("A", "1"), ("VERGENCE_JOB_ID", "fetch-1")])).unwrap();
        let container = &overrides.container_overrides()[0];
        assert_eq!(container.name(), Some("job"));
        // The program is the definition's entrypoint; only its arguments
        // go per task.
        assert_eq!(container.command(), ["--quick"]);
        let env: Vec<_> = container
            .environment()
            .iter()
            .map(|kv| (kv.name().unwrap(), kv.value().unwrap()))
            .collect();
        assert_eq!(env, [("A", "1"), ("VERGENCE_JOB_ID", "fetch-1")]);
    }

    #[test]
    fn overrides_over_eight_kib_are_refused_before_ecs_sees_them() {
        let url = format!(
            "https://bucket.s3.amazonaws.com/jobs/x?{}",
            "X".repeat(2000)
        );
        let big = launch(&[
            ("VERGENCE_STDOUT_URL", &url),
            ("VERGENCE_STDERR_URL", &url),
            ("VERGENCE_OUTPUT_URLS", &url),
            ("VERGENCE_INPUT_URLS", &url),
        ]);
        let err = overrides(&big).unwrap_err().to_string();
        assert!(err.contains("ECS takes at most 8192"), "{err}");
    }

    #[test]
    fn a_refusal_lists_ecs_reasons_and_a_conflict_names_the_task_already_started() {
        let refused = RunTaskOutput::builder()
            .failures(
                Failure::builder()
                    .arn("arn:aws:ecs:eu-west-1:1:cluster/jobs")
                    .reason("MISSING")
                    .build(),
            )
            .build();
        let err = started_task(Ok(refused), "jobs", "vergence-abc")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "cluster jobs started no task: arn:aws:ecs:eu-west-1:1:cluster/jobs: MISSING"
            ),
            "{err}"
        );
        let started = RunTaskOutput::builder()
            .tasks(Task::builder().task_arn("arn:task/1").build())
            .build();
        assert_eq!(
            started_task(Ok(started), "jobs", "f").unwrap(),
            "arn:task/1"
        );
    }
}
