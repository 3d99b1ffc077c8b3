//! What an idle `vergence-agent` costs the serverless API, counted at the
//! wire (docs/cost.md): one poll answered at once, and a poll the API holds
//! (an agent of an earlier version asks for 20 s), whose extra cost is a
//! look for work every second on top of the function's duration.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::instrument::WithSubscriber;
use vergence_e2e::{Harness, endpoints};

/// Counts the bytes written to it.
#[derive(Clone, Default)]
struct Bytes(Arc<Mutex<usize>>);

impl std::io::Write for Bytes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.0.lock().unwrap() += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One poll through the api function's router, as the function serves it
/// and logs it (`json_logs` at its default level). Returns the tasks
/// handed out, the wall time and the bytes logged.
async fn poll(
    api: &axum::Router,
    token: &str,
    wait_seconds: u64,
) -> (Vec<serde_json::Value>, Duration, usize) {
    use tower::ServiceExt;
    let body = serde_json::json!({
        "version": "0.0.0-test",
        "namespace": "default",
        "waitSeconds": wait_seconds,
    });
    let request = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/agents/prod-eu/poll")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let logged = Bytes::default();
    let writer = logged.clone();
    let logs = vergence_lambda::json_logs(move || writer.clone(), "info").finish();
    let started = Instant::now();
    let response = api
        .clone()
        .oneshot(request)
        .with_subscriber(logs)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let took = started.elapsed();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(status, 200, "{answer}");
    let tasks = answer["tasks"].as_array().unwrap().clone();
    let logged = *logged.0.lock().unwrap();
    (tasks, took, logged)
}

/// An idle agent's poll, answered at once, reads its token and its
/// (empty) work, and writes nothing: the api container remembers the
/// agent's record, written again only once it is 30 s old. A container
/// that has not seen the agent reads the record once. A held poll looks
/// for work once more every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agents_poll_reads_two_items_and_writes_none() {
    let Some((dynamodb, sqs)) = endpoints() else {
        return;
    };
    let counter = vergence_e2e::wire::RequestCounter::default();
    let h = Harness::start_with(&dynamodb, &sqs, None, Some(counter.clone())).await;
    let api = vergence_lambda::api_router(&h.deployment);
    let (_, token) = vergence_api::create_token(
        h.deployment.store.as_ref(),
        &vergence_model::TokenSubject::Agent("prod-eu".parse().unwrap()),
        &[],
        None,
        "test",
        &vergence_model::ports::SystemClock,
    )
    .await
    .unwrap();
    // The first poll records the agent.
    let (tasks, _, _) = poll(&api, &token, 0).await;
    assert!(tasks.is_empty());
    // Another container (a router of its own) reads the record once, and
    // does not write it: it is fresh.
    let other = vergence_lambda::api_router(&h.deployment);
    counter.reset();
    let (tasks, _, _) = poll(&other, &token, 0).await;
    assert!(tasks.is_empty());
    let first_in_other = counter.snapshot();
    assert_eq!(
        first_in_other.get("DynamoDB.GetItem"),
        Some(&2),
        "the token and the agent's record: {first_in_other:?}"
    );
    assert_eq!(counter.capacity().write, 0.0, "{first_in_other:?}");

    counter.reset();
    let (tasks, took, log_bytes) = poll(&api, &token, 0).await;
    assert!(tasks.is_empty());
    let idle = counter.snapshot();
    let capacity = counter.capacity();
    let ops: Vec<String> = idle.iter().map(|(op, n)| format!("{op}={n}")).collect();
    println!(
        "BENCH cost_agent_poll rru={} wru={} ms={:.3} log_bytes={log_bytes} {}",
        capacity.read,
        capacity.write,
        took.as_secs_f64() * 1e3,
        ops.join(" ")
    );

    counter.reset();
    let (tasks, took, log_bytes) = poll(&api, &token, 2).await;
    assert!(tasks.is_empty());
    let held = counter.snapshot();
    let held_capacity = counter.capacity();
    println!(
        "BENCH cost_agent_held_poll wait_seconds=2 looks={} rru={} wru={} ms={:.3} log_bytes={log_bytes}",
        held.get("DynamoDB.Query").copied().unwrap_or(0),
        held_capacity.read,
        held_capacity.write,
        took.as_secs_f64() * 1e3,
    );

    let expected: std::collections::BTreeMap<String, usize> = [
        // The token.
        ("DynamoDB.GetItem".to_owned(), 1),
        // Its work: none.
        ("DynamoDB.Query".to_owned(), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(idle, expected, "an idle poll writes nothing");
    assert_eq!(capacity.write, 0.0);
    // Looks at 0, 1 and 2 s.
    assert_eq!(held.get("DynamoDB.Query"), Some(&3), "{held:?}");
}
