//! CI jobs calling with their own OIDC token: a local issuer (discovery
//! and a JWKS on 127.0.0.1, which the tests can rotate or stop) and tokens
//! the tests sign with checked-in RSA keys. Every refusal is a 401 that
//! names its reason and leaves the store exactly as it was.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::get;
use base64::Engine;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use vergence_model::{ConfigBundle, EventFilter, Scope};

use crate::common::{Api, RELEASES, START, quickstart_files, request, two_applications};

const RSA_A: &[u8] = include_bytes!("oidc_keys/rsa-a.pem");
const RSA_A_PUBLIC: &[u8] = include_bytes!("oidc_keys/rsa-a.pub.pem");
const RSA_B: &[u8] = include_bytes!("oidc_keys/rsa-b.pem");
const EC_P256: &[u8] = include_bytes!("oidc_keys/ec-p256.pem");

/// A local OIDC issuer: its discovery document and the keys it serves
/// now, and how often its keys were fetched.
pub(crate) struct Issuer {
    pub(crate) url: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    key_fetches: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct IssuerState {
    url: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    key_fetches: Arc<AtomicUsize>,
}

async fn discovery(State(issuer): State<IssuerState>) -> Json<Value> {
    Json(json!({"issuer": issuer.url, "jwks_uri": format!("{}/keys", issuer.url)}))
}

async fn jwks(State(issuer): State<IssuerState>) -> Json<Value> {
    issuer.key_fetches.fetch_add(1, Ordering::SeqCst);
    let keys = issuer.keys.lock().unwrap().clone();
    Json(json!({ "keys": keys }))
}

/// The public JWK of a private key, with its id.
fn public_jwk(pem: &[u8], kid: &str) -> Jwk {
    let key = EncodingKey::from_rsa_pem(pem).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

impl Issuer {
    /// Serves key `a` (rsa-a.pem).
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let keys = Arc::new(Mutex::new(vec![public_jwk(RSA_A, "a")]));
        let key_fetches = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/keys", get(jwks))
            .with_state(IssuerState {
                url: url.clone(),
                keys: keys.clone(),
                key_fetches: key_fetches.clone(),
            });
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            keys,
            key_fetches,
            server,
        }
    }

    fn fetches(&self) -> usize {
        self.key_fetches.load(Ordering::SeqCst)
    }

    /// A token for the trusted job: shop's repository, main, audience
    /// `vergence`, valid from START for 5 minutes; `change` edits claims.
    pub(crate) fn token(&self, change: impl FnOnce(&mut Value)) -> String {
        self.token_signed(RSA_A, "a", change)
    }

    fn token_signed(&self, pem: &[u8], kid: &str, change: impl FnOnce(&mut Value)) -> String {
        let key = EncodingKey::from_rsa_pem(pem).unwrap();
        self.token_with(Algorithm::RS256, &key, kid, change)
    }

    fn token_with(
        &self,
        algorithm: Algorithm,
        key: &EncodingKey,
        kid: &str,
        change: impl FnOnce(&mut Value),
    ) -> String {
        let mut claims = json!({
            "iss": self.url,
            "aud": "vergence",
            "sub": "repo:org/shop:ref:refs/heads/main",
            "repository": "org/shop",
            "ref": "refs/heads/main",
            "iat": START,
            "nbf": START,
            "exp": START + 300,
        });
        change(&mut claims);
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// shop trusts its main branch's CI to release; blog trusts nothing.
fn trusting_config(issuer: &str) -> ConfigBundle {
    ConfigBundle::from_files(trusting(two_applications(), issuer))
}

/// `files` (shop's application.yaml among them) with a trust entry for
/// shop's main branch's CI, with the release scope.
pub(crate) fn trusting(
    mut files: std::collections::BTreeMap<String, String>,
    issuer: &str,
) -> std::collections::BTreeMap<String, String> {
    let application = files.get_mut("application.yaml").unwrap();
    *application = application.replace(
        "application:\n  name: shop\n",
        &format!(
            "application:\n  name: shop\n  trust:\n    - issuer: {issuer}\n      audience: vergence\n      claims: {{repository: org/shop, ref: refs/heads/main}}\n      scopes: [release]\n"
        ),
    );
    files
}

async fn api_trusting(issuer: &Issuer) -> Api {
    let api = Api::new();
    api.control
        .apply_config(trusting_config(&issuer.url), "test")
        .await
        .unwrap();
    api
}

fn release(token: &str) -> axum::http::Request<axum::body::Body> {
    request(
        Method::POST,
        RELEASES,
        Some(token),
        Some(json!({"version": "v2"}).to_string()),
    )
}

/// Sends `token` as a release, which must be refused with 401 naming
/// `reason`, the store untouched.
async fn refused_naming(api: &Api, token: &str, reason: &str) {
    let reply = api
        .refused(release(token), StatusCode::UNAUTHORIZED, "unauthorized")
        .await;
    assert!(
        reply.message().contains(reason),
        "{:?} does not name {reason:?}",
        reply.message()
    );
}

#[tokio::test]
async fn a_trusted_jobs_token_pushes_a_release_recorded_as_its_identity() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let token = issuer.token(|_| {});
    let reply = api.send(release(&token)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.json["version"], "v2");
    let host = issuer.url.trim_start_matches("http://");
    let events = api.control.events(&EventFilter::default()).await.unwrap();
    let actor = format!("oidc:{host}:repo:org/shop:ref:refs/heads/main");
    assert!(
        events.iter().any(|e| e.actor == actor),
        "no event by {actor}: {events:?}"
    );
    assert!(
        events.iter().all(|e| !format!("{e:?}").contains(&token)),
        "the token was recorded"
    );
    // whoami reads as shop's release token, so the CLI needs no --app.
    let me = api
        .call(Method::GET, "/v1/whoami", Some(&token), None)
        .await;
    assert_eq!(me.status, StatusCode::OK, "{me:?}");
    assert_eq!(me.json["application"], "shop");
    assert_eq!(me.json["scopes"], json!(["release"]));
    assert_eq!(me.json["actor"], actor.as_str());
    // Keys were fetched once for both requests.
    assert_eq!(issuer.fetches(), 1);
}

#[tokio::test]
async fn a_trusted_job_gets_exactly_its_entrys_scopes_on_its_application() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let token = issuer.token(|_| {});
    let approve = request(
        Method::POST,
        crate::common::APPROVALS,
        Some(&token),
        Some("{}".to_owned()),
    );
    let reply = api
        .refused(approve, StatusCode::FORBIDDEN, "forbidden")
        .await;
    assert!(reply.message().contains("lacks scope approve"), "{reply:?}");
    let blog = request(
        Method::POST,
        "/v1/applications/blog/services/site/releases",
        Some(&token),
        Some(json!({"version": "v2"}).to_string()),
    );
    let reply = api.refused(blog, StatusCode::FORBIDDEN, "forbidden").await;
    assert!(reply.message().contains("not blog"), "{reply:?}");
    let create = request(
        Method::POST,
        "/v1/applications/shop/tokens",
        Some(&token),
        Some(json!({"scopes": ["release"]}).to_string()),
    );
    api.refused(create, StatusCode::FORBIDDEN, "forbidden")
        .await;
}

#[tokio::test]
async fn tokens_that_fail_a_check_are_refused_with_the_reason() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let cases: Vec<(String, &str)> = vec![
        (
            issuer.token(|c| c["aud"] = json!("someone-else")),
            "audience",
        ),
        (
            issuer.token(|c| c["exp"] = json!(START - 120)),
            "expired 120s ago",
        ),
        (
            issuer.token(|c| c["nbf"] = json!(START + 600)),
            "not valid yet",
        ),
        (
            issuer.token(|c| c["repository"] = json!("org/other")),
            r#"repository is "org/other", not "org/shop""#,
        ),
        (
            issuer.token(|c| c["ref"] = json!("refs/heads/feature")),
            r#"ref is "refs/heads/feature", not "refs/heads/main""#,
        ),
        (
            issuer.token(|c| c["iss"] = json!("https://elsewhere.example")),
            "no trust entry of the config in force names issuer https://elsewhere.example",
        ),
        (
            issuer.token_signed(RSA_B, "a", |_| {}),
            "signature does not verify",
        ),
    ];
    for (token, reason) in cases {
        refused_naming(&api, &token, reason).await;
    }
    // Within the leeway, a token just expired or not quite valid yet passes.
    let skewed = issuer.token(|c| {
        c["exp"] = json!(START - 30);
        c["nbf"] = json!(START + 30);
    });
    let reply = api.send(release(&skewed)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[tokio::test]
async fn an_unsigned_token_and_an_hmac_made_with_the_public_key_are_refused() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let valid = issuer.token(|_| {});
    let payload = valid.split('.').nth(1).unwrap();
    let none = format!(
        "{}.{payload}.",
        b64(br#"{"alg":"none","typ":"JWT","kid":"a"}"#)
    );
    refused_naming(&api, &none, "never none").await;

    // The classic confusion: HS256 keyed with the issuer's public key,
    // which anyone can fetch.
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("a".to_owned());
    let hmac = jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_secret(RSA_A_PUBLIC).unwrap(),
    )
    .unwrap();
    refused_naming(&api, &hmac, "signed with HS256, but issuer").await;
}

#[tokio::test]
async fn an_unknown_key_is_fetched_again_once_then_refused() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let reply = api.send(release(&issuer.token(|_| {}))).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(issuer.fetches(), 1);
    let unknown = issuer.token_signed(RSA_B, "b", |_| {});
    refused_naming(&api, &unknown, "has no key \"b\"").await;
    assert_eq!(issuer.fetches(), 2, "the keys were fetched again once");
    // Another unknown key at once does not reach the issuer again.
    refused_naming(&api, &unknown, "has no key \"b\"").await;
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn a_rotated_key_is_picked_up() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let reply = api.send(release(&issuer.token(|_| {}))).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    issuer.keys.lock().unwrap().push(public_jwk(RSA_B, "b"));
    let rotated = issuer.token_signed(RSA_B, "b", |_| {});
    let reply = api.send(release(&rotated)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(issuer.fetches(), 2);
}

#[tokio::test]
async fn an_issuer_that_is_down_refuses_its_tokens_only() {
    let issuer = Issuer::start().await;
    let api = api_trusting(&issuer).await;
    let token = issuer.token(|_| {});
    issuer.server.abort();
    // Wait until the listener is closed.
    while tokio::net::TcpStream::connect(issuer.url.trim_start_matches("http://"))
        .await
        .is_ok()
    {
        tokio::task::yield_now().await;
    }
    let reason = format!("the keys of issuer {} cannot be fetched: GET", issuer.url);
    refused_naming(&api, &token, &reason).await;
    // Stored tokens are unaffected.
    let stored = api.token("shop", &[Scope::Release]).await;
    let reply = api.send(release(&stored)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn without_a_trust_entry_an_oidc_token_is_refused() {
    let issuer = Issuer::start().await;
    let api = Api::new();
    api.control
        .apply_config(ConfigBundle::from_files(quickstart_files()), "test")
        .await
        .unwrap();
    refused_naming(
        &api,
        &issuer.token(|_| {}),
        "no trust entry of the config in force names issuer",
    )
    .await;
    assert_eq!(issuer.fetches(), 0);
}

#[tokio::test]
async fn an_ec_key_verifies_es256_and_nothing_else() {
    let issuer = Issuer::start().await;
    let ec = EncodingKey::from_ec_pem(EC_P256).unwrap();
    let mut jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some("e".to_owned());
    issuer.keys.lock().unwrap().push(jwk);
    let api = api_trusting(&issuer).await;
    let es256 = issuer.token_with(Algorithm::ES256, &ec, "e", |_| {});
    let reply = api.send(release(&es256)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // An RSA signature claiming the EC key's id is refused before any
    // verification is tried.
    let confused = issuer.token_signed(RSA_A, "e", |_| {});
    refused_naming(&api, &confused, "signed with RS256, but issuer").await;
}
