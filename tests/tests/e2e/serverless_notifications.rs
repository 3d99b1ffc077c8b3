//! Notifications in the serverless shape: the notifier pass the scheduler
//! function makes each minute, over DynamoDB Local (the events, the
//! config in force) and moto's S3 (its cursor), tells a receiver on
//! 127.0.0.1 that prod converged, once across runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use vergence_e2e::{Harness, endpoints, quickstart_copy};
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::ArtifactStore;
use vergence_notify::{ArtifactCursorStore, HttpSender, Notifier, pass_within};

/// Starts a receiver recording each request's delivery id and body.
async fn receiver() -> (String, Arc<Mutex<Vec<(String, serde_json::Value)>>>) {
    let received: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let record = received.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: axum::body::Bytes| {
        let record = record.clone();
        async move {
            let delivery = headers["x-vergence-delivery"].to_str().unwrap().to_owned();
            let body = serde_json::from_slice(&body).unwrap();
            record.lock().unwrap().push((delivery, body));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_pass_sends_prod_convergence_once_with_its_cursor_in_s3() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let mut h = Harness::start(&dynamodb, &sqs).await;
    let dir = quickstart_copy();
    let app = std::fs::read_to_string(dir.path().join("application.yaml")).unwrap();
    std::fs::write(
        dir.path().join("application.yaml"),
        format!(
            "{app}\n  notifications:\n    - name: deploy-hook\n      \
             webhook: {{url: {{fromEnv: HOOK_URL}}, signingSecret: {{fromEnv: HOOK_SECRET}}}}\n      \
             on: [converged]\n"
        ),
    )
    .unwrap();
    h.control()
        .apply_config(vergence_compiler::read_dir(dir.path()).unwrap(), "ci")
        .await
        .unwrap();
    let worker = Worker::new(h.deployment.clone(), WorkerConfig::default());
    h.converge(Duration::from_secs(120), async |h, event| {
        h.deliver(&worker, event).await;
    })
    .await;

    let (url, received) = receiver().await;
    let environment = BTreeMap::from([
        ("HOOK_URL".to_owned(), url),
        ("HOOK_SECRET".to_owned(), "s3cret".to_owned()),
    ]);
    // What the scheduler's main builds, with the environment as a map.
    let notifier = || {
        let environment = environment.clone();
        Notifier::new(
            h.deployment.state(),
            Arc::new(vergence_compiler::YamlCompiler),
            Arc::new(
                HttpSender::reading(Arc::new(move |name| environment.get(name).cloned())).unwrap(),
            ),
            Arc::new(ArtifactCursorStore::new(h.deployment.artifacts.clone())),
            h.deployment.clock.clone(),
        )
        .with_public_url(Some("https://vergence.example.com".into()))
    };
    let report = pass_within(&notifier(), Duration::from_secs(40))
        .await
        .expect("a pass");
    assert_eq!(report.delivered, 3, "prod's three services converged");
    let services: Vec<String> = {
        let received = received.lock().unwrap();
        let mut services: Vec<String> = received
            .iter()
            .map(|(delivery, body)| {
                assert_eq!(body["deliveryId"], delivery.as_str());
                assert_eq!(body["releaseChannel"], "prod");
                body["service"].as_str().unwrap().to_owned()
            })
            .collect();
        services.sort();
        services
    };
    assert_eq!(services, ["api", "migrations", "web"]);

    // The next minute's run, in a new container: the cursor in S3 says
    // all of it was sent.
    let report = pass_within(&notifier(), Duration::from_secs(40))
        .await
        .expect("a pass");
    assert_eq!(report.delivered, 0);
    assert_eq!(received.lock().unwrap().len(), 3);
    let cursor = h
        .deployment
        .artifacts
        .get("notifications/cursor.json")
        .await
        .unwrap();
    assert!(
        cursor.is_some(),
        "the cursor is kept in the artifact bucket"
    );
}
