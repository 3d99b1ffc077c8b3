//! Reading status and events.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_model::Scope;

use crate::common::{Api, RELEASES, request};

#[tokio::test]
async fn any_token_of_the_application_reads_status_in_the_cli_shape() {
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/status",
            Some(&approver),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let instances = reply.json["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 6);
    let first = instances[0].as_object().unwrap();
    let mut fields: Vec<&str> = first.keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "application",
            "currentVersion",
            "desiredVersion",
            "info",
            "reason",
            "releaseChannel",
            "service",
            "status"
        ]
    );
    assert_eq!(first["status"], "PENDING");
    // Promotion order within a service: staging before prod.
    let order: Vec<(&str, &str)> = instances
        .iter()
        .map(|i| {
            (
                i["service"].as_str().unwrap(),
                i["releaseChannel"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(order[0], ("api", "staging"));
    assert_eq!(order[1], ("api", "prod"));

    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/status?service=web&releaseChannel=prod",
            Some(&approver),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let instances = reply.json["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0]["service"], "web");
    assert_eq!(instances[0]["releaseChannel"], "prod");
}

#[tokio::test]
async fn reading_another_application_or_an_unknown_one_is_refused() {
    let api = Api::new().with_quickstart().await;
    let blog = api.token("blog", &[Scope::Admin]).await;
    for uri in [
        "/v1/applications/shop/status",
        "/v1/applications/shop/events",
    ] {
        let reply = api
            .refused(
                request(Method::GET, uri, Some(&blog), None),
                StatusCode::FORBIDDEN,
                "forbidden",
            )
            .await;
        assert!(reply.message().contains("belongs to application blog"));
        api.refused(
            request(Method::GET, uri, None, None),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    }
    // blog has a token but no config.
    for uri in [
        "/v1/applications/blog/status",
        "/v1/applications/blog/events",
    ] {
        let reply = api
            .refused(
                request(Method::GET, uri, Some(&blog), None),
                StatusCode::NOT_FOUND,
                "notFound",
            )
            .await;
        assert!(reply.message().contains("application blog"));
    }
}

#[tokio::test]
async fn bad_filters_are_a_400_naming_the_parameter() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    for (uri, field) in [
        ("/v1/applications/Shop/status", "application"),
        ("/v1/applications/shop/status?service=Web", "service"),
        (
            "/v1/applications/shop/status?releaseChannel=prod_1",
            "releaseChannel",
        ),
        ("/v1/applications/shop/events?limit=0", "limit"),
        ("/v1/applications/shop/events?limit=ten", "limit"),
        ("/v1/applications/shop/events?limit=10001", "limit"),
        (
            "/v1/applications/shop/events?service=web&service=api",
            "query",
        ),
    ] {
        let reply = api
            .refused(
                request(Method::GET, uri, Some(&admin), None),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{uri}: {reply:?}");
    }
}

#[tokio::test]
async fn events_are_the_audit_trail_newest_last_within_the_limit() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    api.clock.advance(jiff::SignedDuration::from_secs(1));
    let reply = api
        .call(
            Method::POST,
            RELEASES,
            Some(&ci),
            Some(json!({"version": "v2"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    let reply = api
        .call(Method::GET, "/v1/applications/shop/events", Some(&ci), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let events = reply.json["events"].as_array().unwrap();
    assert_eq!(
        events.first().unwrap()["type"],
        "configApplied",
        "{events:?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "releaseCreated");
    assert_eq!(last["version"], "v2");
    assert!(last["actor"].as_str().unwrap().starts_with("api:token-"));

    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/events?service=web&releaseChannel=prod&limit=1",
            Some(&ci),
            None,
        )
        .await;
    let events = reply.json["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["service"], "web");
    assert_eq!(events[0]["releaseChannel"], "prod");
}
