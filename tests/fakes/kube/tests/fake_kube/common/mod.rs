//! Helpers shared by the fake's tests: typed objects from JSON, waiting
//! with a deadline, and the Status of a failed call.

#![allow(dead_code)] // each test binary uses a different subset
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A typed object from JSON.
pub fn typed<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// A Job running `command` once, never retried.
pub fn job(name: &str, command: &[&str]) -> Job {
    typed(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "run", "image": "busybox:1.36", "command": command}]
        }}}
    }))
}

/// Fails the test if `future` takes longer than `seconds`.
pub async fn within<F: Future>(seconds: u64, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .unwrap_or_else(|_| panic!("still waiting after {seconds}s"))
}

/// Polls `probe` every 20 ms until it answers `Some`, for up to 10 s.
pub async fn eventually<T, F, Fut>(mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(10, async {
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The Status of a call that must have failed with an API error.
pub fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}
