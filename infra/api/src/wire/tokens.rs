//! Tokens as lists show them: never the secret, nor its hash.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use vergence_model::{ApiToken, Scope};

/// A token in a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    /// The public part (`vgt_<id>_…`), which events name.
    pub id: String,
    pub scopes: Vec<Scope>,
    pub created_at: Timestamp,
    pub created_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl TokenView {
    pub fn of(token: &ApiToken) -> Self {
        Self {
            id: token.id.clone(),
            scopes: token.scopes.clone(),
            created_at: token.created_at,
            created_by: token.created_by.clone(),
            description: token.description.clone(),
        }
    }
}

/// `GET /v1/applications/{app}/tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensResponse {
    pub tokens: Vec<TokenView>,
}

/// `POST /v1/applications/{app}/tokens`: a token of the application, with
/// scopes no wider than the caller's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenRequest {
    pub scopes: Option<Vec<Scope>>,
    pub description: Option<String>,
}

/// A token just made: the full string is in this answer and nowhere else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCreated {
    /// `vgt_<id>_<secret>`; only a SHA-256 of the secret is stored.
    pub token: String,
    #[serde(flatten)]
    pub view: TokenView,
}
