//! The API's one error type, and how each error becomes an HTTP answer:
//! always `{"error": {"code", "message", "field"?}}`, never plain text.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::error;

use crate::wire::{ErrorBody, ErrorResponse};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed: bad JSON, a missing field, an invalid name
    /// or version. `field` names the input at fault.
    #[error("{field}: {message}")]
    InvalidInput { field: String, message: String },

    /// No usable credentials: missing, malformed, unknown or wrong token, or
    /// a webhook signature that is missing, wrong, replayed or stale.
    #[error("{0}")]
    Authenticate(String),

    /// Valid credentials that do not allow this request.
    #[error("{0}")]
    Authorize(String),

    #[error("the request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },

    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },

    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },

    /// A control operation failed; its kind decides the status.
    #[error(transparent)]
    Control(#[from] vergence_model::Error),

    #[error("cannot generate a random token: {0}")]
    GenerateToken(#[source] getrandom::Error),

    #[error("the webhook secret cannot be used as an HMAC key: {0}")]
    WebhookKey(#[source] hmac::digest::InvalidLength),
}

impl ApiError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidInput {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The status code and body this error is answered with.
    pub fn to_parts(&self) -> (StatusCode, ErrorBody) {
        let body = |code: &str, message: String, field: Option<String>| ErrorBody {
            code: code.to_owned(),
            message,
            field,
            errors: Vec::new(),
            more_errors: 0,
        };
        match self {
            ApiError::InvalidInput { field, .. } => (
                StatusCode::BAD_REQUEST,
                body("invalidRequest", self.to_string(), Some(field.clone())),
            ),
            ApiError::Authenticate(message) => (
                StatusCode::UNAUTHORIZED,
                body("unauthorized", message.clone(), None),
            ),
            ApiError::Authorize(message) => (
                StatusCode::FORBIDDEN,
                body("forbidden", message.clone(), None),
            ),
            ApiError::BodyTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                body("payloadTooLarge", self.to_string(), Some("body".to_owned())),
            ),
            ApiError::NoRoute { .. } => (
                StatusCode::NOT_FOUND,
                body("notFound", self.to_string(), None),
            ),
            ApiError::MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                body("methodNotAllowed", self.to_string(), None),
            ),
            ApiError::Control(e) => control_parts(e),
            ApiError::GenerateToken(_) | ApiError::WebhookKey(_) => internal(self),
        }
    }
}

fn control_parts(e: &vergence_model::Error) -> (StatusCode, ErrorBody) {
    use vergence_model::Error as E;
    let plain = |status, code: &str, field: Option<String>, message: String| {
        (
            status,
            ErrorBody {
                code: code.to_owned(),
                message,
                field,
                errors: Vec::new(),
                more_errors: 0,
            },
        )
    };
    match e {
        E::Config(errors) => {
            // Bounded: a big config with an error in every document would
            // otherwise be answered with a body several times its size.
            let (listed, more_errors) = errors.listed();
            let mut message = format!("{} error(s); nothing was stored", errors.len());
            if more_errors > 0 {
                message.push_str(&format!("; the first {} are listed", listed.len()));
            }
            (
                StatusCode::BAD_REQUEST,
                ErrorBody {
                    code: "invalidConfig".to_owned(),
                    message,
                    field: Some("files".to_owned()),
                    errors: listed,
                    more_errors,
                },
            )
        }
        E::InvalidRequest { field, message } => {
            let field = api_field(field);
            plain(
                StatusCode::BAD_REQUEST,
                "invalidRequest",
                Some(field.clone()),
                format!("{field}: {message}"),
            )
        }
        E::NotFound { .. } => plain(StatusCode::NOT_FOUND, "notFound", None, e.to_string()),
        E::Conflict { .. } | E::Exists { .. } => {
            plain(StatusCode::CONFLICT, "conflict", None, e.to_string())
        }
        E::Store { .. } | E::Queue { .. } if e.is_retryable() => {
            error!(error = %e, "request failed; retryable");
            plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                None,
                "the state store or queue is unavailable; retry later".to_owned(),
            )
        }
        E::Store { .. } | E::Queue { .. } | E::ReadConfig { .. } | E::Runner { .. } => internal(e),
    }
}

/// Details of internal failures go to the log, not to the caller.
fn internal(e: &dyn std::error::Error) -> (StatusCode, ErrorBody) {
    error!(error = %e, "request failed");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorBody {
            code: "internal".to_owned(),
            message: "internal error; the server log has the details".to_owned(),
            field: None,
            errors: Vec::new(),
            more_errors: 0,
        },
    )
}

/// The core names release parameters `param NAME`; the API's body has them
/// under `params.NAME`.
fn api_field(core_field: &str) -> String {
    match core_field.strip_prefix("param ") {
        Some(name) => format!("params.{name}"),
        None => core_field.to_owned(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = self.to_parts();
        let mut response = (status, Json(ErrorResponse { error })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // RFC 7235: a 401 says how to authenticate.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"vergence\""),
            );
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
