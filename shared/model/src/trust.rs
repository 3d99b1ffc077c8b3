//! Trust in an outside identity provider: a CI job's own short-lived OIDC
//! token (GitHub Actions, GitLab CI) stands in for a stored API token when
//! it was issued by `issuer` for `audience` and its claims match. The
//! config says which jobs are trusted and with what scopes; verifying the
//! token (signature, expiry) is the API's business, not the model's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::names::ApplicationName;
use super::token::Scope;

/// One `trust:` entry of an application, checked by the compiler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustRule {
    /// The application whose config holds the entry: the only one its
    /// callers may act on.
    pub application: ApplicationName,
    /// Exactly the token's `iss`, and where its keys are discovered
    /// (`{issuer}/.well-known/openid-configuration`).
    pub issuer: String,
    /// One of the token's `aud`.
    pub audience: String,
    /// Claims the token must carry with exactly these (string) values,
    /// e.g. `repository: org/repo`, `ref: refs/heads/main`.
    pub claims: BTreeMap<String, String>,
    /// What a matching token may do: never [`Scope::Platform`].
    pub scopes: Vec<Scope>,
}

impl TrustRule {
    /// Whether a token's claims hold every value the entry asks for; a
    /// claim that is not a string (or is missing) never matches.
    pub fn claims_match(&self, claims: &serde_json::Map<String, serde_json::Value>) -> bool {
        self.claims
            .iter()
            .all(|(name, wanted)| claims.get(name).and_then(|v| v.as_str()) == Some(wanted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_must_be_present_as_that_exact_string() {
        let rule = TrustRule {
            application: "shop".parse().unwrap(),
            issuer: "https://token.actions.githubusercontent.com".to_owned(),
            audience: "vergence".to_owned(),
            claims: [("repository".to_owned(), "acme/shop".to_owned())]
                .into_iter()
                .collect(),
            scopes: vec![Scope::Release],
        };
        let claims = |value: serde_json::Value| value.as_object().cloned().unwrap();
        assert!(rule.claims_match(&claims(
            serde_json::json!({"repository": "acme/shop", "ref": "x"})
        )));
        assert!(!rule.claims_match(&claims(serde_json::json!({"repository": "acme/shop2"}))));
        assert!(!rule.claims_match(&claims(serde_json::json!({"repository": ["acme/shop"]}))));
        assert!(!rule.claims_match(&claims(serde_json::json!({}))));
    }
}
