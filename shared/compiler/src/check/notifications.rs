//! Checks an application's `notifications:`: each has a unique name,
//! exactly one target (`slack` or `webhook`) with every secret it needs,
//! at least one event, and only release channels the application has.
//!
//! Secrets come from `fromEnv` only: they are read by the process that
//! delivers notifications (`vergence up`/`serve`, the scheduler function),
//! not by a runner, and that process reads its environment.

use std::collections::BTreeSet;

use super::field_path::FieldPath;
use super::{Checker, check_env_name, unknown_name_message};
use crate::config::schema::{NotificationDoc, SecretValueDoc};
use vergence_model::notification::{NotificationEvent, NotificationRule, NotificationTarget};
use vergence_model::{ApplicationName, ReleaseChannelName, SecretRef, Source};

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

    /// A URL or signing secret: given, and read from the environment.
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
        let others = [
            ("awsSecretsManager", doc.aws_secrets_manager.is_some()),
            ("awsSsmParameter", doc.aws_ssm_parameter.is_some()),
            ("gcpSecretManager", doc.gcp_secret_manager.is_some()),
            ("kubernetesSecret", doc.kubernetes_secret.is_some()),
        ];
        if let Some((key, _)) = others.iter().find(|(_, given)| *given) {
            self.err(
                source,
                &path.key(key),
                "notifications read their secrets from the environment of the process that \
                 delivers them (`vergence up`/`serve`, the scheduler function): write {fromEnv: VARIABLE}",
            );
            return None;
        }
        let Some(variable) = &doc.from_env else {
            self.err(
                source,
                path,
                "give the secret a source: {fromEnv: VARIABLE}, an environment variable of the \
                 process that delivers notifications",
            );
            return None;
        };
        match check_env_name(variable) {
            Ok(()) => Some(SecretRef::FromEnv(variable.clone())),
            Err(e) => {
                self.err(source, &path.key("fromEnv"), e);
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
