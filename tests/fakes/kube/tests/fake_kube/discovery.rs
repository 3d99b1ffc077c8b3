//! Discovery and the dynamic client, request accounting, authentication
//! and the server's answers to paths and methods it does not serve.

use crate::common::api_error;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::{self, Discovery, Scope};
use serde_json::json;
use vergence_fake_kube::FakeCluster;

#[tokio::test]
async fn discovery_finds_deployments_and_jobs() {
    let cluster = FakeCluster::start().await.unwrap();
    let discovery = Discovery::new(cluster.client()).run().await.unwrap();
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            found.push((
                resource.api_version.clone(),
                resource.kind.clone(),
                resource.plural.clone(),
                caps.scope,
            ));
        }
    }
    let has = |api_version: &str, kind: &str, plural: &str, scope: Scope| {
        found
            .iter()
            .any(|(v, k, p, s)| v == api_version && k == kind && p == plural && *s == scope)
    };
    assert!(
        has("apps/v1", "Deployment", "deployments", Scope::Namespaced),
        "{found:?}"
    );
    assert!(has("batch/v1", "Job", "jobs", Scope::Namespaced));
    assert!(has("v1", "Namespace", "namespaces", Scope::Cluster));
    assert!(has(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        Scope::Namespaced
    ));
    assert_eq!(found.len(), vergence_fake_kube::RESOURCES.len());

    let aggregated = Discovery::new(cluster.client())
        .run_aggregated()
        .await
        .unwrap();
    let (job, caps) = aggregated
        .resolve_gvk(&kube::core::GroupVersionKind::gvk("batch", "v1", "Job"))
        .unwrap();
    assert_eq!(job.plural, "jobs");
    assert!(
        caps.subresources.iter().any(|(r, _)| r.plural == "status"),
        "{caps:?}"
    );
    let (pods, _) = discovery::pinned_kind(
        &cluster.client(),
        &kube::core::GroupVersionKind::gvk("", "v1", "Pod"),
    )
    .await
    .unwrap();
    assert_eq!(pods.plural, "pods");
}

#[tokio::test]
async fn the_dynamic_client_works_from_discovered_resources() {
    let cluster = FakeCluster::start().await.unwrap();
    let (resource, _) = discovery::pinned_kind(
        &cluster.client(),
        &kube::core::GroupVersionKind::gvk("apps", "v1", "Deployment"),
    )
    .await
    .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client(), "default", &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dyn"},
        "spec": {"selector": {"matchLabels": {"app": "dyn"}},
                 "template": {"metadata": {"labels": {"app": "dyn"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].data["spec"]["replicas"], 1,
        "defaults applied"
    );
}

#[tokio::test]
async fn requests_are_counted() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    maps.create(&PostParams::default(), &cm).await.unwrap();
    maps.get("c").await.unwrap();
    maps.list(&ListParams::default().labels("a=b"))
        .await
        .unwrap();
    let requests = cluster.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("POST", "/api/v1/namespaces/default/configmaps")
    );
    assert_eq!(
        requests[0].content_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(requests[1].path, "/api/v1/namespaces/default/configmaps/c");
    assert!(requests[2].is_list() && requests[2].has_param("labelSelector", "a=b"));
    assert_eq!(cluster.count(|r| r.method == "GET"), 2);
    cluster.reset_requests();
    assert!(cluster.requests().is_empty());
}

#[tokio::test]
async fn a_required_token_turns_other_callers_away_with_401() {
    let cluster = FakeCluster::builder()
        .require_token("let-me-in")
        .start()
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    let listed = namespaces.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = listed
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    let stranger: Api<Namespace> = Api::all(cluster.client_with_token("guess").unwrap());
    let status = api_error(stranger.list(&ListParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
}

#[tokio::test]
async fn unknown_paths_are_404_and_unsupported_methods_405_with_status_bodies() {
    let cluster = FakeCluster::start().await.unwrap();
    let client = cluster.client();
    let get = |path: &str| axum::http::Request::get(path).body(Vec::new()).unwrap();
    let missing = api_error(
        client
            .request::<serde_json::Value>(get("/apis/example.com/v1/widgets"))
            .await,
    );
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    let post = axum::http::Request::post("/apis/batch/v1")
        .body(Vec::new())
        .unwrap();
    let refused = api_error(client.request::<serde_json::Value>(post).await);
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (405, "MethodNotAllowed")
    );
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "37")
    );
}
