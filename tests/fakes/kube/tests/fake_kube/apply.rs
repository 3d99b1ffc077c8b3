//! Server-side apply through the real client: create on first apply,
//! ownership per field manager, pruning of fields no longer applied,
//! conflicts and forcing, and the errors for a missing manager or YAML.

use crate::common::api_error;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use vergence_fake_kube::FakeCluster;

fn web(replicas: i64, image: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "main", "image": image}]}}
        }
    })
}

fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager)
}

#[tokio::test]
async fn server_side_apply_creates_then_updates_and_prunes_fields() {
    let cluster = FakeCluster::start().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    let created = deployments
        .patch(
            "web",
            &apply("vergence"),
            &Patch::Apply(web(2, "web:1", json!({"team": "a", "tier": "front"}))),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.metadata.labels.as_ref().unwrap().len(), 2);
    let managed = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("vergence"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&managed[0].fields_v1).unwrap();
    assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
    assert_eq!(
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]["f:image"],
        json!({})
    );

    let updated = deployments
        .patch(
            "web",
            &apply("vergence"),
            &Patch::Apply(web(2, "web:2", json!({"team": "a"}))),
        )
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(
        updated.spec.template.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("web:2")
    );
    let labels = updated.metadata.labels.clone().unwrap();
    assert!(
        !labels.contains_key("tier"),
        "a label no longer applied is pruned: {labels:?}"
    );
    assert_eq!(labels["team"], "a");
}

#[tokio::test]
async fn an_unchanged_apply_writes_nothing() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
    let first = maps
        .patch("c", &apply("vergence"), &Patch::Apply(&config))
        .await
        .unwrap();
    let before = cluster.resource_version();
    let again = maps
        .patch("c", &apply("vergence"), &Patch::Apply(&config))
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        first.metadata.resource_version
    );
    assert_eq!(again.metadata.managed_fields, first.metadata.managed_fields);
    assert_eq!(
        cluster.resource_version(),
        before,
        "no write, so no watch event either"
    );
}

#[tokio::test]
async fn ssa_conflict_without_force_is_409() {
    let cluster = FakeCluster::start().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .patch(
            "web",
            &apply("vergence"),
            &Patch::Apply(web(2, "web:1", json!({}))),
        )
        .await
        .unwrap();
    let status = api_error(
        deployments
            .patch(
                "web",
                &apply("autoscaler"),
                &Patch::Apply(web(5, "web:1", json!({}))),
            )
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("conflict with \"vergence\""),
        "{}",
        status.message
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(
        causes.len(),
        1,
        "the same image is shared, not a conflict: {causes:?}"
    );
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".spec.replicas");
    assert_eq!(
        causes[0].message,
        "conflict with \"vergence\" using apps/v1"
    );
}

#[tokio::test]
async fn a_forced_apply_takes_the_field_over() {
    let cluster = FakeCluster::start().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .patch(
            "web",
            &apply("vergence"),
            &Patch::Apply(web(2, "web:1", json!({}))),
        )
        .await
        .unwrap();
    let forced = deployments
        .patch(
            "web",
            &apply("autoscaler").force(),
            &Patch::Apply(web(5, "web:1", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.replicas, Some(5));
    let status = api_error(
        deployments
            .patch(
                "web",
                &apply("vergence"),
                &Patch::Apply(web(2, "web:1", json!({}))),
            )
            .await,
    );
    assert!(
        status.message.contains("conflict with \"autoscaler\""),
        "ownership moved: {}",
        status.message
    );
}

#[tokio::test]
async fn an_update_by_another_manager_makes_the_next_apply_conflict() {
    let cluster = FakeCluster::start().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .patch(
            "web",
            &apply("vergence"),
            &Patch::Apply(web(2, "web:1", json!({}))),
        )
        .await
        .unwrap();
    let edit = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            "web",
            &edit,
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let status = api_error(
        deployments
            .patch(
                "web",
                &apply("vergence"),
                &Patch::Apply(web(2, "web:1", json!({}))),
            )
            .await,
    );
    assert!(
        status.message.contains("conflict with \"kubectl-edit\""),
        "{}",
        status.message
    );
    let healed = deployments
        .patch(
            "web",
            &apply("vergence").force(),
            &Patch::Apply(web(2, "web:1", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(healed.spec.replicas, Some(2));
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_json() {
    let cluster = FakeCluster::start().await.unwrap();
    let client = cluster.client();
    let path = "/api/v1/namespaces/default/configmaps/c";
    let request = |query: &str, body: &str| {
        axum::http::Request::patch(format!("{path}{query}"))
            .header("content-type", "application/apply-patch+yaml")
            .body(body.as_bytes().to_vec())
            .unwrap()
    };
    let config =
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}"#;
    let no_manager = api_error(client.request::<ConfigMap>(request("", config)).await);
    assert_eq!(
        (no_manager.code, no_manager.reason.as_str()),
        (422, "Invalid")
    );
    assert!(
        no_manager.message.contains("fieldManager: Required value"),
        "{}",
        no_manager.message
    );
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";
    let unreadable = api_error(
        client
            .request::<ConfigMap>(request("?fieldManager=m", yaml))
            .await,
    );
    assert_eq!(unreadable.code, 415);
    let created = client
        .request::<ConfigMap>(request("?fieldManager=m", config))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
}
