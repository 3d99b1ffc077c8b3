//! Creating API tokens. A token is `vgt_<id>_<secret>`: the id is public
//! (it names the token in lists and events), the secret is random and only
//! its SHA-256 is stored, so a leaked store does not leak usable tokens.

use sha2::{Digest, Sha256};
use vergence_model::ports::{Clock, StateStore};
use vergence_model::{ApiToken, Scope, TokenSubject, token_string};

use crate::ApiError;

const ID_BYTES: usize = 16;
const SECRET_BYTES: usize = 32;
const MAX_DESCRIPTION_CHARS: usize = 200;

/// Creates and stores a token for `subject`: an application's token needs
/// scopes; an agent's token takes none (it can do that agent's work and
/// nothing else); the platform's has the platform scope and no other (it
/// pushes and rolls back configs, shared parts included, and nothing else). Returns the stored token and the full token string, which
/// exists nowhere else: show it once.
pub async fn create_token(
    store: &dyn StateStore,
    subject: &TokenSubject,
    scopes: &[Scope],
    description: Option<String>,
    actor: &str,
    clock: &dyn Clock,
) -> Result<(ApiToken, String), ApiError> {
    match subject {
        TokenSubject::Application(_) if scopes.is_empty() => {
            return Err(ApiError::invalid(
                "scopes",
                "a token needs at least one scope: release, approve or admin",
            ));
        }
        TokenSubject::Agent(agent) if !scopes.is_empty() => {
            return Err(ApiError::invalid(
                "scopes",
                format!(
                    "a token of agent {agent} can only do that agent's work; scopes are for application tokens"
                ),
            ));
        }
        TokenSubject::Application(application) if scopes.contains(&Scope::Platform) => {
            return Err(ApiError::invalid(
                "scopes",
                format!(
                    "the platform scope belongs to platform tokens, not to application {application}'s; create one with `vergence token create --platform`"
                ),
            ));
        }
        TokenSubject::Platform if scopes.iter().any(|s| *s != Scope::Platform) => {
            return Err(ApiError::invalid(
                "scopes",
                "a platform token pushes and rolls back configs and nothing else; it takes no application scope",
            ));
        }
        _ => {}
    }
    let description = description
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty());
    if description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_CHARS)
    {
        return Err(ApiError::invalid(
            "description",
            format!("at most {MAX_DESCRIPTION_CHARS} characters"),
        ));
    }
    let mut scopes = match subject {
        TokenSubject::Platform => vec![Scope::Platform],
        _ => scopes.to_vec(),
    };
    scopes.sort();
    scopes.dedup();
    let id = random_hex(ID_BYTES)?;
    let secret = random_hex(SECRET_BYTES)?;
    let token = ApiToken {
        id: id.clone(),
        subject: subject.clone(),
        scopes,
        secret_sha256: secret_sha256(&secret),
        description,
        created_at: clock.now(),
        created_by: actor.to_owned(),
    };
    store.put_token(&token).await?;
    Ok((token, token_string(&id, &secret)))
}

/// Hex SHA-256 of a token's secret part, as stored.
pub fn secret_sha256(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn random_hex(bytes: usize) -> Result<String, ApiError> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).map_err(ApiError::GenerateToken)?;
    Ok(hex::encode(buffer))
}
