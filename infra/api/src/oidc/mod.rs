//! CI jobs that call with their own OIDC token instead of a stored API
//! token (`Authorization: Bearer <JWT>`): the token is verified against
//! the keys of an issuer a `trust:` entry names — the signature with the
//! algorithm the issuer's key is for (never the one the token asks for,
//! so `alg: none` and an HMAC made with the public key are refused), then
//! `iss`, `aud`, `exp` and `nbf` (60 s leeway, on the API's clock) and the
//! entry's claims. The caller gets exactly the matching entries' scopes on
//! their applications. The token itself is never stored or logged; events
//! name the issuer's host, the subject and the repository.

mod keys;

use std::collections::BTreeMap;

use jiff::Timestamp;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use vergence_model::trust::TrustRule;
use vergence_model::{ApplicationName, Scope};

pub(crate) use keys::KeyCache;
use keys::KeyError;

use crate::ApiError;

/// Clock skew allowed between the issuer and this API, either way.
const LEEWAY_SECONDS: i64 = 60;

/// A caller known by a verified OIDC token.
#[derive(Debug)]
pub(crate) struct TrustedCaller {
    pub issuer: String,
    pub subject: String,
    pub repository: Option<String>,
    /// Each application a matching entry is for, with its scopes.
    pub grants: BTreeMap<ApplicationName, Vec<Scope>>,
}

impl TrustedCaller {
    /// `oidc:<issuer host>:<sub>`, and the repository when the token
    /// names one its subject does not already show.
    pub fn actor(&self) -> String {
        let host = self
            .issuer
            .split_once("://")
            .map_or(self.issuer.as_str(), |(_, rest)| rest);
        let host = host.split('/').next().unwrap_or(host);
        let mut actor = format!("oidc:{host}:{}", self.subject);
        if let Some(repository) = &self.repository
            && !self.subject.contains(repository.as_str())
        {
            actor.push_str(&format!(" (repository {repository})"));
        }
        actor
    }

    /// Whether the caller may use `scope` on `application` (admin allows
    /// every application scope, as for a stored token).
    pub fn allows_on(&self, application: &ApplicationName, scope: Scope) -> bool {
        self.grants
            .get(application)
            .is_some_and(|scopes| allows(scopes, scope))
    }

    /// Whether the caller may use `scope` on any of its applications.
    pub fn allows_anywhere(&self, scope: Scope) -> bool {
        self.grants.values().any(|scopes| allows(scopes, scope))
    }
}

fn allows(scopes: &[Scope], scope: Scope) -> bool {
    scope != Scope::Platform && (scopes.contains(&scope) || scopes.contains(&Scope::Admin))
}

/// Whether a bearer value is shaped like a JWT (three base64url parts),
/// rather than a Vergence token.
pub(crate) fn looks_like_jwt(presented: &str) -> bool {
    presented.split('.').count() == 3
        && presented
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn refuse(reason: impl std::fmt::Display) -> ApiError {
    ApiError::Authenticate(format!("the OIDC token is refused: {reason}"))
}

/// Verifies `token` against the `rules` of the config in force, at `now`.
pub(crate) async fn verify(
    keys: &KeyCache,
    token: &str,
    rules: &[TrustRule],
    now: Timestamp,
) -> Result<TrustedCaller, ApiError> {
    // Read unverified only to pick the issuer whose keys verify it; every
    // claim used below comes from the verified decode.
    let unverified: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(token)
        .map_err(|e| refuse(format!("it cannot be read as a JWT ({e})")))?;
    let issuer = unverified
        .get("iss")
        .and_then(Value::as_str)
        .ok_or_else(|| refuse("it has no iss"))?;
    let candidates: Vec<&TrustRule> = rules.iter().filter(|r| r.issuer == issuer).collect();
    if candidates.is_empty() {
        return Err(refuse(format!(
            "no trust entry of the config in force names issuer {issuer}"
        )));
    }
    let header = jsonwebtoken::decode_header(token).map_err(|e| {
        refuse(format!(
            "its header is not one accepted (alg must be the issuer key's: RS256/384/512 or ES256/384; never none): {e}"
        ))
    })?;
    let kid = header
        .kid
        .as_deref()
        .ok_or_else(|| refuse("its header names no key (kid)"))?;
    let jwk = keys.key(issuer, kid).await.map_err(|e| match e {
        KeyError::Fetch(reason) => refuse(format!(
            "the keys of issuer {issuer} cannot be fetched: {reason}"
        )),
        KeyError::UnknownKey(reason) => refuse(reason),
    })?;
    let algorithm = key_algorithm(&jwk)
        .map_err(|reason| refuse(format!("issuer {issuer}'s key {kid:?} {reason}")))?;
    if header.alg != algorithm {
        return Err(refuse(format!(
            "it is signed with {:?}, but issuer {issuer}'s key {kid:?} is for {algorithm:?}",
            header.alg
        )));
    }
    let claims = verified_claims(token, &jwk, algorithm, issuer, &candidates)?;
    check_times(&claims, now)?;
    grant(issuer, &claims, &candidates)
}

/// The algorithm the issuer's key is for: its `alg` when it has one, else
/// what its type implies. Symmetric and unknown keys are refused.
fn key_algorithm(jwk: &Jwk) -> Result<Algorithm, String> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return Err("is for encryption (use: enc), not for signatures".to_owned());
    }
    let stated = jwk.common.key_algorithm;
    let algorithm = match (&jwk.algorithm, stated) {
        (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
        (AlgorithmParameters::RSA(_), Some(KeyAlgorithm::RS384)) => Algorithm::RS384,
        (AlgorithmParameters::RSA(_), Some(KeyAlgorithm::RS512)) => Algorithm::RS512,
        (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
            if ec.curve == EllipticCurve::P256 =>
        {
            Algorithm::ES256
        }
        (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES384))
            if ec.curve == EllipticCurve::P384 =>
        {
            Algorithm::ES384
        }
        _ => {
            return Err(format!(
                "is not an RSA (RS256/384/512) or EC (ES256 on P-256, ES384 on P-384) signing key (alg {stated:?})"
            ));
        }
    };
    Ok(algorithm)
}

/// The token's claims once its signature, `iss` and `aud` (one of the
/// candidate entries') are verified. `exp` must be present; its value is
/// checked on the API's clock by [`check_times`].
fn verified_claims(
    token: &str,
    jwk: &Jwk,
    algorithm: Algorithm,
    issuer: &str,
    candidates: &[&TrustRule],
) -> Result<Map<String, Value>, ApiError> {
    let key = DecodingKey::from_jwk(jwk)
        .map_err(|e| refuse(format!("issuer {issuer}'s key cannot be used: {e}")))?;
    let mut validation = Validation::new(algorithm);
    validation.set_issuer(&[issuer]);
    let audiences: Vec<&str> = candidates.iter().map(|r| r.audience.as_str()).collect();
    validation.set_audience(&audiences);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    let data =
        jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::InvalidAudience => refuse(format!(
                    "its audience is not one a trust entry for issuer {issuer} names ({})",
                    audiences.join(", ")
                )),
                ErrorKind::InvalidSignature => refuse(format!(
                    "its signature does not verify with issuer {issuer}'s key"
                )),
                _ => refuse(e),
            }
        })?;
    Ok(data.claims)
}

fn check_times(claims: &Map<String, Value>, now: Timestamp) -> Result<(), ApiError> {
    let now = now.as_second();
    let seconds = |name: &str| claims.get(name).and_then(Value::as_f64).map(|v| v as i64);
    let exp = seconds("exp").ok_or_else(|| refuse("its exp is not a number"))?;
    if exp + LEEWAY_SECONDS < now {
        return Err(refuse(format!(
            "it expired {}s ago",
            now.saturating_sub(exp)
        )));
    }
    if let Some(nbf) = seconds("nbf")
        && nbf - LEEWAY_SECONDS > now
    {
        return Err(refuse(format!(
            "it is not valid yet (nbf is {}s from now)",
            nbf.saturating_sub(now)
        )));
    }
    Ok(())
}

/// The caller, with the scopes of every entry the token matches.
fn grant(
    issuer: &str,
    claims: &Map<String, Value>,
    candidates: &[&TrustRule],
) -> Result<TrustedCaller, ApiError> {
    let audiences = audiences(claims);
    let matching: Vec<&&TrustRule> = candidates
        .iter()
        .filter(|r| audiences.contains(&r.audience.as_str()) && r.claims_match(claims))
        .collect();
    if matching.is_empty() {
        return Err(refuse(mismatch(claims, &audiences, candidates)));
    }
    let mut grants: BTreeMap<ApplicationName, Vec<Scope>> = BTreeMap::new();
    for rule in matching {
        let scopes = grants.entry(rule.application.clone()).or_default();
        for scope in &rule.scopes {
            if !scopes.contains(scope) {
                scopes.push(*scope);
            }
        }
    }
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_owned);
    Ok(TrustedCaller {
        issuer: issuer.to_owned(),
        subject: text("sub").unwrap_or_default(),
        repository: text("repository"),
        grants,
    })
}

fn audiences(claims: &Map<String, Value>) -> Vec<&str> {
    match claims.get("aud") {
        Some(Value::String(aud)) => vec![aud.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Which claims kept the token from each entry of its issuer, as the 401
/// says it: the caller's own claims and what the config wants of them.
fn mismatch(claims: &Map<String, Value>, audiences: &[&str], candidates: &[&TrustRule]) -> String {
    let per_entry: Vec<String> = candidates
        .iter()
        .map(|rule| {
            let wrong_audience = (!audiences.contains(&rule.audience.as_str()))
                .then(|| format!("aud is not {:?}", rule.audience));
            let differing: Vec<String> = wrong_audience
                .into_iter()
                .chain(
                    rule.claims
                        .iter()
                        .filter(|(name, wanted)| {
                            claims.get(name.as_str()).and_then(Value::as_str)
                                != Some(wanted.as_str())
                        })
                        .map(|(name, wanted)| {
                            let got = claims
                                .get(name.as_str())
                                .map_or("missing".to_owned(), Value::to_string);
                            format!("{name} is {got}, not {wanted:?}")
                        }),
                )
                .collect();
            format!("{}'s entry: {}", rule.application, differing.join(", "))
        })
        .collect();
    format!("its claims match no trust entry ({})", per_entry.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(subject: &str, repository: Option<&str>) -> TrustedCaller {
        TrustedCaller {
            issuer: "https://token.actions.githubusercontent.com".to_owned(),
            subject: subject.to_owned(),
            repository: repository.map(str::to_owned),
            grants: BTreeMap::new(),
        }
    }

    #[test]
    fn the_actor_names_the_issuer_host_the_subject_and_the_repository() {
        let github = caller("repo:acme/shop:ref:refs/heads/main", Some("acme/shop"));
        assert_eq!(
            github.actor(),
            "oidc:token.actions.githubusercontent.com:repo:acme/shop:ref:refs/heads/main"
        );
        let opaque = caller("1234", Some("acme/shop"));
        assert_eq!(
            opaque.actor(),
            "oidc:token.actions.githubusercontent.com:1234 (repository acme/shop)"
        );
    }

    #[test]
    fn only_three_part_base64url_values_are_taken_for_jwts() {
        assert!(looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(looks_like_jwt("eyJh.eyJz."));
        assert!(!looks_like_jwt("vgt_0123_abcd"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c d"));
    }

    #[test]
    fn exp_and_nbf_allow_a_minute_of_skew() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let claims = |exp: i64, nbf: i64| {
            serde_json::json!({"exp": exp, "nbf": nbf})
                .as_object()
                .cloned()
                .unwrap()
        };
        let t = now.as_second();
        assert!(check_times(&claims(t - 60, t + 60), now).is_ok());
        assert!(check_times(&claims(t - 61, t), now).is_err());
        assert!(check_times(&claims(t + 300, t + 61), now).is_err());
    }
}
