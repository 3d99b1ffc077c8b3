//! The first-class Kubernetes runtime end to end: manifests pushed with
//! the config, applied by `vergence-agent` with server-side apply into the
//! fake cluster, read back from the agent's watch caches; drift seen by
//! the watch and healed (or only recorded), a failed rollout rolled back,
//! and a steady state that costs the API server no lists.

use std::time::Duration;

use serde_json::{Value, json};
use vergence_fake_kube::{FakeCluster, Rollout};

use crate::harness::{Agent, Server, eventually, kubeconfig};

/// The application and the runtime, reading the live objects back every
/// `steady` once converged.
fn app(steady: &str) -> String {
    APP.replace("STEADY", steady)
}

const APP: &str = r#"
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: cluster}]
    - name: prod
      runtimes: [{runtime: cluster}]
      preconditions:
        - releaseChannelStable: {releaseChannel: staging}
---
runtime:
  name: cluster
  kubernetes: {agent: prod-eu, pollInterval: 1s, steadyStatePollInterval: STEADY}
"#;

fn service(name: &str, drift_policy: &str) -> String {
    format!(
        "service:\n  name: {name}\n  driftPolicy: {drift_policy}\n  kubernetes: {{manifests: k8s}}\n  parameters: [{{name: image, dockerImage: {{}}, required: true}}]\n"
    )
}

/// A Deployment per release channel (namespace `shop-<channel>`), and a
/// ConfigMap that a later config drops (pruned).
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: "shop-{{.Builtins.ReleaseChannel.Name}}"
spec:
  replicas: 2
  progressDeadlineSeconds: 60
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "{{.Params.image}}"}]
"#;
const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-settings, namespace: \"shop-{{.Builtins.ReleaseChannel.Name}}\"}\ndata: {greeting: hello}\n";

async fn push(server: &Server, files: &[(&str, &str)]) {
    let token = server.admin_token().await;
    let files: serde_json::Map<String, Value> = files
        .iter()
        .map(|(path, text)| ((*path).to_owned(), Value::String((*text).to_owned())))
        .collect();
    let body = json!({ "files": files });
    let (status, answer) = server
        .call("POST", "/v1/configs", &token, Some(&body))
        .await;
    assert_eq!(status, 200, "{answer}");
}

async fn release(server: &Server, service: &str, version: &str, image: &str) {
    let token = server.admin_token().await;
    let body = json!({"version": version, "params": {"image": image}});
    let path = format!("/v1/applications/shop/services/{service}/releases");
    let (status, answer) = server.call("POST", &path, &token, Some(&body)).await;
    assert_eq!(status, 200, "{answer}");
}

fn image_of(cluster: &FakeCluster, namespace: &str) -> Option<String> {
    let deployment = cluster.object("Deployment", namespace, "web").unwrap()?;
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .map(str::to_owned)
}

async fn instance(server: &Server, service: &str, channel: &str) -> Value {
    let status = server.status().await;
    status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["service"] == service && i["releaseChannel"] == channel)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn start(dir: &std::path::Path, cluster: &FakeCluster) -> (Server, Agent) {
    for namespace in ["shop-staging", "shop-prod"] {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        cluster.create("Namespace", "", ns).unwrap();
    }
    let server = Server::start(dir).await;
    let token = server.agent_token("prod-eu").await;
    let agent = Agent::start(&server, &kubeconfig(dir, cluster.url()), "prod-eu", &token);
    (server, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_roll_out_through_the_channels_drift_heals_and_a_failed_rollout_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::builder()
        .rollout_delay(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let (server, _agent) = start(dir.path(), &cluster).await;
    let web = service("web", "remediate");
    // Reads after convergence are minutes apart: what heals drift within
    // seconds is the agent's watch.
    let app = app("5m");
    let files = [
        ("shop.yaml", app.as_str()),
        ("web.yaml", web.as_str()),
        ("k8s/deployment.yaml", DEPLOYMENT),
        ("k8s/settings.yaml", SETTINGS),
    ];
    push(&server, &files).await;
    release(&server, "web", "v1", "registry.example/web:1").await;
    server.await_converged(2, Duration::from_secs(90)).await;
    for namespace in ["shop-staging", "shop-prod"] {
        assert_eq!(
            image_of(&cluster, namespace).as_deref(),
            Some("registry.example/web:1")
        );
        let deployment = cluster
            .object("Deployment", namespace, "web")
            .unwrap()
            .unwrap();
        assert_eq!(
            deployment["metadata"]["annotations"]["vergence.dev/version"],
            "v1"
        );
        assert_eq!(
            deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "vergence"
        );
        let managers: Vec<&str> = deployment["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["operation"] == "Apply")
            .filter_map(|f| f["manager"].as_str())
            .collect();
        assert_eq!(managers, ["vergence"], "server-side applied by vergence");
    }
    let events = server.events().await;
    assert!(
        events.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("kubectl apply --server-side --field-manager=vergence"))),
        "the apply's event says how to do it by hand"
    );

    // A new image rolls the Deployment, staging then prod.
    release(&server, "web", "v2", "registry.example/web:2").await;
    eventually(Duration::from_secs(90), || async {
        let prod = instance(&server, "web", "prod").await;
        (prod["status"] == "CONVERGED" && prod["currentVersion"] == "v2").then_some(())
    })
    .await;
    assert_eq!(
        image_of(&cluster, "shop-prod").as_deref(),
        Some("registry.example/web:2")
    );

    // Edited out of band: the agent's watch tells Vergence at once (the
    // next steady-state read is minutes away), and the edit is undone.
    cluster
        .edit("Deployment", "shop-staging", "web", |d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] = "evil/miner:1".into();
        })
        .unwrap();
    let healed = std::time::Instant::now();
    eventually(Duration::from_secs(30), || async {
        (image_of(&cluster, "shop-staging").as_deref() == Some("registry.example/web:2"))
            .then_some(())
    })
    .await;
    assert!(
        healed.elapsed() < Duration::from_secs(20),
        "healed in {:?}",
        healed.elapsed()
    );
    let events = server.events().await;
    assert!(
        events.iter().any(|e| e["type"] == "driftDetected"),
        "the drift is on the record"
    );

    // A rollout that exceeds its progress deadline fails, and the
    // instance goes back to v2.
    cluster.set_rollout(
        "shop-staging",
        "Deployment",
        "web",
        Rollout::ProgressDeadlineExceeded,
    );
    release(&server, "web", "v3", "registry.example/web:3").await;
    eventually(Duration::from_secs(60), || async {
        let staging = instance(&server, "web", "staging").await;
        let status = staging["status"].as_str().unwrap_or_default().to_owned();
        matches!(status.as_str(), "FAILED" | "ROLLING_BACK").then_some(())
    })
    .await;
    cluster.set_rollout("shop-staging", "Deployment", "web", Rollout::Healthy);
    let staging = eventually(Duration::from_secs(90), || async {
        let staging = instance(&server, "web", "staging").await;
        (staging["status"] == "ROLLED_BACK").then_some(staging)
    })
    .await;
    assert!(
        staging["reason"].as_str().unwrap().contains("v3"),
        "{staging:#}"
    );
    assert_eq!(
        image_of(&cluster, "shop-staging").as_deref(),
        Some("registry.example/web:2")
    );
    assert_eq!(
        image_of(&cluster, "shop-prod").as_deref(),
        Some("registry.example/web:2"),
        "prod never saw v3"
    );

    // The ConfigMap leaves the manifests: the next apply prunes it. A
    // config push under release v3 keeps v3 held in staging, where it
    // failed; releasing v3 again (its rollout healthy now) asks for it.
    push(&server, &files[..3]).await;
    release(&server, "web", "v3", "registry.example/web:3").await;
    eventually(Duration::from_secs(60), || async {
        cluster
            .object("ConfigMap", "shop-prod", "web-settings")
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        cluster
            .object("Deployment", "shop-prod", "web")
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detect_only_records_drift_and_a_steady_state_costs_watches_not_lists() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let (server, _agent) = start(dir.path(), &cluster).await;
    let services: Vec<String> = (1..=4).map(|i| format!("web{i}")).collect();
    let mut files = vec![("shop.yaml".to_owned(), app("2s"))];
    for (i, name) in services.iter().enumerate() {
        let policy = if i == 0 { "detectOnly" } else { "remediate" };
        files.push((
            format!("{name}.yaml"),
            service(name, policy).replace("manifests: k8s", &format!("manifests: k8s/{name}")),
        ));
        files.push((
            format!("k8s/{name}/deployment.yaml"),
            DEPLOYMENT.replace(
                "name: web\n  namespace",
                &format!("name: {name}\n  namespace"),
            ),
        ));
    }
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    push(&server, &borrowed).await;
    for name in &services {
        release(&server, name, "v1", "registry.example/web:1").await;
    }
    server.await_converged(8, Duration::from_secs(120)).await;

    // Converged: several steady-state reads of 8 instances (every 2 s)
    // happen now, and none of them lists or gets anything.
    cluster.reset_requests();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let requests = cluster.requests();
    let reads: Vec<String> = requests
        .iter()
        .filter(|r| r.method == "GET" && !r.watch && !r.path.contains("/jobs"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        reads.is_empty(),
        "steady-state reads hit the API server: {reads:?}"
    );

    // detectOnly: the edit is recorded, not undone.
    cluster
        .edit("Deployment", "shop-staging", "web1", |d| {
            d["spec"]["replicas"] = 5.into();
        })
        .unwrap();
    let drifted = eventually(Duration::from_secs(10), || async {
        let staging = instance(&server, "web1", "staging").await;
        (staging["status"] == "DRIFTED").then_some(staging)
    })
    .await;
    assert!(
        drifted["reason"]
            .as_str()
            .unwrap()
            .contains("spec.replicas"),
        "{drifted:#}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let deployment = cluster
        .object("Deployment", "shop-staging", "web1")
        .unwrap()
        .unwrap();
    assert_eq!(
        deployment["spec"]["replicas"], 5,
        "detectOnly never applies"
    );
}

/// The Deployment of `DEPLOYMENT` as someone else made it in `namespace`
/// (no Vergence labels or annotations), running `image`.
fn made_by_someone_else(cluster: &FakeCluster, namespace: &str, image: &str) {
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 60,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    });
    cluster.create("Deployment", namespace, deployment).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_someone_else_made_are_adopted_when_they_match_and_taken_over_once_approved() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let (server, _agent) = start(dir.path(), &cluster).await;
    // staging already runs what v1 describes; prod runs another image.
    made_by_someone_else(&cluster, "shop-staging", "registry.example/web:1");
    made_by_someone_else(&cluster, "shop-prod", "registry.example/web:0");
    let generation = |namespace: &str| {
        cluster
            .object("Deployment", namespace, "web")
            .unwrap()
            .unwrap()["metadata"]["generation"]
            .clone()
    };
    let staging_generation = generation("shop-staging");
    cluster.reset_requests();
    let app = app("1m").replace(
        "      preconditions:\n        - releaseChannelStable: {releaseChannel: staging}\n",
        "",
    );
    push(
        &server,
        &[
            ("shop.yaml", &app),
            ("web.yaml", &service("web", "remediate")),
            ("k8s/deployment.yaml", DEPLOYMENT),
        ],
    )
    .await;
    release(&server, "web", "v1", "registry.example/web:1").await;

    let prod = eventually(Duration::from_secs(60), || async {
        let prod = instance(&server, "web", "prod").await;
        (prod["status"] == "WAITING_APPROVAL").then_some(prod)
    })
    .await;
    let reason = prod["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("waiting for approval to take over the existing Deployment shop-prod/web: spec.template.spec.containers[0].image: registry.example/web:0 live, registry.example/web:1 wanted"),
        "{reason}"
    );
    eventually(Duration::from_secs(60), || async {
        (instance(&server, "web", "staging").await["status"] == "CONVERGED").then_some(())
    })
    .await;

    // Staging: adopted with one server-side apply of the object as it is
    // (the marks), no rollout, and an `adopted` event in the API's list.
    let patches = |namespace: &str| {
        cluster.count(|r| {
            r.method == "PATCH"
                && r.path
                    .contains(&format!("/namespaces/{namespace}/deployments/web"))
        })
    };
    assert_eq!(patches("shop-staging"), 1, "only the marks");
    assert_eq!(generation("shop-staging"), staging_generation, "no rollout");
    let staging = cluster
        .object("Deployment", "shop-staging", "web")
        .unwrap()
        .unwrap();
    assert_eq!(
        staging["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "vergence"
    );
    assert_eq!(
        staging["metadata"]["annotations"]["vergence.dev/version"],
        "v1"
    );
    let events = server.events().await;
    let adopted: Vec<&Value> = events.iter().filter(|e| e["type"] == "adopted").collect();
    assert_eq!(adopted.len(), 1, "{events:#?}");
    assert_eq!(adopted[0]["releaseChannel"], "staging");

    // Prod: nothing applied until approved; then one apply.
    assert_eq!(patches("shop-prod"), 0);
    assert_eq!(
        image_of(&cluster, "shop-prod").as_deref(),
        Some("registry.example/web:0")
    );
    let token = server.admin_token().await;
    let (status, answer) = server
        .call(
            "POST",
            "/v1/applications/shop/services/web/release-channels/prod/approvals",
            &token,
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    eventually(Duration::from_secs(60), || async {
        (instance(&server, "web", "prod").await["status"] == "CONVERGED").then_some(())
    })
    .await;
    assert_eq!(
        image_of(&cluster, "shop-prod").as_deref(),
        Some("registry.example/web:1")
    );
    assert_eq!(patches("shop-prod"), 1, "one apply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_adopt_apply_an_object_someone_else_made_is_applied_without_approval() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = FakeCluster::start().await.unwrap();
    let (server, _agent) = start(dir.path(), &cluster).await;
    made_by_someone_else(&cluster, "shop-staging", "registry.example/web:0");
    made_by_someone_else(&cluster, "shop-prod", "registry.example/web:0");
    let app = app("1m")
        .replace(
            "      preconditions:\n        - releaseChannelStable: {releaseChannel: staging}\n",
            "",
        )
        .replace(
            "steadyStatePollInterval: 1m}",
            "steadyStatePollInterval: 1m, adopt: apply}",
        );
    push(
        &server,
        &[
            ("shop.yaml", &app),
            ("web.yaml", &service("web", "remediate")),
            ("k8s/deployment.yaml", DEPLOYMENT),
        ],
    )
    .await;
    release(&server, "web", "v1", "registry.example/web:1").await;
    server.await_converged(2, Duration::from_secs(60)).await;
    assert_eq!(
        image_of(&cluster, "shop-prod").as_deref(),
        Some("registry.example/web:1")
    );
    let events = server.events().await;
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "adopted" || e["to"] == "WAITING_APPROVAL"),
        "{events:#?}"
    );
}
