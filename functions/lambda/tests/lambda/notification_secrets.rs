//! Notification secrets by reference, read by the scheduler when it sends:
//! an SSM SecureString for the webhook's URL and a key of a JSON secret in
//! Secrets Manager for its signing secret, both in moto, through the
//! scheduler's handler (`Scheduler::handle` with the EventBridge event the
//! function is invoked with). Nothing of them is in the config, the state
//! or the environment; what cannot be read is recorded naming the
//! notification, the reference and why.

use std::sync::{Arc, Mutex};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_sdk_ssm::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_ssm::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ssm::error::BoxError;
use aws_smithy_types::body::SdkBody;
use axum::http::HeaderMap;
use vergence_aws::AwsSecretReader;
use vergence_aws::testing::{sdk_config, unique_name};
use vergence_lambda::Deployment;
use vergence_lambda::scheduler::Scheduler;
use vergence_model::ports::EventStore;
use vergence_model::{
    ApplicationName, Event, EventFilter, EventKind, InstanceKey, ReleaseChannelName, ServiceName,
    Version,
};

use crate::common::{bundle, deployment, endpoints};

/// One request a receiver got: its headers and raw body.
type Received = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// A webhook receiver on 127.0.0.1; its URL and what it received.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let record = received.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: axum::body::Bytes| {
        let record = record.clone();
        async move {
            record.lock().unwrap().push((headers, body.to_vec()));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// The scheduler's invocation event, as EventBridge Scheduler sends it.
fn schedule_event() -> EventBridgeEvent {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../events/schedule.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Where the secrets live in moto, under names of this test's own.
struct Secrets {
    ssm: aws_sdk_ssm::Client,
    secrets_manager: aws_sdk_secretsmanager::Client,
    path: String,
    secret_arn: String,
}

impl Secrets {
    /// The hook's URL as a SecureString, the signing secret as the
    /// `signingSecret` key of a JSON secret.
    async fn create(moto: &str, hook_url: &str, signing_secret: &str) -> Self {
        let sdk = sdk_config(moto).await;
        let ssm = aws_sdk_ssm::Client::new(&sdk);
        let secrets_manager = aws_sdk_secretsmanager::Client::new(&sdk);
        let path = format!("/{}", unique_name("vergence-test"));
        ssm.put_parameter()
            .name(format!("{path}/hook-url"))
            .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
            .value(hook_url)
            .send()
            .await
            .unwrap();
        let secret_arn = secrets_manager
            .create_secret()
            .name(unique_name("vergence-test"))
            .secret_string(serde_json::json!({ "signingSecret": signing_secret }).to_string())
            .send()
            .await
            .unwrap()
            .arn()
            .unwrap()
            .to_owned();
        Self {
            ssm,
            secrets_manager,
            path,
            secret_arn,
        }
    }

    /// A config whose `deploy-hook` reads both, and whose `absent-hook`
    /// names a parameter that does not exist.
    fn config(&self) -> String {
        format!(
            r#"runtime:
  name: files
  apply: {{taskConfig: {{program: {{cmd: [./apply.sh]}}}}}}
---
application:
  name: shop
  releaseChannels:
    - {{name: prod, runtimes: [{{runtime: files}}]}}
  notifications:
    - name: deploy-hook
      webhook:
        url: {{awsSsmParameter: {path}/hook-url}}
        signingSecret: {{awsSecretsManager: "{arn}:signingSecret::"}}
      on: [converged]
    - name: absent-hook
      webhook:
        url: {{awsSsmParameter: {path}/absent}}
        signingSecret: {{awsSecretsManager: "{arn}:signingSecret::"}}
      on: [converged]
---
service:
  name: web
  custom: {{}}
"#,
            path = self.path,
            arn = self.secret_arn
        )
    }

    /// The scheduler's reader, over moto.
    fn reader(&self) -> AwsSecretReader {
        AwsSecretReader::new(self.ssm.clone(), self.secrets_manager.clone())
    }
}

/// Records that prod's web converged, as a step would.
async fn converged(deployment: &Deployment, n: usize) {
    let key = InstanceKey::new(
        ApplicationName::parse("shop").unwrap(),
        ServiceName::parse("web").unwrap(),
        ReleaseChannelName::parse("prod").unwrap(),
    );
    let kind = EventKind::Converged {
        version: Version::parse("v1").unwrap(),
    };
    let mut event = Event::for_instance(&key, deployment.clock.now(), "worker", kind, "converged");
    Event::assign_ids(std::slice::from_mut(&mut event), &format!("test-{n}"));
    deployment.store.append_events(&[event]).await.unwrap();
}

/// The messages of the `notificationFailed` events recorded so far.
async fn failures(deployment: &Deployment) -> Vec<String> {
    deployment
        .store
        .list_events(&EventFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::NotificationFailed { .. }))
        .map(|e| e.message)
        .collect()
}

/// The signature a receiver expects for a request signed with `secret`.
fn signed_with(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let timestamp: i64 = headers["x-vergence-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    headers["x-vergence-signature"].to_str().unwrap()
        == vergence_notify::signature(secret.as_bytes(), timestamp, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_reads_notification_secrets_from_ssm_and_secrets_manager_when_it_sends() {
    let Some((dynamodb, moto)) = endpoints() else {
        return;
    };
    let (url, received) = receiver().await;
    let secrets = Secrets::create(&moto, &url, "s3cret-one").await;
    let deployment = deployment(&dynamodb, &moto, std::time::Duration::from_secs(1))
        .await
        .with_notification_secrets(secrets.reader());
    deployment
        .control()
        .apply_config(bundle(&secrets.config()), "test")
        .await
        .unwrap();
    converged(&deployment, 1).await;

    let scheduler =
        Scheduler::new(deployment.clone(), Some("https://v.example.com".into())).unwrap();
    let report = scheduler.handle(schedule_event()).await.unwrap();
    assert_eq!(
        (
            report.notifications_delivered,
            report.notifications_given_up
        ),
        (1, 1),
        "{report:?}"
    );
    {
        let received = received.lock().unwrap();
        let [(headers, body)] = received.as_slice() else {
            panic!("one delivery: {received:?}");
        };
        assert!(
            signed_with("s3cret-one", headers, body),
            "signed with the JSON key of the secret"
        );
    }
    let failures = failures(&deployment).await;
    let [failure] = failures.as_slice() else {
        panic!("one failure: {failures:?}");
    };
    assert!(
        failure.starts_with(&format!(
            "notification absent-hook (webhook) about converged was not delivered after 1 \
             attempt(s): the webhook URL is SSM parameter {}/absent, which cannot be read: \
             not found: ParameterNotFound",
            secrets.path
        )),
        "{failure}"
    );

    // The secret is rotated; the next minute's run in a new container
    // (the cache of this one keeps a value up to a minute) signs with the
    // new one. Nothing was pushed.
    secrets
        .secrets_manager
        .put_secret_value()
        .secret_id(&secrets.secret_arn)
        .secret_string(serde_json::json!({ "signingSecret": "s3cret-two" }).to_string())
        .send()
        .await
        .unwrap();
    converged(&deployment, 2).await;
    let scheduler = Scheduler::new(deployment.clone(), None).unwrap();
    let report = scheduler.handle(schedule_event()).await.unwrap();
    assert_eq!(report.notifications_delivered, 1, "{report:?}");
    {
        let received = received.lock().unwrap();
        let (headers, body) = received.last().unwrap();
        assert!(signed_with("s3cret-two", headers, body));
    }

    // No value went into the audit trail.
    let everything = format!(
        "{:?}",
        deployment.store.list_events(&EventFilter::default()).await
    );
    for value in ["s3cret-one", "s3cret-two", url.as_str()] {
        assert!(!everything.contains(value), "{value} in the events");
    }
}

/// Answers every SSM call as AWS does a role without `ssm:GetParameter`.
#[derive(Debug)]
struct DenyAll;

impl Intercept for DenyAll {
    fn name(&self) -> &'static str {
        "deny-all"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let response = context.response_mut();
        *response.status_mut() = 400.try_into()?;
        response.headers_mut().remove("content-length");
        // moto names its own error here (ParameterNotFound for a
        // parameter that does not exist), which the client reads first.
        response
            .headers_mut()
            .insert("x-amzn-errortype", "AccessDeniedException");
        *response.body_mut() = SdkBody::from(
            serde_json::json!({
                "__type": "AccessDeniedException",
                "message": "User: arn:aws:sts::123456789012:assumed-role/vergence-SchedulerFunctionRole/x is not authorized to perform: ssm:GetParameter",
            })
            .to_string(),
        );
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_scheduler_may_not_read_is_recorded_as_access_denied_with_what_grants_it() {
    let Some((dynamodb, moto)) = endpoints() else {
        return;
    };
    let (url, received) = receiver().await;
    let secrets = Secrets::create(&moto, &url, "s3cret").await;
    let denied = aws_sdk_ssm::Client::from_conf(
        aws_sdk_ssm::config::Builder::from(&sdk_config(&moto).await)
            .interceptor(DenyAll)
            .build(),
    );
    let deployment = deployment(&dynamodb, &moto, std::time::Duration::from_secs(1))
        .await
        .with_notification_secrets(AwsSecretReader::new(
            denied,
            secrets.secrets_manager.clone(),
        ));
    deployment
        .control()
        .apply_config(bundle(&secrets.config()), "test")
        .await
        .unwrap();
    converged(&deployment, 1).await;

    let scheduler = Scheduler::new(deployment.clone(), None).unwrap();
    let report = scheduler.handle(schedule_event()).await.unwrap();
    assert_eq!(report.notifications_given_up, 2, "{report:?}");
    assert!(received.lock().unwrap().is_empty());
    let failures = failures(&deployment).await;
    assert_eq!(failures.len(), 2, "{failures:?}");
    for failure in &failures {
        assert!(
            failure.contains(&format!("SSM parameter {}/", secrets.path))
                && failure.contains(
                    "which cannot be read: access denied: AccessDeniedException: User: \
                     arn:aws:sts::123456789012:assumed-role/vergence-SchedulerFunctionRole/x is \
                     not authorized to perform: ssm:GetParameter (the scheduler function may \
                     read the parameters under the stack parameter NotificationParameterPath"
                )
                && failure.contains("after 1 attempt(s)"),
            "{failure}"
        );
    }
}
