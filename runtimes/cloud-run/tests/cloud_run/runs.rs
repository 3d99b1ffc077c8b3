//! What a run carries, and dispatching the same job twice.

use std::time::Duration;

use serde_json::Value;
use vergence_fake_cloud_run::{CannedExecutor, FakeCloudRun, TaskOutcome};
use vergence_model::SecretRef;

use crate::*;

fn env_of(container: &Value) -> BTreeMap<String, Value> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e.clone()))
        .collect()
}

#[tokio::test]
async fn a_run_carries_the_args_env_and_timeout_and_secrets_as_secret_refs() {
    let canned = FakeCloudRun::builder().executor(CannedExecutor::new(TaskOutcome::Exited(0)));
    let h = Harness::with(canned, settings()).await;
    let mut deploy = job("apply-1", IMAGE, &["deploy", "--fast", "--to=prod"]);
    Arc::make_mut(&mut deploy.spec)
        .env
        .insert("LOG".into(), "debug".into());
    Arc::make_mut(&mut deploy.spec).secret_env.insert(
        "DB_PASSWORD".into(),
        SecretRef::GcpSecretManager(format!("projects/{PROJECT}/secrets/db/versions/3")),
    );
    Arc::make_mut(&mut deploy.spec).outputs = vec!["plan".into()];
    Arc::make_mut(&mut deploy.spec).timeout = SignedDuration::from_mins(7);

    let dispatched = dispatch(&h.runner, &deploy).await;

    // The Cloud Run job: the program, the settings, the secret by reference.
    let created = h.requests_ending("POST", "/jobs").remove(0).body.unwrap();
    let task = &created["template"]["template"];
    assert_eq!(task["maxRetries"], 0);
    assert_eq!(
        task["serviceAccount"],
        format!("vergence-jobs@{PROJECT}.iam.gserviceaccount.com")
    );
    assert_eq!(created["template"]["taskCount"], 1);
    let container = &task["containers"][0];
    assert_eq!(container["image"], IMAGE);
    assert_eq!(container["command"], serde_json::json!(["deploy"]));
    assert_eq!(container["resources"]["limits"]["memory"], "512Mi");
    let template_env = env_of(container);
    assert_eq!(
        template_env.len(),
        1,
        "only secrets live in the job: {template_env:?}"
    );
    let secret = &template_env["DB_PASSWORD"];
    assert_eq!(secret.get("value"), None, "a secret is never a plain value");
    let key = &secret["valueSource"]["secretKeyRef"];
    assert_eq!(key["secret"], format!("projects/{PROJECT}/secrets/db"));
    assert_eq!(key["version"], "3");

    // The run: arguments, every plain variable, one task, the timeout.
    let run = h.requests_ending("POST", ":run").remove(0).body.unwrap();
    let overrides = &run["overrides"];
    assert_eq!(overrides["taskCount"], 1);
    assert_eq!(overrides["timeout"], "420s");
    let change = &overrides["containerOverrides"][0];
    assert_eq!(change["args"], serde_json::json!(["--fast", "--to=prod"]));
    assert_eq!(change.get("clearArgs"), None);
    let env = env_of(change);
    assert_eq!(env["LOG"]["value"], "debug");
    assert_eq!(env["VERGENCE_JOB_ID"]["value"], "apply-1");
    assert_eq!(env["PVN_SERVICE_VERSION"]["value"], "v7");
    assert!(
        env["VERGENCE_OUTPUT_URLS"]["value"]
            .as_str()
            .unwrap()
            .contains("/objects/")
    );
    assert!(
        !env.contains_key("DB_PASSWORD"),
        "secrets are not overridden"
    );

    // What the task ran, after the overrides.
    assert!(finish(&h.runner, &dispatched).await.exited_with(0));
    let ran = &h.fake.task_runs()[0];
    assert_eq!(ran.command, ["deploy"]);
    assert_eq!(ran.args, ["--fast", "--to=prod"]);
    assert_eq!(ran.timeout, Duration::from_secs(420));
    assert_eq!(ran.env_var("VERGENCE_SERVICE"), Some("web"));

    // A program without arguments clears the template's.
    dispatch(&h.runner, &job("apply-2", IMAGE, &["deploy"])).await;
    let bare = h.requests_ending("POST", ":run").remove(1).body.unwrap();
    assert_eq!(
        bare["overrides"]["containerOverrides"][0]["clearArgs"],
        true
    );
}

#[tokio::test]
async fn a_secret_cloud_run_cannot_read_is_refused_naming_the_variable() {
    let h = Harness::start().await;
    let mut deploy = shell_job("apply-1", "true");
    Arc::make_mut(&mut deploy.spec).secret_env.insert(
        "DB_PASSWORD".into(),
        SecretRef::AwsSecretsManager("arn:aws:secretsmanager:eu-west-1:1:secret:db".into()),
    );

    let error = h.runner.dispatch(&deploy).await.unwrap_err();

    let vergence_model::Error::Runner { runner, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(runner, "cloudRun");
    assert!(message.contains("secret variable DB_PASSWORD"), "{message}");
    assert!(
        message.contains("Cloud Run cannot read AWS Secrets Manager secret"),
        "{message}"
    );
    assert!(h.fake.requests().is_empty(), "nothing was created or run");
}

#[tokio::test]
async fn a_redelivered_dispatch_starts_no_second_execution() {
    let slow = CannedExecutor::new(TaskOutcome::Exited(0)).with_delay(Duration::from_millis(300));
    let h = Harness::with(FakeCloudRun::builder().executor(slow), settings()).await;
    let apply = shell_job("apply-1", "true");

    let first = dispatch(&h.runner, &apply).await;
    let again = dispatch(&h.runner, &apply).await;
    let elsewhere = h.another_runner(settings()).await;
    let from_another_worker = dispatch(&elsewhere, &apply).await;

    assert_eq!(handle_of(&again), handle_of(&first));
    assert_eq!(handle_of(&from_another_worker), handle_of(&first));
    assert_eq!(h.requests_ending("POST", ":run").len(), 1);
    // Another Vergence job on the same Cloud Run job is a run of its own.
    let next = dispatch(&h.runner, &shell_job("apply-2", "true")).await;
    assert_ne!(handle_of(&next), handle_of(&first));
    assert_eq!(h.requests_ending("POST", ":run").len(), 2);
    assert!(finish(&h.runner, &first).await.exited_with(0));
    assert_eq!(h.fake.task_runs().len(), 2);
}

#[tokio::test]
async fn a_dispatched_job_whose_handle_was_never_recorded_is_found_by_its_id() {
    let h = Harness::start().await;
    let apply = shell_job("apply-1", "echo found");
    h.runner.dispatch(&apply).await.unwrap();

    let without_handle = dispatched(&apply, None);
    let result = finish(&h.runner, &without_handle).await;

    assert_eq!(result.stdout, "found\n");
    let never_dispatched = dispatched(&shell_job("apply-2", "true"), None);
    assert_eq!(
        h.runner.poll(&never_dispatched).await.unwrap(),
        JobProgress::Unknown
    );
}
