//! An application's `notifications:`: where to tell people about the
//! events they act on. Every field is optional here so the checker can
//! report all that is missing, with lines, instead of the reader stopping
//! at the first.

use schemars::JsonSchema;
use serde::Deserialize;

use super::SecretValueDoc;
use vergence_model::ReleaseChannelName;
use vergence_model::notification::NotificationEvent;

/// `{name, slack: {webhookUrl}} | {name, webhook: {url, signingSecret}}`,
/// with `on: [events]` and optionally `releaseChannels: [names]`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationDoc {
    /// Names the notification in logs and in `notificationFailed` events.
    pub name: String,
    /// A Slack incoming webhook.
    pub slack: Option<SlackNotificationDoc>,
    /// A generic webhook, signed with HMAC-SHA256.
    pub webhook: Option<WebhookNotificationDoc>,
    /// The events to notify about.
    #[serde(default)]
    pub on: Vec<NotificationEvent>,
    /// Only events of these release channels; all of them when not given.
    pub release_channels: Option<Vec<ReleaseChannelName>>,
}

/// `slack: {webhookUrl: SECRET}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlackNotificationDoc {
    /// The incoming webhook's URL: a secret, e.g. `{fromEnv: SLACK_WEBHOOK_URL}`
    /// or `{awsSsmParameter: /vergence/slack-url}`.
    pub webhook_url: Option<SecretValueDoc>,
}

/// `webhook: {url: SECRET, signingSecret: SECRET}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookNotificationDoc {
    /// Where the JSON body is POSTed: a secret (URLs often embed a token).
    pub url: Option<SecretValueDoc>,
    /// The HMAC-SHA256 key of `X-Vergence-Signature`.
    pub signing_secret: Option<SecretValueDoc>,
}
