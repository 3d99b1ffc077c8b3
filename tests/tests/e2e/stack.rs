//! The stack as deployed (docs/serverless.md, "What the deployed stack is
//! tested against"): template.yaml expanded by aws-sam-translator and
//! created in one moto server with IAM enforced, the three functions each
//! behind a Lambda runtime API with only its own role's credentials, API
//! Gateway's HTTP API, the worker's event source mapping and the
//! schedule's ticks ([`vergence_e2e::stack`]). The flows are the user's,
//! driven by the `vergence` CLI through `--endpoint` as a CI job and an
//! operator run it; every AWS call the functions make is judged by the
//! roles the template gives them, and none may be refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use serde_json::Value;
use vergence_e2e::stack::{Permissions, Stack, WEBHOOK_SECRET};

/// One application, staging then prod (prod behind an approval), one
/// service whose runtime "deploys" by writing `<deployed>/<channel>.txt`
/// and whose exit-code fetch says whether that file still holds the
/// version: jobs the worker runs itself, with nothing from the config
/// directory (the serverless worker has none of it). A signed webhook
/// tells when an approval is needed; its URL is an SSM parameter and its
/// signing secret a Secrets Manager secret, read by the scheduler when it
/// sends.
fn write_config(dir: &Path, deployed: &Path, secret_arn: &str) {
    let deployed = deployed.display();
    std::fs::write(
        dir.join("shop.yaml"),
        format!(
            r#"application:
  name: shop
  notifications:
    - name: approvals
      webhook:
        url: {{awsSsmParameter: {HOOK_URL_PARAMETER}}}
        signingSecret: {{awsSecretsManager: "{secret_arn}"}}
      on: [approvalNeeded]
  releaseChannels:
    - name: staging
      runtimes: [{{runtime: files}}]
    - name: prod
      runtimes: [{{runtime: files}}]
      preconditions:
        - releaseChannelStable: {{releaseChannel: staging}}
        - manualApproval: {{name: prod-gate}}
      protections:
        - ref: {{name: prod-alarms}}
          lifecycle: [{{deployment: {{failureBehavior: FAIL}}}}]
---
protection:
  name: prod-alarms
  cloudwatchAlarm: {{names: [{PROD_ALARM}]}}
---
runtime:
  name: files
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'mkdir -p {deployed} && printf %s "$VERGENCE_SERVICE_VERSION" > {deployed}/$VERGENCE_RELEASE_CHANNEL.txt']
  fetch:
    mode: exitCode
    pollInterval: 1s
    steadyStatePollInterval: 2s
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat {deployed}/$VERGENCE_RELEASE_CHANNEL.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
---
service:
  name: web
  application: shop
  runtime: files
"#
        ),
    )
    .unwrap();
}

/// The CloudWatch alarm prod's deployment protection reads, with the
/// worker's role (ProtectionAlarms).
const PROD_ALARM: &str = "shop-prod-5xx";

/// Where the operator keeps the approvals hook's URL (under the stack's
/// NotificationParameterPath).
const HOOK_URL_PARAMETER: &str = "/vergence/notifications/approvals-url";

/// A request the hook got.
#[derive(Debug, Clone)]
struct Delivery {
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Delivery {
    fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.headers))
            .to_str()
            .unwrap()
            .to_owned()
    }
}

/// An HTTP receiver of webhooks on 127.0.0.1, answering 200.
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Delivery>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Self {
        let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let record = received.clone();
        let app = axum::Router::new().fallback(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(Delivery {
                        headers,
                        body: body.to_vec(),
                    });
                    axum::http::StatusCode::OK
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/vergence", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            received,
            server,
        }
    }

    /// The first delivery, ticking the schedule (which sends them) until
    /// it comes.
    async fn first(&self, timeout: Duration, stack: &Stack) -> Delivery {
        let started = Instant::now();
        loop {
            if let Some(first) = self.received.lock().unwrap().first() {
                return first.clone();
            }
            assert!(
                started.elapsed() < timeout,
                "no notification\nscheduler:\n{}",
                stack.scheduler.logs().join("\n")
            );
            stack.tick().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `vergence --output json status` through the API.
fn status(stack: &Stack, dir: &Path, token: &str) -> Vec<Value> {
    let output = stack.vergence(dir, token, &["status", "--app", "shop", "--output", "json"]);
    assert!(output.status.success(), "status: {output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    json["instances"].as_array().unwrap().clone()
}

fn instance<'a>(instances: &'a [Value], channel: &str) -> &'a Value {
    instances
        .iter()
        .find(|i| i["releaseChannel"] == channel)
        .unwrap_or_else(|| panic!("no instance in {channel}: {instances:?}"))
}

/// Ticks the schedule every second until `done` holds for the instances.
async fn until(
    stack: &Stack,
    dir: &Path,
    token: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let started = Instant::now();
    loop {
        stack.tick().await;
        let instances = status(stack, dir, token);
        if done(&instances) {
            return instances;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: still {instances:#?}\nworker:\n{}",
            stack.worker.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn succeeded(output: &std::process::Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// CI pushes the config and a release through the signed webhook; the
/// schedule rolls it out to staging; prod waits for an approval given
/// through the API; a change by hand in staging is found by a scheduled
/// check and healed.
async fn ci_release_approval_and_drift(stack: &Stack) {
    let dir = tempfile::tempdir().unwrap();
    let deployed = tempfile::tempdir().unwrap();
    let seeded = stack.contract().seeded.notification_secret.clone();
    write_config(dir.path(), deployed.path(), &seeded.secret_arn);
    let receiver = Receiver::start().await;
    // The operator puts the hook's URL where the template lets the
    // scheduler read it (NotificationParameterPath).
    aws_sdk_ssm::Client::new(&stack.account.sdk_config(&stack.contract().admin).await)
        .put_parameter()
        .name(HOOK_URL_PARAMETER)
        .value(&receiver.url)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    // The alarm prod's protection reads before every apply, not in ALARM.
    let cloudwatch =
        aws_sdk_cloudwatch::Client::new(&stack.account.sdk_config(&stack.contract().admin).await);
    cloudwatch
        .put_metric_alarm()
        .alarm_name(PROD_ALARM)
        .namespace("Shop")
        .metric_name("5xx")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(1.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
    let admin = stack.create_token(&["--app", "shop", "--scope", "admin"]);
    let ci = stack.create_token(&["--app", "shop", "--scope", "release"]);

    // CI: the config, then a release through the signed webhook.
    let pushed = stack.vergence(
        dir.path(),
        &admin,
        &["configs", "push", ".", "--app", "shop"],
    );
    succeeded(&pushed, "configs push");
    let release = stack.vergence(
        dir.path(),
        &ci,
        &[
            "--webhook-secret",
            WEBHOOK_SECRET,
            "release",
            "web",
            "v1",
            "--app",
            "shop",
        ],
    );
    succeeded(&release, "release");

    // The schedule finds the instances; staging converges, prod waits.
    let instances = until(stack, dir.path(), &admin, "staging converges on v1", |i| {
        instance(i, "staging")["status"] == "CONVERGED"
            && instance(i, "prod")["status"] == "WAITING_APPROVAL"
    })
    .await;
    assert_eq!(instance(&instances, "staging")["currentVersion"], "v1");
    assert_eq!(
        std::fs::read_to_string(deployed.path().join("staging.txt")).unwrap(),
        "v1"
    );

    // The scheduler told the hook, signed with the secret it read.
    let delivery = receiver.first(Duration::from_secs(60), stack).await;
    assert_eq!(delivery.header("x-vergence-event"), "approvalNeeded");
    let signed = format!(
        "{}.{}",
        delivery.header("x-vergence-timestamp"),
        String::from_utf8_lossy(&delivery.body)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(seeded.value.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    assert_eq!(
        delivery.header("x-vergence-signature"),
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    );

    // The on-call breaks the glass for prod's v1 through the api function
    // with an `override` token: recorded on the instance, under the
    // template's own permissions.
    let on_call = stack.create_token(&["--app", "shop", "--scope", "override"]);
    let overridden = stack.vergence(
        dir.path(),
        &on_call,
        &[
            "override",
            "web",
            "--app",
            "shop",
            "--release-channel",
            "prod",
            "--reason",
            "stack test",
        ],
    );
    succeeded(&overridden, "override");
    let shown = status(stack, dir.path(), &admin);
    assert_eq!(
        instance(&shown, "prod")["windowOverride"]["reason"],
        "stack test",
        "{shown:?}"
    );

    // An operator approves prod through the API.
    let approved = stack.vergence(
        dir.path(),
        &admin,
        &[
            "approve",
            "--app",
            "shop",
            "--release-channel",
            "prod",
            "--service",
            "web",
        ],
    );
    succeeded(&approved, "approve");
    until(stack, dir.path(), &admin, "prod converges on v1", |i| {
        instance(i, "prod")["status"] == "CONVERGED"
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(deployed.path().join("prod.txt")).unwrap(),
        "v1"
    );

    // Someone changes staging by hand: the scheduled checks find the
    // drift and the worker heals it.
    std::fs::write(deployed.path().join("staging.txt"), "by hand").unwrap();
    until(stack, dir.path(), &admin, "staging healed", |_| {
        std::fs::read_to_string(deployed.path().join("staging.txt")).unwrap_or_default() == "v1"
    })
    .await;
    let events = succeeded(
        &stack.vergence(
            dir.path(),
            &admin,
            &[
                "events",
                "--app",
                "shop",
                "--service",
                "web",
                "--output",
                "json",
            ],
        ),
        "events",
    );
    assert!(events.contains("drift"), "{events}");
    assert!(events.contains("overridden"), "{events}");

    // Delivery metrics through the api function, from the events table.
    let metrics = succeeded(
        &stack.vergence(
            dir.path(),
            &ci,
            &["metrics", "--app", "shop", "--output", "json"],
        ),
        "metrics",
    );
    let metrics: Value = serde_json::from_str(&metrics).unwrap();
    assert_eq!(metrics["deployments"], 1, "{metrics}");
    assert_eq!(metrics["releases"], 1, "{metrics}");
}

/// An application on ECS: `web` on the first-class ECS runtime (a task
/// definition and a service of the seeded cluster), `migrate` a custom
/// runtime whose apply runs as a task of the `ecs` runner.
fn write_ecs_config(dir: &Path, stack: &Stack) {
    let seeded = &stack.contract().seeded;
    let network = format!(
        r#"{{"awsvpcConfiguration": {{"subnets": ["{}"], "securityGroups": ["{}"]}}}}"#,
        seeded.subnets[0], seeded.security_groups[0]
    );
    std::fs::create_dir_all(dir.join("ecs")).unwrap();
    std::fs::write(
        dir.join("fleet.yaml"),
        format!(
            r#"application:
  name: fleet
  releaseChannels:
    - name: prod
      runtimes: [{{runtime: fargate}}, {{runtime: migrations}}]
---
runtime:
  name: fargate
  ecs: {{cluster: {cluster}, pollInterval: 1s, steadyStatePollInterval: 1m}}
---
runtime:
  name: migrations
  runner:
    ecs:
      cluster: {cluster_arn}
      subnets: [{subnet}]
      securityGroups: [{group}]
      executionRoleArn: {execution}
      taskRoleArn: {task}
  apply:
    taskConfig:
      program:
        image: registry.example.com/migrate:1
        cmd: [migrate, up]
---
service:
  name: web
  application: fleet
  runtime: fargate
  ecs: {{taskDefinition: ecs/task.json, service: ecs/service.json}}
  parameters: [{{name: image, dockerImage: {{}}, required: true}}]
---
service:
  name: migrate
  application: fleet
  runtime: migrations
"#,
            cluster = seeded.ecs_cluster.name,
            cluster_arn = seeded.ecs_cluster.arn,
            subnet = seeded.subnets[0],
            group = seeded.security_groups[0],
            execution = seeded.execution_role_arn,
            task = seeded.task_role_arn,
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("ecs/task.json"),
        r#"{"family": "fleet-web", "networkMode": "awsvpc", "requiresCompatibilities": ["FARGATE"], "cpu": "256", "memory": "512",
  "containerDefinitions": [{"name": "web", "image": "{{.Params.image}}", "essential": true}]}
"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("ecs/service.json"),
        format!(
            r#"{{"serviceName": "fleet-web", "desiredCount": 2, "launchType": "FARGATE", "networkConfiguration": {network}}}
"#
        ),
    )
    .unwrap();
}

/// The image of the service's current task definition, as ECS has it.
async fn service_image(ecs: &aws_sdk_ecs::Client, cluster: &str) -> Option<String> {
    let described = ecs
        .describe_services()
        .cluster(cluster)
        .services("fleet-web")
        .send()
        .await
        .unwrap();
    let definition = described.services().first()?.task_definition()?.to_owned();
    let task = ecs
        .describe_task_definition()
        .task_definition(definition)
        .send()
        .await
        .unwrap();
    task.task_definition()?.container_definitions()[0]
        .image()
        .map(str::to_owned)
}

/// Plays every running task of the cluster to a successful end.
async fn finish_tasks(stack: &Stack, ecs: &aws_sdk_ecs::Client, cluster: &str) -> usize {
    let listed = ecs
        .list_tasks()
        .cluster(cluster)
        .desired_status(aws_sdk_ecs::types::DesiredStatus::Running)
        .send()
        .await
        .unwrap();
    for arn in listed.task_arns() {
        stack
            .account
            .ecs_task_stopped(arn, 0, &["migrated 3 tables"])
            .await;
    }
    listed.task_arns().len()
}

/// The first-class ECS runtime creates its service, then updates it to
/// the next release; a custom runtime's apply runs as an ECS task whose
/// end comes back through the template's EventBridge rule.
async fn ecs_runtime_and_runner(stack: &Stack) {
    let dir = tempfile::tempdir().unwrap();
    write_ecs_config(dir.path(), stack);
    let token = stack.create_token(&["--app", "fleet", "--scope", "admin"]);
    let ecs = aws_sdk_ecs::Client::new(&stack.account.sdk_config(&stack.contract().admin).await);
    let cluster = stack.contract().seeded.ecs_cluster.arn.clone();
    succeeded(
        &stack.vergence(
            dir.path(),
            &token,
            &["configs", "push", ".", "--app", "fleet"],
        ),
        "configs push",
    );
    let mut tasks = 0;
    for version in ["v1", "v2"] {
        let image = format!("registry.example.com/web:{version}");
        let param = format!("image={image}");
        succeeded(
            &stack.vergence(
                dir.path(),
                &token,
                &[
                    "--webhook-secret",
                    WEBHOOK_SECRET,
                    "release",
                    "web",
                    version,
                    "--app",
                    "fleet",
                    "--param",
                    &param,
                ],
            ),
            "release web",
        );
        let started = Instant::now();
        loop {
            stack.tick().await;
            tasks += finish_tasks(stack, &ecs, &cluster).await;
            let output = stack.vergence(
                dir.path(),
                &token,
                &["status", "--app", "fleet", "--output", "json"],
            );
            let json: Value = serde_json::from_str(&succeeded(&output, "status")).unwrap();
            let instances = json["instances"].as_array().unwrap();
            let web = instances.iter().find(|i| i["service"] == "web").unwrap();
            let migrate = instances
                .iter()
                .find(|i| i["service"] == "migrate")
                .unwrap();
            if web["status"] == "CONVERGED"
                && web["currentVersion"] == version
                && migrate["status"] == "CONVERGED"
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{version}: still {instances:#?}\nworker:\n{}",
                stack.worker.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(service_image(&ecs, &cluster).await, Some(image));
    }
    assert!(tasks >= 1, "the migration ran as an ECS task");
}

/// A custom runtime on the lambda runner: the worker invokes the stack's
/// jobs function (`LambdaFunctionArns`) asynchronously, with its role's
/// `LambdaJobs` grant; vergence-wrapper there runs the command and reports
/// through the presigned URLs of the artifact bucket, which later checks
/// read. The apply appends a line to `applies.log` per invocation.
async fn lambda_runner(stack: &Stack) {
    let dir = tempfile::tempdir().unwrap();
    let out = stack.jobs_dir.path().display().to_string();
    std::fs::write(
        dir.path().join("jobs.yaml"),
        format!(
            r#"application:
  name: jobs
  releaseChannels:
    - {{name: prod, runtimes: [{{runtime: fn}}]}}
---
runtime:
  name: fn
  runner:
    lambda: {{function: '{function}'}}
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_SERVICE_VERSION" >> {out}/applies.log; echo "$VERGENCE_SERVICE_VERSION" > {out}/deployed.txt']
  fetch:
    mode: exitCode
    taskConfig:
      program:
        cmd: [sh, -c, 'test "$(cat {out}/deployed.txt 2>/dev/null)" = "$VERGENCE_SERVICE_VERSION" || exit 2']
---
service:
  name: hook
  application: jobs
  runtime: fn
"#,
            function = stack.contract().seeded.jobs_function.arn,
        ),
    )
    .unwrap();
    let token = stack.create_token(&["--app", "jobs", "--scope", "admin"]);
    succeeded(
        &stack.vergence(
            dir.path(),
            &token,
            &["configs", "push", ".", "--app", "jobs"],
        ),
        "configs push",
    );
    succeeded(
        &stack.vergence(
            dir.path(),
            &token,
            &[
                "--webhook-secret",
                WEBHOOK_SECRET,
                "release",
                "hook",
                "v1",
                "--app",
                "jobs",
            ],
        ),
        "release hook",
    );
    let started = Instant::now();
    loop {
        stack.tick().await;
        let output = stack.vergence(
            dir.path(),
            &token,
            &["status", "--app", "jobs", "--output", "json"],
        );
        let json: Value = serde_json::from_str(&succeeded(&output, "status")).unwrap();
        let hook = &json["instances"][0];
        if hook["status"] == "CONVERGED" && hook["currentVersion"] == "v1" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "still {json:#}\nworker:\n{}",
            stack.worker.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let applies = std::fs::read_to_string(stack.jobs_dir.path().join("applies.log")).unwrap();
    assert_eq!(applies, "v1\n", "the apply was invoked once");
}

/// The real vergence-agent in a (fake) cluster, polling the deployment
/// through the api function's URL (the `AgentUrl` output) with its agent
/// token and its default polling; stopped when dropped.
struct Agent(std::process::Child);

impl Agent {
    fn start(stack: &Stack, kubeconfig: &Path, token: &str) -> Self {
        let child =
            std::process::Command::new(vergence_testkit::workspace_binary("vergence-agent"))
                .args(["--api-url", &stack.function_url.url, "--agent", "prod-eu"])
                .env("VERGENCE_AGENT_TOKEN", token)
                .env("KUBECONFIG", kubeconfig)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
        Self(child)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A poll through the function URL with `token`: its status and answer.
async fn poll_through_the_function_url(stack: &Stack, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}v1/agents/prod-eu/poll", stack.function_url.url))
        .json(&serde_json::json!({"version": "0.0.0-test", "namespace": "default"}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The real vergence-agent polls the api function through its URL and
/// runs the job as a Kubernetes Job in its (fake) cluster. The URL is
/// public: the API itself refuses a poll without the agent's token, and
/// the refused polls record nothing.
async fn agent_through_the_api_function(stack: &Stack) {
    let cluster = vergence_fake_kube::FakeCluster::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("applied");
    std::fs::write(
        dir.path().join("batch.yaml"),
        format!(
            r#"application:
  name: batch
  releaseChannels:
    - name: prod
      runtimes: [{{runtime: cluster-jobs}}]
---
runtime:
  name: cluster-jobs
  runner:
    kubernetes: {{agent: prod-eu}}
  apply:
    taskConfig:
      program:
        image: registry.example/deployer:1
        cmd: [sh, -c, 'echo "$VERGENCE_RELEASE_CHANNEL $PVN_SERVICE_VERSION" >> {marker}']
---
service:
  name: nightly
  application: batch
  custom: {{}}
"#,
            marker = marker.display()
        ),
    )
    .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\nusers: [{{name: fake, user: {{}}}}]\ncontexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: default}}}}]\ncurrent-context: fake\n",
            cluster.url()
        ),
    )
    .unwrap();
    let token = stack.create_token(&["--app", "batch", "--scope", "admin"]);
    let agent_token = stack.create_token(&["--agent", "prod-eu"]);
    succeeded(
        &stack.vergence(
            dir.path(),
            &token,
            &["configs", "push", ".", "--app", "batch"],
        ),
        "configs push",
    );
    let (status, answer) = poll_through_the_function_url(stack, None).await;
    assert_eq!(status, 401, "{answer}");
    let (status, answer) = poll_through_the_function_url(stack, Some(&token)).await;
    assert_eq!(status, 403, "an application token cannot poll: {answer}");
    // Every route is served at the function URL, the CLI's too.
    let through_url = stack.vergence_at(
        &stack.function_url.url,
        dir.path(),
        &token,
        &["status", "--app", "batch", "--output", "json"],
    );
    let json: Value = serde_json::from_str(&succeeded(&through_url, "status")).unwrap();
    assert_eq!(
        json["agents"],
        serde_json::json!([]),
        "a refused poll records no agent: {json}"
    );
    let _agent = Agent::start(stack, &kubeconfig, &agent_token);
    let started = Instant::now();
    loop {
        stack.tick().await;
        let output = stack.vergence(
            dir.path(),
            &token,
            &["status", "--app", "batch", "--output", "json"],
        );
        let json: Value = serde_json::from_str(&succeeded(&output, "status")).unwrap();
        let nightly = &json["instances"][0];
        if nightly["status"] == "CONVERGED" {
            assert_eq!(json["agents"][0]["name"], "prod-eu", "{json}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "still {json:#}\napi:\n{}",
            stack.api.logs().join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let applied = std::fs::read_to_string(&marker).unwrap();
    assert!(applied.starts_with("prod "), "{applied}");
    let jobs = cluster.objects("Job", Some("default")).unwrap();
    assert_eq!(jobs.len(), 1, "one Kubernetes Job for the apply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_flow_runs_on_the_deployed_stack_under_the_templates_own_permissions() {
    let Some(stack) = Stack::deploy(&[]).await else {
        return;
    };
    ci_release_approval_and_drift(&stack).await;
    ecs_runtime_and_runner(&stack).await;
    agent_through_the_api_function(&stack).await;
    lambda_runner(&stack).await;

    let permissions = stack.permissions().await;
    for (function, used) in &permissions {
        assert!(
            used.denied.is_empty(),
            "{function} was refused: {:?}",
            used.denied
        );
    }
    let worker = &permissions["worker"].used;
    for action in [
        "ecs:CreateService",
        "ecs:UpdateService",
        "ecs:RunTask",
        "lambda:InvokeFunction",
    ] {
        assert!(
            worker.contains(action),
            "the worker never called {action}: {worker:?}"
        );
    }

    // A grant no request used is either documented (with why) or goes,
    // and the table names only what the template grants. A documented
    // grant this run happened to use is only reported: some (a lease let
    // go, a task stopped) depend on timing.
    let triples = |pick: fn(&Permissions) -> &BTreeSet<(String, String)>| {
        permissions
            .iter()
            .flat_map(|(function, p)| {
                pick(p)
                    .iter()
                    .map(|(grant, action)| (function.clone(), grant.clone(), action.clone()))
            })
            .collect::<BTreeSet<_>>()
    };
    let unused = triples(|p| &p.unused);
    let granted = triples(|p| &p.granted);
    let documented = documented_unused_grants();
    let undocumented: Vec<_> = unused.difference(&documented).collect();
    let not_granted: Vec<_> = documented.difference(&granted).collect();
    assert!(
        undocumented.is_empty() && not_granted.is_empty(),
        "docs/serverless.md's table of grants the stack test does not use is out of date:\n\
         granted and unused, not in the table (use them, drop them from template.yaml, or say why): {undocumented:#?}\n\
         in the table, not granted by template.yaml: {not_granted:#?}"
    );
    for used_anyway in documented.difference(&unused) {
        println!("note: documented as unused, used in this run: {used_anyway:?}");
    }
}

/// The rows of docs/serverless.md's table of grants the stack test does
/// not use, one (function, grant, action) per name in its cells.
fn documented_unused_grants() -> BTreeSet<(String, String, String)> {
    let mut rows = BTreeSet::new();
    let table = vergence_testkit::doc_table(
        "docs/serverless.md",
        "| function | grant | actions | why the stack test does not use it |",
    );
    for cells in &table {
        let [functions, grant, actions, why] = cells.as_slice() else {
            panic!("a row of four cells: {cells:?}");
        };
        assert!(!why.is_empty(), "every unused grant says why: {cells:?}");
        for function in functions.split(", ") {
            for action in actions.split(", ") {
                rows.insert((function.to_owned(), grant.clone(), action.to_owned()));
            }
        }
    }
    rows
}

/// The emulated account's own self-test (tests/stack/test_account.py):
/// its IAM evaluator, request mapping and SAM expansion against the
/// cases AWS documents, so a change to the harness cannot quietly make
/// the stack test above more permissive than AWS.
#[test]
fn the_emulated_account_passes_its_self_test() {
    let Some(python) = vergence_e2e::stack::python() else {
        return;
    };
    let output = std::process::Command::new(python)
        .current_dir(vergence_testkit::workspace())
        .arg("tests/stack/test_account.py")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "tests/stack/test_account.py failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
