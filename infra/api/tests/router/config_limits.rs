//! What a config push may hold and what its answer may grow to: file names
//! the CLI would never send are refused, and a config with thousands of
//! errors is answered with a bounded list and how many more there were.

use axum::http::{Method, StatusCode};
use serde_json::json;
use vergence_api::create_token;
use vergence_model::ports::ConfigStore;
use vergence_model::{ConfigBundle, Scope, TokenSubject};

use crate::common::{Api, quickstart_files, request};

/// Names the CLI never bundles (it skips hidden entries and refuses the
/// rest), each with a word of the reason the API must give.
const BAD_NAMES: &[(&str, &str)] = &[
    ("a/./b.yaml", "'.' or '..'"),
    ("a/../b.yaml", "'.' or '..'"),
    ("a//b.yaml", "empty segment"),
    ("/etc/b.yaml", "leading '/'"),
    ("a\\b.yaml", "'/'"),
    ("a\0b.yaml", "U+0000"),
    ("a\nb.yaml", "U+000A"),
    ("a\u{1b}[31mb.yaml", "U+001B"),
    ("a\u{202E}lmay.yaml", "U+202E"),
    ("a\u{200B}b.yaml", "U+200B"),
    ("a\u{2066}b.yaml", "U+2066"),
    ("a\u{FEFF}b.yaml", "U+FEFF"),
    (".hidden.yaml", "hidden"),
    ("apps/.git/x.yaml", "hidden"),
    ("notes.txt", "*.yaml"),
];

#[tokio::test]
async fn file_names_the_cli_would_never_send_are_refused_and_nothing_is_stored() {
    let api = Api::new().with_quickstart().await;
    // A platform token may push any part: only the name can be refused.
    let (_, admin) = create_token(
        api.store.as_ref(),
        &TokenSubject::Platform,
        &[Scope::Platform],
        Some("test".into()),
        "test",
        api.clock.as_ref(),
    )
    .await
    .unwrap();
    for (name, reason) in BAD_NAMES {
        let mut files = quickstart_files();
        files.insert((*name).to_owned(), "# nothing\n".to_owned());
        let bundle = ConfigBundle::from_files(files.clone());
        let body = json!({ "files": files }).to_string();
        for uri in [
            "/v1/configs",
            "/v1/configs?validateOnly=true",
            "/v1/configs?application=shop",
            "/v1/configs/plan",
        ] {
            let reply = api
                .refused(
                    request(Method::POST, uri, Some(&admin), Some(body.clone())),
                    StatusCode::BAD_REQUEST,
                    "invalidRequest",
                )
                .await;
            let field = format!("files[{name:?}]");
            assert_eq!(reply.error()["field"], field, "{name:?} {uri}: {reply:?}");
            assert!(
                reply.message().contains(reason),
                "{name:?} {uri}: expected {reason:?} in {reply:?}"
            );
        }
        assert_eq!(api.store.get_snapshot(&bundle.hash()).await.unwrap(), None);
    }
}

/// Listed errors in an answer; the rest are counted.
const LISTED: usize = 100;

#[tokio::test]
async fn a_push_with_thousands_of_errors_answers_a_bounded_list_and_the_count() {
    let api = Api::new().with_quickstart().await;
    let admin = api.token("shop", &[Scope::Admin]).await;
    let mut files = quickstart_files();
    // 5000 services naming no runtime there is, in files under the 1 MiB limit.
    let services = 5000;
    for file in 0..5 {
        let mut text = String::new();
        for n in 0..services / 5 {
            text.push_str(&format!(
                "---\nservice:\n  name: svc{file}x{n}\n  runtime: no-such-runtime-{}\n",
                "x".repeat(200)
            ));
        }
        files.insert(format!("broken{file}.yaml"), text);
    }
    let bundle = ConfigBundle::from_files(files.clone());
    let body = json!({ "files": files }).to_string();
    for uri in ["/v1/configs?validateOnly=true", "/v1/configs"] {
        let reply = api
            .refused(
                request(Method::POST, uri, Some(&admin), Some(body.clone())),
                StatusCode::BAD_REQUEST,
                "invalidConfig",
            )
            .await;
        let error = reply.error();
        let listed = error["errors"].as_array().unwrap().len();
        let more = error["moreErrors"].as_u64().unwrap_or(0) as usize;
        assert_eq!(listed, LISTED, "{uri}");
        assert!(listed + more >= services, "{uri}: {listed} + {more}");
        assert_eq!(
            error["message"],
            format!(
                "{} error(s); nothing was stored; the first {LISTED} are listed",
                listed + more
            ),
            "{uri}"
        );
        let size = reply.json.to_string().len();
        assert!(size < 100_000, "{uri}: a {size}-byte answer");
    }
    assert_eq!(api.store.get_snapshot(&bundle.hash()).await.unwrap(), None);

    // A config with few errors lists them all and counts none more.
    let mut files = quickstart_files();
    files.insert("broken.yaml".into(), "service: [unclosed\n".into());
    let reply = api
        .refused(
            request(
                Method::POST,
                "/v1/configs",
                Some(&admin),
                Some(json!({ "files": files }).to_string()),
            ),
            StatusCode::BAD_REQUEST,
            "invalidConfig",
        )
        .await;
    assert_eq!(reply.error()["errors"].as_array().unwrap().len(), 1);
    assert_eq!(reply.error().get("moreErrors"), None, "{reply:?}");
    assert_eq!(reply.message(), "1 error(s); nothing was stored");
}
