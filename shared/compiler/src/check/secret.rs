//! Checks the source a service gives a runtime's `secret` parameter:
//! exactly one of `fromEnv`, `awsSecretsManager`, `awsSsmParameter`,
//! `gcpSecretManager` or `kubernetesSecret`, of the right shape, and one
//! the runner that runs the runtime's jobs in that release channel reads.

use super::field_path::FieldPath;
use super::runner_fields::{Arn, check_dns_subdomain};
use super::{Checker, check_env_name};
use crate::config::schema::{KubernetesSecretDoc, SecretValueDoc};
use vergence_model::{RunnerKind, RunnerSpec, RuntimeName, SecretRef, Source};

/// Each secret source's key in config, and the runner that reads it
/// ([`SecretRef::read_by`]).
const SOURCES: [(&str, RunnerKind); 5] = [
    ("fromEnv", RunnerKind::Local),
    ("awsSecretsManager", RunnerKind::Ecs),
    ("awsSsmParameter", RunnerKind::Ecs),
    ("gcpSecretManager", RunnerKind::CloudRun),
    ("kubernetesSecret", RunnerKind::Kubernetes),
];

/// The runtime a secret is for, and the runner its jobs run on in the
/// release channel being checked.
pub(super) struct SecretReader<'r> {
    pub(super) runtime: &'r RuntimeName,
    pub(super) runner: &'r RunnerSpec,
}

impl Checker<'_> {
    /// The secret a service gives at `path` (a value's `secret`); `None`
    /// when it has no single valid source or one the runner cannot read.
    pub(super) fn secret_source(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &SecretValueDoc,
        reader: &SecretReader<'_>,
    ) -> Option<SecretRef> {
        let given = given_sources(doc);
        let (key, parsed) = match given.as_slice() {
            [(key, parsed)] => (*key, parsed.clone()),
            [] => {
                self.err(
                    source,
                    path,
                    "give the secret a source: one of fromEnv: VARIABLE, awsSecretsManager: ARN, \
                     awsSsmParameter: NAME, gcpSecretManager: projects/P/secrets/S/versions/V, \
                     kubernetesSecret: {name, key}",
                );
                return None;
            }
            several => {
                let keys: Vec<&str> = several.iter().map(|(key, _)| *key).collect();
                let message = format!(
                    "a secret has exactly one source; found {}: keep one",
                    keys.join(" and ")
                );
                self.err(source, path, message);
                return None;
            }
        };
        let source_path = path.key(key);
        let secret = match parsed {
            Ok(secret) => secret,
            Err((field, e)) => {
                let path = field.map_or(source_path.clone(), |f| source_path.key(f));
                self.err(source, &path, e);
                return None;
            }
        };
        let runner = reader.runner.kind();
        if secret.read_by() != runner {
            self.err(
                source,
                &source_path,
                unreadable(key, reader.runtime, runner),
            );
            return None;
        }
        Some(secret)
    }
}

/// A secret source that could not be read: the field under the source's
/// key it is about (`name` of a kubernetesSecret), and why.
pub(super) type SourceError = (Option<&'static str>, String);

/// Each source the value gives, by key, read into a [`SecretRef`].
pub(super) fn given_sources(
    doc: &SecretValueDoc,
) -> Vec<(&'static str, Result<SecretRef, SourceError>)> {
    let whole = |e: String| (None, e);
    let text = |value: &Option<String>, read: fn(&str) -> Result<SecretRef, String>| {
        value.as_deref().map(|raw| read(raw).map_err(whole))
    };
    [
        ("fromEnv", text(&doc.from_env, from_env)),
        (
            "awsSecretsManager",
            text(&doc.aws_secrets_manager, aws_secrets_manager),
        ),
        (
            "awsSsmParameter",
            text(&doc.aws_ssm_parameter, aws_ssm_parameter),
        ),
        (
            "gcpSecretManager",
            text(&doc.gcp_secret_manager, gcp_secret_manager),
        ),
        (
            "kubernetesSecret",
            doc.kubernetes_secret.as_ref().map(kubernetes_secret),
        ),
    ]
    .into_iter()
    .filter_map(|(key, parsed)| parsed.map(|p| (key, p)))
    .collect()
}

fn from_env(raw: &str) -> Result<SecretRef, String> {
    check_env_name(raw).map(|()| SecretRef::FromEnv(raw.to_owned()))
}

/// A Secrets Manager secret's full ARN (ECS needs the ARN, not the name),
/// optionally with ECS's `:json-key:version-stage:version-id` after it.
fn aws_secrets_manager(raw: &str) -> Result<SecretRef, String> {
    let valid = Arn::parse(raw).is_some_and(|arn| {
        !arn.region.is_empty() && arn.resource_name("secretsmanager", "secret:").is_some()
    });
    if valid {
        Ok(SecretRef::AwsSecretsManager(raw.to_owned()))
    } else {
        Err(format!(
            "{raw:?} is not a Secrets Manager secret ARN: write arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME"
        ))
    }
}

/// An SSM parameter's ARN, or its name (`/path/to/name`) when it is in the
/// task's region.
fn aws_ssm_parameter(raw: &str) -> Result<SecretRef, String> {
    let valid = if raw.starts_with("arn:") {
        Arn::parse(raw).is_some_and(|arn| {
            !arn.region.is_empty() && arn.resource_name("ssm", "parameter/").is_some()
        })
    } else {
        (1..=2048).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-/".contains(&b))
    };
    if valid {
        Ok(SecretRef::AwsSsmParameter(raw.to_owned()))
    } else {
        Err(format!(
            "{raw:?} is not an SSM parameter: write its name (/path/to/name: letters, digits and _ . - /) or its ARN, arn:aws:ssm:REGION:ACCOUNT:parameter/NAME"
        ))
    }
}

/// `projects/P/secrets/S/versions/V`, V a number or `latest`.
fn gcp_secret_manager(raw: &str) -> Result<SecretRef, String> {
    let parts: Vec<&str> = raw.split('/').collect();
    let valid = match parts.as_slice() {
        ["projects", project, "secrets", secret, "versions", version] => {
            !project.is_empty()
                && (1..=255).contains(&secret.len())
                && secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                && (*version == "latest"
                    || (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit())))
        }
        _ => false,
    };
    if valid {
        Ok(SecretRef::GcpSecretManager(raw.to_owned()))
    } else {
        Err(format!(
            "{raw:?} is not a Secret Manager version: write projects/PROJECT/secrets/NAME/versions/VERSION (a number, or latest)"
        ))
    }
}

/// `{name, key}`: a Secret in the Job's namespace and one of its keys.
fn kubernetes_secret(doc: &KubernetesSecretDoc) -> Result<SecretRef, SourceError> {
    let name = doc.name.as_deref().ok_or((
        Some("name"),
        "kubernetesSecret needs name: the Secret, in the namespace the Job runs in".to_owned(),
    ))?;
    check_dns_subdomain("name", name).map_err(|e| (Some("name"), e))?;
    let key = doc.key.as_deref().ok_or((
        Some("key"),
        "kubernetesSecret needs key: the key of the Secret's data that holds the value".to_owned(),
    ))?;
    let valid_key = (1..=253).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !valid_key {
        return Err((
            Some("key"),
            format!("key {key:?} is not a key of a Secret: letters, digits, '-', '_' and '.'"),
        ));
    }
    Ok(SecretRef::KubernetesSecret {
        name: name.to_owned(),
        key: key.to_owned(),
    })
}

/// Why a runtime's runner cannot read a secret from the source `key`, and
/// which sources it reads.
fn unreadable(key: &str, runtime: &RuntimeName, runner: RunnerKind) -> String {
    let accepted: Vec<&str> = SOURCES
        .iter()
        .filter(|(_, reader)| *reader == runner)
        .map(|(key, _)| *key)
        .collect();
    let why = match SOURCES.iter().find(|(k, _)| *k == key) {
        Some((_, RunnerKind::Local)) => format!(
            "{key} is the environment of the local runner, and passing it on would put the secret \
             in the job's plain environment"
        ),
        Some((_, reader)) => format!("the {reader} runner does"),
        None => "no runner does".to_owned(),
    };
    if accepted.is_empty() {
        // The lambda runner: a function is handed no secret by reference.
        return format!(
            "runtime {runtime} runs its jobs on the {runner} runner, which reads no secret sources ({why}); \
             give the secret to the function itself (its environment, or have the command read the secret store), \
             and drop this parameter"
        );
    }
    format!(
        "runtime {runtime} runs its jobs on the {runner} runner, which does not read {key} secrets ({why}); \
         give a source the {runner} runner reads: {}",
        accepted.join(" or ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_is_read_by_the_runner_the_model_says() {
        let doc = |set: fn(&mut SecretValueDoc)| {
            let mut doc = SecretValueDoc::default();
            set(&mut doc);
            doc
        };
        let docs = [
            doc(|d| d.from_env = Some("TOKEN".into())),
            doc(|d| {
                d.aws_secrets_manager =
                    Some("arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf".into())
            }),
            doc(|d| d.aws_ssm_parameter = Some("/prod/db/password".into())),
            doc(|d| d.gcp_secret_manager = Some("projects/p/secrets/db/versions/latest".into())),
            doc(|d| {
                d.kubernetes_secret = Some(KubernetesSecretDoc {
                    name: Some("db".into()),
                    key: Some("password".into()),
                })
            }),
        ];
        for (doc, (key, reader)) in docs.iter().zip(SOURCES) {
            let given = given_sources(doc);
            let [(given_key, Ok(secret))] = given.as_slice() else {
                panic!("{key}: {given:?}");
            };
            assert_eq!((*given_key, secret.read_by()), (key, reader));
        }
    }

    #[test]
    fn sources_have_their_shapes() {
        assert!(aws_secrets_manager("db-password").is_err());
        let with_key = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db-AbCdEf:password::";
        assert!(aws_secrets_manager(with_key).is_ok());
        assert!(aws_ssm_parameter("arn:aws:ssm:eu-west-1:123456789012:parameter/db/pw").is_ok());
        assert!(aws_ssm_parameter("db password").is_err());
        assert!(gcp_secret_manager("projects/p/secrets/db/versions/3").is_ok());
        assert!(gcp_secret_manager("projects/p/secrets/db").is_err());
        assert!(gcp_secret_manager("projects/p/secrets/db/versions/newest").is_err());
        let missing_key = KubernetesSecretDoc {
            name: Some("db".into()),
            key: None,
        };
        assert_eq!(kubernetes_secret(&missing_key).unwrap_err().0, Some("key"));
    }
}
