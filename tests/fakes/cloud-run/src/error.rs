//! Errors as Google APIs return them over REST: an HTTP status and a
//! `google.rpc.Status` wrapped in `{"error": {...}}`. The Rust client takes
//! the error's code from the `status` name, so both it and the number are
//! written.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A `google.rpc.Code` the fake answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    Aborted,
}

impl Code {
    /// The number of this code in `google.rpc.Code`.
    pub(crate) fn number(self) -> i32 {
        match self {
            Self::Cancelled => 1,
            Self::Unknown => 2,
            Self::InvalidArgument => 3,
            Self::DeadlineExceeded => 4,
            Self::NotFound => 5,
            Self::AlreadyExists => 6,
            Self::FailedPrecondition => 9,
            Self::Aborted => 10,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Cancelled => "CANCELLED",
            Self::Unknown => "UNKNOWN",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::Aborted => "ABORTED",
        }
    }

    /// The HTTP status Google's REST transcoding maps the code to.
    fn http_status(self) -> StatusCode {
        match self {
            Self::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            Self::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
            Self::InvalidArgument | Self::FailedPrecondition => StatusCode::BAD_REQUEST,
            Self::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::AlreadyExists | Self::Aborted => StatusCode::CONFLICT,
        }
    }
}

/// A failed call: the code and a message saying what was wrong.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// A resource that does not exist, named the way the API names it.
    pub(crate) fn not_found(kind: &str, name: &str) -> Self {
        Self::new(
            Code::NotFound,
            format!("Resource '{name}' of kind '{kind}' does not exist."),
        )
    }

    /// The `google.rpc.Status` message itself, as embedded in a finished
    /// long-running operation's `error`.
    pub(crate) fn to_status(&self) -> Value {
        json!({"code": self.code.number(), "message": self.message, "details": []})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "code": self.code.http_status().as_u16(),
            "message": self.message,
            "status": self.code.name(),
        }});
        (self.code.http_status(), Json(body)).into_response()
    }
}

/// What a route returns: a JSON body, or an error.
pub(crate) type ApiResult = Result<Value, ApiError>;
