//! An application's `trust:`: which CI jobs, known by the OIDC token their
//! platform issues them, may act on the application without a stored
//! token. Every field is optional or a plain string here so the checker
//! can report each mistake at its line instead of the reader stopping at
//! the first.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// `{issuer, audience, claims: {name: value}, scopes: [release, …]}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrustDoc {
    /// The token's `iss`, exactly: `https://token.actions.githubusercontent.com`
    /// for GitHub Actions. Its keys are found at
    /// `{issuer}/.well-known/openid-configuration`. `https://` only (plain
    /// `http://` to 127.0.0.1 or localhost, for tests).
    pub issuer: Option<String>,
    /// The `aud` the job asks its token for (GitHub: the `audience` of the
    /// token request), e.g. `vergence`.
    pub audience: Option<String>,
    /// Claims the token must carry with exactly these values, at least one
    /// (e.g. `repository: org/repo`, `ref: refs/heads/main`,
    /// `environment: production`): without one, every job of the issuer
    /// (every repository on GitHub) would match.
    #[serde(default)]
    pub claims: BTreeMap<String, String>,
    /// What a matching job may do for this application: `release`,
    /// `approve`, `admin`.
    #[serde(default)]
    pub scopes: Vec<String>,
}
