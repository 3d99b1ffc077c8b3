//! The worker's bound on `runner: local` jobs, through its handler: a job
//! whose own timeout is longer than the worker function can give it runs
//! for what it can, and is recorded as stopped there, saying why.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use vergence_aws::WorkMessage;
use vergence_lambda::worker::{Worker, WorkerConfig};
use vergence_model::ports::{EventStore, InstanceStore};
use vergence_model::{
    ApplicationName, EventFilter, InstanceKey, ReleaseChannelName, ServiceName, Version,
};

use crate::common::{bundle, deployment, endpoints};

/// An apply that would run for 30 s, with its own timeout of 30 minutes.
const CONFIG: &str = r#"runtime:
  name: slow
  apply:
    timeout: 30m
    taskConfig: {program: {cmd: [sleep, "30"]}}
---
application:
  name: shop
  releaseChannels:
    - {name: prod, runtimes: [{runtime: slow}]}
---
service:
  name: web
  custom: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_job_longer_than_the_worker_function_allows_fails_saying_why() {
    let Some((dynamodb, moto)) = endpoints() else {
        return;
    };
    // WorkerTimeoutSeconds 7, a margin of 1 s: local jobs run 6 s at most.
    let deployment = deployment(&dynamodb, &moto, Duration::from_secs(1)).await;
    let control = deployment.control();
    control.apply_config(bundle(CONFIG), "test").await.unwrap();
    let web = ServiceName::parse("web").unwrap();
    let v1 = Version::parse("v1").unwrap();
    control
        .push_release(None, &web, &v1, &BTreeMap::new(), "test")
        .await
        .unwrap();
    let worker = Worker::new(
        deployment.clone(),
        WorkerConfig {
            function_timeout: Some(Duration::from_secs(7)),
            ..WorkerConfig::default()
        },
    );
    assert_eq!(
        worker.local_job_limit().unwrap(),
        Some(Duration::from_secs(6))
    );

    let key = InstanceKey::new(
        ApplicationName::parse("shop").unwrap(),
        web,
        ReleaseChannelName::parse("prod").unwrap(),
    );
    let mut message = SqsMessage::default();
    message.message_id = Some("message-1".into());
    message.body = Some(WorkMessage::step(key.clone()).to_body().unwrap());
    let mut event = SqsEvent::default();
    event.records = vec![message];
    let invoked = Instant::now();
    let response = worker
        .handle(event, Some(invoked + Duration::from_secs(7)))
        .await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert!(
        invoked.elapsed() < Duration::from_secs(7),
        "the job was stopped within the invocation: {:?}",
        invoked.elapsed()
    );

    let events = deployment
        .store
        .list_events(&EventFilter::default())
        .await
        .unwrap();
    let said = "failed on its platform: stopped after 6s, before its own timeout of 30m: the \
                longest a local job runs in the worker function (the stack parameter \
                WorkerTimeoutSeconds, 7s, less 1s to record the result)";
    assert!(
        events.iter().any(|e| e.message.contains(said)),
        "{:#?}",
        events.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    let instance = deployment.store.get_instance(&key).await.unwrap().unwrap();
    assert!(
        !instance.state.reason.contains("timed out"),
        "{}",
        instance.state.reason
    );
}
