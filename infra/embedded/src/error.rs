//! Errors of the embedded adapters, converted to the core's error at the
//! port boundary with whether retrying can help.

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("cannot create {path}: {source}")]
    Create {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the state file {path} is empty (0 bytes): it was cut short (a crash, a full disk, a bad copy); restore it from a backup, or delete it to start over with no history"
    )]
    EmptyState { path: String },
    #[error("cannot open the state store {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{operation}: the state file {path} is read-only: it can be read (status, events, explain) but not changed; make it writable to run this command"
    )]
    ReadOnly {
        operation: &'static str,
        path: String,
    },
    #[error("{operation}: {source}")]
    Sql {
        operation: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{operation}: the state store's writer thread has stopped (a write panicked); run the command again"
    )]
    WriterGone { operation: &'static str },
    #[error("{operation}: cannot encode a record: {source}")]
    Encode {
        operation: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{operation}: a stored record is unreadable (written by another version of vergence?): {source}"
    )]
    Decode {
        operation: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} was changed concurrently")]
    Conflict { what: String },
    #[error("{what} is corrupt: {message}")]
    Corrupt { what: String, message: String },
    #[error("artifact {key}: {message}")]
    Artifact { key: String, message: String },
}

impl EmbeddedError {
    pub(crate) fn sql(operation: &'static str, source: rusqlite::Error) -> Self {
        EmbeddedError::Sql { operation, source }
    }

    /// Another process holding the database lock past the busy timeout is
    /// worth retrying; anything else is not.
    fn is_busy(&self) -> bool {
        matches!(
            self,
            EmbeddedError::Sql {
                source: rusqlite::Error::SqliteFailure(e, _),
                ..
            } if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }

    fn operation(&self) -> &'static str {
        match self {
            EmbeddedError::Sql { operation, .. }
            | EmbeddedError::ReadOnly { operation, .. }
            | EmbeddedError::WriterGone { operation }
            | EmbeddedError::Encode { operation, .. }
            | EmbeddedError::Decode { operation, .. } => operation,
            EmbeddedError::Create { .. }
            | EmbeddedError::Open { .. }
            | EmbeddedError::EmptyState { .. } => "open",
            EmbeddedError::Conflict { .. } | EmbeddedError::Corrupt { .. } => "read",
            EmbeddedError::Artifact { .. } => "artifact",
        }
    }
}

impl From<EmbeddedError> for vergence_model::Error {
    fn from(error: EmbeddedError) -> Self {
        match error {
            EmbeddedError::Conflict { what } => vergence_model::Error::Conflict { what },
            other => vergence_model::Error::Store {
                operation: other.operation(),
                retryable: other.is_busy(),
                source: Box::new(other),
            },
        }
    }
}
