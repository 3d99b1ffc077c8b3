//! An application's tokens through the API: its `admin` token may list,
//! create and revoke them. A new token's scopes are no wider than the
//! caller's own. Tokens of agents and of the platform are not made here:
//! an agent's token receives the jobs of every application routed to that
//! agent, and the platform's changes every application's config, so
//! neither is an application's to grant; they are made where the state is
//! (`vergence token create` on the state file, or `--dynamodb-table`).

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use vergence_model::{ApplicationName, Scope, TokenSubject};

use super::{parse_json, parse_name, path_error, read_body};
use crate::auth::{Caller, authenticate};
use crate::wire::{TokenCreated, TokenRequest, TokenView, TokensResponse};
use crate::{ApiError, ApiState, create_token};

/// Longest token id looked up; ids are 32 hex characters.
const MAX_ID_LEN: usize = 64;

/// The caller, once it is the path's application's admin.
async fn admin_of(
    api: &ApiState,
    headers: &HeaderMap,
    app: &str,
) -> Result<(Caller, ApplicationName), ApiError> {
    let caller = authenticate(api, headers).await?;
    let application: ApplicationName = parse_name("application", app)?;
    caller.authorize(&application, Scope::Admin)?;
    Ok((caller, application))
}

/// `GET /v1/applications/{app}/tokens`: never a secret, nor its hash.
pub(super) async fn list(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<TokensResponse>, ApiError> {
    let Path(app) = path.map_err(path_error)?;
    let (_, application) = admin_of(&api, &headers, &app).await?;
    let tokens = api
        .store
        .list_tokens(&TokenSubject::Application(application))
        .await?;
    Ok(Json(TokensResponse {
        tokens: tokens.iter().map(TokenView::of).collect(),
    }))
}

/// `POST /v1/applications/{app}/tokens`.
pub(super) async fn create(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<TokenCreated>, ApiError> {
    let Path(app) = path.map_err(path_error)?;
    let (caller, application) = admin_of(&api, &headers, &app).await?;
    let body = read_body(&api, request).await?;
    let body: TokenRequest = parse_json(&body)?;
    let scopes = body
        .scopes
        .ok_or_else(|| ApiError::invalid("scopes", "missing field"))?;
    // A CI job's short-lived identity does not mint long-lived tokens:
    // that would undo what trusting it instead of a stored secret is for.
    let Some(own) = caller.stored_token() else {
        return Err(ApiError::Authorize(format!(
            "{} may not create tokens: only a stored admin token can",
            caller.name()
        )));
    };
    // A token cannot hand out more than it may do itself.
    if let Some(wider) = scopes.iter().find(|scope| !own.allows(**scope)) {
        return Err(ApiError::Authorize(format!(
            "{} may not create a token with scope {wider}, which it does not have",
            caller.name()
        )));
    }
    let (token, full) = create_token(
        api.store.as_ref(),
        &TokenSubject::Application(application),
        &scopes,
        body.description,
        &caller.actor(),
        api.clock.as_ref(),
    )
    .await?;
    Ok(Json(TokenCreated {
        token: full,
        view: TokenView::of(&token),
    }))
}

/// `DELETE /v1/applications/{app}/tokens/{id}`: requests with the token
/// are refused from then on. Another application's token, and an unknown
/// one, are both "not found": the caller learns nothing of tokens not its
/// application's.
pub(super) async fn revoke(
    State(api): State<ApiState>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<TokenView>, ApiError> {
    let Path((app, id)) = path.map_err(path_error)?;
    let (_, application) = admin_of(&api, &headers, &app).await?;
    let not_found =
        || vergence_model::Error::not_found(format!("token {id} of application {application}"));
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::invalid(
            "id",
            "a token id is the hex part after `vgt_`, as `vergence token list` shows it",
        ));
    }
    let token = api
        .store
        .get_token(&id)
        .await?
        .filter(|token| token.application() == Some(&application))
        .ok_or_else(not_found)?;
    if !api.store.delete_token(&id).await? {
        return Err(not_found().into());
    }
    Ok(Json(TokenView::of(&token)))
}
