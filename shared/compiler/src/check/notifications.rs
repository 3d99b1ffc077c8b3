//! Checks an application's `notifications:`: each has a unique name,
//! exactly one target (`slack` or `webhook`) with every secret it needs,
//! at least one event, and only release channels the application has.
//!
//! Secrets are read by the process that delivers notifications (`vergence
//! up`/`serve`, the scheduler function), not by a runner, when it sends: from
//! its environment (`fromEnv`), or from AWS (`awsSsmParameter`,
//! `awsSecretsManager`), so the serverless deployment needs no secret value
//! in its template.

use std::collections::BTreeSet;

use super::field_path::FieldPath;
use super::secret::given_sources;
use super::{Checker, unknown_name_message};
use crate::config::schema::{NotificationDoc, SecretValueDoc};
use vergence_model::notification::{NotificationEvent, NotificationRule, NotificationTarget};
use vergence_model::{ApplicationName, ReleaseChannelName, SecretRef, Source};

/// The sources a notification's secret may name, as a hint.
const NOTIFICATION_SOURCES: &str = "{fromEnv: VARIABLE}, {awsSsmParameter: /path/name} or \
     {awsSecretsManager: arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME}";

impl Checker<'_> {
    /// The application's notification rules; those with errors are left out
    /// (and reported).
    pub(super) fn notifications(
        &mut self,
        source: &Source,
        application: &ApplicationName,
        docs: &[NotificationDoc],
        channels: &[&ReleaseChannelName],
    ) -> Vec<NotificationRule> {
        let list = FieldPath::root("application").key("notifications");
        let mut names = BTreeSet::new();
        let mut rules = Vec::new();
        for (i, doc) in docs.iter().enumerate() {
            let path = list.index(i);
            let errors_before = self.errors.len();
            if doc.name.trim().is_empty() {
                self.err(source, &path.key("name"), "a notification needs a name");
            } else if !names.insert(doc.name.as_str()) {
                let message = format!("notification '{}' is defined twice", doc.name);
                self.err(source, &path.key("name"), message);
            }
            let target = self.notification_target(source, &path, doc);
            let on = self.notification_events(source, &path, doc);
            let release_channels = self.notification_channels(source, &path, doc, channels);
            if let Some(target) = target
                && self.errors.len() == errors_before
            {
                rules.push(NotificationRule {
                    application: application.clone(),
                    name: doc.name.clone(),
                    target,
                    on,
                    release_channels,
                });
            }
        }
        rules
    }

    fn notification_target(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &NotificationDoc,
    ) -> Option<NotificationTarget> {
        match (&doc.slack, &doc.webhook) {
            (Some(slack), None) => {
                let path = path.key("slack");
                let webhook_url = self.notification_secret(
                    source,
                    &path.key("webhookUrl"),
                    slack.webhook_url.as_ref(),
                    "slack needs webhookUrl: the incoming webhook's URL, e.g. {fromEnv: SLACK_WEBHOOK_URL}",
                );
                Some(NotificationTarget::Slack {
                    webhook_url: webhook_url?,
                })
            }
            (None, Some(webhook)) => {
                let path = path.key("webhook");
                let url = self.notification_secret(
                    source,
                    &path.key("url"),
                    webhook.url.as_ref(),
                    "webhook needs url: where to POST, e.g. {fromEnv: DEPLOY_HOOK_URL}",
                );
                let signing_secret = self.notification_secret(
                    source,
                    &path.key("signingSecret"),
                    webhook.signing_secret.as_ref(),
                    "webhook needs signingSecret: the key receivers verify X-Vergence-Signature with, e.g. {fromEnv: DEPLOY_HOOK_SECRET}",
                );
                Some(NotificationTarget::Webhook {
                    url: url?,
                    signing_secret: signing_secret?,
                })
            }
            (None, None) => {
                self.err(
                    source,
                    path,
                    "give the notification a target: slack: {webhookUrl: {fromEnv: VARIABLE}} \
                     or webhook: {url: {fromEnv: VARIABLE}, signingSecret: {fromEnv: VARIABLE}}",
                );
                None
            }
            (Some(_), Some(_)) => {
                self.err(
                    source,
                    &path.key("webhook"),
                    "a notification has exactly one target; found slack and webhook: \
                     keep one, or write two notifications",
                );
                None
            }
        }
    }

    /// A URL or signing secret: given, from exactly one source the
    /// process that delivers notifications reads itself — its environment,
    /// or AWS (SSM Parameter Store, Secrets Manager) at delivery time.
    fn notification_secret(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: Option<&SecretValueDoc>,
        missing: &str,
    ) -> Option<SecretRef> {
        let Some(doc) = doc else {
            self.err(source, path, missing);
            return None;
        };
        let given = given_sources(doc);
        let (key, parsed) = match given.as_slice() {
            [(key, parsed)] => (*key, parsed.clone()),
            [] => {
                self.err(
                    source,
                    path,
                    format!("give the secret a source: {NOTIFICATION_SOURCES}"),
                );
                return None;
            }
            several => {
                let keys: Vec<&str> = several.iter().map(|(key, _)| *key).collect();
                let message = format!(
                    "a secret has exactly one source; found {}: keep one",
                    keys.join(" and ")
                );
                self.err(source, path, message);
                return None;
            }
        };
        let source_path = path.key(key);
        match parsed {
            Ok(SecretRef::GcpSecretManager(_) | SecretRef::KubernetesSecret { .. }) => {
                let message = format!(
                    "{key} is read by the runner whose jobs use it, and notifications are sent by \
                     `vergence up`/`serve` or the scheduler function, which do not read it: write \
                     {NOTIFICATION_SOURCES}"
                );
                self.err(source, &source_path, message);
                None
            }
            Ok(secret) => Some(secret),
            Err((field, e)) => {
                let path = field.map_or(source_path.clone(), |f| source_path.key(f));
                self.err(source, &path, e);
                None
            }
        }
    }

    fn notification_events(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &NotificationDoc,
    ) -> BTreeSet<NotificationEvent> {
        if doc.on.is_empty() {
            let all: Vec<&str> = NotificationEvent::ALL.iter().map(|e| e.as_str()).collect();
            self.err(
                source,
                &path.key("on"),
                format!(
                    "list the events to notify about: one or more of {}",
                    all.join(", ")
                ),
            );
        }
        doc.on.iter().copied().collect()
    }

    fn notification_channels(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &NotificationDoc,
        channels: &[&ReleaseChannelName],
    ) -> Option<BTreeSet<ReleaseChannelName>> {
        let given = doc.release_channels.as_ref()?;
        let path = path.key("releaseChannels");
        if given.is_empty() {
            self.err(
                source,
                &path,
                "list at least one release channel, or leave releaseChannels out for all of them",
            );
        }
        for (i, channel) in given.iter().enumerate() {
            if !channels.contains(&channel) {
                let message = unknown_name_message(
                    "release channel",
                    channel.as_str(),
                    channels.iter().map(|c| c.as_str()),
                );
                self.err(source, &path.index(i), message);
            }
        }
        Some(given.iter().cloned().collect())
    }
}
