//! The Cloud Run job a launch needs: its name, its secrets, and what counts
//! as the same job.

#![allow(clippy::unwrap_used)]

use google_cloud_run_v2::model::{EnvVar, ResourceRequirements};

use super::*;

fn spec() -> CloudRunRunnerSpec {
    CloudRunRunnerSpec {
        project: "p".into(),
        region: "europe-west1".into(),
        service_account: Some("jobs@p.iam.gserviceaccount.com".into()),
        cpu: Some("1".into()),
        memory: Some("512Mi".into()),
    }
}

fn template_with(
    image: &str,
    command: &[&str],
    secrets: &[(&str, SecretRef)],
    spec: &CloudRunRunnerSpec,
) -> Result<JobTemplate, CloudRunError> {
    let command: Vec<String> = command.iter().map(|s| (*s).to_owned()).collect();
    let secrets = secrets
        .iter()
        .map(|(name, source)| ((*name).to_owned(), source.clone()))
        .collect();
    JobTemplate::of(image, &command, &secrets, spec)
}

fn template(image: &str, command: &[&str]) -> JobTemplate {
    template_with(image, command, &[], &spec()).unwrap()
}

fn gcp(name: &str) -> SecretRef {
    SecretRef::GcpSecretManager(name.into())
}

#[test]
fn the_name_hashes_what_a_run_cannot_override_and_not_the_arguments() {
    let deploy = template("registry/deploy:1", &["deploy", "--fast"]);
    let id = deploy.id();
    assert!(id.starts_with("vg-") && id.len() == 15, "{id}");
    assert!(
        id[3..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(
        id,
        template("registry/deploy:1", &["deploy", "--slow"]).id()
    );
    assert_ne!(id, template("registry/deploy:2", &["deploy"]).id());
    assert_ne!(id, template("registry/deploy:1", &["check"]).id());
    assert_ne!(id, template("registry/deploy:1", &[]).id());
    let mut bigger = spec();
    bigger.memory = Some("1Gi".into());
    assert_ne!(
        id,
        template_with("registry/deploy:1", &["deploy"], &[], &bigger)
            .unwrap()
            .id()
    );
    let mut default_account = spec();
    default_account.service_account = None;
    let other = template_with("registry/deploy:1", &["deploy"], &[], &default_account).unwrap();
    assert_ne!(id, other.id());
    let with_secret = template_with(
        "registry/deploy:1",
        &["deploy"],
        &[("TOKEN", gcp("projects/p/secrets/token/versions/3"))],
        &spec(),
    )
    .unwrap();
    assert_ne!(id, with_secret.id());
}

#[test]
fn secrets_name_secret_manager_versions_and_other_stores_are_refused_by_variable() {
    let t = template_with(
        "i",
        &["run"],
        &[
            ("TOKEN", gcp("projects/p/secrets/token/versions/3")),
            ("KEY", gcp("projects/other/secrets/key")),
        ],
        &spec(),
    )
    .unwrap();
    assert_eq!(
        t.secrets["TOKEN"],
        SecretVersion {
            secret: "projects/p/secrets/token".into(),
            version: "3".into()
        }
    );
    assert_eq!(t.secrets["KEY"].version, "latest");

    let aws = SecretRef::AwsSecretsManager("arn:aws:secretsmanager:eu-west-1:1:secret:db".into());
    let err = template_with("i", &["run"], &[("DB_PASSWORD", aws)], &spec()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("secret variable DB_PASSWORD:"),
        "{message}"
    );
    assert!(
        message.contains("Cloud Run cannot read AWS Secrets Manager secret"),
        "{message}"
    );

    let odd = template_with("i", &["run"], &[("X", gcp("token/3"))], &spec()).unwrap_err();
    assert!(
        odd.to_string()
            .contains("'token/3' is not a Secret Manager version"),
        "{odd}"
    );
}

#[test]
fn the_job_runs_the_program_once_with_secrets_as_references() {
    let t = template_with(
        "registry/deploy:1",
        &["deploy", "--fast"],
        &[("TOKEN", gcp("projects/p/secrets/token/versions/3"))],
        &spec(),
    )
    .unwrap();
    let job = t.to_job();
    let execution = job.template.as_ref().unwrap();
    assert_eq!(execution.task_count, 1);
    let task = execution.template.as_ref().unwrap();
    assert_eq!(task.max_retries(), Some(&0));
    assert_eq!(task.service_account, "jobs@p.iam.gserviceaccount.com");
    let container = &task.containers[0];
    assert_eq!(container.command, ["deploy"]);
    assert!(container.args.is_empty());
    assert_eq!(container.env.len(), 1);
    assert!(
        container.env[0].value().is_none(),
        "a secret is never a plain value"
    );
    let key = container.env[0]
        .value_source()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (key.secret.as_str(), key.version.as_str()),
        ("projects/p/secrets/token", "3")
    );
    assert!(t.matches(&job));
}

#[test]
fn a_job_changed_by_hand_no_longer_matches_but_platform_defaults_do() {
    let t = template("registry/deploy:1", &["deploy"]);
    let edit = |change: &dyn Fn(&mut Container)| {
        let mut job = t.to_job();
        let task = job.template.as_mut().unwrap().template.as_mut().unwrap();
        change(&mut task.containers[0]);
        job
    };
    assert!(!t.matches(&edit(&|c| c.image = "registry/deploy:evil".into())));
    assert!(!t.matches(&edit(&|c| {
        c.env.push(EnvVar::new().set_name("DEBUG").set_value("1"))
    })));
    assert!(!t.matches(&edit(&|c| c.args = vec!["--force".into()])));
    // The platform writes one CPU as millicores; that is the same job.
    let normalised = edit(&|c| {
        c.resources =
            Some(ResourceRequirements::new().set_limits([("cpu", "1000m"), ("memory", "512Mi")]));
    });
    assert!(t.matches(&normalised));
}
