//! Conformance: config snapshots and pointer, releases, tokens, alerts,
//! approvals and events.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::bundle::ConfigBundle;
use crate::error::Error;
use crate::ports::*;
use crate::*;

use super::*;

fn pointer(hash: &str, channels: &[&str]) -> CurrentConfig {
    CurrentConfig {
        hash: hash.into(),
        revision: 0,
        channels: [(
            ApplicationName::parse("shop").expect("name"),
            channels
                .iter()
                .map(|c| ReleaseChannelName::parse(*c).expect("name"))
                .collect(),
        )]
        .into(),
    }
}

pub async fn snapshots_are_immutable_and_idempotent(store: Arc<dyn StateStore>) {
    let bundle = ConfigBundle::from_files(BTreeMap::from([("a.yaml".into(), "x: 1".into())]));
    let snapshot = ConfigSnapshot {
        hash: bundle.hash(),
        bundle,
        created_at: t(0),
        actor: "test".into(),
    };
    store.put_snapshot(&snapshot).await.expect("first put");
    store
        .put_snapshot(&snapshot)
        .await
        .expect("the same snapshot again is fine");
    let read = store.get_snapshot(&snapshot.hash).await.expect("get");
    assert_eq!(read.as_ref(), Some(&snapshot));
    assert_eq!(store.get_snapshot("nope").await.expect("get"), None);

    // A part's version and the composed config that names it read back
    // whole: per-application history lives in these fields.
    let mut part = ConfigBundle::from_files(BTreeMap::from([("shop.yaml".into(), "x: 2".into())]));
    part.part_of = Some(PartOf {
        part: "application:shop".into(),
        previous: Some(snapshot.hash.clone()),
    });
    let mut composed = part.clone();
    composed.part_of = None;
    composed
        .parts
        .insert("application:shop".into(), part.hash());
    for bundle in [part, composed] {
        let snapshot = ConfigSnapshot {
            hash: bundle.hash(),
            bundle,
            created_at: t(1),
            actor: "api:token-ab12".into(),
        };
        store.put_snapshot(&snapshot).await.expect("put a part");
        let read = store
            .get_snapshot(&snapshot.hash)
            .await
            .expect("get a part");
        assert_eq!(read.as_ref(), Some(&snapshot));
    }
}

pub async fn current_config_moves_only_from_the_revision_read(store: Arc<dyn StateStore>) {
    assert_eq!(store.current_config().await.expect("read"), None);
    let first = store
        .set_current_config(&pointer("a", &["staging"]), None)
        .await
        .expect("first pointer");
    let b = pointer("b", &["staging", "prod"]);
    assert!(
        is_conflict(&store.set_current_config(&b, None).await),
        "a pointer exists now"
    );
    assert!(is_conflict(
        &store.set_current_config(&b, Some(first + 7)).await
    ));
    let second = store
        .set_current_config(&b, Some(first))
        .await
        .expect("from the revision read");
    assert!(second > first);
    let read = store.current_config().await.expect("read").expect("set");
    assert_eq!(
        read,
        CurrentConfig {
            revision: second,
            ..b
        }
    );
    assert_eq!(
        read.rank(
            &ApplicationName::parse("shop").unwrap(),
            &ReleaseChannelName::parse("prod").unwrap()
        ),
        Some(1)
    );
}

pub async fn releases_are_immutable_versions_and_the_last_pushed_is_latest(
    store: Arc<dyn StateStore>,
) {
    let release = |version: &str, image: &str, at: i64| Release {
        application: "shop".parse().expect("n"),
        service: "web".parse().expect("n"),
        version: version.parse().expect("version"),
        params: BTreeMap::from([("image".to_owned(), ParamValue::DockerImage(image.into()))]),
        config_fingerprint: "f".into(),
        created_at: t(at),
        actor: "ci".into(),
    };
    let (app, svc) = ("shop".parse().expect("n"), "web".parse().expect("n"));
    assert_eq!(
        store.latest_release(&app, &svc).await.expect("latest"),
        None
    );
    store
        .put_release(&release("v1", "r/w:1", 1))
        .await
        .expect("v1");
    store
        .put_release(&release("v2", "r/w:2", 2))
        .await
        .expect("v2");
    assert_eq!(
        store
            .latest_release(&app, &svc)
            .await
            .expect("latest")
            .map(|r| r.version),
        Some("v2".parse().expect("version"))
    );
    // Rolling back by pushing v1 again makes it latest; its record is unchanged.
    store
        .put_release(&release("v1", "r/w:1", 3))
        .await
        .expect("v1 again");
    let latest = store
        .latest_release(&app, &svc)
        .await
        .expect("latest")
        .expect("some");
    assert_eq!(latest.version, "v1");
    assert_eq!(latest.created_at, t(1), "a release's record is immutable");
    assert!(
        is_conflict(&store.put_release(&release("v2", "r/w:other", 4)).await),
        "same version, other parameters"
    );
    let listed: Vec<Version> = store
        .list_releases(&app, &svc, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.version)
        .collect();
    assert_eq!(listed, vec!["v1", "v2"]);
    let other_service: ServiceName = "api".parse().expect("n");
    assert_eq!(
        store
            .latest_release(&app, &other_service)
            .await
            .expect("latest"),
        None
    );
}

fn web_release(version: &str, image: &str) -> Release {
    Release {
        application: "shop".parse().expect("n"),
        service: "web".parse().expect("n"),
        version: version.parse().expect("version"),
        params: BTreeMap::from([("image".to_owned(), ParamValue::DockerImage(image.into()))]),
        config_fingerprint: "f".into(),
        created_at: t(10),
        actor: "ci".into(),
    }
}

fn web_keys() -> [InstanceKey; 2] {
    [key("shop", "web", "staging"), key("shop", "web", "prod")]
}

/// `release` compiled from config `hash` into `instances`, with one event.
fn release_push(
    release: Release,
    hash: &str,
    instances: &[InstanceRecord],
    event_id: &str,
) -> ReleasePush {
    let mut pushed = event(event_id, &web_keys()[0], t(10));
    pushed.kind = EventKind::ReleaseCreated {
        version: release.version.clone(),
    };
    let instances = instances
        .iter()
        .cloned()
        .map(|mut r| {
            r.config_hash = hash.into();
            r
        })
        .collect();
    ReleasePush {
        release,
        config_hash: hash.into(),
        instances,
        events: vec![pushed],
    }
}

async fn web_instances(store: &dyn StateStore) -> Vec<InstanceRecord> {
    let mut read = Vec::new();
    for k in &web_keys() {
        read.push(store.get_instance(k).await.expect("get").expect("exists"));
    }
    read
}

async fn event_count(store: &dyn StateStore) -> usize {
    let events = store.list_events(&EventFilter::default()).await;
    events.expect("events").len()
}

/// A release pushed with its instances' desired states and its event: all
/// of it, or (the config moved, an instance changed, the version exists
/// with other parameters) none of it.
pub async fn a_release_is_pushed_with_its_instances_all_or_nothing(store: Arc<dyn StateStore>) {
    let (app, svc): (ApplicationName, ServiceName) =
        ("shop".parse().expect("n"), "web".parse().expect("n"));
    store
        .set_current_config(&pointer("h1", &["staging", "prod"]), None)
        .await
        .expect("pointer");
    for k in &web_keys() {
        store
            .commit(put(record(k, None), None))
            .await
            .expect("create");
    }
    let before = web_instances(store.as_ref()).await;

    // Compiled from a config no longer in force: nothing is written.
    let stale = release_push(web_release("v1", "r/w:1"), "h0", &before, "e0");
    assert!(
        is_conflict(&store.push_release(&stale).await),
        "config moved"
    );
    // One instance changed since it was read: nothing is written.
    let mut changed = before.clone();
    changed[1].revision += 1;
    let racing = release_push(web_release("v1", "r/w:1"), "h1", &changed, "e0");
    assert!(
        is_conflict(&store.push_release(&racing).await),
        "instance moved"
    );
    assert_eq!(
        store.latest_release(&app, &svc).await.expect("latest"),
        None
    );
    assert_eq!(web_instances(store.as_ref()).await, before);
    assert_eq!(event_count(store.as_ref()).await, 0);

    let pushed = release_push(web_release("v1", "r/w:1"), "h1", &before, "e1");
    store.push_release(&pushed).await.expect("push");
    let latest = store.latest_release(&app, &svc).await.expect("latest");
    assert_eq!(latest.map(|r| r.version), Some("v1".parse().expect("v")));
    let after = web_instances(store.as_ref()).await;
    for (was, is) in before.iter().zip(&after) {
        assert_eq!(is.revision, was.revision + 1, "{}", is.key);
        assert_eq!(is.config_hash, "h1");
    }
    assert_eq!(event_count(store.as_ref()).await, 1);

    // The same version with other parameters: refused, nothing written.
    let other = release_push(web_release("v1", "r/w:other"), "h1", &after, "e2");
    assert!(is_conflict(&store.push_release(&other).await), "immutable");
    assert_eq!(web_instances(store.as_ref()).await, after);
    assert_eq!(event_count(store.as_ref()).await, 1);
}

pub async fn a_webhook_signature_is_used_once_until_it_expires(store: Arc<dyn StateStore>) {
    let first = "ab".repeat(32);
    let other = "cd".repeat(32);
    assert!(
        store
            .use_webhook_signature(&first, t(0), t(600))
            .await
            .unwrap()
    );
    assert!(
        !store
            .use_webhook_signature(&first, t(1), t(601))
            .await
            .unwrap()
    );
    assert!(
        !store
            .use_webhook_signature(&first, t(599), t(1199))
            .await
            .unwrap()
    );
    assert!(
        store
            .use_webhook_signature(&other, t(1), t(601))
            .await
            .unwrap()
    );
    // Past its expiry the record no longer counts (and may be gone).
    assert!(
        store
            .use_webhook_signature(&first, t(600), t(1200))
            .await
            .unwrap()
    );
    assert!(
        !store
            .use_webhook_signature(&first, t(601), t(1201))
            .await
            .unwrap()
    );
    // Concurrent first uses (two API instances): exactly one wins.
    let racers = (0..8).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .use_webhook_signature(&"ef".repeat(32), t(2), t(602))
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for racer in racers.collect::<Vec<_>>() {
        won += usize::from(racer.await.unwrap());
    }
    assert_eq!(won, 1);
}

pub async fn tokens_are_unique_by_id_and_listed_per_application(store: Arc<dyn StateStore>) {
    use crate::{ApiToken, Scope, TokenSubject};
    let application = |app: &str| TokenSubject::Application(app.parse().unwrap());
    let token = |id: &str, subject: TokenSubject| ApiToken {
        id: id.into(),
        scopes: match subject {
            TokenSubject::Application(_) => vec![Scope::Release],
            TokenSubject::Agent(_) => Vec::new(),
            TokenSubject::Platform => vec![Scope::Platform],
        },
        subject,
        secret_sha256: "ab".repeat(32),
        description: Some("ci".into()),
        created_at: t(1),
        created_by: "cli:alice".into(),
    };
    let agent = TokenSubject::Agent("shop".parse().unwrap());
    store
        .put_token(&token("t1", application("shop")))
        .await
        .unwrap();
    store
        .put_token(&token("t2", application("shop")))
        .await
        .unwrap();
    store
        .put_token(&token("t3", application("blog")))
        .await
        .unwrap();
    store.put_token(&token("t4", agent.clone())).await.unwrap();
    store
        .put_token(&token("t5", TokenSubject::Platform))
        .await
        .unwrap();
    let again = store.put_token(&token("t1", application("blog"))).await;
    assert!(
        matches!(again, Err(Error::Conflict { .. })),
        "an id is never reused: {again:?}"
    );
    assert_eq!(
        store.get_token("t1").await.unwrap(),
        Some(token("t1", application("shop")))
    );
    assert_eq!(
        store.get_token("t4").await.unwrap(),
        Some(token("t4", agent.clone()))
    );
    assert_eq!(store.get_token("nope").await.unwrap(), None);
    let listed = |tokens: Vec<ApiToken>| tokens.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        listed(store.list_tokens(&application("shop")).await.unwrap()),
        vec!["t1".to_owned(), "t2".to_owned()],
        "an agent named like an application has tokens of its own"
    );
    assert_eq!(
        listed(store.list_tokens(&agent).await.unwrap()),
        vec!["t4".to_owned()]
    );
    assert_eq!(
        listed(store.list_tokens(&TokenSubject::Platform).await.unwrap()),
        vec!["t5".to_owned()],
        "platform tokens are listed apart from every application's"
    );
    assert_eq!(
        store.get_token("t5").await.unwrap(),
        Some(token("t5", TokenSubject::Platform))
    );
    assert!(store.delete_token("t1").await.unwrap());
    assert!(!store.delete_token("t1").await.unwrap());
    assert_eq!(store.get_token("t1").await.unwrap(), None);
}

pub async fn alerts_are_replaced_by_name(store: Arc<dyn StateStore>) {
    assert_eq!(store.get_alert("high-errors").await.unwrap(), None);
    assert!(store.list_alerts().await.unwrap().is_empty());
    let firing = AlertState {
        name: "high-errors".into(),
        firing: true,
        since: t(1),
        actor: "cli:alice".into(),
        summary: Some("5xx above 2%".into()),
    };
    store.put_alert(&firing).await.unwrap();
    let resolved = AlertState {
        firing: false,
        since: t(2),
        summary: None,
        ..firing.clone()
    };
    store.put_alert(&resolved).await.unwrap();
    let other = AlertState {
        name: "disk-full".into(),
        ..firing.clone()
    };
    store.put_alert(&other).await.unwrap();
    assert_eq!(
        store.get_alert("high-errors").await.unwrap(),
        Some(resolved.clone())
    );
    let names: Vec<String> = store
        .list_alerts()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(
        names,
        vec!["disk-full".to_owned(), "high-errors".to_owned()]
    );
}

pub async fn approvals_are_listed_per_instance(store: Arc<dyn StateStore>) {
    let prod = key("shop", "web", "prod");
    let staging = key("shop", "web", "staging");
    let approval = |k: &InstanceKey, version: &str, at: i64| Approval {
        instance: k.clone(),
        version: version.parse().expect("version"),
        plan_sha256: None,
        actor: "alice".into(),
        at: t(at),
    };
    store
        .put_approval(&approval(&prod, "v1", 1))
        .await
        .expect("put");
    store
        .put_approval(&approval(&prod, "v2", 2))
        .await
        .expect("put");
    store
        .put_approval(&approval(&staging, "v2", 3))
        .await
        .expect("put");
    let mut versions: Vec<Version> = store
        .list_approvals(&prod)
        .await
        .expect("list")
        .into_iter()
        .map(|a| a.version)
        .collect();
    versions.sort();
    assert_eq!(versions, vec!["v1", "v2"]);
    assert_eq!(
        store.list_approvals(&staging).await.expect("list"),
        vec![approval(&staging, "v2", 3)]
    );
}

pub async fn events_are_appended_once_and_listed_by_filter_and_limit(store: Arc<dyn StateStore>) {
    let web = key("shop", "web", "prod");
    let api = key("shop", "api", "staging");
    let blog = key("blog", "web", "prod");
    let events = vec![
        event("0001", &web, t(1)),
        event("0002", &api, t(2)),
        event("0003", &blog, t(3)),
        event("0004", &web, t(4)),
    ];
    store.append_events(&events).await.expect("append");
    store
        .append_events(&events[..1])
        .await
        .expect("appending the same id again is a no-op");
    let ids = |events: Vec<Event>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .list_events(&EventFilter::default())
            .await
            .expect("all")),
        vec!["0001", "0002", "0003", "0004"]
    );
    let shop = EventFilter {
        application: Some("shop".parse().expect("n")),
        ..Default::default()
    };
    assert_eq!(
        ids(store.list_events(&shop).await.expect("shop")),
        vec!["0001", "0002", "0004"]
    );
    let web_prod = EventFilter {
        application: Some("shop".parse().expect("n")),
        service: Some("web".parse().expect("n")),
        release_channel: Some("prod".parse().expect("n")),
        limit: None,
    };
    assert_eq!(
        ids(store.list_events(&web_prod).await.expect("web")),
        vec!["0001", "0004"]
    );
    let newest_two = EventFilter {
        limit: Some(2),
        ..Default::default()
    };
    assert_eq!(
        ids(store.list_events(&newest_two).await.expect("limit")),
        vec!["0003", "0004"]
    );
}

/// Two writers recording an event about one instance in the same
/// millisecond with the same scope (two approvals at once) both keep it:
/// ids are unique by construction, so neither write replaces or is
/// skipped for the other.
pub async fn two_events_of_one_instance_in_one_millisecond_are_both_kept(
    store: Arc<dyn StateStore>,
) {
    let web = key("shop", "web", "prod");
    let at = t(5);
    let scope = format!("{}@approval-{}", web.storage_id(), at.as_millisecond());
    for actor in ["alice", "bob"] {
        let mut events = vec![Event::for_instance(
            &web,
            at,
            actor,
            EventKind::ApprovalRecorded {
                version: "v1".parse().expect("version"),
            },
            format!("{actor} approved v1"),
        )];
        Event::assign_ids(&mut events, &scope);
        store.append_events(&events).await.expect("append");
    }
    let kept = store
        .list_events(&EventFilter::default())
        .await
        .expect("list");
    let actors: Vec<&str> = kept.iter().map(|e| &*e.actor).collect();
    assert_eq!(actors.len(), 2, "both events are kept: {actors:?}");
    assert!(
        actors.contains(&"alice") && actors.contains(&"bob"),
        "{actors:?}"
    );
}
