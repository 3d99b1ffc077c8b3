//! The routes the CLI's remote mode needs beyond releases and approvals:
//! planning a config, pinning and unpinning one instance, pausing,
//! resuming and re-checking many at once, and where a rollout stands.
//! Every refusal names what is wrong and writes nothing.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use vergence_model::ports::InstanceStore;
use vergence_model::{InstanceKey, Scope};

use crate::common::{Api, quickstart_files, quickstart_push, request};

const INSTANCE: &str = "/v1/applications/shop/services/web/release-channels/prod";

fn web_prod() -> InstanceKey {
    InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        "prod".parse().unwrap(),
    )
}

async fn release(api: &Api, versions: &[&str]) {
    let web = "web".parse().unwrap();
    for version in versions {
        api.control
            .push_release(
                Some("shop".parse().unwrap()),
                &web,
                &version.parse().unwrap(),
                &BTreeMap::new(),
                "test",
            )
            .await
            .unwrap();
    }
}

fn body(value: Value) -> Option<String> {
    Some(value.to_string())
}

#[tokio::test]
async fn a_plan_says_what_a_push_would_change_and_stores_nothing() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = quickstart_files();
    files.remove("services.yaml");
    let before = api.footprint().await;
    let reply = api
        .call(
            Method::POST,
            "/v1/configs/plan",
            Some(&admin),
            Some(json!({ "files": files })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(api.footprint().await, before, "a plan stored something");
    let actions: Vec<(&str, &str)> = reply.json["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["instance"]["service"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
            )
        })
        .collect();
    // Without its services file every instance would leave management.
    assert_eq!(actions.len(), 6, "{reply:?}");
    assert!(actions.iter().all(|(_, a)| *a == "remove"), "{actions:?}");
    assert!(reply.json["hash"].is_string());

    let same = api
        .call(
            Method::POST,
            "/v1/configs/plan",
            Some(&admin),
            Some(quickstart_push()),
        )
        .await;
    // The same config: each instance keeps what it wants; nothing has
    // converged yet, so each is still to be brought there.
    for entry in same.json["instances"].as_array().unwrap() {
        assert_eq!(entry["action"], "update", "{entry}");
        assert!(entry["desiredVersion"].is_string(), "{entry}");
    }
    assert_eq!(api.footprint().await, before, "a plan stored something");
}

#[tokio::test]
async fn a_plan_of_a_bad_config_is_refused_with_every_error() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = quickstart_files();
    let services = files.get_mut("services.yaml").unwrap();
    *services = services.replace("runtime: files-structured", "runtime: nope");
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs/plan",
                Some(&admin),
                body(json!({ "files": files })),
            ),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    let errors = reply.error()["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("services.yaml")),
        "{reply:?}"
    );
    for (bad, field) in [
        (json!({}), "files"),
        (json!({"files": {}}), "files"),
        (json!({"files": {"../x.yaml": ""}}), "files[\"../x.yaml\"]"),
        (json!({"files": {"a.yaml": ""}, "extra": 1}), "extra"),
    ] {
        let reply = api
            .refused(
                request(Method::POST, "/v1/configs/plan", Some(&admin), body(bad)),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{reply:?}");
    }
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs/plan?application=Shop",
                Some(&admin),
                body(quickstart_push()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "application", "{reply:?}");
}

#[tokio::test]
async fn pin_holds_an_instance_on_a_release_and_unpin_lets_it_follow_again() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    release(&api, &["v1", "v2"]).await;
    let reply = api
        .call(
            Method::POST,
            &format!("{INSTANCE}/pin"),
            Some(&admin),
            Some(json!({"version": "v1"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["desiredVersion"], "v1", "{reply:?}");
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    let pin = record.controls.pinned.expect("pinned");
    assert!(pin.actor.starts_with("api:token-"), "{}", pin.actor);

    let reply = api
        .call(
            Method::POST,
            &format!("{INSTANCE}/unpin"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["desiredVersion"], "v2", "{reply:?}");
}

#[tokio::test]
async fn a_bad_pin_names_what_is_wrong_and_writes_nothing() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    release(&api, &["v1"]).await;
    let pin = format!("{INSTANCE}/pin");
    for (bad, field) in [
        (None, "body"),
        (body(json!({})), "version"),
        (body(json!({"version": "v 1"})), "version"),
        (body(json!({"verison": "v1"})), "verison"),
        (Some("{".to_owned()), "body"),
    ] {
        let reply = api
            .refused(
                request(Method::POST, &pin, Some(&admin), bad),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{reply:?}");
    }
    // A version never released, and an instance that does not exist.
    let reply = api
        .refused(
            request(
                Method::POST,
                &pin,
                Some(&admin),
                body(json!({"version": "v9"})),
            ),
            StatusCode::NOT_FOUND,
            "notFound",
        )
        .await;
    assert!(reply.message().contains("release v9 of web"), "{reply:?}");
    api.refused(
        request(
            Method::POST,
            "/v1/applications/shop/services/web/release-channels/qa/pin",
            Some(&admin),
            body(json!({"version": "v1"})),
        ),
        StatusCode::NOT_FOUND,
        "notFound",
    )
    .await;
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/applications/shop/services/Web/release-channels/prod/unpin",
                Some(&admin),
                None,
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "service", "{reply:?}");
}

#[tokio::test]
async fn pause_resume_and_checks_work_on_the_instances_the_body_names() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::POST,
            "/v1/applications/shop/pause",
            Some(&admin),
            Some(json!({"releaseChannel": "prod"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let paused: Vec<String> = reply.json["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| format!("{}@{}", k["service"], k["releaseChannel"]))
        .collect();
    assert_eq!(paused.len(), 3, "{paused:?}");
    assert!(paused.iter().all(|k| k.ends_with("\"prod\"")), "{paused:?}");
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    assert!(record.controls.paused.is_some());

    // Without a body: every instance of the application.
    let reply = api
        .call(
            Method::POST,
            "/v1/applications/shop/resume",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["instances"].as_array().unwrap().len(), 6);
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    assert!(record.controls.paused.is_none());

    let reply = api
        .call(
            Method::POST,
            "/v1/applications/shop/checks",
            Some(&admin),
            Some(json!({"service": "web"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["instances"].as_array().unwrap().len(), 2);
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    assert!(record.state.checks_requested);
}

#[tokio::test]
async fn pause_resume_and_checks_refuse_bad_input_and_write_nothing() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let release = api.token("shop", &[Scope::Release]).await;
    for action in ["pause", "resume", "checks"] {
        let uri = format!("/v1/applications/shop/{action}");
        for (bad, field) in [
            (body(json!({"service": "Web"})), "service"),
            (body(json!({"releaseChannel": "pr od"})), "releaseChannel"),
            (body(json!({"channel": "prod"})), "channel"),
            (body(json!([])), "body"),
        ] {
            let reply = api
                .refused(
                    request(Method::POST, &uri, Some(&admin), bad),
                    StatusCode::BAD_REQUEST,
                    "invalidRequest",
                )
                .await;
            assert_eq!(reply.error()["field"], field, "{action}: {reply:?}");
        }
        let reply = api
            .refused(
                request(
                    Method::POST,
                    &uri,
                    Some(&admin),
                    body(json!({"service": "nope"})),
                ),
                StatusCode::NOT_FOUND,
                "notFound",
            )
            .await;
        assert!(reply.message().contains("matching the filter"), "{reply:?}");
        let reply = api
            .refused(
                request(Method::POST, &uri, Some(&release), None),
                StatusCode::FORBIDDEN,
                "forbidden",
            )
            .await;
        assert!(reply.message().contains("lacks scope admin"), "{reply:?}");
    }
}

#[tokio::test]
async fn the_rollout_says_what_the_engine_has_yet_to_look_at() {
    let api = Api::new().with_quickstart().await;
    let reader = api.token("shop", &[Scope::Release]).await;
    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/rollout",
            Some(&reader),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let current = api.control.current_config().await.unwrap().unwrap();
    assert_eq!(reply.json["config"], current.hash.as_str());
    let instances = reply.json["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 6);
    // Just added: the engine has looked at none of them.
    for instance in instances {
        assert_eq!(instance["awaitingEngine"], true, "{instance}");
        assert_eq!(instance["status"], "PENDING", "{instance}");
        assert_eq!(instance["failedRelease"], false, "{instance}");
    }
    let reply = api
        .refused(
            request(
                Method::GET,
                "/v1/applications/blog/rollout",
                Some(&reader),
                None,
            ),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    assert!(reply.message().contains("not blog"), "{reply:?}");
    let blog = api.token("blog", &[Scope::Admin]).await;
    api.refused(
        request(
            Method::GET,
            "/v1/applications/blog/rollout",
            Some(&blog),
            None,
        ),
        StatusCode::NOT_FOUND,
        "notFound",
    )
    .await;
    let reply = api
        .refused(
            request(
                Method::GET,
                "/v1/applications/-shop/rollout",
                Some(&reader),
                None,
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "application", "{reply:?}");
}
