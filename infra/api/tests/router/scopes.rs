//! Who may call what: every operation of `docs/openapi.json` against every
//! kind of caller, with the expected outcome written down as a table.
//!
//! The routes come from the document, not from the table, so a route added
//! later without a row here fails the test instead of going unreviewed.
//! Each request is well-formed for its route, so an allowed caller gets
//! the handler's real answer and a missing permission check shows up as a
//! denied caller getting through. A refused caller gets 401 (who are you?)
//! or 403 (not yours to do) with the JSON error body, and the store is left
//! exactly as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};
use vergence_api::create_token;
use vergence_engine::control::PauseAction;
use vergence_model::ports::{AgentStore, Clock, InstanceFilter, TokenStore};
use vergence_model::{
    ApiToken, ConfigBundle, InstanceKey, Scope, TokenSubject, split_token, token_string,
};

use crate::common::{Api, request, two_applications};
use crate::oidc::{Issuer, trusting};

/// Every kind of caller a request can come from. The route's application
/// is always shop; blog is another configured application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    NoToken,
    /// Not of the form `vgt_<id>_<secret>`.
    Malformed,
    /// A real token's id with another secret.
    WrongSecret,
    /// An admin token of shop, revoked before the call.
    Revoked,
    Shop(Scope),
    Blog(Scope),
    /// The token of the agent named in the path (`prod-eu`).
    OwnAgent,
    /// The token of another agent (`prod-us`).
    OtherAgent,
    /// A platform token: it pushes and rolls back configs, shared parts
    /// included, and does nothing else.
    Platform,
    /// shop's CI job by its OIDC token, which shop's `trust:` entry gives
    /// the release scope.
    ShopCi,
    /// Another repository's CI job by its OIDC token: no entry matches.
    ForeignCi,
}

use Caller::{
    Blog, ForeignCi, Malformed, NoToken, OtherAgent, OwnAgent, Platform, Revoked, Shop, ShopCi,
    WrongSecret,
};
use Scope::{Admin, Approve, Override, Release};

const CALLERS: [Caller; 17] = [
    NoToken,
    Malformed,
    WrongSecret,
    Revoked,
    Shop(Release),
    Shop(Approve),
    Shop(Override),
    Shop(Admin),
    Blog(Release),
    Blog(Approve),
    Blog(Override),
    Blog(Admin),
    OwnAgent,
    OtherAgent,
    Platform,
    ShopCi,
    ForeignCi,
];

/// What may read shop: its tokens and its trusted CI.
const SHOP_TOKENS: &[Caller] = &[
    Shop(Release),
    Shop(Approve),
    Shop(Override),
    Shop(Admin),
    ShopCi,
];
const APPLICATION_TOKENS: &[Caller] = &[
    ShopCi,
    Shop(Release),
    Shop(Approve),
    Shop(Override),
    Shop(Admin),
    Blog(Release),
    Blog(Approve),
    Blog(Override),
    Blog(Admin),
];
/// Alerts are global: protections of any application may refer to one, so
/// any application's admin may set it (docs/openapi.json, `setAlert`).
/// This is the one write across applications: blog's admin can fire or
/// resolve an alert that gates shop's instances.
const ANY_ADMIN: &[Caller] = &[Shop(Admin), Blog(Admin)];
/// Every valid token, whatever it belongs to: `whoami` tells each what it is.
const ANY_TOKEN: &[Caller] = &[
    ShopCi,
    Shop(Release),
    Shop(Approve),
    Shop(Override),
    Shop(Admin),
    Blog(Release),
    Blog(Approve),
    Blog(Override),
    Blog(Admin),
    OwnAgent,
    OtherAgent,
    Platform,
];

/// Who may change shop's config: its admin and the platform.
const SHOP_CONFIG: &[Caller] = &[Shop(Admin), Platform];
/// Who may read shop's config versions: its tokens and the platform.
const SHOP_CONFIG_READERS: &[Caller] = &[
    Shop(Release),
    Shop(Approve),
    Shop(Override),
    Shop(Admin),
    ShopCi,
    Platform,
];

/// The config in force when the request is made.
#[derive(Clone, Copy, Debug)]
enum Setup {
    /// shop and blog, so blog's tokens belong to a live application.
    ShopAndBlog,
    /// shop and blog, then shop's part pushed again with a change: shop's
    /// config has a version to roll back to.
    ShopPushedTwice,
    /// shop and blog, with shop/web in prod paused: resuming writes.
    Paused,
    /// shop and blog, with releases v1 and v2 of shop/web pushed: prod
    /// wants v2 and can be rolled back to v1.
    Released,
    /// As `Released`, with shop/web in prod pinned to v1: unpinning writes.
    Pinned,
    /// shop and blog, with a token of shop's whose id is [`KNOWN_TOKEN_ID`]:
    /// revoking it writes.
    ShopToken,
}

/// The id of the token `Setup::ShopToken` stores, for `{id}` in paths.
const KNOWN_TOKEN_ID: &str = "0123456789abcdef0123456789abcdef";

/// What the handler answers an allowed caller.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// 200, having written to the store.
    Writes,
    /// 200, leaving the store as it was.
    Reads,
    /// 404 from the handler itself, after the token was accepted: this
    /// router has no agent desk (`vergence serve` without the kubernetes
    /// runner answers the same), which the handler checks last.
    NoAgentDesk,
}

/// One row per documented operation.
struct Row {
    method: &'static str,
    path: &'static str,
    allowed: &'static [Caller],
    setup: Setup,
    body: Option<fn() -> Value>,
    answer: Answer,
}

fn table() -> Vec<Row> {
    use Answer::{NoAgentDesk, Reads, Writes};
    use Setup::{Paused, Pinned, Released, ShopAndBlog, ShopPushedTwice, ShopToken};
    let row = |method, path, allowed, setup, body, answer| Row {
        method,
        path,
        allowed,
        setup,
        body,
        answer,
    };
    vec![
        row("GET", "/v1/healthz", &CALLERS, ShopAndBlog, None, Reads),
        row("GET", "/v1/whoami", ANY_TOKEN, ShopAndBlog, None, Reads),
        // A push is allowed by the parts it changes: this one changes
        // shop's part only, which blog's admin may not change.
        row(
            "POST",
            "/v1/configs",
            SHOP_CONFIG,
            ShopAndBlog,
            Some(config_push),
            Writes,
        ),
        row(
            "GET",
            "/v1/applications/{app}/configs",
            SHOP_CONFIG_READERS,
            ShopPushedTwice,
            None,
            Reads,
        ),
        row(
            "POST",
            "/v1/applications/{app}/configs/rollback",
            SHOP_CONFIG,
            ShopPushedTwice,
            Some(|| json!({})),
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/releases",
            &[Shop(Release), Shop(Admin), ShopCi],
            ShopAndBlog,
            Some(|| json!({"version": "v2", "params": {"commit": "abc1234"}})),
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/approvals",
            &[Shop(Approve), Shop(Admin)],
            // An approval names a version that was released.
            Released,
            Some(|| json!({"version": "v2"})),
            Writes,
        ),
        row(
            "GET",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}",
            SHOP_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        // Operator actions on one instance are admin's, as in the CLI.
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/pause",
            &[Shop(Admin)],
            ShopAndBlog,
            None,
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/resume",
            &[Shop(Admin)],
            Paused,
            None,
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/rollback",
            &[Shop(Admin)],
            Released,
            Some(|| json!({"version": "v1"})),
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/pin",
            &[Shop(Admin)],
            Released,
            Some(|| json!({"version": "v1"})),
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/unpin",
            &[Shop(Admin)],
            Pinned,
            None,
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/services/{service}/release-channels/{rc}/override",
            &[Shop(Override), Shop(Admin)],
            Released,
            Some(|| json!({"reason": "incident 123", "for": "1h"})),
            Writes,
        ),
        // The same operator actions on many instances at once.
        row(
            "POST",
            "/v1/applications/{app}/pause",
            &[Shop(Admin)],
            ShopAndBlog,
            Some(|| json!({"releaseChannel": "prod"})),
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/resume",
            &[Shop(Admin)],
            Paused,
            None,
            Writes,
        ),
        row(
            "POST",
            "/v1/applications/{app}/checks",
            &[Shop(Admin)],
            ShopAndBlog,
            None,
            Writes,
        ),
        // Alerts are global, like agents: any application may read them.
        row(
            "GET",
            "/v1/alerts",
            APPLICATION_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        row(
            "PUT",
            "/v1/alerts/{name}",
            ANY_ADMIN,
            ShopAndBlog,
            Some(|| json!({"state": "firing", "summary": "5xx above 2%"})),
            Writes,
        ),
        row(
            "POST",
            "/v1/alerts/alertmanager",
            ANY_ADMIN,
            ShopAndBlog,
            Some(|| json!({"alerts": [{"status": "firing", "labels": {"alertname": "down"}}]})),
            Writes,
        ),
        row(
            "GET",
            "/v1/applications/{app}/status",
            SHOP_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        row(
            "GET",
            "/v1/applications/{app}/events",
            SHOP_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        // Metrics are read from the events, like the events themselves;
        // with releases pushed, so there is something to measure.
        row(
            "GET",
            "/v1/applications/{app}/metrics",
            SHOP_TOKENS,
            Released,
            None,
            Reads,
        ),
        row(
            "GET",
            "/v1/applications/{app}/rollout",
            SHOP_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        // A plan is a push that stores nothing: who may push may plan.
        row(
            "POST",
            "/v1/configs/plan",
            SHOP_CONFIG,
            ShopAndBlog,
            Some(config_push),
            Reads,
        ),
        // Tokens are the application admin's to manage, never wider than
        // its own, never another application's.
        row(
            "GET",
            "/v1/applications/{app}/tokens",
            &[Shop(Admin)],
            ShopAndBlog,
            None,
            Reads,
        ),
        row(
            "POST",
            "/v1/applications/{app}/tokens",
            &[Shop(Admin)],
            ShopAndBlog,
            Some(|| json!({"scopes": ["release"], "description": "CI"})),
            Writes,
        ),
        row(
            "DELETE",
            "/v1/applications/{app}/tokens/{id}",
            &[Shop(Admin)],
            ShopToken,
            None,
            Writes,
        ),
        // Agents serve clusters, not applications: any application may see
        // their last contact, an agent may not see the others.
        row(
            "GET",
            "/v1/agents",
            APPLICATION_TOKENS,
            ShopAndBlog,
            None,
            Reads,
        ),
        row(
            "POST",
            "/v1/agents/{agent}/poll",
            &[OwnAgent],
            ShopAndBlog,
            Some(|| json!({"version": "0.1.0", "waitSeconds": 0})),
            NoAgentDesk,
        ),
        row(
            "POST",
            "/v1/agents/{agent}/reports",
            &[OwnAgent],
            ShopAndBlog,
            Some(|| {
                json!({
                    "kind": "objectsChanged",
                    "application": "shop",
                    "service": "web",
                    "releaseChannel": "prod",
                    "changes": ["Deployment shop/web edited out of band"]
                })
            }),
            NoAgentDesk,
        ),
    ]
}

/// shop and blog again with one more comment in shop's file: a new content
/// hash of shop's part only, so an accepted push visibly replaces the
/// config in force and only shop's admin (or the platform) may make it.
fn config_push() -> Value {
    let mut files = config_files();
    files
        .get_mut("application.yaml")
        .unwrap()
        .push_str("\n# pushed through the API\n");
    json!({ "files": files })
}

/// The issuer of the CI callers' tokens, started by the test that needs it.
static ISSUER: OnceLock<String> = OnceLock::new();

/// shop and blog, shop trusting its CI's OIDC tokens from [`ISSUER`].
fn config_files() -> BTreeMap<String, String> {
    let issuer = ISSUER.get().expect("the issuer is started first");
    trusting(two_applications(), issuer)
}

/// (METHOD, path template) of every operation in docs/openapi.json.
fn documented() -> BTreeSet<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut operations = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "put", "post", "delete", "patch", "head", "options"]
                .contains(&method.as_str())
            {
                operations.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    operations
}

/// The concrete URI of a path template; an unknown parameter fails here so
/// a new route cannot be tested against a literal `{param}`.
fn uri_of(template: &str) -> String {
    let uri = template
        .replace("{app}", "shop")
        .replace("{service}", "web")
        .replace("{rc}", "prod")
        .replace("{name}", "high-error-rate")
        .replace("{agent}", "prod-eu")
        .replace("{id}", KNOWN_TOKEN_ID);
    assert!(
        !uri.contains('{'),
        "{template}: a path parameter this test does not know; add it to uri_of"
    );
    uri
}

/// A fresh API with `setup` in force and one token of every kind, so no
/// case sees what an earlier one wrote.
async fn api_with_callers(setup: Setup, issuer: &Issuer) -> (Api, BTreeMap<&'static str, String>) {
    let api = Api::new();
    let files = match setup {
        Setup::ShopAndBlog
        | Setup::Paused
        | Setup::Released
        | Setup::Pinned
        | Setup::ShopPushedTwice
        | Setup::ShopToken => config_files(),
    };
    api.control
        .apply_config(ConfigBundle::from_files(files), "test")
        .await
        .unwrap();
    if let Setup::ShopPushedTwice = setup {
        let files = config_push()["files"].clone();
        let files = serde_json::from_value(files).unwrap();
        api.control
            .apply_config(ConfigBundle::from_files(files), "test")
            .await
            .unwrap();
    }
    let shop = || Some("shop".parse().unwrap());
    let web: vergence_model::ServiceName = "web".parse().unwrap();
    match setup {
        Setup::Paused => {
            let filter = InstanceFilter {
                application: shop(),
                service: Some(web.clone()),
                release_channel: Some("prod".parse().unwrap()),
            };
            api.control
                .pause(&filter, PauseAction::Pause, "test")
                .await
                .unwrap();
        }
        Setup::Released | Setup::Pinned => {
            for version in ["v1", "v2"] {
                api.control
                    .push_release(
                        shop(),
                        &web,
                        &version.parse().unwrap(),
                        &BTreeMap::new(),
                        "test",
                    )
                    .await
                    .unwrap();
            }
        }
        Setup::ShopToken => {
            api.store
                .put_token(&ApiToken {
                    id: KNOWN_TOKEN_ID.to_owned(),
                    subject: TokenSubject::Application("shop".parse().unwrap()),
                    scopes: vec![Release],
                    secret_sha256: vergence_api::secret_sha256("known"),
                    description: Some("to revoke".to_owned()),
                    created_at: api.clock.now(),
                    created_by: "test".to_owned(),
                })
                .await
                .unwrap();
        }
        Setup::ShopAndBlog | Setup::ShopPushedTwice => {}
    }
    if let Setup::Pinned = setup {
        let prod = InstanceKey::new(shop().unwrap(), web.clone(), "prod".parse().unwrap());
        api.control
            .pin(&prod, &"v1".parse().unwrap(), "test")
            .await
            .unwrap();
    }
    let mut tokens = BTreeMap::new();
    for (name, app, scope) in [
        ("shop-release", "shop", Release),
        ("shop-approve", "shop", Approve),
        ("shop-override", "shop", Override),
        ("shop-admin", "shop", Admin),
        ("blog-release", "blog", Release),
        ("blog-approve", "blog", Approve),
        ("blog-override", "blog", Override),
        ("blog-admin", "blog", Admin),
    ] {
        tokens.insert(name, api.token(app, &[scope]).await);
    }
    let (_, platform) = create_token(
        api.store.as_ref(),
        &TokenSubject::Platform,
        &[],
        None,
        "test",
        api.clock.as_ref(),
    )
    .await
    .unwrap();
    tokens.insert("platform", platform);
    for (name, agent) in [("own-agent", "prod-eu"), ("other-agent", "prod-us")] {
        let (_, token) = create_token(
            api.store.as_ref(),
            &TokenSubject::Agent(agent.parse().unwrap()),
            &[],
            None,
            "test",
            api.clock.as_ref(),
        )
        .await
        .unwrap();
        tokens.insert(name, token);
    }
    let revoked = api.token("shop", &[Admin]).await;
    let (id, secret) = split_token(&revoked).unwrap();
    // Flip the secret's last character: same id and length, wrong secret.
    let flipped = if secret.ends_with('0') { "1" } else { "0" };
    let wrong = token_string(id, &format!("{}{flipped}", &secret[..secret.len() - 1]));
    tokens.insert("wrong-secret", wrong);
    assert!(api.store.delete_token(id).await.unwrap());
    tokens.insert("revoked", revoked);
    tokens.insert("malformed", "not-a-token".to_owned());
    tokens.insert("shop-ci", issuer.token(|_| {}));
    tokens.insert(
        "foreign-ci",
        issuer.token(|claims| claims["repository"] = json!("org/elsewhere")),
    );
    (api, tokens)
}

fn token_of(caller: Caller, tokens: &BTreeMap<&'static str, String>) -> Option<String> {
    let name = match caller {
        NoToken => return None,
        Malformed => "malformed",
        WrongSecret => "wrong-secret",
        Revoked => "revoked",
        Shop(Release) => "shop-release",
        Shop(Approve) => "shop-approve",
        Shop(Override) => "shop-override",
        Shop(Admin) => "shop-admin",
        Blog(Release) => "blog-release",
        Blog(Approve) => "blog-approve",
        Blog(Override) => "blog-override",
        Blog(Admin) => "blog-admin",
        OwnAgent => "own-agent",
        OtherAgent => "other-agent",
        Platform => "platform",
        ShopCi => "shop-ci",
        ForeignCi => "foreign-ci",
        Shop(Scope::Platform) | Blog(Scope::Platform) => {
            unreachable!("the platform scope is no application's")
        }
    };
    Some(tokens[name].clone())
}

/// Runs one (route, caller) case; `Err` says what went wrong.
async fn check(row: &Row, caller: Caller, issuer: &Issuer) -> Result<(), String> {
    let (api, tokens) = api_with_callers(row.setup, issuer).await;
    let uri = uri_of(row.path);
    let method: Method = row.method.parse().unwrap();
    let body = row.body.map(|body| body().to_string());
    let token = token_of(caller, &tokens);
    let before = api.footprint().await;
    let agents_before = api.store.list_agents().await.unwrap();
    let reply = api
        .send(request(method, &uri, token.as_deref(), body))
        .await;
    let wrote =
        api.footprint().await != before || api.store.list_agents().await.unwrap() != agents_before;
    let allowed = row.allowed.contains(&caller);
    let fail = |what: String| Err(format!("{what}: {reply:?}"));
    if allowed {
        let (status, writes) = match row.answer {
            Answer::Writes => (StatusCode::OK, true),
            Answer::Reads => (StatusCode::OK, false),
            Answer::NoAgentDesk => (StatusCode::NOT_FOUND, false),
        };
        if reply.status != status {
            return fail(format!("allowed, expected {status}"));
        }
        if matches!(row.answer, Answer::NoAgentDesk)
            && !reply.json["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("without the kubernetes runner"))
        {
            return fail("allowed, expected the handler's no-agent-desk answer".into());
        }
        if wrote != writes {
            return fail(format!("allowed, expected writes={writes}, wrote={wrote}"));
        }
        return Ok(());
    }
    let (status, code) = match caller {
        NoToken | Malformed | WrongSecret | Revoked | ForeignCi => {
            (StatusCode::UNAUTHORIZED, "unauthorized")
        }
        _ => (StatusCode::FORBIDDEN, "forbidden"),
    };
    if reply.status != status {
        return fail(format!("denied, expected {status}"));
    }
    let error = &reply.json["error"];
    if error["code"] != code || !error["message"].is_string() {
        return fail(format!("denied, expected an error body with code {code}"));
    }
    if status == StatusCode::UNAUTHORIZED && !reply.headers.contains_key(header::WWW_AUTHENTICATE) {
        return fail("a 401 without WWW-Authenticate".into());
    }
    if wrote {
        return fail("denied, but the store changed".into());
    }
    Ok(())
}

#[test]
fn every_documented_route_has_a_row_in_the_scope_table() {
    let rows: BTreeSet<(String, String)> = table()
        .iter()
        .map(|row| (row.method.to_owned(), row.path.to_owned()))
        .collect();
    let documented = documented();
    let missing: Vec<_> = documented.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "routes in docs/openapi.json without a row in the scope table: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "rows for routes not in docs/openapi.json: {stale:?}"
    );
    assert_eq!(rows.len(), table().len(), "one row per route");
}

#[tokio::test]
async fn every_route_allows_exactly_the_callers_in_the_scope_table() {
    let issuer = Issuer::start().await;
    ISSUER.get_or_init(|| issuer.url.clone());
    let table = table();
    let mut failures = Vec::new();
    let mut cases = 0;
    for (method, path) in documented() {
        let Some(row) = table
            .iter()
            .find(|row| row.method == method && row.path == path)
        else {
            // The test above names it; here it simply cannot be checked.
            failures.push(format!("{method} {path}: no row in the scope table"));
            continue;
        };
        for caller in CALLERS {
            cases += 1;
            if let Err(failure) = check(row, caller, &issuer).await {
                failures.push(format!("{method} {path} as {caller:?}: {failure}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(cases, table.len() * CALLERS.len());
}
