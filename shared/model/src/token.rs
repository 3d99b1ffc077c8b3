//! API tokens: an application's, with scopes; an agent's, which can do
//! that agent's work and nothing else; or the platform's, which pushes
//! configs (the parts several applications share, and whole configs) and
//! nothing else. Only a hash of the secret is ever
//! stored; the whole token is shown once, when it is created.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::names::{AgentName, ApplicationName};

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
    /// Push and roll back configs of any part, the shared one included; the
    /// scope of platform tokens, and only theirs.
    Platform,
    /// Break-glass: apply one version through a freeze or a closed window,
    /// with a reason (`vergence override`).
    Override,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Release => "release",
            Scope::Approve => "approve",
            Scope::Admin => "admin",
            Scope::Platform => "platform",
            Scope::Override => "override",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, String> {
        match raw {
            "release" => Ok(Scope::Release),
            "approve" => Ok(Scope::Approve),
            "admin" => Ok(Scope::Admin),
            "platform" => Ok(Scope::Platform),
            "override" => Ok(Scope::Override),
            other => Err(format!(
                "unknown scope {other:?}; use release, approve, override or admin (or platform, with --platform)"
            )),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whose a token is. Stored beside the token's other fields as
/// `"application": NAME`, `"agent": NAME` or `"platform": null`, so tokens
/// stored before agents existed read back as application tokens.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TokenSubject {
    /// Calls on behalf of an application's people and CI, within its scopes.
    Application(ApplicationName),
    /// `vergence-agent`'s calls: polling for and reporting that agent's work.
    Agent(AgentName),
    /// The platform team's: pushes and rolls back any part of the config,
    /// including the runtimes and protections several applications share.
    Platform,
}

impl fmt::Display for TokenSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSubject::Application(application) => write!(f, "application {application}"),
            TokenSubject::Agent(agent) => write!(f, "agent {agent}"),
            TokenSubject::Platform => f.write_str("the platform"),
        }
    }
}

/// A stored token. The id is public (it appears in the token string and in
/// logs); the secret only as its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    pub id: String,
    #[serde(flatten)]
    pub subject: TokenSubject,
    /// What an application token may do; an agent token has none.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Hex SHA-256 of the secret part.
    pub secret_sha256: String,
    pub description: Option<String>,
    pub created_at: Timestamp,
    pub created_by: String,
}

impl ApiToken {
    /// Whether the token allows `scope` (an application's admin allows
    /// every application scope). Agent tokens allow no scope; a platform
    /// token allows only [`Scope::Platform`].
    pub fn allows(&self, scope: Scope) -> bool {
        match self.subject {
            TokenSubject::Application(_) => {
                scope != Scope::Platform
                    && (self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin))
            }
            TokenSubject::Platform => scope == Scope::Platform,
            TokenSubject::Agent(_) => false,
        }
    }

    /// Whether this is a platform token.
    pub fn is_platform(&self) -> bool {
        self.subject == TokenSubject::Platform
    }

    /// The application of an application token.
    pub fn application(&self) -> Option<&ApplicationName> {
        match &self.subject {
            TokenSubject::Application(application) => Some(application),
            TokenSubject::Agent(_) | TokenSubject::Platform => None,
        }
    }

    /// The agent of an agent token.
    pub fn agent(&self) -> Option<&AgentName> {
        match &self.subject {
            TokenSubject::Agent(agent) => Some(agent),
            TokenSubject::Application(_) | TokenSubject::Platform => None,
        }
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

    #[test]
    fn tokens_stored_before_agents_read_back_as_application_tokens() {
        let stored = r#"{"id":"t1","application":"shop","scopes":["release"],"secretSha256":"ab","description":null,"createdAt":"2027-01-15T08:00:00Z","createdBy":"cli:alice"}"#;
        let token: ApiToken = serde_json::from_str(stored).unwrap();
        assert_eq!(
            token.subject,
            TokenSubject::Application("shop".parse().unwrap())
        );
        assert!(token.allows(Scope::Release));
        assert_eq!(serde_json::to_string(&token).unwrap(), stored);
    }

    #[test]
    fn agent_tokens_name_their_agent_and_allow_no_scope() {
        let stored = r#"{"id":"t2","agent":"prod-eu","secretSha256":"ab","description":null,"createdAt":"2027-01-15T08:00:00Z","createdBy":"cli:alice"}"#;
        let token: ApiToken = serde_json::from_str(stored).unwrap();
        assert_eq!(token.agent().map(|a| a.as_str()), Some("prod-eu"));
        assert_eq!(token.application(), None);
        assert!(!token.allows(Scope::Admin));
    }

    #[test]
    fn platform_tokens_push_configs_and_nothing_else() {
        let stored = r#"{"id":"t3","platform":null,"scopes":["platform"],"secretSha256":"ab","description":null,"createdAt":"2027-01-15T08:00:00Z","createdBy":"cli:alice"}"#;
        let token: ApiToken = serde_json::from_str(stored).unwrap();
        assert!(token.is_platform());
        assert_eq!(token.application(), None);
        assert!(token.allows(Scope::Platform));
        assert!(!token.allows(Scope::Admin));
        assert_eq!(serde_json::to_string(&token).unwrap(), stored);
        let admin: ApiToken = serde_json::from_str(&stored.replace(
            r#""platform":null,"scopes":["platform"]"#,
            r#""application":"shop","scopes":["admin"]"#,
        ))
        .unwrap();
        assert!(admin.allows(Scope::Release));
        assert!(!admin.allows(Scope::Platform));
    }
}
