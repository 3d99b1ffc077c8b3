//! Which events become which notifications, for which rules, and the
//! message each becomes.

use std::collections::BTreeSet;

use jiff::Timestamp;

use super::*;

fn key(channel: &str) -> InstanceKey {
    InstanceKey::new(
        ApplicationName::parse("shop").unwrap(),
        ServiceName::parse("web").unwrap(),
        ReleaseChannelName::parse(channel).unwrap(),
    )
}

fn event(channel: &str, kind: EventKind, message: &str) -> Event {
    let mut event = Event::for_instance(
        &key(channel),
        Timestamp::UNIX_EPOCH,
        "engine",
        kind,
        message,
    );
    event.id = format!("000000000000001-shop/web/{channel}@3-000");
    event
}

fn status(to: Status) -> EventKind {
    EventKind::StatusChanged {
        from: Status::Pending,
        to,
    }
}

fn version(v: &str) -> Version {
    Version::parse(v).unwrap()
}

fn rule(on: &[NotificationEvent], channels: Option<&[&str]>) -> NotificationRule {
    NotificationRule {
        application: ApplicationName::parse("shop").unwrap(),
        name: "ops".to_owned(),
        target: NotificationTarget::Slack {
            webhook_url: SecretRef::FromEnv("SLACK_URL".to_owned()),
        },
        on: on.iter().copied().collect(),
        release_channels: channels.map(|cs| {
            cs.iter()
                .map(|c| ReleaseChannelName::parse(*c).unwrap())
                .collect::<BTreeSet<_>>()
        }),
    }
}

fn converged(v: &str) -> EventKind {
    EventKind::Converged {
        version: version(v),
    }
}

#[test]
fn each_event_people_act_on_is_recognised_and_routine_ones_are_not() {
    use NotificationEvent as N;
    let prod = ReleaseChannelName::parse("prod").unwrap();
    let drift = EventKind::DriftDetected {
        version: version("v2"),
    };
    let step_failed = EventKind::StepFailed {
        dead_lettered: true,
    };
    let cases = [
        (
            "prod",
            status(Status::WaitingApproval),
            Some(N::ApprovalNeeded),
        ),
        ("prod", status(Status::Failed), Some(N::Failed)),
        ("prod", status(Status::Blocked), Some(N::Blocked)),
        ("prod", step_failed, Some(N::Failed)),
        (
            "prod",
            EventKind::RolledBack { to: version("v1") },
            Some(N::RolledBack),
        ),
        ("prod", drift, Some(N::DriftDetected)),
        ("prod", converged("v2"), Some(N::Converged)),
        (
            "staging",
            EventKind::Overridden {
                version: version("v2"),
            },
            Some(N::Overridden),
        ),
        // Converging in an earlier channel is routine.
        ("staging", converged("v2"), None),
        ("prod", status(Status::Applying), None),
        // The rolledBack event (with the version) is the one sent.
        ("prod", status(Status::RolledBack), None),
        ("prod", EventKind::ChecksRequested, None),
    ];
    for (channel, kind, expected) in cases {
        let event = event(channel, kind, "it happened");
        assert_eq!(
            NotificationEvent::of(&event, Some(&prod)),
            expected,
            "{:?}",
            event.kind
        );
    }
    let converged = event("prod", converged("v2"), "converged");
    assert_eq!(
        NotificationEvent::of(&converged, None),
        None,
        "no channel order known: no channel is the last"
    );
}

#[test]
fn a_rule_wants_only_its_events_application_and_channels() {
    let failed = event("staging", status(Status::Failed), "boom");
    let all_channels = rule(&[NotificationEvent::Failed], None);
    assert!(all_channels.wants(NotificationEvent::Failed, &failed));
    assert!(!all_channels.wants(NotificationEvent::Blocked, &failed));
    let prod_only = rule(&[NotificationEvent::Failed], Some(&["prod"]));
    assert!(!prod_only.wants(NotificationEvent::Failed, &failed));
    let mut other_app = failed.clone();
    other_app.application = ApplicationName::parse("billing").unwrap();
    assert!(!all_channels.wants(NotificationEvent::Failed, &other_app));
}

#[test]
fn a_notification_carries_the_dedup_key_version_and_instance_link() {
    let rolled_back = event(
        "prod",
        EventKind::RolledBack { to: version("v1") },
        "rolled back to v1: v2 failed",
    );
    let rule = rule(&[NotificationEvent::RolledBack], None);
    let n = Notification::new(
        &rule,
        NotificationEvent::RolledBack,
        &rolled_back,
        Some("https://vergence.example.com/"),
    );
    assert_eq!(n.delivery_id, rolled_back.id);
    assert_eq!(n.notification, "ops");
    assert_eq!(n.version, Some(version("v1")));
    assert_eq!(
        n.link.as_deref(),
        Some("https://vergence.example.com/ui/instances/shop/prod/web")
    );
    assert_eq!(
        n.text(),
        "shop/web@prod: rolled back — rolled back to v1: v2 failed"
    );
    let body = serde_json::to_value(&n).unwrap();
    assert_eq!(body["deliveryId"], rolled_back.id.as_str());
    assert_eq!(body["event"], "rolledBack");
    assert_eq!(body["releaseChannel"], "prod");

    let unlinked = Notification::new(&rule, NotificationEvent::RolledBack, &rolled_back, None);
    assert_eq!(unlinked.link, None);
}
