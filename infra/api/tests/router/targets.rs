//! The deployment an API serves decides which configs it accepts: a
//! serverless one refuses jobs of the local runner its worker function
//! cannot start, with the errors `vergence validate --target serverless`
//! prints, and stores nothing; a local one (`vergence serve`) runs them.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use vergence_api::ApiConfig;
use vergence_model::ports::{Compiler, ConfigStore};
use vergence_model::{ConfigBundle, DeploymentTarget, Scope};

use crate::common::{Api, BLOG, quickstart_files, quickstart_push, request, two_applications};

fn serverless() -> Api {
    Api::with_config(ApiConfig {
        target: DeploymentTarget::Serverless,
        ..ApiConfig::default()
    })
}

/// The errors `vergence validate --target serverless` prints for `files`,
/// as the API writes them.
fn validate_for_serverless(files: &BTreeMap<String, String>) -> Vec<Value> {
    let model = vergence_compiler::YamlCompiler
        .compile(&ConfigBundle::from_files(files.clone()))
        .unwrap();
    let errors = model.target_errors(DeploymentTarget::Serverless);
    errors
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

/// blog, as its team pushes its part, running `cmd` (a flow list).
fn blog_running(cmd: &str) -> BTreeMap<String, String> {
    let blog = BLOG
        .replace(
            "service:\n  name: ",
            "service:\n  application: blog\n  name: ",
        )
        .replace("[./scripts/publish.sh]", cmd);
    BTreeMap::from([("blog.yaml".to_owned(), blog)])
}

#[tokio::test]
async fn a_serverless_api_refuses_local_jobs_its_worker_cannot_start_and_stores_nothing() {
    let api = serverless();
    let admin = api.token("shop", &[Scope::Admin]).await;
    // The quickstart's jobs run scripts beside the config.
    let expected = validate_for_serverless(&quickstart_files());
    assert_eq!(expected.len(), 5, "{expected:?}");
    for uri in [
        "/v1/configs",
        "/v1/configs?validateOnly=true",
        "/v1/configs/plan",
    ] {
        let body = quickstart_push().to_string();
        let reply = api
            .refused(
                request(Method::POST, uri, Some(&admin), Some(body)),
                StatusCode::BAD_REQUEST,
                "invalidConfig",
            )
            .await;
        let error = reply.error();
        assert_eq!(error["errors"], json!(expected), "{uri}: {reply:?}");
        assert_eq!(error["message"], "5 error(s); nothing was stored");
        let first = &error["errors"][0];
        assert_eq!(first["file"], "runtimes.yaml", "{reply:?}");
        assert!(first["line"].as_u64().is_some(), "{reply:?}");
        assert_eq!(first["path"], "runtime.apply.taskConfig.program.cmd[0]");
        assert!(
            first["message"]
                .as_str()
                .unwrap()
                .contains("needs ./scripts/migrate.sh, a file of the config directory"),
            "{reply:?}"
        );
    }
    let hash = ConfigBundle::from_files(quickstart_files()).hash();
    assert_eq!(api.store.current_config().await.unwrap(), None);
    assert_eq!(api.store.get_snapshot(&hash).await.unwrap(), None);
}

#[tokio::test]
async fn a_local_api_runs_the_same_config() {
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
}

#[tokio::test]
async fn a_serverless_api_accepts_local_jobs_its_worker_can_start() {
    let api = serverless();
    let admin = api.token("blog", &[Scope::Admin]).await;
    let files = blog_running(r#"[sh, -c, 'curl -fsS -X POST "https://blog.example.com/publish"']"#);
    let reply = api
        .call(
            Method::POST,
            "/v1/configs",
            Some(&admin),
            Some(json!({ "files": files })),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn a_part_push_answers_for_its_own_files_only() {
    let api = serverless();
    // Stored before the API checked where jobs run: both applications'
    // jobs run scripts beside the config.
    api.control
        .apply_config(ConfigBundle::from_files(two_applications()), "test")
        .await
        .unwrap();
    let blog_admin = api.token("blog", &[Scope::Admin]).await;
    let push = |files: BTreeMap<String, String>| {
        request(
            Method::POST,
            "/v1/configs?application=blog",
            Some(&blog_admin),
            Some(json!({ "files": files }).to_string()),
        )
    };

    // blog's own script is refused, and only blog's file is named.
    let reply = api
        .refused(
            push(blog_running("[./scripts/publish.sh, --now]")),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    let files: Vec<&Value> = reply.error()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["file"])
        .collect();
    assert_eq!(files, [&json!("blog.yaml")], "{reply:?}");

    // Without it, blog's part is accepted: shop's files are shop's to fix.
    let fixed = blog_running("[curl, -fsS, https://blog.example.com/publish]");
    let reply = api.send(push(fixed)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");

    // Rolling blog back to its script is refused like pushing it.
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/applications/blog/configs/rollback",
                Some(&blog_admin),
                Some("{}".into()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    let error = &reply.error()["errors"][0];
    assert_eq!(error["file"], "blog.yaml", "{reply:?}");
    assert_eq!(error["path"], "runtime.apply.taskConfig.program.cmd[0]");
}
