//! Passes of the notifier over a real SQLite store and the real compiler,
//! with a sender that records what it is given and fails as told.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use vergence_compiler::YamlCompiler;
use vergence_embedded::{DirArtifactStore, SqliteStore};
use vergence_model::notification::{DeliveryFailure, NotificationTarget};
use vergence_model::ports::{ConfigSnapshot, ConfigStore, EventStore, ManualClock};
use vergence_model::{
    ApplicationName, ConfigBundle, InstanceKey, ReleaseChannelName, ServiceName, Status, Version,
};

use super::*;
use crate::ArtifactCursorStore;

const CONFIG: &str = r#"runtime:
  name: files
  apply: {taskConfig: {program: {cmd: [./apply.sh]}}}
---
application:
  name: shop
  releaseChannels:
    - {name: staging, runtimes: [{runtime: files}]}
    - name: prod
      runtimes: [{runtime: files}]
      preconditions: [{releaseChannelStable: {releaseChannel: staging}}]
  notifications:
    - name: chat
      slack: {webhookUrl: {fromEnv: CHAT_URL}}
      on: [approvalNeeded, converged, failed]
---
service:
  name: web
  custom: {}
"#;

/// Records what it sends; answers from a script, then succeeds.
#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<Notification>>,
    script: Mutex<VecDeque<DeliveryFailure>>,
}

#[async_trait]
impl NotificationSender for Recorder {
    async fn send(
        &self,
        _target: &NotificationTarget,
        notification: &Notification,
    ) -> Result<(), DeliveryFailure> {
        self.sent.lock().unwrap().push(notification.clone());
        match self.script.lock().unwrap().pop_front() {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
}

struct Fixture {
    store: Arc<SqliteStore>,
    clock: Arc<ManualClock>,
    sender: Arc<Recorder>,
    notifier: Notifier,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::in_memory().unwrap());
    let bundle = ConfigBundle::from_files(BTreeMap::from([(
        "vergence.yaml".to_owned(),
        CONFIG.to_owned(),
    )]));
    let start: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
    store
        .put_snapshot(&ConfigSnapshot {
            hash: bundle.hash(),
            bundle: bundle.clone(),
            created_at: start,
            actor: "test".into(),
        })
        .await
        .unwrap();
    let channels = ["staging", "prod"]
        .map(|c| ReleaseChannelName::parse(c).unwrap())
        .to_vec();
    store
        .set_current_config(
            &CurrentConfig {
                hash: bundle.hash(),
                revision: 0,
                channels: BTreeMap::from([(ApplicationName::parse("shop").unwrap(), channels)]),
            },
            None,
        )
        .await
        .unwrap();
    let clock = Arc::new(ManualClock::new(start));
    let sender = Arc::new(Recorder::default());
    let notifier = Notifier::new(
        store.clone(),
        Arc::new(YamlCompiler),
        sender.clone(),
        Arc::new(ArtifactCursorStore::new(Arc::new(DirArtifactStore::new(
            dir.path().to_owned(),
        )))),
        clock.clone(),
    )
    .with_public_url(Some("https://vergence.example.com/".into()))
    .with_backoff(Backoff {
        attempts: 3,
        first: Duration::from_millis(1),
    });
    Fixture {
        store,
        clock,
        sender,
        notifier,
        _dir: dir,
    }
}

impl Fixture {
    /// Records an event of `web@channel` at the clock's time less `ago`.
    async fn record(&self, channel: &str, kind: EventKind, ago: SignedDuration, n: usize) {
        let key = InstanceKey::new(
            ApplicationName::parse("shop").unwrap(),
            ServiceName::parse("web").unwrap(),
            ReleaseChannelName::parse(channel).unwrap(),
        );
        let at = self.clock.now().checked_sub(ago).unwrap();
        let mut event = Event::for_instance(&key, at, "engine", kind, "it happened");
        Event::assign_ids(std::slice::from_mut(&mut event), &format!("test-{n}"));
        self.store.append_events(&[event]).await.unwrap();
    }

    fn sent(&self) -> Vec<(NotificationEvent, String)> {
        self.sender
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|n| (n.event, n.subject()))
            .collect()
    }
}

fn to(status: Status) -> EventKind {
    EventKind::StatusChanged {
        from: Status::Pending,
        to: status,
    }
}

fn converged() -> EventKind {
    EventKind::Converged {
        version: Version::parse("v2").unwrap(),
    }
}

#[tokio::test]
async fn a_pass_sends_what_rules_ask_for_once_with_the_instance_link() {
    let f = fixture().await;
    f.record("prod", to(Status::WaitingApproval), SignedDuration::ZERO, 1)
        .await;
    f.record("staging", converged(), SignedDuration::ZERO, 2)
        .await;
    f.record("prod", converged(), SignedDuration::ZERO, 3).await;
    f.record("prod", to(Status::Blocked), SignedDuration::ZERO, 4)
        .await;

    let report = f.notifier.pass().await.unwrap();
    assert_eq!(report.delivered, 2);
    assert_eq!(
        f.sent(),
        vec![
            (NotificationEvent::ApprovalNeeded, "shop/web@prod".into()),
            (NotificationEvent::Converged, "shop/web@prod".into()),
        ],
        "staging converging is routine; blocked is not asked for"
    );
    let first = f.sender.sent.lock().unwrap()[0].clone();
    assert_eq!(
        first.link.as_deref(),
        Some("https://vergence.example.com/ui/instances/shop/prod/web")
    );
    assert!(first.delivery_id.contains("test-1"), "{first:?}");

    // The next pass, and a restarted notifier, send nothing again.
    f.clock.advance(SignedDuration::from_secs(1));
    assert_eq!(f.notifier.pass().await.unwrap(), PassReport::default());
    assert_eq!(f.sent().len(), 2);
}

#[tokio::test]
async fn an_event_committed_after_a_later_one_was_sent_is_still_sent() {
    let f = fixture().await;
    f.record("prod", converged(), SignedDuration::ZERO, 1).await;
    f.notifier.pass().await.unwrap();
    f.clock.advance(SignedDuration::from_secs(10));
    // Decided 30 s ago (before the last pass), committed only now.
    f.record("prod", to(Status::Failed), SignedDuration::from_secs(30), 2)
        .await;
    f.notifier.pass().await.unwrap();
    assert_eq!(
        f.sent(),
        vec![
            (NotificationEvent::Converged, "shop/web@prod".into()),
            (NotificationEvent::Failed, "shop/web@prod".into()),
        ]
    );
    // Long after, the cursor has forgotten both and still sends neither.
    f.clock.advance(SignedDuration::from_mins(10));
    f.notifier.pass().await.unwrap();
    assert_eq!(f.sent().len(), 2);
}

#[tokio::test]
async fn a_failing_receiver_is_tried_again_then_given_up_on_and_recorded() {
    let f = fixture().await;
    let retryable = |m: &str| DeliveryFailure {
        retryable: true,
        message: m.into(),
    };
    // First message: fails twice, then gets through on the third attempt.
    // Second message: fails all three attempts.
    f.sender.script.lock().unwrap().extend([
        retryable("500"),
        retryable("500"),
        // (third attempt of the first message succeeds: nothing scripted)
    ]);
    f.record("prod", to(Status::WaitingApproval), SignedDuration::ZERO, 1)
        .await;
    let report = f.notifier.pass().await.unwrap();
    assert_eq!(report.delivered, 1);
    assert_eq!(f.sent().len(), 3, "two failures, then delivered");

    f.sender
        .script
        .lock()
        .unwrap()
        .extend([retryable("503"), retryable("503"), retryable("503")]);
    f.clock.advance(SignedDuration::from_secs(1));
    f.record("prod", to(Status::Failed), SignedDuration::ZERO, 2)
        .await;
    let report = f.notifier.pass().await.unwrap();
    assert_eq!(report.given_up, 1);
    assert_eq!(f.sent().len(), 6, "three attempts, then given up");
    let failures: Vec<Event> = f
        .store
        .list_events(&EventFilter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::NotificationFailed { .. }))
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].message.contains(
            "notification chat (slack) about failed was not delivered after 3 attempt(s): 503"
        ),
        "{}",
        failures[0].message
    );
    // Given up on is done with: the next pass does not try again.
    f.clock.advance(SignedDuration::from_secs(1));
    f.notifier.pass().await.unwrap();
    assert_eq!(f.sent().len(), 6);
}

#[tokio::test]
async fn a_permanent_failure_is_not_tried_again() {
    let f = fixture().await;
    f.sender.script.lock().unwrap().push_back(DeliveryFailure {
        retryable: false,
        message: "CHAT_URL is not set".into(),
    });
    f.record("prod", to(Status::Failed), SignedDuration::ZERO, 1)
        .await;
    let report = f.notifier.pass().await.unwrap();
    assert_eq!(report.given_up, 1);
    assert_eq!(f.sent().len(), 1);
}

#[test]
fn a_slack_message_has_text_blocks_and_a_button_to_the_instance() {
    let n = Notification {
        delivery_id: "000000000000001-x".into(),
        notification: "chat".into(),
        event: NotificationEvent::ApprovalNeeded,
        application: ApplicationName::parse("shop").unwrap(),
        service: Some(ServiceName::parse("web").unwrap()),
        release_channel: Some(ReleaseChannelName::parse("prod").unwrap()),
        version: None,
        at: Timestamp::UNIX_EPOCH,
        message: "runtime files requires approval".into(),
        link: Some("https://v.example.com/ui/instances/shop/prod/web".into()),
    };
    let message = crate::http::slack_message(&n);
    assert_eq!(
        message["text"],
        "shop/web@prod: approval needed — runtime files requires approval \
         <https://v.example.com/ui/instances/shop/prod/web|Open in Vergence>"
    );
    assert_eq!(message["blocks"][1]["elements"][0]["url"], n.link.unwrap());
}

#[tokio::test]
async fn the_background_notifier_makes_a_last_pass_when_finished() {
    let f = fixture().await;
    let notifier = Arc::new(f.notifier);
    // Passes an hour apart: only the first, at once, and the last.
    let background = crate::spawn(notifier.clone(), Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let key = InstanceKey::new(
        ApplicationName::parse("shop").unwrap(),
        ServiceName::parse("web").unwrap(),
        ReleaseChannelName::parse("prod").unwrap(),
    );
    let mut event = Event::for_instance(&key, f.clock.now(), "engine", converged(), "done");
    Event::assign_ids(std::slice::from_mut(&mut event), "late");
    f.store.append_events(&[event]).await.unwrap();
    assert!(f.sender.sent.lock().unwrap().is_empty());

    assert!(background.finish(Duration::from_secs(5)).await);
    assert_eq!(f.sender.sent.lock().unwrap().len(), 1);
}
