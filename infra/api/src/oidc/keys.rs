//! The signing keys of the issuers `trust:` entries name: discovered at
//! `{issuer}/.well-known/openid-configuration`, fetched over HTTPS, cached
//! per issuer, and fetched again when a token names a key the cache does
//! not have (the issuer rotated its keys) — at most once a minute, so a
//! stream of tokens with made-up key ids cannot make Vergence hammer the
//! issuer.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;
use tokio::sync::Mutex;
use vergence_model::text::with_causes;

/// How long fetched keys are used before they are fetched again.
const KEYS_TTL: Duration = Duration::from_secs(10 * 60);
/// The least time between two fetches caused by an unknown key id.
const UNKNOWN_KEY_REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// How long a failed fetch is answered from memory: an issuer that is down
/// costs each request nothing, not a 5 s wait.
const FAILURE_MEMORY: Duration = Duration::from_secs(10);
/// How long one discovery or key request may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// A discovery document or key set is a few KiB; more is not one.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// Why an issuer's key could not be had; the message names the issuer.
#[derive(Clone, Debug)]
pub(crate) enum KeyError {
    /// Discovery or the key set could not be fetched or read.
    Fetch(String),
    /// The key set, fetched again, has no key with the token's id.
    UnknownKey(String),
}

#[derive(Default)]
struct IssuerKeys {
    keys: Option<(Arc<JwkSet>, Instant)>,
    unknown_key_refetch: Option<Instant>,
    failure: Option<(String, Instant)>,
}

/// The key cache, shared by every request of one API process. Each issuer
/// has its own lock, so an issuer that is slow to answer delays its own
/// tokens only. Issuers are those of the config's trust entries, so the
/// map stays small.
#[derive(Default)]
pub(crate) struct KeyCache {
    client: OnceLock<Result<reqwest::Client, String>>,
    issuers: std::sync::Mutex<HashMap<String, Arc<Mutex<IssuerKeys>>>>,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCache")
    }
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl KeyCache {
    /// The issuer's key `kid`, from the cache or fetched. The issuer's lock
    /// is held across a fetch so concurrent requests wait for one fetch
    /// instead of each making their own.
    pub(crate) async fn key(&self, issuer: &str, kid: &str) -> Result<Jwk, KeyError> {
        let slot = self
            .issuers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(issuer.to_owned())
            .or_default()
            .clone();
        let mut state = slot.lock().await;
        let fresh = state
            .keys
            .as_ref()
            .filter(|(_, at)| at.elapsed() < KEYS_TTL)
            .map(|(keys, _)| keys.clone());
        if let Some(keys) = &fresh {
            if let Some(key) = keys.find(kid) {
                return Ok(key.clone());
            }
            if state
                .unknown_key_refetch
                .is_some_and(|at| at.elapsed() < UNKNOWN_KEY_REFETCH_INTERVAL)
            {
                return Err(unknown_key(
                    issuer,
                    kid,
                    "fetched again less than a minute ago",
                ));
            }
            state.unknown_key_refetch = Some(Instant::now());
        } else if let Some((reason, at)) = &state.failure
            && at.elapsed() < FAILURE_MEMORY
        {
            return Err(KeyError::Fetch(reason.clone()));
        }
        match self.fetch(issuer).await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                state.keys = Some((keys.clone(), Instant::now()));
                state.failure = None;
                keys.find(kid)
                    .cloned()
                    .ok_or_else(|| unknown_key(issuer, kid, "fetched again just now"))
            }
            Err(reason) => {
                tracing::warn!(issuer, reason, "cannot fetch an OIDC issuer's keys");
                state.failure = Some((reason.clone(), Instant::now()));
                Err(KeyError::Fetch(reason))
            }
        }
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        self.client
            .get_or_init(|| {
                // reqwest takes the process's TLS provider; a function or
                // test that installed none gets ring (a no-op when the
                // process already has one).
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
                    .timeout(FETCH_TIMEOUT)
                    // An issuer's keys are where its discovery says, not
                    // wherever a redirect leads.
                    .redirect(reqwest::redirect::Policy::none())
                    .user_agent(concat!("vergence/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot build an HTTP client: {}", with_causes(&e)))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Discovery, then the key set it points at.
    async fn fetch(&self, issuer: &str) -> Result<JwkSet, String> {
        let client = self.client()?;
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        );
        let discovery: Discovery = get_json(client, &discovery_url).await?;
        if discovery.issuer != issuer {
            return Err(format!(
                "{discovery_url} names issuer {:?}, not {issuer:?}",
                discovery.issuer
            ));
        }
        if !same_security(issuer, &discovery.jwks_uri) {
            return Err(format!(
                "{discovery_url} points at keys over plain http ({}); keys are fetched over https only",
                discovery.jwks_uri
            ));
        }
        get_json(client, &discovery.jwks_uri).await
    }
}

fn unknown_key(issuer: &str, kid: &str, when: &str) -> KeyError {
    KeyError::UnknownKey(format!(
        "issuer {issuer} has no key {kid:?} (its keys were {when})"
    ))
}

/// `https://` keys for any issuer; `http://` to this machine only for an
/// issuer that is itself there (a test's; the compiler refuses others).
fn same_security(issuer: &str, jwks_uri: &str) -> bool {
    jwks_uri.starts_with("https://")
        || (issuer.starts_with("http://")
            && [
                "http://127.0.0.1:",
                "http://127.0.0.1/",
                "http://localhost:",
                "http://localhost/",
            ]
            .iter()
            .any(|prefix| jwks_uri.starts_with(prefix)))
}

async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
) -> Result<T, String> {
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url} failed: {}", with_causes(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("GET {url} answered {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("GET {url} failed: {}", with_causes(&e)))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(format!(
                "GET {url}: the answer is over {MAX_DOCUMENT_BYTES} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the JSON expected: {e}"))
}
