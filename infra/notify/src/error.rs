//! The errors of delivering notifications, converted to the core's error
//! where a port needs one.

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The state store could not be read or written (events, the config,
    /// the cursor); the pass stops and the next one starts over.
    #[error("{operation}: {source}")]
    Store {
        operation: &'static str,
        #[source]
        source: vergence_model::Error,
    },
    #[error("the notifier's cursor {key} cannot be read: {source}")]
    DecodeCursor {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "public URL {url:?}: write the address people open, such as https://vergence.example.com"
    )]
    PublicUrl { url: String },
    #[error("cannot build the HTTP client for notifications: {source}")]
    Client {
        #[source]
        source: reqwest::Error,
    },
}

impl NotifyError {
    pub(crate) fn store(operation: &'static str) -> impl FnOnce(vergence_model::Error) -> Self {
        move |source| NotifyError::Store { operation, source }
    }
}

impl From<NotifyError> for vergence_model::Error {
    fn from(error: NotifyError) -> Self {
        match error {
            NotifyError::Store { source, .. } => source,
            other => vergence_model::Error::Store {
                operation: "notify",
                retryable: false,
                source: Box::new(other),
            },
        }
    }
}
