//! Smoke test of the real `worker` and `api` binaries as Lambda runs them:
//! each process behind a Lambda runtime API ([`vergence_e2e::lambda`]),
//! invoked with the event files in functions/events, against DynamoDB
//! Local and moto.

use aws_sdk_sqs::Client as SqsClient;
use serde_json::Value;
use vergence_aws::DynamoStore;
use vergence_aws::testing::{dynamodb_client, endpoint, fresh_bucket, sdk_config, unique_name};
use vergence_e2e::event_file;
use vergence_e2e::lambda::{FunctionSpec, LambdaFunction};
use vergence_testkit::workspace_binary;

/// The event in functions/events/`name`.
fn event(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(event_file(name)).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_api_binaries_answer_their_events_under_a_lambda_runtime_api() {
    let (Some(dynamodb), Some(sqs)) = (
        endpoint("VERGENCE_TEST_DYNAMODB_URL"),
        endpoint("VERGENCE_TEST_SQS_URL"),
    ) else {
        return;
    };
    let client = dynamodb_client(&dynamodb).await;
    let table = unique_name("vergence-smoke");
    DynamoStore::create_table(&client, &table).await.unwrap();
    let queue = SqsClient::new(&sdk_config(&sqs).await)
        .create_queue()
        .queue_name(unique_name("vergence-smoke"))
        .send()
        .await
        .unwrap();
    let queue_url = queue.queue_url().unwrap().to_owned();
    let (_, bucket) = fresh_bucket(&sqs).await;

    let spec = |name: &str| {
        FunctionSpec::new(name, &workspace_binary(name))
            .env("VERGENCE_TABLE", &table)
            .env("VERGENCE_QUEUE_URL", &queue_url)
            .env("VERGENCE_ARTIFACT_BUCKET", &bucket)
            .env("VERGENCE_S3_PATH_STYLE", "true")
            .env("AWS_ENDPOINT_URL_DYNAMODB", &dynamodb)
            .env("AWS_ENDPOINT_URL_SQS", &sqs)
            .env("AWS_ENDPOINT_URL_S3", &sqs)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
    };
    let worker = LambdaFunction::start(spec("worker")).await;
    let api = LambdaFunction::start(spec("api")).await;

    let response = worker.invoke(&event("sqs.json")).await.json();
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([]),
        "a message for an instance that does not exist is consumed: {response}"
    );

    let response = api.invoke(&event("api-healthz.json")).await.json();
    assert_eq!(response["statusCode"], 200, "{response}");

    // The status page comes from the same router as under `vergence serve`.
    let page = api.invoke(&event("api-status-page.json")).await.json();
    assert_eq!(page["statusCode"], 200, "{page}");
    let content_type = page["headers"]["content-type"].as_str().unwrap_or_default();
    assert!(content_type.starts_with("text/html"), "{page}");
    assert!(
        page["headers"]["content-security-policy"].is_string(),
        "{page}"
    );

    let status = api
        .invoke(&event("api-status-unauthenticated.json"))
        .await
        .json();
    assert_eq!(status["statusCode"], 401, "no token, no status: {status}");
}
