//! Credentials, signatures, limits and routing: what is refused before any
//! control operation runs.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use jiff::SignedDuration;
use serde_json::json;
use vergence_api::{ApiConfig, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_webhook};
use vergence_model::ports::{ReleaseStore, TokenStore};
use vergence_model::{Scope, split_token, token_string};

use crate::common::{APPROVALS, Api, RELEASES, START, request};

const SECRET: &str = "webhook-secret-for-tests";

fn release_body() -> String {
    json!({"version": "v2"}).to_string()
}

#[tokio::test]
async fn health_needs_no_token() {
    let api = Api::new();
    let reply = api.call(Method::GET, "/v1/healthz", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json, json!({"status": "ok"}));
}

#[tokio::test]
async fn missing_malformed_unknown_or_wrong_tokens_are_401_with_a_bearer_challenge() {
    let api = Api::new().with_quickstart().await;
    let good = api.token("shop", &[Scope::Release]).await;
    let (id, secret) = split_token(&good).unwrap();
    // Same id, same length, last character changed: only the constant-time
    // comparison of the secret's hash can tell.
    let mut wrong_secret = secret.to_owned();
    let last = if wrong_secret.ends_with('0') {
        "1"
    } else {
        "0"
    };
    wrong_secret.replace_range(wrong_secret.len() - 1.., last);
    let wrong = token_string(id, &wrong_secret);
    let unknown = token_string(&"f".repeat(32), secret);
    let cases: Vec<(Option<String>, &str)> = vec![
        (None, "missing credentials"),
        (Some("Basic dXNlcjpwYXNz".into()), "must be `Bearer"),
        (Some("Bearer".into()), "must be `Bearer"),
        (Some("Bearer not-a-token".into()), "must be `Bearer"),
        (Some(format!("Bearer {wrong}")), "not valid"),
        (Some(format!("Bearer {unknown}")), "not valid"),
    ];
    for (authorization, says) in cases {
        let mut builder = Request::builder().method(Method::POST).uri(RELEASES);
        if let Some(value) = &authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        let reply = api
            .refused(
                builder.body(Body::from(release_body())).unwrap(),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        let message = reply.message();
        assert!(message.contains(says), "{authorization:?}: {message}");
        assert_eq!(
            reply.headers[header::WWW_AUTHENTICATE],
            "Bearer realm=\"vergence\""
        );
    }
    // The scheme is case-insensitive; the good token works.
    let reply = api
        .send(
            Request::builder()
                .method(Method::POST)
                .uri(RELEASES)
                .header(header::AUTHORIZATION, format!("bearer {good}"))
                .body(Body::from(release_body()))
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn a_revoked_token_stops_working() {
    let api = Api::new().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let (id, _) = split_token(&ci).unwrap();
    assert!(api.store.delete_token(id).await.unwrap());
    api.refused(
        request(Method::POST, RELEASES, Some(&ci), Some(release_body())),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

#[tokio::test]
async fn tokens_are_stored_only_as_a_hash_of_their_secret() {
    let api = Api::new();
    let ci = api.token("shop", &[Scope::Release, Scope::Release]).await;
    let (id, secret) = split_token(&ci).unwrap();
    assert_eq!(id.len(), 32, "16 random bytes, hex");
    assert_eq!(secret.len(), 64, "32 random bytes, hex");
    let stored = api.store.get_token(id).await.unwrap().unwrap();
    assert_eq!(stored.scopes, [Scope::Release], "scopes are deduplicated");
    assert_eq!(stored.secret_sha256, vergence_api::secret_sha256(secret));
    let json = serde_json::to_string(&stored).unwrap();
    assert!(!json.contains(secret), "{json}");
    let other = api.token("shop", &[Scope::Release]).await;
    assert_ne!(split_token(&other).unwrap().0, id, "ids are random");
}

fn signed(token: &str, uri: &str, body: &str, timestamp: i64, secret: &str) -> Request<Body> {
    let mut request = request(Method::POST, uri, Some(token), Some(body.to_owned()));
    let headers = request.headers_mut();
    headers.insert(TIMESTAMP_HEADER, timestamp.to_string().parse().unwrap());
    let signature = sign_webhook(secret, timestamp, body.as_bytes()).unwrap();
    headers.insert(SIGNATURE_HEADER, signature.parse().unwrap());
    request
}

fn signing_api() -> Api {
    Api::with_config(ApiConfig {
        webhook_secret: Some(SECRET.into()),
        ..ApiConfig::default()
    })
}

#[tokio::test]
async fn with_a_webhook_secret_releases_need_a_fresh_valid_signature() {
    let api = signing_api().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let body = release_body();

    // Unsigned, or signed with another secret, or over another body.
    let unsigned = api
        .refused(
            request(Method::POST, RELEASES, Some(&ci), Some(body.clone())),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    assert!(unsigned.message().contains("requires signed webhooks"));
    api.refused(
        signed(&ci, RELEASES, &body, START, "another-secret"),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let mut tampered = signed(&ci, RELEASES, &body, START, SECRET);
    *tampered.body_mut() = Body::from(json!({"version": "v666"}).to_string());
    api.refused(tampered, StatusCode::UNAUTHORIZED, "unauthorized")
        .await;
    let mut bad_header = signed(&ci, RELEASES, &body, START, SECRET);
    bad_header
        .headers_mut()
        .insert(SIGNATURE_HEADER, "md5=abc".parse().unwrap());
    api.refused(bad_header, StatusCode::UNAUTHORIZED, "unauthorized")
        .await;

    // Correctly signed but too old, or too far ahead: a replay.
    for skew in [-301, 301] {
        let reply = api
            .refused(
                signed(&ci, RELEASES, &body, START + skew, SECRET),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        let message = reply.message();
        assert!(message.contains("replayed or stale"), "{message}");
    }

    // Signed four minutes ago: accepted.
    let reply = api
        .send(signed(&ci, RELEASES, &body, START - 240, SECRET))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // The same request replayed six minutes later is refused.
    api.clock.advance(SignedDuration::from_mins(6));
    api.refused(
        signed(&ci, RELEASES, &body, START - 240, SECRET),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
}

#[tokio::test]
async fn a_signed_release_replayed_within_the_window_is_refused_and_changes_nothing() {
    let api = signing_api().with_quickstart().await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let v40 = json!({"version": "v40"}).to_string();
    let v41 = json!({"version": "v41"}).to_string();
    let reply = api.send(signed(&ci, RELEASES, &v40, START, SECRET)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    api.clock.advance(SignedDuration::from_secs(30));
    let reply = api
        .send(signed(&ci, RELEASES, &v41, START + 30, SECRET))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    // The captured v40 request, sent again a minute later (well within
    // the 300 s window): refused, and v41 stays the latest release.
    api.clock.advance(SignedDuration::from_secs(30));
    let reply = api
        .refused(
            signed(&ci, RELEASES, &v40, START, SECRET),
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    let message = reply.message();
    assert!(message.contains("replayed"), "{message}");
    assert!(message.contains("already used"), "{message}");
    let releases = api
        .store
        .list_releases(&"shop".parse().unwrap(), &"web".parse().unwrap(), 10)
        .await
        .unwrap();
    assert_eq!(releases.first().map(|r| r.version.as_str()), Some("v41"));
    // Re-signed, the same release goes through: it is the signature that
    // is used up, not the version.
    let reply = api
        .send(signed(&ci, RELEASES, &v40, START + 60, SECRET))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn with_a_webhook_secret_alertmanager_needs_a_signature_and_approvals_do_not() {
    let api = signing_api().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let body =
        json!({"alerts": [{"status": "firing", "labels": {"alertname": "down"}}]}).to_string();
    api.refused(
        request(
            Method::POST,
            "/v1/alerts/alertmanager",
            Some(&admin),
            Some(body.clone()),
        ),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let reply = api
        .send(signed(
            &admin,
            "/v1/alerts/alertmanager",
            &body,
            START,
            SECRET,
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // Approvals come from people with their own token, not from a webhook.
    let reply = api
        .send(request(Method::POST, APPROVALS, Some(&admin), None))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_json_413() {
    let api = Api::with_config(ApiConfig {
        max_body_bytes: 1024,
        ..ApiConfig::default()
    })
    .with_quickstart()
    .await;
    let ci = api.token("shop", &[Scope::Release]).await;
    let big = json!({"version": "v2", "params": {"replicas": "1".repeat(2000)}}).to_string();
    let reply = api
        .refused(
            request(Method::POST, RELEASES, Some(&ci), Some(big.clone())),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payloadTooLarge",
        )
        .await;
    assert_eq!(
        reply.error()["message"],
        "the request body is larger than the limit of 1024 bytes"
    );
    // Without a Content-Length (a streamed body) the limit holds too.
    let stream = Body::from_stream(futures_stream(big));
    let request = Request::builder()
        .method(Method::POST)
        .uri(RELEASES)
        .header(header::AUTHORIZATION, format!("Bearer {ci}"))
        .body(stream)
        .unwrap();
    api.refused(request, StatusCode::PAYLOAD_TOO_LARGE, "payloadTooLarge")
        .await;
    let releases = api
        .store
        .list_releases(&"shop".parse().unwrap(), &"web".parse().unwrap(), 10)
        .await
        .unwrap();
    assert!(releases.is_empty());
}

/// A body in 100-byte chunks, without a known length.
fn futures_stream(text: String) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> {
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = text
        .into_bytes()
        .chunks(100)
        .map(|c| Ok(c.to_vec()))
        .collect();
    futures::stream::iter(chunks)
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let api = Api::new();
    let reply = api.call(Method::GET, "/v1/nope", None, None).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error()["code"], "notFound");
    let reply = api.call(Method::DELETE, "/v1/configs", None, None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.error()["code"], "methodNotAllowed");
}
