//! Uploading config bundles, whole or one application's part, and the
//! versions and rollback of an application's part.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use vergence_api::create_token;
use vergence_model::ports::{Clock, ConfigStore, EventStore, InstanceFilter, InstanceStore};
use vergence_model::{ConfigBundle, EventFilter, Scope, TokenSubject};

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
    assert!(reply.message().contains("lacks scope admin"));
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
        reply
            .message()
            .contains("application blog's part (blog.yaml)"),
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

/// A runtime both shop and blog use, in a file of its own: the platform's.
const SHARED: &str = "\
runtime:
  name: notify
  apply:
    taskConfig:
      program:
        cmd: [./scripts/notify.sh]
";

/// shop and blog, each with its own files, and `shared.yaml` with a
/// runtime both list in their release channels.
fn shared_config() -> BTreeMap<String, String> {
    let mut files = two_applications();
    let application = files.get_mut("application.yaml").unwrap();
    *application = application.replace(
        "        - runtime: files-structured\n",
        "        - runtime: files-structured\n        - runtime: notify\n",
    );
    let blog = files.get_mut("blog.yaml").unwrap();
    *blog = blog.replace(
        "        - runtime: blog-files\n",
        "        - runtime: blog-files\n        - runtime: notify\n",
    );
    files.insert("shared.yaml".into(), SHARED.into());
    files
}

/// shop's files of [`shared_config`], as shop's team has them.
fn shop_files() -> BTreeMap<String, String> {
    let mut files = shared_config();
    files.retain(|path, _| {
        ["application.yaml", "runtimes.yaml", "services.yaml"].contains(&path.as_str())
    });
    files
}

/// shop with one more service: three more instances, all shop's.
fn shop_with_cart() -> BTreeMap<String, String> {
    let mut files = shop_files();
    files.get_mut("services.yaml").unwrap().push_str(
        "---\nservice:\n  application: shop\n  name: cart\n  runtime: files-apply-only\n  custom:\n    parameterValues:\n      - name: service\n        string: cart\n",
    );
    files
}

async fn with_shared_config() -> Api {
    let api = Api::new();
    api.control
        .apply_config(ConfigBundle::from_files(shared_config()), "test")
        .await
        .unwrap();
    api
}

async fn platform_token(api: &Api) -> String {
    create_token(
        api.store.as_ref(),
        &TokenSubject::Platform,
        &[],
        None,
        "test",
        api.clock.as_ref(),
    )
    .await
    .unwrap()
    .1
}

/// What a push must leave alone of one application: its instances (with
/// their revisions) and its audit trail.
async fn trail_of(
    api: &Api,
    app: &str,
) -> (
    Vec<vergence_model::InstanceRecord>,
    Vec<vergence_model::Event>,
) {
    let application = app.parse().unwrap();
    let instances = api
        .store
        .list_instances(&InstanceFilter {
            application: Some(application),
            ..InstanceFilter::default()
        })
        .await
        .unwrap();
    let events = api
        .store
        .list_events(&EventFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.application.as_str() == app)
        .collect();
    (instances, events)
}

fn push_of(files: &BTreeMap<String, String>) -> String {
    json!({ "files": files }).to_string()
}

async fn versions(api: &Api, app: &str, token: &str) -> Vec<Value> {
    let reply = api
        .call(
            Method::GET,
            &format!("/v1/applications/{app}/configs"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["application"], app);
    reply.json["versions"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_applications_admin_pushes_its_part_without_touching_the_others() {
    let api = with_shared_config().await;
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let blog_before = trail_of(&api, "blog").await;
    assert!(!blog_before.0.is_empty() && !blog_before.1.is_empty());

    let reply = api
        .send(request(
            Method::POST,
            "/v1/configs?application=shop",
            Some(&shop_admin),
            Some(push_of(&shop_with_cart())),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["changedParts"], json!(["application:shop"]));
    let added: Vec<&str> = reply.json["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["service"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["cart", "cart"], "{reply:?}");
    assert_eq!(
        trail_of(&api, "blog").await,
        blog_before,
        "blog was touched"
    );

    // The composed config in force keeps blog's and the shared files.
    let current = api.store.current_config().await.unwrap().unwrap();
    let composed = api
        .store
        .get_snapshot(&current.hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        composed.bundle.files["blog.yaml"],
        shared_config()["blog.yaml"]
    );
    assert_eq!(composed.bundle.files["shared.yaml"], SHARED);
    assert!(composed.bundle.files["services.yaml"].contains("name: cart"));

    // shop has two versions, the newest in force and pushed by the token;
    // blog still has its first.
    let shop = versions(&api, "shop", &shop_admin).await;
    assert_eq!(shop.len(), 2, "{shop:?}");
    assert_eq!(shop[0]["current"], true);
    assert!(shop[0]["actor"].as_str().unwrap().starts_with("api:token-"));
    assert_eq!(shop[0]["previous"], shop[1]["hash"]);
    assert_eq!(
        shop[0]["files"],
        json!(["application.yaml", "runtimes.yaml", "services.yaml"])
    );
    let blog_admin = api.token("blog", &[Scope::Admin]).await;
    assert_eq!(versions(&api, "blog", &blog_admin).await.len(), 1);

    // A whole config that changes only shop's files is shop's admin's to
    // push too; the same again changes no part.
    let mut whole = shared_config();
    whole.extend(shop_with_cart());
    whole
        .get_mut("runtimes.yaml")
        .unwrap()
        .push_str("# tuned\n");
    for expected in [json!(["application:shop"]), json!([])] {
        let reply = api
            .call(
                Method::POST,
                "/v1/configs",
                Some(&shop_admin),
                Some(json!({ "files": whole })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.json["changedParts"], expected, "{reply:?}");
    }
    assert_eq!(
        trail_of(&api, "blog").await,
        blog_before,
        "blog was touched"
    );
    assert_eq!(versions(&api, "shop", &shop_admin).await.len(), 3);
}

#[tokio::test]
async fn an_applications_admin_cannot_change_another_application_or_a_shared_runtime() {
    let api = with_shared_config().await;
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let refused = |uri: &'static str, files: BTreeMap<String, String>| {
        let token = shop_admin.clone();
        let api = &api;
        async move {
            let reply = api
                .refused(
                    request(Method::POST, uri, Some(&token), Some(push_of(&files))),
                    StatusCode::FORBIDDEN,
                    "forbidden",
                )
                .await;
            reply.message().to_owned()
        }
    };

    // Naming another application.
    let message = refused("/v1/configs?application=blog", shared_config()).await;
    assert!(message.contains("not blog"), "{message}");

    // shop's push carrying an edited blog.yaml.
    let mut files = shop_files();
    files.insert(
        "blog.yaml".into(),
        format!("{}# mine now\n", shared_config()["blog.yaml"]),
    );
    let message = refused("/v1/configs?application=shop", files).await;
    assert!(
        message.contains("application blog's part (blog.yaml)"),
        "{message}"
    );

    // The shared runtime, in shop's part push and in a whole config.
    let mut files = shop_files();
    files.insert(
        "shared.yaml".into(),
        SHARED.replace("notify.sh", "notify.sh, --loud"),
    );
    let message = refused("/v1/configs?application=shop", files.clone()).await;
    assert!(
        message.contains("the platform part (shared.yaml, used by blog and shop)"),
        "{message}"
    );
    let mut whole = shared_config();
    whole.extend(files);
    let message = refused("/v1/configs", whole).await;
    assert!(
        message.contains("the platform part (shared.yaml, used by blog and shop)")
            && message.contains("only a platform token"),
        "{message}"
    );

    // Taking blog's runtime into shop's channels would make it shared.
    let mut files = shop_files();
    let application = files.get_mut("application.yaml").unwrap();
    *application = application.replace(
        "        - runtime: notify\n",
        "        - runtime: notify\n        - runtime: blog-files\n",
    );
    let message = refused("/v1/configs?application=shop", files).await;
    assert!(message.contains("blog.yaml"), "{message}");

    // A part whose files define no such application is not a push of it.
    let mut files = shop_files();
    files.remove("application.yaml");
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs?application=shop",
                Some(&shop_admin),
                Some(push_of(&files)),
            ),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    assert!(
        reply.error()["errors"]
            .to_string()
            .contains("services.yaml"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn a_part_that_breaks_the_config_is_rejected_naming_the_files() {
    let api = with_shared_config().await;
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = shop_files();
    // A typo in shop's part: the composed config is compiled as a whole.
    let services = files.get_mut("services.yaml").unwrap();
    *services = services.replacen("runtime: files-structured", "runtime: files-structurd", 1);
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs?application=shop",
                Some(&shop_admin),
                Some(push_of(&files)),
            ),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    let errors = reply.error()["errors"].as_array().unwrap().clone();
    assert!(
        errors.iter().any(|e| e["file"] == "services.yaml"
            && e["message"].as_str().unwrap().contains("files-structurd")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_platform_token_changes_shared_runtimes_and_nothing_else() {
    let api = with_shared_config().await;
    let platform = platform_token(&api).await;
    let before = (
        trail_of(&api, "shop").await.0,
        trail_of(&api, "blog").await.0,
    );
    let mut files = shared_config();
    files.insert(
        "shared.yaml".into(),
        format!("# owned by the platform team\n{SHARED}"),
    );
    let reply = api
        .call(
            Method::POST,
            "/v1/configs",
            Some(&platform),
            Some(json!({ "files": files })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["changedParts"], json!(["platform"]));
    // A comment changes no instance.
    assert_eq!(
        (
            trail_of(&api, "shop").await.0,
            trail_of(&api, "blog").await.0
        ),
        before
    );
    let current = api.store.current_config().await.unwrap().unwrap();
    let composed = api
        .store
        .get_snapshot(&current.hash)
        .await
        .unwrap()
        .unwrap();
    assert!(composed.bundle.files["shared.yaml"].starts_with("# owned by"));

    // It pushes configs, and does not release, approve or read status.
    api.refused(
        request(
            Method::GET,
            "/v1/applications/shop/status",
            Some(&platform),
            None,
        ),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;
}

#[tokio::test]
async fn rollback_restores_an_applications_previous_part_and_leaves_the_others() {
    let api = with_shared_config().await;
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let blog_admin = api.token("blog", &[Scope::Admin]).await;
    let push = |token: &str, app: &str, files: BTreeMap<String, String>| {
        let request = request(
            Method::POST,
            &format!("/v1/configs?application={app}"),
            Some(token),
            Some(push_of(&files)),
        );
        let api = &api;
        async move {
            let reply = api.send(request).await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            reply
        }
    };
    push(&shop_admin, "shop", shop_with_cart()).await;
    let mut blog = BTreeMap::new();
    blog.insert(
        "blog.yaml".to_owned(),
        format!("{}# v2\n", shared_config()["blog.yaml"]),
    );
    push(&blog_admin, "blog", blog).await;
    let blog_before = trail_of(&api, "blog").await;
    let blog_versions = versions(&api, "blog", &blog_admin).await;

    // Another application's admin cannot roll shop back.
    api.refused(
        request(
            Method::POST,
            "/v1/applications/shop/configs/rollback",
            Some(&blog_admin),
            Some("{}".into()),
        ),
        StatusCode::FORBIDDEN,
        "forbidden",
    )
    .await;

    let reply = api
        .call(
            Method::POST,
            "/v1/applications/shop/configs/rollback",
            Some(&shop_admin),
            Some(json!({})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["changedParts"], json!(["application:shop"]));
    let removed: Vec<&str> = reply.json["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["service"].as_str().unwrap())
        .collect();
    assert_eq!(removed, ["cart", "cart"], "{reply:?}");
    let current = api.store.current_config().await.unwrap().unwrap();
    let composed = api
        .store
        .get_snapshot(&current.hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        composed.bundle.files["services.yaml"],
        shared_config()["services.yaml"]
    );
    assert!(
        composed.bundle.files["blog.yaml"].ends_with("# v2\n"),
        "blog's v2 stays"
    );
    assert_eq!(
        trail_of(&api, "blog").await,
        blog_before,
        "blog was touched"
    );
    assert_eq!(versions(&api, "blog", &blog_admin).await, blog_versions);

    // The rollback is a version of its own; rolling forward names a hash.
    let shop = versions(&api, "shop", &shop_admin).await;
    assert_eq!(shop.len(), 3, "{shop:?}");
    let with_cart = shop[1]["hash"].as_str().unwrap();
    let reply = api
        .call(
            Method::POST,
            "/v1/applications/shop/configs/rollback",
            Some(&shop_admin),
            Some(json!({ "to": &with_cart[..12] })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(
        reply.json["added"].as_array().unwrap().len(),
        2,
        "{reply:?}"
    );

    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/applications/shop/configs/rollback",
                Some(&shop_admin),
                Some(json!({ "to": "0000000" }).to_string()),
            ),
            StatusCode::NOT_FOUND,
            "notFound",
        )
        .await;
    assert!(reply.message().contains("configs list --app shop"));
}

#[tokio::test]
async fn a_config_stored_before_parts_existed_is_split_on_the_next_push() {
    let api = with_shared_config().await;
    // Point at the same files stored as one bundle, as before parts.
    let legacy = ConfigBundle::from_files(shared_config());
    let current = api.store.current_config().await.unwrap().unwrap();
    api.store
        .put_snapshot(&vergence_model::ports::ConfigSnapshot {
            hash: legacy.hash(),
            bundle: legacy.clone(),
            created_at: api.clock.now(),
            actor: "test".into(),
        })
        .await
        .unwrap();
    let mut pointer = current.clone();
    pointer.hash = legacy.hash();
    api.store
        .set_current_config(&pointer, Some(current.revision))
        .await
        .unwrap();
    let shop_admin = api.token("shop", &[Scope::Admin]).await;
    let blog_before = trail_of(&api, "blog").await;
    assert_eq!(
        versions(&api, "shop", &shop_admin).await,
        Vec::<Value>::new()
    );

    let reply = api
        .send(request(
            Method::POST,
            "/v1/configs?application=shop",
            Some(&shop_admin),
            Some(push_of(&shop_with_cart())),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["changedParts"], json!(["application:shop"]));
    assert_eq!(
        trail_of(&api, "blog").await,
        blog_before,
        "blog was touched"
    );
    let shop = versions(&api, "shop", &shop_admin).await;
    assert_eq!(shop.len(), 1, "{shop:?}");
    assert_eq!(shop[0]["previous"], Value::Null);
    let blog_admin = api.token("blog", &[Scope::Admin]).await;
    assert_eq!(versions(&api, "blog", &blog_admin).await.len(), 1);
}
