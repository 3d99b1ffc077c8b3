//! Smoke test of the real `worker` and `api` binaries under
//! `cargo lambda watch` (the Lambda runtime API emulator), invoked with the
//! event files in functions/events, against DynamoDB Local and moto.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vergence_aws::DynamoStore;
use vergence_aws::testing::{dynamodb_client, endpoint, fresh_bucket, sdk_config, unique_name};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `cargo lambda`, if installed; required when services are required.
fn cargo_lambda_available() -> bool {
    let ok = Command::new("cargo")
        .args(["lambda", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && std::env::var("VERGENCE_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("cargo-lambda is not installed: run scripts/test.sh, which installs it");
    }
    if !ok {
        println!("skipped: cargo-lambda is not installed");
    }
    ok
}

struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Invokes `function` with `event`, retrying while `cargo lambda watch`
/// is still compiling it.
fn invoke(port: u16, function: &str, event: &str) -> String {
    let start = Instant::now();
    loop {
        let output = Command::new("cargo")
            .current_dir(workspace())
            .args(["lambda", "invoke", function, "-A", "127.0.0.1", "-P"])
            .arg(port.to_string())
            .arg("--data-file")
            .arg(workspace().join("functions/events").join(event))
            .output()
            .unwrap();
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).into_owned();
        }
        // The first invoke waits for `cargo lambda watch` to compile the
        // function cold with its own flags (the AWS, Google and runner
        // crates): over 8 minutes on a 2-core machine.
        assert!(
            start.elapsed() < Duration::from_secs(1500),
            "invoking {function} kept failing: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
fn worker_and_api_binaries_answer_their_events_under_cargo_lambda_watch() {
    let (Some(dynamodb), Some(sqs)) = (
        endpoint("VERGENCE_TEST_DYNAMODB_URL"),
        endpoint("VERGENCE_TEST_SQS_URL"),
    ) else {
        return;
    };
    if !cargo_lambda_available() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (table, queue_url, bucket) = runtime.block_on(async {
        let client = dynamodb_client(&dynamodb).await;
        let table = unique_name("vergence-smoke");
        DynamoStore::create_table(&client, &table).await.unwrap();
        let sqs_client = aws_sdk_sqs::Client::new(&sdk_config(&sqs).await);
        let queue = sqs_client
            .create_queue()
            .queue_name(unique_name("vergence-smoke"))
            .send()
            .await
            .unwrap();
        let (_, bucket) = fresh_bucket(&sqs).await;
        (table, queue.queue_url().unwrap().to_owned(), bucket)
    });

    let port = free_port();
    let env = [
        format!("VERGENCE_TABLE={table}"),
        format!("VERGENCE_QUEUE_URL={queue_url}"),
        format!("VERGENCE_ARTIFACT_BUCKET={bucket}"),
        "VERGENCE_S3_PATH_STYLE=true".to_owned(),
        format!("AWS_ENDPOINT_URL_DYNAMODB={dynamodb}"),
        format!("AWS_ENDPOINT_URL_SQS={sqs}"),
        format!("AWS_ENDPOINT_URL_S3={sqs}"),
        "AWS_ACCESS_KEY_ID=testing".to_owned(),
        "AWS_SECRET_ACCESS_KEY=testing".to_owned(),
        "AWS_REGION=us-east-1".to_owned(),
    ];
    let mut watch = Command::new("cargo");
    watch
        .current_dir(workspace())
        .args(["lambda", "watch", "-A", "127.0.0.1", "-P"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for var in &env {
        watch.args(["--env-var", var]);
    }
    let _watch = Watch(watch.spawn().unwrap());

    let worker = invoke(port, "worker", "sqs.json");
    let response: serde_json::Value = serde_json::from_str(&worker).unwrap();
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([]),
        "a message for an instance that does not exist is consumed: {worker}"
    );

    let healthz = invoke(port, "api", "api-healthz.json");
    let response: serde_json::Value = serde_json::from_str(&healthz).unwrap();
    assert_eq!(response["statusCode"], 200, "{healthz}");

    // The status page comes from the same router as under `vergence serve`.
    let page = invoke(port, "api", "api-status-page.json");
    let response: serde_json::Value = serde_json::from_str(&page).unwrap();
    assert_eq!(response["statusCode"], 200, "{page}");
    let content_type = response["headers"]["content-type"]
        .as_str()
        .unwrap_or_default();
    assert!(content_type.starts_with("text/html"), "{page}");
    assert!(
        response["headers"]["content-security-policy"].is_string(),
        "{page}"
    );

    let status = invoke(port, "api", "api-status-unauthenticated.json");
    let response: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(response["statusCode"], 401, "no token, no status: {status}");
}
