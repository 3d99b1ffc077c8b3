//! List and watch as `kube::runtime` uses them: the watcher's list-then-
//! watch, bookmarks, streaming lists, re-listing after 410 Expired, the
//! reflector, out-of-band edits and selector-scoped watches.

use std::time::Duration;

use crate::common::{eventually, typed, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use vergence_fake_kube::{FakeCluster, Rollout};

fn config_map(name: &str, value: &str) -> ConfigMap {
    typed(json!({"metadata": {"name": name, "labels": {"app": "demo"}}, "data": {"k": value}}))
}

fn web(replicas: i64, image: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": image}]}}}
    })
}

async fn next<T>(
    events: &mut (impl futures::Stream<Item = Result<T, watcher::Error>> + Unpin),
) -> T {
    within(5, events.try_next()).await.unwrap().unwrap()
}

async fn fast_cluster() -> FakeCluster {
    FakeCluster::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted_and_bookmarks() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    maps.create(&PostParams::default(), &config_map("before", "1"))
        .await
        .unwrap();
    let mut events = watcher::watcher(maps.clone(), watcher::Config::default()).boxed();
    assert!(matches!(next(&mut events).await, Event::Init));
    assert!(
        matches!(next(&mut events).await, Event::InitApply(m) if m.metadata.name.as_deref() == Some("before"))
    );
    assert!(matches!(next(&mut events).await, Event::InitDone));

    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    assert!(
        matches!(next(&mut events).await, Event::Apply(m) if m.data.as_ref().unwrap()["k"] == "1")
    );
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next(&mut events).await, Event::Apply(m) if m.data.as_ref().unwrap()["k"] == "2")
    );
    maps.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        matches!(next(&mut events).await, Event::Delete(m) if m.metadata.name.as_deref() == Some("a"))
    );

    let watch = cluster.requests().into_iter().find(|r| r.watch).unwrap();
    assert!(watch.has_param("allowWatchBookmarks", "true"), "{watch:?}");
    assert!(watch.has_param("timeoutSeconds", "290"), "{watch:?}");

    // The raw stream: a bookmark carries the latest resourceVersion.
    let latest = cluster.resource_version().to_string();
    let mut raw = maps
        .watch(&WatchParams::default(), &latest)
        .await
        .unwrap()
        .boxed();
    match within(5, raw.try_next()).await.unwrap().unwrap() {
        WatchEvent::Bookmark(bookmark) => {
            assert_eq!(bookmark.metadata.resource_version, latest);
            assert_eq!(
                (
                    bookmark.types.kind.as_str(),
                    bookmark.types.api_version.as_str()
                ),
                ("ConfigMap", "v1")
            );
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_an_old_version_replays_what_happened_since() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let from = cluster.resource_version().to_string();
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    maps.delete("a", &DeleteParams::default()).await.unwrap();
    let wp = WatchParams::default().disable_bookmarks();
    let events: Vec<_> = within(
        5,
        maps.watch(&wp, &from).await.unwrap().take(3).try_collect(),
    )
    .await
    .unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Modified(_) => "MODIFIED",
            WatchEvent::Deleted(_) => "DELETED",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_one_410_error_event() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    // The raw answer: 200 with one ERROR event holding a 410 Expired Status.
    let old = cluster.resource_version().to_string();
    maps.create(&PostParams::default(), &config_map("b", "1"))
        .await
        .unwrap();
    cluster.compact();
    let first = within(
        5,
        maps.watch(&WatchParams::default(), &old)
            .await
            .unwrap()
            .boxed()
            .try_next(),
    )
    .await;
    match first.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_relists() {
    let cluster = fast_cluster().await;
    let client = cluster.client();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();

    // Through the real watcher: between its list and its watch, history is
    // compacted past the listed version, so the watch answers 410 and the
    // watcher lists again.
    let config = watcher::Config::default().disable_bookmarks();
    let mut events = watcher::watcher(maps.clone(), config).boxed();
    let mut lists_done = 0;
    let mut expired = false;
    while lists_done < 2 {
        match within(10, events.next()).await.unwrap() {
            Ok(Event::InitDone) => {
                lists_done += 1;
                if lists_done == 1 {
                    // A change elsewhere moves the latest version past the
                    // watcher's, then history goes.
                    let others: Api<k8s_openapi::api::core::v1::Secret> =
                        Api::namespaced(client.clone(), "default");
                    others
                        .create(
                            &PostParams::default(),
                            &typed(json!({"metadata": {"name": "s"}})),
                        )
                        .await
                        .unwrap();
                    cluster.compact();
                }
            }
            Err(watcher::Error::WatchError(status)) => {
                assert_eq!(status.code, 410);
                expired = true;
            }
            Ok(_) => {}
            Err(other) => panic!("unexpected watcher error {other}"),
        }
    }
    assert!(expired, "the watcher saw the 410 before re-listing");
    assert_eq!(
        cluster.count(|r| r.is_list() && r.path.ends_with("/configmaps")),
        2
    );
}

#[tokio::test]
async fn a_streaming_list_watcher_starts_from_one_watch_without_listing() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    let mut events =
        watcher::watcher(maps.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut seen = Vec::new();
    loop {
        match within(5, events.try_next()).await.unwrap().unwrap() {
            Event::InitApply(m) => seen.push(m.metadata.name.unwrap()),
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, ["a"]);
    let watch = cluster.requests().into_iter().find(|r| r.watch).unwrap();
    assert!(
        watch.has_param("sendInitialEvents", "true")
            && watch.has_param("resourceVersionMatch", "NotOlderThan")
    );
    assert_eq!(cluster.count(|r| r.is_list()), 0);
}

#[tokio::test]
async fn an_out_of_band_edit_is_a_modified_event_and_bumps_generation() {
    let cluster = fast_cluster().await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .patch(
            "web",
            &PatchParams::apply("vergence"),
            &Patch::Apply(web(2, "web:1")),
        )
        .await
        .unwrap();
    eventually(|| async {
        cluster
            .object("Deployment", "default", "web")
            .unwrap()
            .filter(|d| d["status"]["availableReplicas"] == 2)
    })
    .await;
    let from = cluster.resource_version().to_string();
    let mut raw = deployments
        .watch(&WatchParams::default().disable_bookmarks(), &from)
        .await
        .unwrap()
        .boxed();
    cluster
        .edit("Deployment", "default", "web", |d| {
            d["spec"]["replicas"] = json!(5)
        })
        .unwrap();
    let edited = loop {
        match within(5, raw.try_next()).await.unwrap().unwrap() {
            WatchEvent::Modified(d) if d.spec.replicas == Some(5) => break d,
            _ => {}
        }
    };
    assert_eq!(edited.metadata.generation, Some(2));
    let managers: Vec<_> = edited
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"kubectl-edit".to_owned()),
        "{managers:?}"
    );
}

/// The cached Deployment once its status shows the current generation with
/// `available` replicas and a `Progressing` condition of `reason`.
fn rolled_out(
    reader: &reflector::Store<Deployment>,
    available: i32,
    reason: &str,
) -> Option<Deployment> {
    let found = reader.get(&ObjectRef::new("web").within("default"))?;
    let status = found.status.clone().unwrap_or_default();
    let progressing = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_.as_deref() == Some("Progressing"));
    let reached = status.observed_generation == found.metadata.generation
        && status.available_replicas.unwrap_or(0) == available
        && progressing.and_then(|c| c.reason).as_deref() == Some(reason);
    reached.then(|| (*found).clone())
}

#[tokio::test]
async fn reflector_store_follows_deployment_rollout_status() {
    let cluster = fast_cluster().await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(deployments.clone(), watcher::Config::default()),
    );
    tokio::spawn(stream.applied_objects().for_each(|_| async {}));
    let status_of = |available: i32, reason: &'static str| {
        let reader = reader.clone();
        move || std::future::ready(rolled_out(&reader, available, reason))
    };

    deployments
        .patch(
            "web",
            &PatchParams::apply("vergence"),
            &Patch::Apply(web(3, "web:1")),
        )
        .await
        .unwrap();
    let healthy = eventually(status_of(3, "NewReplicaSetAvailable")).await;
    assert_eq!(healthy.status.unwrap().updated_replicas, Some(3));
    within(
        5,
        await_condition(
            deployments.clone(),
            "web",
            conditions::is_deployment_completed(),
        ),
    )
    .await
    .unwrap();

    cluster.set_rollout("default", "Deployment", "web", Rollout::Stuck);
    deployments
        .patch(
            "web",
            &PatchParams::apply("vergence"),
            &Patch::Apply(web(3, "web:2")),
        )
        .await
        .unwrap();
    let stuck = eventually(status_of(2, "ReplicaSetUpdated")).await;
    assert_eq!(stuck.status.unwrap().updated_replicas, Some(2));

    cluster.set_rollout(
        "default",
        "Deployment",
        "web",
        Rollout::ProgressDeadlineExceeded,
    );
    let failed = eventually(status_of(2, "ProgressDeadlineExceeded")).await;
    let progressing = failed
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_.as_deref() == Some("Progressing"))
        .unwrap();
    assert_eq!(progressing.status.as_deref(), Some("False"));
}

#[tokio::test]
async fn a_label_selected_watch_sees_an_object_leave_as_deleted() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let from = cluster.resource_version().to_string();
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    let wp = WatchParams::default()
        .labels("app=demo")
        .disable_bookmarks();
    let events: Vec<_> = within(
        5,
        maps.watch(&wp, &from).await.unwrap().take(2).try_collect(),
    )
    .await
    .unwrap();
    assert!(matches!(&events[0], WatchEvent::Added(_)));
    assert!(
        matches!(&events[1], WatchEvent::Deleted(m) if m.metadata.labels.as_ref().unwrap()["app"] == "other")
    );
}

#[tokio::test]
async fn a_steady_watcher_costs_one_list_and_a_watch_not_a_list_per_poll() {
    let cluster = fast_cluster().await;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(maps.clone(), watcher::Config::default()),
    );
    tokio::spawn(stream.applied_objects().for_each(|_| async {}));
    maps.create(&PostParams::default(), &config_map("a", "1"))
        .await
        .unwrap();
    eventually(|| std::future::ready(reader.get(&ObjectRef::new("a").within("default")))).await;
    // Several bookmark intervals of "polling" the cache.
    for _ in 0..10 {
        assert!(reader.get(&ObjectRef::new("a").within("default")).is_some());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cluster.count(|r| r.is_list()), 1);
    assert_eq!(cluster.count(|r| r.watch), 1);
}
