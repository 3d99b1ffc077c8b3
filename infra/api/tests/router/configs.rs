//! Uploading config bundles.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_model::ConfigBundle;
use vergence_model::Scope;
use vergence_model::ports::ConfigStore;

use crate::common::{Api, quickstart_files, quickstart_push, request, two_applications};

#[tokio::test]
async fn an_admin_applies_a_config_and_gets_the_report() {
    let api = Api::new();
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reply = api
        .call(
            Method::POST,
            "/v1/configs",
            Some(&admin),
            Some(quickstart_push()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(
        reply.json["added"].as_array().unwrap().len(),
        6,
        "{reply:?}"
    );
    assert_eq!(reply.json["unchanged"], 0);
    let hash = reply.json["hash"].as_str().unwrap();
    assert_eq!(
        api.store.current_config().await.unwrap().unwrap().hash,
        hash
    );
    // The event names the token, not a person.
    let events = api.control.events(&Default::default()).await.unwrap();
    assert!(
        events.iter().any(|e| e.actor.starts_with("api:token-")),
        "{events:?}"
    );

    // Pushing the same files again changes nothing.
    let again = api
        .call(
            Method::POST,
            "/v1/configs",
            Some(&admin),
            Some(quickstart_push()),
        )
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json["unchanged"], 6, "{again:?}");
}

#[tokio::test]
async fn validate_only_checks_a_config_and_stores_nothing() {
    let api = Api::new();
    let admin = api.token("shop", &[Scope::Admin]).await;
    let before = api.footprint().await;
    let reply = api
        .call(
            Method::POST,
            "/v1/configs?validateOnly=true",
            Some(&admin),
            Some(quickstart_push()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["applications"], json!(["shop"]));
    assert_eq!(reply.json["instances"], 6);
    assert_eq!(api.footprint().await, before);
    let hash = reply.json["hash"].as_str().unwrap();
    assert_eq!(api.store.get_snapshot(hash).await.unwrap(), None);
}

#[tokio::test]
async fn a_rejected_config_returns_every_error_with_its_place_and_stores_nothing() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = quickstart_files();
    let services = files.get_mut("services.yaml").unwrap();
    *services = services.replacen("runtime: files-structured", "runtime: no-such-runtime", 1);
    files.insert("broken.yaml".into(), "service: [unclosed\n".into());
    let bundle = ConfigBundle::from_files(files.clone());
    let body = json!({ "files": files }).to_string();
    let reply = api
        .refused(
            request(Method::POST, "/v1/configs", Some(&admin), Some(body)),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    let error = reply.error();
    let errors = error["errors"].as_array().unwrap();
    assert!(errors.len() >= 2, "{reply:?}");
    assert_eq!(
        error["message"],
        format!("{} error(s); nothing was stored", errors.len())
    );
    for e in errors {
        for field in ["file", "line", "path", "message"] {
            assert!(e.get(field).is_some(), "{field} missing in {e}");
        }
    }
    assert!(
        errors.iter().any(|e| e["file"] == "broken.yaml"),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e["file"] == "services.yaml"
            && e["message"].as_str().unwrap().contains("no-such-runtime")),
        "{errors:?}"
    );
    assert_eq!(api.store.get_snapshot(&bundle.hash()).await.unwrap(), None);
}

#[tokio::test]
async fn a_config_upload_needs_an_admin_token() {
    let api = Api::new();
    let release = api.token("shop", &[Scope::Release, Scope::Approve]).await;
    let body = quickstart_push().to_string();
    let reply = api
        .refused(
            request(Method::POST, "/v1/configs", Some(&release), Some(body)),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    assert!(
        reply.error()["message"]
            .as_str()
            .unwrap()
            .contains("lacks scope admin")
    );
}

#[tokio::test]
async fn an_admin_of_one_application_cannot_configure_another() {
    let api = Api::new();
    let blog_admin = api.token("blog", &[Scope::Admin]).await;
    let body = quickstart_push().to_string();
    api.refused(
        request(Method::POST, "/v1/configs", Some(&blog_admin), Some(body)),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;

    // Every application of the bundle must be the token's.
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let body = json!({ "files": two_applications() }).to_string();
    api.refused(
        request(Method::POST, "/v1/configs", Some(&shop_admin), Some(body)),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn a_config_that_would_remove_another_application_is_refused() {
    let api = Api::new();
    api.control
        .apply_config(ConfigBundle::from_files(two_applications()), "test")
        .await
        .unwrap();
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    // Only shop's files: applying it would stop managing blog.
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs",
                Some(&shop_admin),
                Some(quickstart_push().to_string()),
            ),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    assert!(
        reply.error()["message"]
            .as_str()
            .unwrap()
            .contains("remove application blog"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn malformed_uploads_name_the_field_at_fault() {
    let api = Api::new();
    let admin = api.token("shop", &[Scope::Admin]).await;
    for (body, field) in [
        ("{not json", "body"),
        ("{}", "files"),
        (r#"{"files": {}}"#, "files"),
        (r#"{"files": {"a.yaml": 42}}"#, "files.a.yaml"),
        (
            r#"{"files": {"../a.yaml": "x: 1"}}"#,
            r#"files["../a.yaml"]"#,
        ),
        (r#"{"files": {"notes.txt": "x"}}"#, r#"files["notes.txt"]"#),
        (r#"{"files": {"a.yaml": "x"}, "extra": 1}"#, "extra"),
        ("[]", "body"),
    ] {
        let reply = api
            .refused(
                request(Method::POST, "/v1/configs", Some(&admin), Some(body.into())),
                StatusCode::BAD_REQUEST,
                "invalidRequest",
            )
            .await;
        assert_eq!(reply.error()["field"], field, "{body}: {reply:?}");
    }
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs?validateOnly=maybe",
                Some(&admin),
                Some(quickstart_push().to_string()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "query");
}

#[tokio::test]
async fn a_config_nested_thousands_deep_is_refused_and_the_server_lives_on() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = quickstart_files();
    files.insert("bomb.yaml".into(), format!("{}x\n", "- ".repeat(5_000)));
    let body = json!({ "files": files }).to_string();
    for path in ["/v1/configs?validateOnly=true", "/v1/configs"] {
        let reply = api
            .refused(
                request(Method::POST, path, Some(&admin), Some(body.clone())),
                StatusCode::BAD_REQUEST,
                "invalidConfig",
            )
            .await;
        let errors = reply.error()["errors"].as_array().unwrap().clone();
        assert!(
            errors.iter().any(|e| e["file"] == "bomb.yaml"
                && e["message"].as_str().unwrap().contains("levels deep")),
            "{errors:?}"
        );
    }
    // Still answering.
    let status = api
        .send(request(
            Method::GET,
            "/v1/applications/shop/status",
            Some(&admin),
            None,
        ))
        .await;
    assert_eq!(status.status, StatusCode::OK, "{status:?}");
}
