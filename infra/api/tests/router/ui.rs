//! The status page's files (served without a token, with a strict CSP) and
//! the API routes it reads and acts through: whoami, one instance in full,
//! alerts, pause, resume and rollback.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use jiff::Timestamp;
use serde_json::json;
use tower::ServiceExt;
use vergence_model::ports::{InstanceStore, update_instance};
use vergence_model::{EventKind, InstanceKey, JobId, JobKind, JobOutcome, JobSummary, Scope};

use crate::common::{Api, START, request};

const INSTANCE: &str = "/v1/applications/shop/services/web/release-channels/prod";

fn web_prod() -> InstanceKey {
    InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        "prod".parse().unwrap(),
    )
}

/// A raw answer: the page's files are not JSON.
struct Raw {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn get(api: &Api, uri: &str) -> Raw {
    let request = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let response = api.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Raw {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn header_of(raw: &Raw, name: header::HeaderName) -> &str {
    raw.headers
        .get(&name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn the_root_and_ui_without_a_slash_redirect_to_the_page() {
    let api = Api::new();
    for uri in ["/", "/ui"] {
        let raw = get(&api, uri).await;
        assert!(raw.status.is_redirection(), "{uri}: {}", raw.status);
        assert_eq!(header_of(&raw, header::LOCATION), "/ui/", "{uri}");
    }
}

#[tokio::test]
async fn the_page_and_its_files_are_served_without_a_token_with_their_types_and_csp() {
    let api = Api::new();
    for (uri, content_type) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/instances/shop/prod/web", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
    ] {
        let raw = get(&api, uri).await;
        assert_eq!(raw.status, StatusCode::OK, "{uri}: {}", raw.body);
        assert_eq!(header_of(&raw, header::CONTENT_TYPE), content_type, "{uri}");
        assert_eq!(
            header_of(&raw, header::CONTENT_SECURITY_POLICY),
            vergence_api::CONTENT_SECURITY_POLICY,
            "{uri}"
        );
        assert_eq!(header_of(&raw, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(header_of(&raw, header::X_FRAME_OPTIONS), "DENY");
        assert!(!raw.body.is_empty(), "{uri}");
    }
    // The instance page is the same shell: the script reads the path.
    assert_eq!(
        get(&api, "/ui/").await.body,
        get(&api, "/ui/instances/shop/prod/web").await.body
    );
}

#[test]
fn the_policy_allows_only_the_pages_own_files() {
    let csp = vergence_api::CONTENT_SECURITY_POLICY;
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp} lacks {directive}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
}

#[tokio::test]
async fn the_shell_has_no_inline_script_or_style_the_policy_would_block() {
    let api = Api::new();
    let html = get(&api, "/ui/").await.body;
    // Every <script> loads a file of the page, none carries code.
    let scripts: Vec<&str> = html.split("<script").skip(1).collect();
    assert!(!scripts.is_empty());
    for script in scripts {
        let tag = &script[..script.find('>').unwrap()];
        assert!(
            tag.contains("src=\"/ui/"),
            "inline or foreign script: {tag}"
        );
        assert!(script[tag.len() + 1..].starts_with("</script>"), "{script}");
    }
    assert!(!html.contains("<style"), "inline <style>");
    assert!(!html.contains(" style="), "inline style attribute");
    for handler in ["onclick=", "onload=", "onsubmit=", "onerror="] {
        assert!(!html.contains(handler), "inline event handler {handler}");
    }
    // The script puts data in as text; markup from answers would be a hole.
    let script = get(&api, "/ui/app.js").await.body;
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
}

#[tokio::test]
async fn mistyped_page_paths_are_the_apis_404() {
    let api = Api::new();
    for uri in [
        "/ui/nope",
        "/ui/instances/shop/prod",
        "/ui/instances/shop/Prod_1/web",
        "/ui/instances/shop/prod/web/extra",
    ] {
        let raw = get(&api, uri).await;
        assert_eq!(raw.status, StatusCode::NOT_FOUND, "{uri}: {}", raw.body);
        let json: serde_json::Value = serde_json::from_str(&raw.body).unwrap();
        assert_eq!(json["error"]["code"], "notFound", "{uri}");
    }
}

#[tokio::test]
async fn whoami_names_the_tokens_application_and_scopes() {
    let api = Api::new().with_quickstart().await;
    let token = api.token("shop", &[Scope::Approve, Scope::Release]).await;
    let reply = api
        .call(Method::GET, "/v1/whoami", Some(&token), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["application"], "shop");
    let mut scopes: Vec<&str> = reply.json["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    scopes.sort_unstable();
    assert_eq!(scopes, ["approve", "release"]);
    assert!(reply.json.get("agent").is_none(), "{reply:?}");
    let id = reply.json["id"].as_str().unwrap();
    assert_eq!(id.len(), 8);
    assert!(token.starts_with(&format!("vgt_{id}")), "{id} of {token}");
}

#[tokio::test]
async fn an_instance_reads_in_full_with_the_explain_chain_and_the_last_jobs() {
    let api = Api::new().with_quickstart().await;
    let reader = api.token("shop", &[Scope::Release]).await;
    let at = Timestamp::from_second(START + 5).unwrap();
    let recorded = update_instance(api.store.as_ref(), api.clock.as_ref(), &web_prod(), |r| {
        r.state.last_jobs = vec![JobSummary {
            job_id: JobId("job-1".into()),
            kind: JobKind::Apply,
            version: "v1".parse().unwrap(),
            attempt: 2,
            outcome: JobOutcome::Exited,
            exit_code: Some(1),
            finished_at: at,
            duration_ms: 1500,
            stderr_tail: "deploying web\nerror: quota exceeded\n".into(),
        }];
        Some(Vec::new())
    })
    .await
    .unwrap();
    assert!(recorded.is_some());

    let reply = api.call(Method::GET, INSTANCE, Some(&reader), None).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let detail = &reply.json;
    assert_eq!(detail["instance"]["service"], "web");
    assert_eq!(detail["instance"]["releaseChannel"], "prod");
    // Exactly what `vergence explain` prints, from the engine's code.
    let explain = api.control.explain(&web_prod()).await.unwrap();
    assert_eq!(detail["explain"], json!(explain));
    assert!(
        explain.iter().any(|l| l.contains("gates, in order")),
        "{explain:?}"
    );
    assert_eq!(
        detail["lastJobs"],
        json!([{
            "kind": "apply",
            "version": "v1",
            "attempt": 2,
            "outcome": "exited",
            "exitCode": 1,
            "finishedAt": at.to_string(),
            "durationMs": 1500,
            "output": "deploying web\nerror: quota exceeded\n",
        }])
    );
    assert!(detail.get("paused").is_none() && detail.get("running").is_none());

    let missing = api
        .call(
            Method::GET,
            "/v1/applications/shop/services/web/release-channels/qa",
            Some(&reader),
            None,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{missing:?}");
    assert!(missing.message().contains("shop/web@qa"), "{missing:?}");
}

#[tokio::test]
async fn an_admin_pauses_and_resumes_one_instance_and_the_audit_trail_names_the_token() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let paused = api
        .call(
            Method::POST,
            &format!("{INSTANCE}/pause"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{paused:?}");
    assert_eq!(paused.json["service"], "web");
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    let mark = record.controls.paused.expect("paused");
    assert!(mark.actor.starts_with("api:token-"), "{}", mark.actor);
    // Only that instance: staging still applies.
    let staging = InstanceKey::new(
        "shop".parse().unwrap(),
        "web".parse().unwrap(),
        "staging".parse().unwrap(),
    );
    let other = api.store.get_instance(&staging).await.unwrap().unwrap();
    assert!(other.controls.paused.is_none());

    let detail = api.call(Method::GET, INSTANCE, Some(&admin), None).await;
    assert_eq!(detail.json["paused"]["actor"], mark.actor.as_str());

    let resumed = api
        .call(
            Method::POST,
            &format!("{INSTANCE}/resume"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{resumed:?}");
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    assert!(record.controls.paused.is_none());
    let events = api.control.events(&Default::default()).await.unwrap();
    let kinds: Vec<&EventKind> = events
        .iter()
        .filter(|e| e.actor == mark.actor)
        .map(|e| &e.kind)
        .collect();
    assert!(
        matches!(kinds.as_slice(), [EventKind::Paused, EventKind::Resumed]),
        "{kinds:?}"
    );
}

#[tokio::test]
async fn an_approve_token_cannot_pause_and_nothing_is_written() {
    let api = Api::new().with_quickstart().await;
    let approver = api.token("shop", &[Scope::Approve]).await;
    for action in ["pause", "resume", "rollback"] {
        let reply = api
            .refused(
                request(
                    Method::POST,
                    &format!("{INSTANCE}/{action}"),
                    Some(&approver),
                    None,
                ),
                StatusCode::FORBIDDEN,
                "forbidden",
            )
            .await;
        assert!(
            reply.message().contains("lacks scope admin"),
            "{action}: {reply:?}"
        );
    }
}

#[tokio::test]
async fn rollback_goes_to_a_released_version_and_says_why_when_it_cannot() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let uri = format!("{INSTANCE}/rollback");
    // Nothing converged yet and no version given: a 400 naming the field.
    let reply = api
        .refused(
            request(Method::POST, &uri, Some(&admin), None),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "version", "{reply:?}");
    assert!(
        reply.message().contains("no version has converged"),
        "{reply:?}"
    );
    let reply = api
        .refused(
            request(
                Method::POST,
                &uri,
                Some(&admin),
                Some(r#"{"versoin": "v1"}"#.into()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidRequest",
        )
        .await;
    assert_eq!(reply.error()["field"], "versoin", "{reply:?}");

    let web = "web".parse().unwrap();
    for version in ["v1", "v2"] {
        api.control
            .push_release(
                Some("shop".parse().unwrap()),
                &web,
                &version.parse().unwrap(),
                &Default::default(),
                "test",
            )
            .await
            .unwrap();
    }
    let reply = api
        .call(
            Method::POST,
            &uri,
            Some(&admin),
            Some(json!({"version": "v1"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let record = api.store.get_instance(&web_prod()).await.unwrap().unwrap();
    let request = record.state.rollback_request.expect("a rollback request");
    assert_eq!(request.to.unwrap().version, "v1");
    assert!(request.actor.starts_with("api:token-"), "{}", request.actor);
}

#[tokio::test]
async fn alerts_are_listed_with_their_state() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let reader = api.token("shop", &[Scope::Release]).await;
    let empty = api
        .call(Method::GET, "/v1/alerts", Some(&reader), None)
        .await;
    assert_eq!(empty.json, json!({"alerts": []}));
    let set = api
        .call(
            Method::PUT,
            "/v1/alerts/high-error-rate",
            Some(&admin),
            Some(json!({"state": "firing", "summary": "5xx above 2%"})),
        )
        .await;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    let listed = api
        .call(Method::GET, "/v1/alerts", Some(&reader), None)
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{listed:?}");
    let alert = &listed.json["alerts"][0];
    assert_eq!(alert["name"], "high-error-rate");
    assert_eq!(alert["state"], "firing");
    assert_eq!(alert["summary"], "5xx above 2%");
    assert_eq!(
        alert["since"],
        Timestamp::from_second(START).unwrap().to_string()
    );
    assert!(alert["actor"].as_str().unwrap().starts_with("api:token-"));
}
