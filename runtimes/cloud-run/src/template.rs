//! The Cloud Run job a Vergence job runs as. Running a Cloud Run job can
//! override only its container's `args` and `env` (and the task count and
//! timeout), so everything else a job needs is the Cloud Run job's own
//! template: the image, the program (the container's `command`), the
//! service account, CPU and memory, and the secret variables, which Cloud
//! Run reads from Secret Manager itself (`valueSource.secretKeyRef`; a
//! secret is never a plain variable). Jobs that share all of that share a
//! Cloud Run job, named after a hash of it: `vg-<12 hex>`.

use std::collections::BTreeMap;

use google_cloud_run_v2::model::{
    Container, EnvVar, EnvVarSource, ExecutionTemplate, Job, ResourceRequirements,
    SecretKeySelector, TaskTemplate,
};
use vergence_model::hashing::hash_fields;
use vergence_model::{CloudRunRunnerSpec, SecretRef};

use crate::error::CloudRunError;

/// The name of the one container, which run overrides address.
pub(crate) const CONTAINER: &str = "job";

/// The label on every Cloud Run job (and, through its execution template,
/// every execution) Vergence makes, so they can be found in the console.
pub(crate) const MANAGED_BY: (&str, &str) = ("managed-by", "vergence");

/// Hex digits of the content hash in a Cloud Run job's name.
const NAME_HASH_LEN: usize = 12;

/// What a Cloud Run job is made of: everything a run cannot override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JobTemplate {
    pub(crate) image: String,
    /// The container's `command`: the job's program, or nothing for the
    /// image's own entrypoint.
    pub(crate) command: Vec<String>,
    pub(crate) service_account: Option<String>,
    pub(crate) cpu: Option<String>,
    pub(crate) memory: Option<String>,
    /// Secret variables by name.
    pub(crate) secrets: BTreeMap<String, SecretVersion>,
}

/// A Secret Manager secret version, as Cloud Run's `secretKeyRef` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SecretVersion {
    /// `projects/P/secrets/S` (a full name works in any project).
    pub(crate) secret: String,
    /// A version number, an alias, or `latest`.
    pub(crate) version: String,
}

impl JobTemplate {
    /// The template for running `command` in `image` with `secrets` on a
    /// runner with these settings (a launch's parts, or a job spec's).
    /// Fails naming the variable when a secret comes from a store Cloud
    /// Run cannot read.
    pub(crate) fn of(
        image: &str,
        command: &[String],
        secrets: &BTreeMap<String, SecretRef>,
        spec: &CloudRunRunnerSpec,
    ) -> Result<Self, CloudRunError> {
        let secrets = secrets
            .iter()
            .map(|(name, source)| Ok((name.clone(), SecretVersion::of(name, source)?)))
            .collect::<Result<_, CloudRunError>>()?;
        Ok(Self {
            image: image.to_owned(),
            command: command.first().cloned().into_iter().collect(),
            service_account: spec.service_account.clone(),
            cpu: spec.cpu.clone(),
            memory: spec.memory.clone(),
            secrets,
        })
    }

    /// The Cloud Run job's id: `vg-` and the start of a hash of the template.
    pub(crate) fn id(&self) -> String {
        let optional = |value: &Option<String>| match value {
            None => "-".to_owned(),
            Some(value) => format!("+{value}"),
        };
        let mut fields = vec![
            "vergence-cloud-run-job/1".to_owned(),
            self.image.clone(),
            self.command.len().to_string(),
        ];
        fields.extend(self.command.iter().cloned());
        fields.extend([
            optional(&self.service_account),
            optional(&self.cpu),
            optional(&self.memory),
        ]);
        for (name, secret) in &self.secrets {
            fields.extend([name.clone(), secret.secret.clone(), secret.version.clone()]);
        }
        let hash = hash_fields(fields.iter().map(|f| f.as_bytes()));
        format!("vg-{}", &hash[..NAME_HASH_LEN])
    }

    /// The Cloud Run job to create: one task, no retries (Vergence retries
    /// under its own policy), the timeout left to each run.
    pub(crate) fn to_job(&self) -> Job {
        let env = self.secrets.iter().map(|(name, secret)| {
            EnvVar::new().set_name(name).set_value_source(
                EnvVarSource::new().set_secret_key_ref(
                    SecretKeySelector::new()
                        .set_secret(&secret.secret)
                        .set_version(&secret.version),
                ),
            )
        });
        let mut container = Container::new()
            .set_name(CONTAINER)
            .set_image(&self.image)
            .set_command(self.command.clone())
            .set_env(env);
        let limits = self.limits();
        if !limits.is_empty() {
            container = container.set_resources(ResourceRequirements::new().set_limits(limits));
        }
        let mut task = TaskTemplate::new()
            .set_containers([container])
            .set_max_retries(0);
        if let Some(account) = &self.service_account {
            task = task.set_service_account(account);
        }
        Job::new().set_labels([MANAGED_BY]).set_template(
            ExecutionTemplate::new()
                .set_labels([MANAGED_BY])
                .set_task_count(1)
                .set_template(task),
        )
    }

    /// Whether an existing Cloud Run job runs what this template says. Only
    /// what Vergence sets is compared: fields the platform fills in (a
    /// default service account or limits, a default timeout) are not drift.
    pub(crate) fn matches(&self, job: &Job) -> bool {
        let Some(execution) = &job.template else {
            return false;
        };
        let Some(task) = &execution.template else {
            return false;
        };
        let [container] = task.containers.as_slice() else {
            return false;
        };
        let limits = container
            .resources
            .as_ref()
            .map(|r| &r.limits)
            .cloned()
            .unwrap_or_default();
        let limits_match = self.limits().iter().all(|(key, want)| {
            limits
                .get(*key)
                .is_some_and(|have| same_quantity(key, have, want))
        });
        let account_matches = self
            .service_account
            .as_ref()
            .is_none_or(|account| task.service_account == *account);
        execution.task_count == 1
            && task.max_retries() == Some(&0)
            && container.image == self.image
            && container.command == self.command
            && container.args.is_empty()
            && self.env_matches(&container.env)
            && limits_match
            && account_matches
    }

    /// The container's variables are exactly the secret ones: a plain
    /// variable added by hand would reach every run.
    fn env_matches(&self, env: &[EnvVar]) -> bool {
        let mut have = BTreeMap::new();
        for var in env {
            let Some(key) = var
                .value_source()
                .and_then(|source| source.secret_key_ref.as_ref())
            else {
                return false;
            };
            let version = SecretVersion {
                secret: key.secret.clone(),
                version: key.version.clone(),
            };
            have.insert(var.name.clone(), version);
        }
        have == self.secrets
    }

    fn limits(&self) -> Vec<(&'static str, String)> {
        [("cpu", &self.cpu), ("memory", &self.memory)]
            .into_iter()
            .filter_map(|(key, value)| Some((key, value.clone()?)))
            .collect()
    }
}

/// Whether two quantities are the same: CPU may come back in millicores
/// (`"1"` and `"1000m"` are one CPU); memory is compared as written.
fn same_quantity(key: &str, have: &str, want: &str) -> bool {
    if key != "cpu" {
        return have == want;
    }
    let millicores = |text: &str| match text.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok(),
        None => text.parse::<f64>().ok().map(|cpus| cpus * 1000.0),
    };
    match (millicores(have), millicores(want)) {
        (Some(a), Some(b)) => (a - b).abs() < 0.5,
        _ => have == want,
    }
}

impl SecretVersion {
    /// The version `source` names, for the variable `variable`.
    fn of(variable: &str, source: &SecretRef) -> Result<Self, CloudRunError> {
        let unreadable = |reason: String| CloudRunError::Secret {
            variable: variable.to_owned(),
            reason,
        };
        let SecretRef::GcpSecretManager(name) = source else {
            return Err(unreadable(format!(
                "Cloud Run cannot read {}; give a Secret Manager version (projects/PROJECT/secrets/SECRET/versions/VERSION)",
                source.describe()
            )));
        };
        let parts: Vec<&str> = name.split('/').collect();
        match parts.as_slice() {
            ["projects", project, "secrets", secret, rest @ ..]
                if !project.is_empty() && !secret.is_empty() =>
            {
                let version = match rest {
                    [] => "latest",
                    ["versions", version] if !version.is_empty() => version,
                    _ => return Err(unreadable(malformed(name))),
                };
                Ok(Self {
                    secret: format!("projects/{project}/secrets/{secret}"),
                    version: version.to_owned(),
                })
            }
            _ => Err(unreadable(malformed(name))),
        }
    }
}

fn malformed(name: &str) -> String {
    format!(
        "'{name}' is not a Secret Manager version; write projects/PROJECT/secrets/SECRET/versions/VERSION"
    )
}

#[cfg(test)]
mod tests;
