//! The task definition a job runs with: one per runtime image and runner
//! settings, named by a hash of its content so that every job with the same
//! image and settings shares it, and a change to any of them (a new image
//! tag, another role, a secret added) makes a new one.
//!
//! Secrets are part of it because ECS takes them only in the task
//! definition (`secrets[].valueFrom`, resolved by ECS with the execution
//! role when the task starts), never per RunTask; everything else that
//! varies per job (the command's arguments, plain environment) is a RunTask
//! override.
//!
//! Every runner runs a program's `cmd` in place of the image's entrypoint
//! (as `docker run --entrypoint` and a Kubernetes `command` do), so one
//! config means the same on each. RunTask cannot override an entrypoint,
//! so `cmd[0]` is part of the definition and the rest goes per job.

use std::collections::BTreeMap;

use aws_sdk_ecs::operation::register_task_definition::builders::RegisterTaskDefinitionFluentBuilder;
use aws_sdk_ecs::types::{
    Compatibility, ContainerDefinition, LogConfiguration, LogDriver, NetworkMode, Secret,
};
use sha2::{Digest, Sha256};
use vergence_model::{EcsRunnerSpec, SecretRef};

use crate::error::EcsError;

/// The name of the job's container in every task definition.
pub const CONTAINER: &str = "job";

/// The awslogs stream prefix: a task's output is in the stream
/// `vergence/job/<task id>`.
pub const STREAM_PREFIX: &str = "vergence";

/// Bumped when the shape of the registered task definition changes, so
/// that jobs move to definitions of the new shape.
const LAYOUT: u32 = 2;

/// Everything a task definition holds; its hash is the family name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskDefinitionSpec {
    layout: u32,
    pub image: String,
    /// The program (`cmd[0]`), in place of the image's entrypoint; `None`
    /// runs the image's own.
    pub entry_point: Option<String>,
    pub cpu: u32,
    pub memory: u32,
    pub task_role_arn: Option<String>,
    pub execution_role_arn: Option<String>,
    pub log_group: String,
    /// The region the task runs in, where awslogs writes its stream.
    pub log_region: String,
    /// Variable name → `valueFrom` (a Secrets Manager ARN, an SSM
    /// parameter ARN or name).
    pub secrets: BTreeMap<String, String>,
}

impl TaskDefinitionSpec {
    /// The definition for `image` with the runner's settings, in `region`.
    /// A secret from a store ECS cannot read is an error naming it.
    pub fn new(
        spec: &EcsRunnerSpec,
        region: &str,
        image: &str,
        secrets: &BTreeMap<String, SecretRef>,
    ) -> Result<Self, EcsError> {
        Ok(Self {
            layout: LAYOUT,
            image: image.to_owned(),
            entry_point: None,
            cpu: spec.cpu,
            memory: spec.memory,
            task_role_arn: spec.task_role_arn.clone(),
            execution_role_arn: spec.execution_role_arn.clone(),
            log_group: spec.log_group.clone(),
            log_region: region.to_owned(),
            secrets: value_from(secrets)?,
        })
    }

    /// The definition that runs `command`'s program (its first word) as
    /// the container's entrypoint.
    pub fn running(mut self, command: &[String]) -> Self {
        self.entry_point = command.first().cloned();
        self
    }

    /// `vergence-` and 12 hex digits of the SHA-256 of every field.
    pub fn family(&self) -> String {
        let mut hasher = Sha256::new();
        // Length-prefixed, so no two different contents hash the same text.
        let mut field = |value: &str| {
            hasher.update((value.len() as u64).to_le_bytes());
            hasher.update(value.as_bytes());
        };
        field(&self.layout.to_string());
        field(&self.image);
        field(self.entry_point.as_deref().unwrap_or(""));
        field(&self.cpu.to_string());
        field(&self.memory.to_string());
        field(self.task_role_arn.as_deref().unwrap_or(""));
        field(self.execution_role_arn.as_deref().unwrap_or(""));
        field(&self.log_group);
        field(&self.log_region);
        for (name, value_from) in &self.secrets {
            field(name);
            field(value_from);
        }
        let digest = hex::encode(hasher.finalize());
        format!("vergence-{}", &digest[..12])
    }

    /// The one container: essential, logging to the log group through
    /// awslogs, with the secrets as `valueFrom` references. Its memory is
    /// the task's (Fargate allows a container the whole task).
    pub fn container(&self) -> Result<ContainerDefinition, EcsError> {
        let build = EcsError::build("RegisterTaskDefinition");
        let log_configuration = LogConfiguration::builder()
            .log_driver(LogDriver::Awslogs)
            .options("awslogs-group", &self.log_group)
            .options("awslogs-region", &self.log_region)
            .options("awslogs-stream-prefix", STREAM_PREFIX)
            .build()
            .map_err(&build)?;
        let secrets = self
            .secrets
            .iter()
            .map(|(name, value_from)| Secret::builder().name(name).value_from(value_from).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(&build)?;
        Ok(ContainerDefinition::builder()
            .name(CONTAINER)
            .image(&self.image)
            .set_entry_point(self.entry_point.clone().map(|program| vec![program]))
            .essential(true)
            .memory(i32::try_from(self.memory).unwrap_or(i32::MAX))
            .log_configuration(log_configuration)
            .set_secrets(Some(secrets).filter(|s| !s.is_empty()))
            .build())
    }

    /// RegisterTaskDefinition of this definition: its family, Fargate,
    /// awsvpc, the task's size and roles, and the container.
    pub fn register(
        &self,
        request: RegisterTaskDefinitionFluentBuilder,
    ) -> Result<RegisterTaskDefinitionFluentBuilder, EcsError> {
        Ok(request
            .family(self.family())
            .requires_compatibilities(Compatibility::Fargate)
            .network_mode(NetworkMode::Awsvpc)
            .cpu(self.cpu.to_string())
            .memory(self.memory.to_string())
            .set_task_role_arn(self.task_role_arn.clone())
            .set_execution_role_arn(self.execution_role_arn.clone())
            .container_definitions(self.container()?))
    }
}

/// The `valueFrom` of each secret, or an error for the first one ECS
/// cannot read.
fn value_from(secrets: &BTreeMap<String, SecretRef>) -> Result<BTreeMap<String, String>, EcsError> {
    secrets
        .iter()
        .map(|(variable, secret)| match secret {
            SecretRef::AwsSecretsManager(arn) => Ok((variable.clone(), arn.clone())),
            SecretRef::AwsSsmParameter(name) => Ok((variable.clone(), name.clone())),
            other => Err(EcsError::UnreadableSecret {
                variable: variable.clone(),
                origin: other.describe(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner() -> EcsRunnerSpec {
        serde_json::from_str(r#"{"cluster":"jobs","subnets":["subnet-1"]}"#).unwrap()
    }

    fn secrets(pairs: &[(&str, SecretRef)]) -> BTreeMap<String, SecretRef> {
        pairs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect()
    }

    #[test]
    fn the_family_changes_with_every_setting_and_secret_but_not_otherwise() {
        let token = secrets(&[(
            "TOKEN",
            SecretRef::AwsSecretsManager("arn:aws:secretsmanager:eu-west-1:1:secret:t".into()),
        )]);
        let base = TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:1", &token).unwrap();
        let again = TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:1", &token).unwrap();
        assert_eq!(base.family(), again.family());
        assert!(base.family().starts_with("vergence-"));
        assert_eq!(base.family().len(), "vergence-".len() + 12);

        let mut bigger = runner();
        bigger.memory = 1024;
        let mut role = runner();
        role.task_role_arn = Some("arn:aws:iam::1:role/deployer".into());
        let ssm = secrets(&[("TOKEN", SecretRef::AwsSsmParameter("/deploy/token".into()))]);
        let renamed = secrets(&[(
            "API_TOKEN",
            SecretRef::AwsSecretsManager("arn:aws:secretsmanager:eu-west-1:1:secret:t".into()),
        )]);
        let others = [
            TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:2", &token),
            TaskDefinitionSpec::new(&bigger, "eu-west-1", "deploy:1", &token),
            TaskDefinitionSpec::new(&role, "eu-west-1", "deploy:1", &token),
            TaskDefinitionSpec::new(&runner(), "us-east-1", "deploy:1", &token),
            TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:1", &ssm),
            TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:1", &renamed),
            TaskDefinitionSpec::new(&runner(), "eu-west-1", "deploy:1", &BTreeMap::new()),
        ];
        for other in others {
            assert_ne!(other.unwrap().family(), base.family());
        }
    }

    #[test]
    fn a_secret_ecs_cannot_read_names_the_variable_and_its_source() {
        for (secret, source) in [
            (
                SecretRef::FromEnv("DEPLOY_TOKEN".into()),
                "environment variable DEPLOY_TOKEN",
            ),
            (
                SecretRef::GcpSecretManager("projects/p/secrets/s/versions/1".into()),
                "Secret Manager version projects/p/secrets/s/versions/1",
            ),
            (
                SecretRef::KubernetesSecret {
                    name: "deploy".into(),
                    key: "token".into(),
                },
                "key token of Kubernetes Secret deploy",
            ),
        ] {
            let err = TaskDefinitionSpec::new(
                &runner(),
                "eu-west-1",
                "deploy:1",
                &secrets(&[("TOKEN", secret)]),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("secret variable TOKEN comes from"), "{err}");
            assert!(err.contains(source), "{err}");
        }
    }

    #[test]
    fn the_container_logs_through_awslogs_and_takes_secrets_by_reference() {
        let spec = TaskDefinitionSpec::new(
            &runner(),
            "eu-west-1",
            "deploy:1",
            &secrets(&[("TOKEN", SecretRef::AwsSsmParameter("/deploy/token".into()))]),
        )
        .unwrap();
        let container = spec.container().unwrap();
        assert_eq!(container.name(), Some(CONTAINER));
        assert_eq!(container.essential(), Some(true));
        let log = container.log_configuration().unwrap();
        assert_eq!(log.log_driver(), &LogDriver::Awslogs);
        let options = log.options().unwrap();
        assert_eq!(options["awslogs-group"], "/vergence/jobs");
        assert_eq!(options["awslogs-region"], "eu-west-1");
        assert_eq!(options["awslogs-stream-prefix"], "vergence");
        let secret = &container.secrets()[0];
        assert_eq!(
            (secret.name(), secret.value_from()),
            ("TOKEN", "/deploy/token")
        );
        assert!(container.environment().is_empty());
    }
}
