//! Pushing releases and recording approvals.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_model::ports::{ApprovalStore, EventStore, InstanceStore, ReleaseStore};
use vergence_model::{InstanceKey, Scope};

use crate::common::{APPROVALS, Api, RELEASES, request};

fn web(channel: &str) -> InstanceKey {
    InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        channel.parse().unwrap(),
    )
}

#[tokio::test]
async fn ci_pushes_a_release_with_a_release_token() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let reply = api
        .call(
            Method::POST,
            RELEASES,
            Some(&ci),
            Some(json!({"version": "v2", "params": {"commit": "abc1234", "workers": "2"}})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["version"], "v2");
    assert_eq!(reply.json["params"]["workers"], json!({"int": 2}));
    assert_eq!(reply.json["params"]["commit"], json!({"string": "abc1234"}));
    assert!(
        reply.json["actor"]
            .as_str()
            .unwrap()
            .starts_with("api:token-")
    );
    let latest = api
        .store
        .latest_release(&"shop".parse().unwrap(), &"web".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.version, "v2");
    let staging = api
        .store
        .get_instance(&web("staging"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(staging.desired.version().map(|v| v.as_str()), Some("v2"));
}

#[tokio::test]
async fn bad_release_input_is_a_400_naming_the_field() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    for (uri, body, field) in [
        (RELEASES, "{", "body"),
        (RELEASES, "{}", "version"),
        (RELEASES, r#"{"version": 2}"#, "version"),
        (RELEASES, r#"{"version": "v 2"}"#, "version"),
        (RELEASES, r#"{"version": "v2", "verison": "v2"}"#, "verison"),
        (
            RELEASES,
            r#"{"version": "v2", "params": {"nope": "1"}}"#,
            "params.nope",
        ),
        (
            RELEASES,
            r#"{"version": "v2", "params": {"workers": "many"}}"#,
            "params.workers",
        ),
        (
            RELEASES,
            r#"{"version": "v2", "params": {"workers": 2}}"#,
            "params.workers",
        ),
        (
            "/v1/applications/shop/services/Web/releases",
            r#"{"version": "v2"}"#,
            "service",
        ),
    ] {
        let reply = api
            .refused(
                request(Method::POST, uri, Some(&ci), Some(body.into())),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{body}: {reply:?}");
    }
}

#[tokio::test]
async fn an_oversized_release_parameter_is_a_400_naming_it_and_stores_nothing() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let body = json!({"version": "v2", "params": {"commit": "x".repeat(40 * 1024)}});
    let reply = api
        .refused(
            request(Method::POST, RELEASES, Some(&ci), Some(body.to_string())),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "params.commit", "{reply:?}");
    assert!(reply.message().contains("32768 bytes"), "{reply:?}");
}

#[tokio::test]
async fn a_version_pushed_again_with_other_parameters_is_a_409_saying_what_differs() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let release = |commit: &str| json!({"version": "v2", "params": {"commit": commit}});
    let reply = api
        .call(Method::POST, RELEASES, Some(&ci), Some(release("abc1234")))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let reply = api
        .refused(
            request(
                Method::POST,
                RELEASES,
                Some(&ci),
                Some(release("def5678").to_string()),
            ),
            StatusCode::CONFLICT,
            "conflict",
        )
        .await;
    let message = reply.message();
    assert!(!message.contains("concurrently"), "{message}");
    assert!(
        message.contains(r#"commit (released "abc1234", now "def5678")"#),
        "{message}"
    );
    assert!(message.contains("as a new version"), "{message}");
}

#[tokio::test]
async fn approving_a_version_never_released_is_a_404_like_rollback() {
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    let reply = api
        .refused(
            request(
                Method::POST,
                APPROVALS,
                Some(&approver),
                Some(json!({"version": "nope"}).to_string()),
            ),
            StatusCode::NOT_FOUND,
            "notFound",
        )
        .await;
    assert!(reply.message().contains("release nope of web"), "{reply:?}");
}

#[tokio::test]
async fn releasing_an_unknown_service_or_application_is_a_404() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let body = json!({"version": "v2"}).to_string();
    api.refused(
        request(
            Method::POST,
            "/v1/applications/shop/services/cart/releases",
            Some(&ci),
            Some(body.clone()),
        ),
        StatusCode::NOT_FOUND,
        "notFound",
    )
    .await;
    let ghost = api.token("ghost", &[Scope::Release]).await;
    api.refused(
        request(
            Method::POST,
            "/v1/applications/ghost/services/web/releases",
            Some(&ghost),
            Some(body),
        ),
        StatusCode::NOT_FOUND,
        "notFound",
    )
    .await;
}

#[tokio::test]
async fn a_version_pushed_again_with_other_params_is_a_conflict() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let first = json!({"version": "v2", "params": {"workers": "2"}});
    assert_eq!(
        api.call(Method::POST, RELEASES, Some(&ci), Some(first.clone()))
            .await
            .status,
        StatusCode::OK
    );
    // The same push again (a redelivered webhook) is fine.
    assert_eq!(
        api.call(Method::POST, RELEASES, Some(&ci), Some(first))
            .await
            .status,
        StatusCode::OK
    );
    let other = json!({"version": "v2", "params": {"workers": "3"}}).to_string();
    api.refused(
        request(Method::POST, RELEASES, Some(&ci), Some(other)),
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
}

#[tokio::test]
async fn an_approver_approves_the_desired_version_or_a_given_one() {
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    // No body: the desired version.
    let reply = api
        .send(request(Method::POST, APPROVALS, Some(&approver), None))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let desired = api.store.get_instance(&web("prod")).await.unwrap().unwrap();
    assert_eq!(
        reply.json["version"],
        desired.desired.version().unwrap().as_str()
    );
    // A given one: released, though no longer the desired one.
    let ci = api.token("shop", &[Scope::Release]).await;
    for version in ["v7", "v8"] {
        let reply = api
            .call(
                Method::POST,
                RELEASES,
                Some(&ci),
                Some(json!({"version": version})),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }
    let reply = api
        .call(
            Method::POST,
            APPROVALS,
            Some(&approver),
            Some(json!({"version": "v7"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let approvals = api.store.list_approvals(&web("prod")).await.unwrap();
    assert_eq!(approvals.len(), 2);
    assert_eq!(approvals[1].version, "v7");
}

#[tokio::test]
async fn approving_needs_the_approve_scope_of_the_same_application() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let reply = api
        .refused(
            request(Method::POST, APPROVALS, Some(&ci), Some("{}".into())),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    let message = reply.message();
    assert!(message.contains("lacks scope approve"), "{message}");
    let other_app = api.token("blog", &[Scope::Admin]).await;
    let reply = api
        .refused(
            request(Method::POST, APPROVALS, Some(&other_app), Some("{}".into())),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    let message = reply.message();
    assert!(
        message.contains("belongs to application blog, not shop"),
        "{message}"
    );
    // An admin of the application may approve.
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .send(request(Method::POST, APPROVALS, Some(&admin), None))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn approving_an_unknown_instance_or_a_bad_version_writes_nothing() {
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    api.refused(
        request(
            Method::POST,
            "/v1/applications/shop/services/web/release-channels/qa/approvals",
            Some(&approver),
            None,
        ),
        StatusCode::NOT_FOUND,
        "notFound",
    )
    .await;
    let reply = api
        .refused(
            request(
                Method::POST,
                APPROVALS,
                Some(&approver),
                Some(r#"{"version": "v/1"}"#.into()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "version");
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/applications/shop/services/web/release-channels/Prod/approvals",
                Some(&approver),
                None,
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "releaseChannel");
}

#[tokio::test]
async fn a_hundred_concurrent_approvals_of_one_instance_keep_a_hundred_events() {
    // The clock stands still: every approval is in the same millisecond.
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    let replies = futures::future::join_all(
        (0..100).map(|_| api.send(request(Method::POST, APPROVALS, Some(&approver), None))),
    )
    .await;
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }
    assert_eq!(
        api.store.list_approvals(&web("prod")).await.unwrap().len(),
        100
    );
    let events = api
        .store
        .list_events(&vergence_model::EventFilter::default())
        .await
        .unwrap();
    let recorded: Vec<_> = events
        .iter()
        .filter(|e| e.kind.name() == "approvalRecorded")
        .collect();
    assert_eq!(recorded.len(), 100, "every approval is in the audit trail");
    let ids: std::collections::BTreeSet<_> = recorded.iter().map(|e| &e.id).collect();
    assert_eq!(ids.len(), 100, "each with an id of its own");
}
