//! The one error type of the core crate. Adapters convert their own errors
//! into it at the port boundary, saying whether retrying can help.

use crate::diagnostics::ConfigErrors;

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config has problems; nothing was stored.
    #[error("the config has {count} error(s):\n{errors}", count = .0.len(), errors = .0)]
    Config(ConfigErrors),

    #[error("cannot read the config at {path}: {source}")]
    ReadConfig {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// A request named something wrong; `field` says which input.
    #[error("{field}: {message}")]
    InvalidRequest { field: String, message: String },

    #[error("{what} not found")]
    NotFound { what: String },

    /// A conditional write lost to a concurrent writer; re-read and retry.
    #[error("{what} was changed concurrently")]
    Conflict { what: String },

    /// What the request would create exists already, otherwise (a version
    /// released with other parameters); retrying cannot help.
    #[error("{message}")]
    Exists { message: String },

    #[error("state store: {operation} failed: {source}")]
    Store {
        operation: &'static str,
        retryable: bool,
        #[source]
        source: BoxError,
    },

    #[error("work queue: {operation} failed: {source}")]
    Queue {
        operation: &'static str,
        retryable: bool,
        #[source]
        source: BoxError,
    },

    #[error("runner {runner}: {message}")]
    Runner { runner: String, message: String },
}

impl Error {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Error::NotFound { what: what.into() }
    }

    /// Whether the same operation may succeed if tried again later; used at
    /// the edges to choose between "retry the message" and "record a failure".
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Conflict { .. } => true,
            Error::Store { retryable, .. } | Error::Queue { retryable, .. } => *retryable,
            Error::Runner { .. } => true,
            Error::Config(_)
            | Error::ReadConfig { .. }
            | Error::InvalidRequest { .. }
            | Error::Exists { .. }
            | Error::NotFound { .. } => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
