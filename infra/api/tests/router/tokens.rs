//! An application's admin manages its tokens through the API: list them
//! (never a secret), create them with scopes no wider than its own, revoke
//! them; never another application's, an agent's or the platform's.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_model::ports::TokenStore;
use vergence_model::{Scope, TokenSubject, split_token};

use crate::common::{Api, request};

const TOKENS: &str = "/v1/applications/shop/tokens";

#[tokio::test]
async fn an_admin_creates_lists_and_revokes_its_applications_tokens() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::POST,
            TOKENS,
            Some(&admin),
            Some(json!({"scopes": ["release"], "description": "GitHub Actions"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let token = reply.json["token"].as_str().unwrap().to_owned();
    let (id, _) = split_token(&token).expect("vgt_<id>_<secret>");
    assert_eq!(reply.json["id"], id);
    assert_eq!(reply.json["scopes"], json!(["release"]));
    let created_by = reply.json["createdBy"].as_str().unwrap();
    assert!(created_by.starts_with("api:token-"), "{created_by}");

    // The new token works, within its scope.
    let status = api
        .call(
            Method::GET,
            "/v1/applications/shop/status",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status.status, StatusCode::OK, "{status:?}");

    let list = api.call(Method::GET, TOKENS, Some(&admin), None).await;
    assert_eq!(list.status, StatusCode::OK, "{list:?}");
    let text = list.json.to_string();
    assert!(text.contains(id), "{text}");
    assert!(!text.contains("secret"), "a list shows no secret: {text}");
    let stored = api.store.get_token(id).await.unwrap().unwrap();
    assert!(!text.contains(&stored.secret_sha256), "{text}");

    let revoked = api
        .call(
            Method::DELETE,
            &format!("{TOKENS}/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{revoked:?}");
    assert_eq!(revoked.json["id"], id);
    let refused = api
        .call(
            Method::GET,
            "/v1/applications/shop/status",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{refused:?}");
}

#[tokio::test]
async fn a_token_is_never_wider_than_its_maker_nor_of_another_kind() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    for (bad, field) in [
        (json!({}), "scopes"),
        (json!({"scopes": []}), "scopes"),
        (json!({"scopes": ["root"]}), "scopes[0]"),
        (json!({"scopes": ["release"], "agent": "prod-eu"}), "agent"),
        (
            json!({"scopes": ["release"], "description": "x".repeat(201)}),
            "description",
        ),
    ] {
        let reply = api
            .refused(
                request(Method::POST, TOKENS, Some(&admin), Some(bad.to_string())),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{bad}: {reply:?}");
    }
    // The platform's scope is no application token's to hand out.
    let reply = api
        .refused(
            request(
                Method::POST,
                TOKENS,
                Some(&admin),
                Some(json!({"scopes": ["platform"]}).to_string()),
            ),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    assert!(reply.message().contains("scope platform"), "{reply:?}");
    // Only an admin manages tokens: a release token can neither list nor
    // make one (not even a release token like itself).
    let release = api.token("shop", &[Scope::Release]).await;
    for (method, uri, body) in [
        (Method::GET, TOKENS.to_owned(), None),
        (
            Method::POST,
            TOKENS.to_owned(),
            Some(json!({"scopes": ["release"]}).to_string()),
        ),
    ] {
        let reply = api
            .refused(
                request(method, &uri, Some(&release), body),
                StatusCode::FORBIDDEN,
                "forbidden",
            )
            .await;
        assert!(reply.message().contains("lacks scope admin"), "{reply:?}");
    }
    // Another application's admin cannot make shop's tokens.
    let blog = api.token("blog", &[Scope::Admin]).await;
    api.refused(
        request(
            Method::POST,
            TOKENS,
            Some(&blog),
            Some(json!({"scopes": ["admin"]}).to_string()),
        ),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn revoking_names_no_token_of_another_application_and_refuses_bad_ids() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let blogs = api.token("blog", &[Scope::Release]).await;
    let (blog_id, _) = split_token(&blogs).unwrap();
    let unknown = "0".repeat(32);
    for id in [blog_id, unknown.as_str()] {
        let reply = api
            .refused(
                request(
                    Method::DELETE,
                    &format!("{TOKENS}/{id}"),
                    Some(&admin),
                    None,
                ),
                StatusCode::NOT_FOUND,
                "notFound",
            )
            .await;
        assert!(reply.message().contains("of application shop"), "{reply:?}");
    }
    // blog's token still works.
    assert!(
        api.store
            .list_tokens(&TokenSubject::Application("blog".parse().unwrap()))
            .await
            .unwrap()
            .iter()
            .any(|t| t.id == blog_id)
    );
    for id in ["not-hex", &"a".repeat(65)] {
        let reply = api
            .refused(
                request(
                    Method::DELETE,
                    &format!("{TOKENS}/{id}"),
                    Some(&admin),
                    None,
                ),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], "id", "{reply:?}");
    }
}
