//! Who is calling and what they may do: bearer tokens per application with
//! scopes, and optional HMAC-SHA256 signatures on webhook requests.

use axum::http::{HeaderMap, header};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use vergence_model::{AgentName, ApiToken, ApplicationName, Scope, split_token};

use crate::oidc::{self, TrustedCaller};
use crate::{ApiError, ApiState};

/// Unix seconds at which a webhook was signed.
pub const TIMESTAMP_HEADER: &str = "x-vergence-timestamp";
/// `sha256=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>`.
pub const SIGNATURE_HEADER: &str = "x-vergence-signature";
/// How far a signed webhook's timestamp may be from the server's clock,
/// either way; older ones are treated as replays.
pub const MAX_WEBHOOK_SKEW_SECONDS: i64 = 5 * 60;

/// Token ids are 32 hex characters; anything much longer is not one of ours
/// and is refused before it reaches the store.
const MAX_TOKEN_ID_LEN: usize = 64;

/// CI platforms' OIDC tokens are 1-2 KiB; a bearer value much longer is
/// refused before it is decoded.
const MAX_JWT_LEN: usize = 16 * 1024;

const SHA256_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// An authenticated caller: a stored token, or a CI job's verified OIDC
/// token (see [`crate::oidc`]).
#[derive(Debug)]
pub(crate) enum Caller {
    Token(ApiToken),
    Trusted(TrustedCaller),
}

impl Caller {
    /// Who the caller's actions are attributed to in events.
    pub fn actor(&self) -> String {
        match self {
            Caller::Token(token) => format!("api:token-{}", short_id(&token.id)),
            Caller::Trusted(trusted) => trusted.actor(),
        }
    }

    /// The stored token the caller presented, if it presented one.
    pub fn stored_token(&self) -> Option<&ApiToken> {
        match self {
            Caller::Token(token) => Some(token),
            Caller::Trusted(_) => None,
        }
    }

    /// How messages name the caller: `token 1a2b3c4d`, or the identity.
    pub fn name(&self) -> String {
        match self {
            Caller::Token(token) => format!("token {}", short_id(&token.id)),
            Caller::Trusted(trusted) => format!("OIDC identity {}", trusted.actor()),
        }
    }

    /// Whose the caller is, for messages.
    pub fn owner(&self) -> String {
        match self {
            Caller::Token(token) => token.subject.to_string(),
            Caller::Trusted(trusted) => {
                let applications: Vec<String> =
                    trusted.grants.keys().map(ToString::to_string).collect();
                format!("application(s) {} by trust", applications.join(", "))
            }
        }
    }

    /// Whether the caller may use `scope`, on some application for an
    /// OIDC identity.
    pub fn allows(&self, scope: Scope) -> bool {
        match self {
            Caller::Token(token) => token.allows(scope),
            Caller::Trusted(trusted) => trusted.allows_anywhere(scope),
        }
    }

    /// Whether the caller acts for `application`, with any scope.
    pub fn acts_for(&self, application: &ApplicationName) -> bool {
        match self {
            Caller::Token(token) => token.application() == Some(application),
            Caller::Trusted(trusted) => trusted.grants.contains_key(application),
        }
    }

    /// The caller must act for `application` and may use `scope` there.
    pub fn authorize(&self, application: &ApplicationName, scope: Scope) -> Result<(), ApiError> {
        self.authorize_application(application)?;
        match self {
            Caller::Token(_) => self.require_scope(scope),
            Caller::Trusted(trusted) if trusted.allows_on(application, scope) => Ok(()),
            Caller::Trusted(trusted) => Err(ApiError::Authorize(format!(
                "{} lacks scope {scope} on {application} (its trust entry gives {})",
                self.name(),
                scope_list(
                    trusted
                        .grants
                        .get(application)
                        .map_or(&[][..], Vec::as_slice)
                )
            ))),
        }
    }

    /// The caller must act for `application`, with any scope.
    pub fn authorize_application(&self, application: &ApplicationName) -> Result<(), ApiError> {
        if self.acts_for(application) {
            return Ok(());
        }
        Err(ApiError::Authorize(format!(
            "{} belongs to {}, not {application}",
            self.name(),
            self.owner()
        )))
    }

    /// The caller must act for an application (any scope).
    pub fn require_application(&self) -> Result<(), ApiError> {
        let token = match self {
            Caller::Trusted(_) => return Ok(()),
            Caller::Token(token) => token,
        };
        if token.application().is_some() {
            return Ok(());
        }
        if token.is_platform() {
            return Err(ApiError::Authorize(format!(
                "token {} belongs to the platform: it can push and roll back configs, nothing else",
                short_id(&token.id)
            )));
        }
        Err(ApiError::Authorize(format!(
            "token {} belongs to {}: it can only poll for and report that agent's work",
            short_id(&token.id),
            token.subject
        )))
    }

    /// The caller must be `agent`'s own token: only it polls for and
    /// reports its work.
    pub fn authorize_agent(&self, agent: &AgentName) -> Result<(), ApiError> {
        if self.stored_token().and_then(ApiToken::agent) == Some(agent) {
            return Ok(());
        }
        Err(ApiError::Authorize(format!(
            "{} belongs to {}, not agent {agent}: create one with `vergence token create --agent {agent}`",
            self.name(),
            self.owner()
        )))
    }

    /// The caller must allow `scope`, whatever its application.
    pub fn require_scope(&self, scope: Scope) -> Result<(), ApiError> {
        if self.allows(scope) {
            return Ok(());
        }
        let scopes: Vec<Scope> = match self {
            Caller::Token(token) => token.scopes.clone(),
            Caller::Trusted(trusted) => trusted.grants.values().flatten().copied().collect(),
        };
        Err(ApiError::Authorize(format!(
            "{} lacks scope {scope} (it has {})",
            self.name(),
            scope_list(&scopes)
        )))
    }
}

fn scope_list(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// Reads `Authorization: Bearer vgt_<id>_<secret>` and checks it against
/// the stored token, or `Bearer <JWT>` and verifies it against the
/// `trust:` entries of the config in force.
pub(crate) async fn authenticate(
    state: &ApiState,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let malformed = || {
        ApiError::Authenticate(
            "the Authorization header must be `Bearer vgt_<id>_<secret>` or `Bearer <OIDC token>`"
                .to_owned(),
        )
    };
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        ApiError::Authenticate(
            "missing credentials: send `Authorization: Bearer vgt_<id>_<secret>`".to_owned(),
        )
    })?;
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, presented) = value.trim().split_once(' ').ok_or_else(malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(malformed());
    }
    let presented = presented.trim();
    if presented.len() <= MAX_JWT_LEN && oidc::looks_like_jwt(presented) {
        return authenticate_oidc(state, presented).await;
    }
    let (id, secret) = split_token(presented).ok_or_else(malformed)?;
    if id.len() > MAX_TOKEN_ID_LEN {
        return Err(malformed());
    }
    let presented_hash = Sha256::digest(secret.as_bytes());
    match state.store.get_token(id).await? {
        Some(token) if secret_matches(&token.secret_sha256, &presented_hash) => {
            Ok(Caller::Token(token))
        }
        // One answer for an unknown id and a wrong secret: the caller learns
        // nothing about which tokens exist.
        _ => Err(ApiError::Authenticate(
            "the token is not valid (unknown, revoked or wrong secret)".to_owned(),
        )),
    }
}

/// A CI job's OIDC token, trusted by the config in force.
async fn authenticate_oidc(state: &ApiState, token: &str) -> Result<Caller, ApiError> {
    let rules = match state.control.current_model().await? {
        Some(model) => model.trust(),
        None => Vec::new(),
    };
    let trusted = oidc::verify(&state.oidc_keys, token, &rules, state.clock.now()).await?;
    Ok(Caller::Trusted(trusted))
}

/// Compares the presented secret's SHA-256 with the stored one in constant
/// time, so response timing does not reveal how many bytes matched.
pub(crate) fn secret_matches(stored_hex: &str, presented_sha256: &[u8]) -> bool {
    match hex::decode(stored_hex) {
        Ok(stored) if stored.len() == SHA256_BYTES && presented_sha256.len() == SHA256_BYTES => {
            stored.as_slice().ct_eq(presented_sha256).into()
        }
        // A stored hash that is not 32 bytes of hex cannot match anything.
        _ => false,
    }
}

/// The `X-Vergence-Signature` value for a webhook body signed at `timestamp`.
pub fn sign_webhook(secret: &str, timestamp: i64, body: &[u8]) -> Result<String, ApiError> {
    let mac = webhook_mac(secret, &timestamp.to_string(), body)?;
    Ok(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

fn webhook_mac(secret: &str, timestamp: &str, body: &[u8]) -> Result<HmacSha256, ApiError> {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).map_err(ApiError::WebhookKey)?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    Ok(mac)
}

/// When a webhook secret is configured, a webhook request must carry a
/// valid signature of its exact body, made within the allowed skew, and
/// not used before: the store remembers each signature past the window,
/// with a conditional write, so that of two API instances given the same
/// request only one accepts it.
pub(crate) async fn verify_webhook(
    state: &ApiState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let Some(secret) = state.config.webhook_secret.as_deref() else {
        return Ok(());
    };
    let header_text = |name: &str| -> Result<&str, ApiError> {
        headers
            .get(name)
            .ok_or_else(|| {
                ApiError::Authenticate(format!(
                    "missing {name} header: this server requires signed webhooks"
                ))
            })?
            .to_str()
            .map(str::trim)
            .map_err(|_| ApiError::Authenticate(format!("the {name} header is not text")))
    };
    let timestamp_text = header_text(TIMESTAMP_HEADER)?;
    let timestamp: i64 = timestamp_text
        .parse()
        .map_err(|_| ApiError::Authenticate(format!("{TIMESTAMP_HEADER} must be unix seconds")))?;
    let signature = header_text(SIGNATURE_HEADER)?
        .strip_prefix("sha256=")
        .and_then(|hex_text| hex::decode(hex_text).ok())
        .ok_or_else(|| {
            ApiError::Authenticate(format!("{SIGNATURE_HEADER} must be `sha256=<hex>`"))
        })?;
    // verify_slice compares in constant time.
    webhook_mac(secret, timestamp_text, body)?
        .verify_slice(&signature)
        .map_err(|_| {
            ApiError::Authenticate(
                "the webhook signature does not match the body and timestamp".to_owned(),
            )
        })?;
    // Checked after the signature, so "stale" is only ever said about a
    // request that really was signed with the secret.
    let age = state.clock.now().as_second().saturating_sub(timestamp);
    if age.saturating_abs() > MAX_WEBHOOK_SKEW_SECONDS {
        let when = if age > 0 {
            format!("{age}s ago")
        } else {
            format!("{}s in the future", age.saturating_neg())
        };
        return Err(ApiError::Authenticate(format!(
            "the webhook is replayed or stale: it was signed {when} (at most {MAX_WEBHOOK_SKEW_SECONDS}s either way)"
        )));
    }
    // Remembered until the timestamp is out of the window everywhere, with
    // a minute for API instances whose clocks differ.
    let expires_at = jiff::Timestamp::from_second(
        timestamp.saturating_add(MAX_WEBHOOK_SKEW_SECONDS + SIGNATURE_MEMORY_MARGIN_SECONDS),
    )
    .map_err(|_| ApiError::Authenticate(format!("{TIMESTAMP_HEADER} is out of range")))?;
    let first_use = state
        .store
        .use_webhook_signature(&hex::encode(&signature), state.clock.now(), expires_at)
        .await?;
    if !first_use {
        return Err(ApiError::Authenticate(
            "the webhook is replayed: this signature was already used (each signed request is accepted once; sign it again to send it again)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// How long past the skew window a used signature is remembered.
const SIGNATURE_MEMORY_MARGIN_SECONDS: i64 = 60;

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::secret_matches;
    use crate::secret_sha256;

    #[test]
    fn only_the_secret_whose_hash_is_stored_matches() {
        let stored = secret_sha256("s3cret");
        assert!(secret_matches(&stored, &Sha256::digest(b"s3cret")));
        assert!(!secret_matches(&stored, &Sha256::digest(b"s3cres")));
        // A damaged stored hash matches nothing, not even its own prefix.
        assert!(!secret_matches("not hex", &Sha256::digest(b"s3cret")));
        assert!(!secret_matches(&stored[..32], &Sha256::digest(b"s3cret")));
        assert!(!secret_matches("", &[]));
    }
}
