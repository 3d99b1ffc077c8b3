use thiserror::Error;

/// Why a function could not start or finish its work.
#[derive(Debug, Error)]
pub enum LambdaError {
    #[error("environment variable {name} is not set: {why}")]
    MissingEnv {
        name: &'static str,
        why: &'static str,
    },

    #[error("environment variable {name}={value:?} is invalid: {message}")]
    InvalidEnv {
        name: &'static str,
        value: String,
        message: String,
    },

    #[error(transparent)]
    Core(#[from] vergence_model::Error),

    #[error("cannot set up notifications: {0}")]
    Notify(#[from] vergence_notify::NotifyError),
}
