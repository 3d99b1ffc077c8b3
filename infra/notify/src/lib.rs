//! Notifications about recorded events (docs/notifications.md).
//!
//! The events in the state store are the outbox: the engine records them as
//! it always does and never waits for a notification. A [`Notifier`] reads
//! the events newer than its cursor, turns those an application's
//! `notifications:` ask for into messages, sends each with retries and
//! backoff ([`HttpSender`]: Slack incoming webhooks and signed generic
//! webhooks), and moves its cursor only after a message was delivered or
//! given up on: delivery is at least once, with the event's id as dedup key.
//! Targets' secrets are read when sending: from the environment, or through
//! an injected [`vergence_model::notification::SecretReader`] (AWS, wired
//! by the scheduler function and the CLI; this crate has no cloud SDK).
//! [`spawn`] runs it beside `vergence up`/`serve`; the scheduler function
//! runs one pass a minute.

mod background;
mod cursor;
mod error;
mod http;
mod notifier;
mod secrets;

pub use background::{
    Background, LOCAL_PASS_EVERY, http_notifier, pass_within, spawn, spawn_local,
};
pub use cursor::ArtifactCursorStore;
pub use error::NotifyError;
pub use http::{
    DELIVERY_HEADER, Environment, HttpSender, SIGNATURE_HEADER, TIMESTAMP_HEADER, signature,
};
pub use notifier::{Backoff, Notifier, PassReport};
pub use secrets::{NoCloudSecrets, SECRET_CACHE_TTL};
