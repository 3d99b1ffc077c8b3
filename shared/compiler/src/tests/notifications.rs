//! `notifications:` on applications: compiled into rules, and every
//! mistake reported with its file, line and field.

use super::*;
use vergence_model::notification::{NotificationEvent, NotificationTarget};
use vergence_model::ports::CompiledConfig;

fn app_with(notifications: &str) -> String {
    format!("{SEED_APP}  notifications:\n{notifications}")
}

#[test]
fn slack_and_webhook_notifications_compile_into_rules() {
    let app = app_with(
        r#"    - name: team-chat
      slack: {webhookUrl: {fromEnv: SLACK_WEBHOOK_URL}}
      on: [approvalNeeded, failed, converged]
    - name: pager
      webhook:
        url: {fromEnv: PAGER_URL}
        signingSecret: {fromEnv: PAGER_SECRET}
      on: [rolledBack, driftDetected, blocked]
      releaseChannels: [prod]
    - name: from-aws
      webhook:
        url: {awsSsmParameter: /vergence/hook-url}
        signingSecret: {awsSecretsManager: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-AbCdEf:signing::"}
      on: [failed]
"#,
    );
    let model = check(&bundle(&[("seed.yaml", SEED), ("app.yaml", &app)])).unwrap();
    let rules = CompiledConfig::notifications(&model);
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].name, "team-chat");
    assert_eq!(
        rules[0].target,
        NotificationTarget::Slack {
            webhook_url: SecretRef::FromEnv("SLACK_WEBHOOK_URL".into())
        }
    );
    assert_eq!(
        rules[0].on.iter().copied().collect::<Vec<_>>(),
        vec![
            NotificationEvent::ApprovalNeeded,
            NotificationEvent::Failed,
            NotificationEvent::Converged
        ]
    );
    assert_eq!(rules[0].release_channels, None);
    assert_eq!(
        rules[1].target,
        NotificationTarget::Webhook {
            url: SecretRef::FromEnv("PAGER_URL".into()),
            signing_secret: SecretRef::FromEnv("PAGER_SECRET".into()),
        }
    );
    assert_eq!(
        rules[1].release_channels,
        Some([name::<ReleaseChannelName>("prod")].into_iter().collect())
    );
    assert_eq!(
        rules[2].target,
        NotificationTarget::Webhook {
            url: SecretRef::AwsSsmParameter("/vergence/hook-url".into()),
            signing_secret: SecretRef::AwsSecretsManager(
                "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-AbCdEf:signing::".into()
            ),
        },
        "read from AWS when the message is sent"
    );
}

#[test]
fn notification_mistakes_are_reported_with_file_line_and_field() {
    let app = app_with(
        r#"    - name: chat
      slack: {webhookUrl: {fromEnv: SLACK_URL}}
      on: [approvalNeeded, deployed]
    - name: chat
      slack: {webhookUrl: {fromEnv: SLACK_URL}, channel: ops}
      on: [failed]
      releaseChannels: [prdo]
    - name: hook
      webhook: {url: {fromEnv: HOOK_URL}}
      on: []
    - name: both
      slack: {webhookUrl: {fromEnv: A}}
      webhook: {url: {fromEnv: B}, signingSecret: {fromEnv: C}}
      on: [failed]
    - name: neither
      on: [failed]
    - name: cloud-secret
      slack: {webhookUrl: {gcpSecretManager: projects/p/secrets/hook/versions/latest}}
      on: [failed]
    - name: bad-references
      webhook:
        url: {awsSsmParameter: "hook url"}
        signingSecret: {awsSecretsManager: hook-secret}
      on: [failed]
"#,
    );
    let errors = errors_of(&[("seed.yaml", SEED), ("app.yaml", &app)]);
    let want = "app.yaml:15: application.notifications[0].on[1]: unknown value 'deployed'; \
                expected one of: approvalNeeded, failed, rolledBack, driftDetected, blocked, converged, overridden";
    assert!(errors.iter().any(|e| e == want), "{errors:#?}");
    // A value that cannot be read stops the checks of the document; fixed,
    // the unknown key and the checker's own findings show.
    let app = app.replace(", deployed]", "]");
    let errors = errors_of(&[("seed.yaml", SEED), ("app.yaml", &app)]);
    let expected = [
        "app.yaml:17: application.notifications[1].slack.channel: unknown key 'channel'",
        "app.yaml:16: application.notifications[1].name: notification 'chat' is defined twice",
        "app.yaml:19: application.notifications[1].releaseChannels[0]: unknown release channel 'prdo'; did you mean 'prod'?",
        "app.yaml:21: application.notifications[2].webhook.signingSecret: webhook needs signingSecret",
        "app.yaml:22: application.notifications[2].on: list the events to notify about: one or more of approvalNeeded, failed, rolledBack, driftDetected, blocked, converged, overridden",
        "app.yaml:25: application.notifications[3].webhook: a notification has exactly one target; found slack and webhook",
        "app.yaml:27: application.notifications[4]: give the notification a target",
        "app.yaml:30: application.notifications[5].slack.webhookUrl.gcpSecretManager: gcpSecretManager is read by the runner whose jobs use it",
        "app.yaml:34: application.notifications[6].webhook.url.awsSsmParameter: \"hook url\" is not an SSM parameter",
        "app.yaml:35: application.notifications[6].webhook.signingSecret.awsSecretsManager: \"hook-secret\" is not a Secrets Manager secret ARN",
    ];
    for want in expected {
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "no error starting {want:?} in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
}
