//! The delivery metrics route: the four measures of the token's
//! application, over the window the query asks for.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use vergence_model::ports::{Clock, EventStore};
use vergence_model::{Event, EventKind, InstanceKey, Scope};

use crate::common::{Api, START, request};

/// v2 of shop/web pushed at START, converged in staging 5 minutes later
/// and in prod (shop's last channel) 15 minutes later; then a day passes.
async fn v2_in_prod() -> Api {
    let api = Api::new().with_quickstart().await;
    api.control
        .push_release(
            None,
            &"web".parse().unwrap(),
            &"v2".parse().unwrap(),
            &BTreeMap::new(),
            "ci",
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    for (channel, minutes) in [("staging", 5), ("prod", 15)] {
        let key = InstanceKey::new(
            "shop".parse().unwrap(),
            "web".parse().unwrap(),
            channel.parse().unwrap(),
        );
        let at = Timestamp::from_second(START + minutes * 60).unwrap();
        let version = "v2".parse().unwrap();
        let converged = EventKind::Converged { version };
        events.push(Event::for_instance_by(
            &key,
            at,
            "engine",
            converged,
            "converged on v2",
        ));
    }
    Event::assign_ids(&mut events, "test");
    api.store.append_events(&events).await.unwrap();
    api.clock.advance(SignedDuration::from_hours(24));
    api
}

#[tokio::test]
async fn any_token_of_the_application_reads_its_metrics_over_the_window_asked_for() {
    let api = v2_in_prod().await;
    let release = api.token("shop", &[Scope::Release]).await;
    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/metrics?since=7d",
            Some(&release),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let now = api.clock.now();
    let week_before = now - SignedDuration::from_hours(7 * 24);
    assert_eq!(
        reply.json,
        json!({
            "application": "shop",
            "since": week_before.to_string(),
            "until": now.to_string(),
            "windowDays": 7.0,
            "lastReleaseChannels": {"shop": "prod"},
            "deploymentFrequencyPerDay": 1.0 / 7.0,
            "deployments": 1,
            "leadTimeSeconds": {"median": 900.0, "p90": 900.0, "count": 1},
            "changeFailureRate": 0.0,
            "releases": 1,
            "failedReleases": 0,
            "timeToRestoreSeconds": {"median": null, "count": 0}
        })
    );
}

#[tokio::test]
async fn without_since_the_window_is_the_last_30_days() {
    let api = v2_in_prod().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/metrics",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["windowDays"], 30.0);
    assert_eq!(reply.json["deployments"], 1);
    // A window that ended before prod converged measures nothing there.
    let reply = api
        .call(
            Method::GET,
            "/v1/applications/shop/metrics?since=12h",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(reply.json["deployments"], 0, "{reply:?}");
    assert_eq!(reply.json["leadTimeSeconds"]["median"], json!(null));
    assert_eq!(reply.json["changeFailureRate"], json!(null));
}

#[tokio::test]
async fn a_bad_window_is_a_400_and_an_unconfigured_application_a_404() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    for since in ["soon", "1mo", "0d", "-2d", "3651d"] {
        let uri = format!("/v1/applications/shop/metrics?since={since}");
        let reply = api
            .refused(
                request(Method::GET, &uri, Some(&admin), None),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], "since", "{since}: {reply:?}");
    }
    // blog has a token but no config.
    let blog = api.token("blog", &[Scope::Admin]).await;
    let reply = api
        .refused(
            request(
                Method::GET,
                "/v1/applications/blog/metrics",
                Some(&blog),
                None,
            ),
            StatusCode::NOT_FOUND,
            "notFound",
        )
        .await;
    assert!(reply.message().contains("application blog"), "{reply:?}");
}
