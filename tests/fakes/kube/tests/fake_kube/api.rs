//! The generic REST API through the real `kube` client: create, get,
//! replace, the patch types, delete with propagation, lists with selectors
//! and pages, and the Status bodies of every failure.

use crate::common::{api_error, job, typed};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use serde_json::json;
use vergence_fake_kube::{FakeCluster, NeverFinishes};

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    typed(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))
}

fn deployment(name: &str, image: &str) -> Deployment {
    typed(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": image}]}}
        }
    }))
}

#[tokio::test]
async fn creating_a_job_twice_is_a_409_already_exists() {
    let cluster = FakeCluster::builder()
        .executor(NeverFinishes)
        .start()
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("x", &["true"]))
        .await
        .unwrap();
    let status = api_error(
        jobs.create(&PostParams::default(), &job("x", &["true"]))
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "AlreadyExists");
    assert_eq!(status.message, "jobs.batch \"x\" already exists");
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("x", "batch", "jobs")
    );
}

#[tokio::test]
async fn a_missing_object_is_a_404_not_found() {
    let cluster = FakeCluster::start().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let status = api_error(pods.get("nope").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "pods \"nope\" not found");
    assert!(pods.get_opt("nope").await.unwrap().is_none());
}

#[tokio::test]
async fn the_server_sets_metadata_like_a_real_apiserver() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let mut generated = config_map("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("settings-".into());
    let created = maps
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("settings-") && name.len() == "settings-".len() + 5,
        "{name}"
    );
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(created.metadata.uid.as_ref().map(String::len), Some(36));
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.creation_timestamp.is_some());
    let rv: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let second = maps
        .create(&PostParams::default(), &config_map("other", json!({})))
        .await
        .unwrap();
    let rv2: u64 = second.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv2 > rv, "resourceVersions increase: {rv} then {rv2}");
    let managed = created.metadata.managed_fields.unwrap();
    assert_eq!(managed[0].manager.as_deref(), Some("unknown"));
    assert_eq!(managed[0].operation.as_deref(), Some("Update"));
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_a_409_conflict() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .unwrap();
    let mut first = created.clone();
    first.data = Some([("k".to_owned(), "first".to_owned())].into());
    let replaced = maps
        .replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "first");
    let mut stale = created;
    stale.data = Some([("k".to_owned(), "stale".to_owned())].into());
    let status = api_error(maps.replace("c", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn creating_in_a_missing_namespace_is_a_404_and_creating_the_namespace_fixes_it() {
    let cluster = FakeCluster::start().await.unwrap();
    let client = cluster.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let status = api_error(
        maps.create(&PostParams::default(), &config_map("c", json!({})))
            .await,
    );
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "namespaces \"team-a\" not found")
    );
    let namespaces: Api<Namespace> = Api::all(client);
    let ns = namespaces
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "team-a"}})),
        )
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    maps.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .unwrap();
}

#[tokio::test]
async fn invalid_objects_are_a_422_naming_the_field() {
    let cluster = FakeCluster::start().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let mut no_policy = job("j", &["true"]);
    no_policy
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .restart_policy = None;
    let status = api_error(jobs.create(&PostParams::default(), &no_policy).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.starts_with(
            "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Required value"
        ),
        "{}",
        status.message
    );
    let bad_name = config_map("Not_A_Name", json!({}));
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    assert_eq!(
        api_error(maps.create(&PostParams::default(), &bad_name).await).code,
        422
    );
}

#[tokio::test]
async fn a_jobs_template_is_immutable() {
    let cluster = FakeCluster::builder()
        .executor(NeverFinishes)
        .start()
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("j", &["true"]))
        .await
        .unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "run", "image": "busybox:1.37"}]}}}});
    let status = api_error(
        jobs.patch("j", &PatchParams::default(), &Patch::Strategic(patch))
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("spec.template: Invalid value")
            && status.message.contains("field is immutable"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn merge_strategic_and_json_patches_change_what_they_say() {
    let cluster = FakeCluster::start().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .create(&PostParams::default(), &deployment("web", "web:1"))
        .await
        .unwrap();
    let merged = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}, "spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.metadata.labels.unwrap()["team"], "a");
    assert_eq!(merged.spec.replicas, Some(3));
    assert_eq!(merged.metadata.generation, Some(2));

    let sidecar = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "proxy:1"}]}}}});
    let strategic = deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(sidecar))
        .await
        .unwrap();
    let containers = strategic.spec.template.spec.unwrap().containers;
    let names: Vec<_> = containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["main", "sidecar"],
        "strategic merge keeps containers by name"
    );

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicas", "value": 3},
        {"op": "replace", "path": "/spec/replicas", "value": 1},
        {"op": "remove", "path": "/metadata/labels/team"}
    ]))
    .unwrap();
    let patched = deployments
        .patch("web", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(patched.spec.replicas, Some(1));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/replicas", "value": 7}]))
            .unwrap();
    let status = api_error(
        deployments
            .patch("web", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn a_status_write_changes_only_the_status_and_keeps_the_generation() {
    let cluster = FakeCluster::builder()
        .rollout_delay(std::time::Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .create(&PostParams::default(), &deployment("web", "web:1"))
        .await
        .unwrap();
    let patch =
        json!({"spec": {"replicas": 9}, "status": {"observedGeneration": 1, "readyReplicas": 7}});
    let patched = deployments
        .patch_status("web", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().ready_replicas, Some(7));
    assert_eq!(
        patched.spec.replicas,
        Some(1),
        "a status write ignores the spec"
    );
    assert_eq!(patched.metadata.generation, Some(1));
    let status = deployments.get_status("web").await.unwrap();
    assert_eq!(status.status.unwrap().ready_replicas, Some(7));
}

#[tokio::test]
async fn deleting_a_job_in_the_background_deletes_its_pods_and_by_default_orphans_them() {
    let cluster = FakeCluster::builder()
        .executor(NeverFinishes)
        .start()
        .await
        .unwrap();
    let client = cluster.client();
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for name in ["background", "orphaned"] {
        jobs.create(&PostParams::default(), &job(name, &["sleep", "60"]))
            .await
            .unwrap();
    }
    let pods_of = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels(&format!("job-name={name}")))
                .await
                .unwrap()
                .items
        }
    };
    crate::common::eventually(|| async {
        (pods_of("background").await.len() == 1 && pods_of("orphaned").await.len() == 1)
            .then_some(())
    })
    .await;

    let answer = jobs
        .delete("background", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        answer.is_right(),
        "a deleted Job answers with a Success Status"
    );
    assert!(pods_of("background").await.is_empty());

    jobs.delete("orphaned", &DeleteParams::default())
        .await
        .unwrap();
    let orphans = pods_of("orphaned").await;
    assert_eq!(
        orphans.len(),
        1,
        "batch/v1 Jobs orphan their pods by default"
    );
    assert!(orphans[0].metadata.owner_references.is_none());
}

#[tokio::test]
async fn lists_select_by_label_and_field_and_come_in_pages() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db"), ("d", "cache")] {
        maps.create(
            &PostParams::default(),
            &config_map(name, json!({"tier": tier})),
        )
        .await
        .unwrap();
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        list.items
            .into_iter()
            .map(|m| m.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let by_label = maps
        .list(&ListParams::default().labels("tier in (web,db),tier!=db"))
        .await
        .unwrap();
    assert_eq!(names(by_label), ["a", "b"]);
    let by_field = maps
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .unwrap();
    assert_eq!(names(by_field), ["c"]);

    let first = maps.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let token = first.metadata.continue_.clone().unwrap();
    maps.create(&PostParams::default(), &config_map("e", json!({})))
        .await
        .unwrap();
    let rest = maps
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        names(rest),
        ["d"],
        "later pages come from the first page's snapshot"
    );
    assert_eq!(names(first), ["a", "b", "c"]);
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selector_matches() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    for (name, tier) in [("a", "web"), ("b", "web"), ("c", "db")] {
        maps.create(
            &PostParams::default(),
            &config_map(name, json!({"tier": tier})),
        )
        .await
        .unwrap();
    }
    let deleted = maps
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=web"),
        )
        .await
        .unwrap();
    let gone: Vec<_> = deleted
        .left()
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(gone, ["a", "b"]);
    let left: Vec<_> = maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test]
async fn an_exact_list_at_a_compacted_version_is_a_410() {
    let cluster = FakeCluster::start().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    maps.delete("a", &DeleteParams::default()).await.unwrap();
    let at = ListParams::default().at(&rv).matching(VersionMatch::Exact);
    let past = maps.list(&at).await.unwrap();
    assert_eq!(
        past.items.len(),
        1,
        "an exact read sees the object as it was"
    );
    cluster.compact();
    let status = api_error(maps.list(&at).await);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
}
