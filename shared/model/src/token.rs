//! API tokens: per application, with scopes. Only a hash of the secret is
//! ever stored; the whole token is shown once, when it is created.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::names::ApplicationName;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Push releases (CI).
    Release,
    /// Record approvals.
    Approve,
    /// Everything: configs, alerts, pause, pin, rollback.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Release => "release",
            Scope::Approve => "approve",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "release" => Ok(Scope::Release),
            "approve" => Ok(Scope::Approve),
            "admin" => Ok(Scope::Admin),
            other => Err(format!(
                "unknown scope {other:?}; use release, approve or admin"
            )),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored token. The id is public (it appears in the token string and in
/// logs); the secret only as its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    pub id: String,
    pub application: ApplicationName,
    pub scopes: Vec<Scope>,
    /// Hex SHA-256 of the secret part.
    pub secret_sha256: String,
    pub description: Option<String>,
    pub created_at: Timestamp,
    pub created_by: String,
}

impl ApiToken {
    /// Whether the token allows `scope` (admin allows everything).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }
}

/// The prefix of every token string: `vgt_<id>_<secret>`.
pub const TOKEN_PREFIX: &str = "vgt_";

/// Splits a presented token into (id, secret), or None if it is not one.
pub fn split_token(presented: &str) -> Option<(&str, &str)> {
    let rest = presented.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (!id.is_empty() && !secret.is_empty()).then_some((id, secret))
}

/// The token string for an id and a secret.
pub fn token_string(id: &str, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{id}_{secret}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_strings_split_back_into_id_and_secret() {
        let token = token_string("a1b2c3", "s3cr3t");
        assert_eq!(split_token(&token), Some(("a1b2c3", "s3cr3t")));
        assert_eq!(split_token("vgt__x"), None);
        assert_eq!(split_token("Bearer x"), None);
    }
}
