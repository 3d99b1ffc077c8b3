//! Alert states: by name and from Alertmanager's webhook.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_model::Scope;
use vergence_model::ports::AlertStore;

use crate::common::{Api, request};

const ALERTMANAGER: &str = "/v1/alerts/alertmanager";

/// What Alertmanager 0.27 posts (webhook version 4), trimmed to two alerts.
fn alertmanager_payload() -> serde_json::Value {
    json!({
        "version": "4",
        "groupKey": "{}:{alertname=\"HighErrorRate\"}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "vergence",
        "groupLabels": {"alertname": "HighErrorRate"},
        "commonLabels": {"severity": "page"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "HighErrorRate", "service": "web"},
                "annotations": {"summary": "5% of requests fail"},
                "startsAt": "2027-01-15T10:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph",
                "fingerprint": "a1b2c3"
            },
            {
                "status": "resolved",
                "labels": {"alertname": "disk_full"},
                "annotations": {},
                "startsAt": "2027-01-15T09:00:00Z",
                "endsAt": "2027-01-15T09:30:00Z",
                "generatorURL": "http://prometheus:9090/graph",
                "fingerprint": "d4e5f6"
            }
        ]
    })
}

#[tokio::test]
async fn an_admin_sets_an_alert_by_name() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::PUT,
            "/v1/alerts/high-error-rate",
            Some(&admin),
            Some(json!({"state": "firing", "summary": "5xx above 2%"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["state"], "firing");
    let alert = api
        .store
        .get_alert("high-error-rate")
        .await
        .unwrap()
        .unwrap();
    assert!(alert.firing);
    assert_eq!(alert.summary.as_deref(), Some("5xx above 2%"));
    assert!(alert.actor.starts_with("api:token-"));

    let reply = api
        .call(
            Method::PUT,
            "/v1/alerts/high-error-rate",
            Some(&admin),
            Some(json!({"state": "resolved"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert!(
        !api.store
            .get_alert("high-error-rate")
            .await
            .unwrap()
            .unwrap()
            .firing
    );
}

#[tokio::test]
async fn setting_an_alert_needs_an_admin_token_and_valid_input() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release, Scope::Approve]).await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let body = || Some(json!({"state": "firing"}).to_string());
    api.refused(
        request(Method::PUT, "/v1/alerts/high-error-rate", Some(&ci), body()),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
    for (uri, body, field) in [
        ("/v1/alerts/High_Errors", body(), "name"),
        (
            "/v1/alerts/high-error-rate",
            Some(r#"{"state": "on"}"#.into()),
            "state",
        ),
        ("/v1/alerts/high-error-rate", Some("{}".into()), "state"),
        ("/v1/alerts/high-error-rate", None, "body"),
    ] {
        let reply = api
            .refused(
                request(Method::PUT, uri, Some(&admin), body),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{uri}: {reply:?}");
    }
}

#[tokio::test]
async fn alertmanager_webhooks_set_every_alert_under_its_vergence_name() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::POST,
            ALERTMANAGER,
            Some(&admin),
            Some(alertmanager_payload()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let names: Vec<&str> = reply.json["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["disk-full", "higherrorrate"]);
    let firing = api.store.get_alert("higherrorrate").await.unwrap().unwrap();
    assert!(firing.firing);
    assert_eq!(firing.summary.as_deref(), Some("5% of requests fail"));
    let resolved = api.store.get_alert("disk-full").await.unwrap().unwrap();
    assert!(!resolved.firing);
}

#[tokio::test]
async fn one_unusable_alert_refuses_the_whole_alertmanager_payload() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut payload = alertmanager_payload();
    payload["alerts"][1]["labels"]["alertname"] = json!("5xxErrors");
    let reply = api
        .refused(
            request(
                Method::POST,
                ALERTMANAGER,
                Some(&admin),
                Some(payload.to_string()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "alerts[1].labels.alertname");

    let mut payload = alertmanager_payload();
    payload["alerts"][0]["status"] = json!("pending");
    let reply = api
        .refused(
            request(
                Method::POST,
                ALERTMANAGER,
                Some(&admin),
                Some(payload.to_string()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "alerts[0].status");

    let ci = api.token("shop", &[Scope::Release]).await;
    api.refused(
        request(
            Method::POST,
            ALERTMANAGER,
            Some(&ci),
            Some(alertmanager_payload().to_string()),
        ),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
}
