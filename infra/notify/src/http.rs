//! Sends notifications over HTTP: a Slack incoming webhook's message, or
//! a generic webhook's JSON body signed with HMAC-SHA256.
//!
//! Secrets (the URLs, the signing secret) are read when a message is sent
//! — from the environment, or from AWS through the injected
//! [`SecretReader`] — so rotating one needs no config push, and they are
//! never stored or logged: errors name the reference, not the value.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vergence_model::SecretRef;
use vergence_model::notification::{
    DeliveryFailure, Notification, NotificationSender, NotificationTarget, SecretReader,
};

use crate::NotifyError;
use crate::secrets::{CachedSecrets, NoCloudSecrets, SECRET_CACHE_TTL};

/// The dedup key: the event's id, the same on every attempt and redelivery.
pub const DELIVERY_HEADER: &str = "X-Vergence-Delivery";
/// Seconds since the Unix epoch when the request was signed.
pub const TIMESTAMP_HEADER: &str = "X-Vergence-Timestamp";
/// `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`.
pub const SIGNATURE_HEADER: &str = "X-Vergence-Signature";
/// The notification's event name (`approvalNeeded`, …).
const EVENT_HEADER: &str = "X-Vergence-Event";

/// How long one request may take: a receiver that hangs is given up on
/// like one that fails, and the notifier moves on.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The signature of a generic webhook's request:
/// `sha256=` and the hex HMAC-SHA256 of `"<timestamp>.<body>"` keyed with
/// the signing secret. Signing the timestamp lets receivers refuse replays.
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Reads the value of an environment variable; `None` when it is not set.
pub type Environment = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

#[derive(Clone)]
pub struct HttpSender {
    client: reqwest::Client,
    environment: Environment,
    /// Reads SSM parameters and Secrets Manager secrets.
    secrets: Arc<dyn SecretReader>,
}

impl std::fmt::Debug for HttpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpSender")
    }
}

impl HttpSender {
    /// Reads secrets from this process's environment.
    pub fn new() -> Result<Self, NotifyError> {
        Self::reading(Arc::new(|name| std::env::var(name).ok()))
    }

    /// Reads secrets from `environment`: a process's own for a command or
    /// a function; a map in tests, which cannot change their own safely.
    pub fn reading(environment: Environment) -> Result<Self, NotifyError> {
        // reqwest takes the process's TLS provider; a function or test
        // that installed none gets ring (installing is a no-op when the
        // process already has one).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("vergence/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| NotifyError::Client { source })?;
        Ok(Self {
            client,
            environment,
            secrets: Arc::new(NoCloudSecrets::default()),
        })
    }

    /// Reads `awsSsmParameter` and `awsSecretsManager` references with
    /// `reader`, each value kept for [`SECRET_CACHE_TTL`].
    pub fn with_secrets(mut self, reader: Arc<dyn SecretReader>) -> Self {
        self.secrets = Arc::new(CachedSecrets::new(reader, SECRET_CACHE_TTL));
        self
    }

    async fn post(
        &self,
        url: &str,
        body: Vec<u8>,
        headers: Vec<(&'static str, String)>,
    ) -> Result<(), DeliveryFailure> {
        let mut request = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|e| DeliveryFailure {
            // Refused, reset, timed out: the receiver may be back soon.
            retryable: true,
            message: describe(&e),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        let text: String = text.chars().take(200).collect();
        Err(DeliveryFailure {
            retryable: status.is_server_error()
                || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                || status == reqwest::StatusCode::REQUEST_TIMEOUT,
            message: format!("the receiver answered {status}: {}", text.trim()),
        })
    }
}

/// A request error without the URL (which is a secret).
fn describe(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "no answer within the timeout"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    let mut source = std::error::Error::source(error);
    let mut detail = String::new();
    while let Some(e) = source {
        detail = e.to_string();
        source = e.source();
    }
    if detail.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {detail}")
    }
}

impl HttpSender {
    /// The value of a target's secret, read now: `what` names the field
    /// for errors, which name the reference and never the value. Only a
    /// source that is down or throttling fails in a way worth retrying.
    async fn read_secret(&self, secret: &SecretRef, what: &str) -> Result<String, DeliveryFailure> {
        let failed = |retryable: bool, why: String| DeliveryFailure {
            retryable,
            message: format!("the {what} is {}, which {why}", secret.describe()),
        };
        let value = match secret {
            SecretRef::FromEnv(variable) => (self.environment)(variable)
                .ok_or_else(|| failed(false, "is not set where notifications are sent".into()))?,
            SecretRef::AwsSsmParameter(_) | SecretRef::AwsSecretsManager(_) => {
                self.secrets.read(secret).await.map_err(|failure| {
                    failed(failure.is_retryable(), format!("cannot be read: {failure}"))
                })?
            }
            SecretRef::GcpSecretManager(_) | SecretRef::KubernetesSecret { .. } => {
                return Err(failed(
                    false,
                    "notifications cannot read: use fromEnv, awsSsmParameter or awsSecretsManager"
                        .into(),
                ));
            }
        };
        if value.is_empty() {
            return Err(failed(false, "is empty".into()));
        }
        Ok(value)
    }
}

#[async_trait]
impl NotificationSender for HttpSender {
    async fn send(
        &self,
        target: &NotificationTarget,
        notification: &Notification,
    ) -> Result<(), DeliveryFailure> {
        let delivery = (DELIVERY_HEADER, notification.delivery_id.clone());
        let event = (EVENT_HEADER, notification.event.as_str().to_owned());
        match target {
            NotificationTarget::Slack { webhook_url } => {
                let url = self.read_secret(webhook_url, "Slack webhook URL").await?;
                let body = serde_json::to_vec(&slack_message(notification)).unwrap_or_default();
                self.post(&url, body, vec![delivery, event]).await
            }
            NotificationTarget::Webhook {
                url,
                signing_secret,
            } => {
                let url = self.read_secret(url, "webhook URL").await?;
                let secret = self
                    .read_secret(signing_secret, "webhook signing secret")
                    .await?;
                let body = serde_json::to_vec(notification).unwrap_or_default();
                let timestamp = jiff::Timestamp::now().as_second();
                let signed = signature(secret.as_bytes(), timestamp, &body);
                let headers = vec![
                    delivery,
                    event,
                    (TIMESTAMP_HEADER, timestamp.to_string()),
                    (SIGNATURE_HEADER, signed),
                ];
                self.post(&url, body, headers).await
            }
        }
    }
}

/// A Slack message: a plain `text` (notifications, clients without
/// blocks) and `blocks` with the headline, the reason and a button to the
/// instance's page.
pub(crate) fn slack_message(notification: &Notification) -> serde_json::Value {
    let mut text = notification.text();
    if let Some(link) = &notification.link {
        text.push_str(&format!(" <{link}|Open in Vergence>"));
    }
    let mut blocks = vec![serde_json::json!({
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": format!(
                "*{}*: {}\n{}",
                notification.subject(),
                notification.event.as_str(),
                notification.message
            ),
        },
    })];
    if let Some(link) = &notification.link {
        blocks.push(serde_json::json!({
            "type": "actions",
            "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": "Open in Vergence"},
                "url": link,
            }],
        }));
    }
    serde_json::json!({ "text": text, "blocks": blocks })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use vergence_model::notification::{SecretFailure, SecretFailureKind};

    use super::*;

    #[test]
    fn the_signature_is_the_hex_hmac_sha256_of_timestamp_dot_body() {
        // RFC 4231 test case 2 checks the HMAC itself: key "Jefe".
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // And ours signs "<timestamp>.<body>" with it.
        let signed = signature(b"s3cret", 1_700_000_000, br#"{"a":1}"#);
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"s3cret").unwrap();
        mac.update(br#"1700000000.{"a":1}"#);
        assert_eq!(
            signed,
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert_ne!(signed, signature(b"s3cret", 1_700_000_001, br#"{"a":1}"#));
        assert_ne!(signed, signature(b"other", 1_700_000_000, br#"{"a":1}"#));
    }

    fn sender() -> HttpSender {
        HttpSender::reading(Arc::new(|name| {
            (name == "HOOK_URL").then(|| "http://127.0.0.1:9".to_owned())
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_secret_that_is_not_set_is_a_permanent_failure_naming_the_variable() {
        let set = SecretRef::FromEnv("HOOK_URL".to_owned());
        assert_eq!(
            sender().read_secret(&set, "webhook URL").await.unwrap(),
            "http://127.0.0.1:9"
        );
        let secret = SecretRef::FromEnv("VERGENCE_TEST_UNSET_NOTIFY_URL".to_owned());
        let failure = sender()
            .read_secret(&secret, "webhook URL")
            .await
            .unwrap_err();
        assert!(!failure.retryable);
        assert!(
            failure
                .message
                .contains("environment variable VERGENCE_TEST_UNSET_NOTIFY_URL"),
            "{}",
            failure.message
        );
    }

    /// Answers every reference with one failure.
    struct Failing(SecretFailure);

    #[async_trait]
    impl SecretReader for Failing {
        async fn read(&self, _: &SecretRef) -> Result<String, SecretFailure> {
            Err(self.0.clone())
        }
    }

    #[tokio::test]
    async fn an_aws_reference_that_fails_names_the_field_the_reference_and_the_failure() {
        let parameter = SecretRef::AwsSsmParameter("/vergence/hook-url".into());
        // Without a reader (a build without AWS), saying so.
        let failure = sender()
            .read_secret(&parameter, "webhook URL")
            .await
            .unwrap_err();
        assert!(!failure.retryable);
        assert!(
            failure.message.starts_with(
                "the webhook URL is SSM parameter /vergence/hook-url, which cannot be read: \
                 not readable here: "
            ),
            "{}",
            failure.message
        );
        // Denied: permanent; throttled: worth retrying.
        for (kind, retryable, said) in [
            (SecretFailureKind::AccessDenied, false, "access denied"),
            (SecretFailureKind::NotFound, false, "not found"),
            (SecretFailureKind::Unavailable, true, "unavailable"),
        ] {
            let reader = Arc::new(Failing(SecretFailure::new(kind, "the source's words")));
            let failure = sender()
                .with_secrets(reader)
                .read_secret(&parameter, "webhook URL")
                .await
                .unwrap_err();
            assert_eq!(failure.retryable, retryable, "{kind:?}");
            assert_eq!(
                failure.message,
                format!(
                    "the webhook URL is SSM parameter /vergence/hook-url, which cannot be read: \
                     {said}: the source's words"
                )
            );
        }
    }
}
