//! One pass of the notifier: the events since the cursor, matched against
//! the rules of the config in force, each message sent with retries, the
//! cursor saved after each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tracing::{info, warn};
use vergence_model::notification::{
    Notification, NotificationCursor, NotificationCursorStore, NotificationEvent, NotificationRule,
    NotificationSender,
};
use vergence_model::ports::{Clock, Compiler, CurrentConfig, StateStore};
use vergence_model::{Event, EventFilter, EventKind};

use crate::NotifyError;

/// How far before the last pass a pass looks again. Events are ordered by
/// the time they were decided, and a step may commit a little after a
/// later one; looking back (and remembering what was delivered) sends such
/// an event once instead of never. It also means that a notifier starting
/// afresh, or a rule just added, covers the last few minutes.
pub const LOOK_BACK: SignedDuration = SignedDuration::from_mins(5);

/// Most events read per pass: far more than a deployment records in the
/// minute between two passes of the scheduler.
const MAX_EVENTS_PER_PASS: usize = 2_000;

/// With no notification configured, the cursor is only kept roughly
/// current (so notifications added later start about now), not rewritten
/// on every pass of every `up` that has none.
const IDLE_CURSOR_REFRESH: SignedDuration = SignedDuration::from_secs(60);

/// When a message is tried again: `attempts` in all, waiting `first`, then
/// twice as long each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub attempts: u32,
    pub first: Duration,
}

impl Default for Backoff {
    /// 4 attempts over about 3.5 s (0.5, 1, 2 s apart): a receiver that
    /// restarts is caught, and one that is down does not hold the others up.
    fn default() -> Self {
        Self {
            attempts: 4,
            first: Duration::from_millis(500),
        }
    }
}

/// What a pass did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    pub delivered: usize,
    pub given_up: usize,
}

/// Delivers the notifications the events in the store call for.
pub struct Notifier {
    store: Arc<dyn StateStore>,
    compiler: Arc<dyn Compiler>,
    sender: Arc<dyn NotificationSender>,
    cursors: Arc<dyn NotificationCursorStore>,
    clock: Arc<dyn Clock>,
    public_url: Option<String>,
    backoff: Backoff,
    /// The rules of the config last read, by its hash: compiled once.
    rules: Mutex<Option<(String, Arc<Vec<NotificationRule>>)>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("public_url", &self.public_url)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(
        store: Arc<dyn StateStore>,
        compiler: Arc<dyn Compiler>,
        sender: Arc<dyn NotificationSender>,
        cursors: Arc<dyn NotificationCursorStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            compiler,
            sender,
            cursors,
            clock,
            public_url: None,
            backoff: Backoff::default(),
            rules: Mutex::new(None),
        }
    }

    /// The base URL of the status pages the messages link to.
    pub fn with_public_url(mut self, public_url: Option<String>) -> Self {
        self.public_url = public_url
            .map(|u| u.trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty());
        self
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sends what the events since the cursor call for, and moves the
    /// cursor after each message (delivered or given up on).
    #[tracing::instrument(name = "notify.pass", level = "debug", skip_all)]
    pub async fn pass(&self) -> Result<PassReport, NotifyError> {
        let now = self.clock.now();
        let mut cursor = self
            .cursors
            .load()
            .await
            .map_err(NotifyError::store("load the cursor"))?
            .unwrap_or_default();
        let since = cursor.since.unwrap_or(now);
        let horizon = id_prefix(since.checked_sub(LOOK_BACK).unwrap_or(since));
        let mut report = PassReport::default();
        let current = self
            .store
            .current_config()
            .await
            .map_err(NotifyError::store("read the config in force"))?;
        let rules = match &current {
            Some(current) => self.rules_of(&current.hash).await?,
            None => Arc::new(Vec::new()),
        };
        let fresh = cursor
            .since
            .is_some_and(|since| now.duration_since(since) < IDLE_CURSOR_REFRESH);
        if rules.is_empty() && fresh {
            return Ok(report);
        }
        if let (Some(current), false) = (&current, rules.is_empty()) {
            let events = self
                .store
                .list_events(&EventFilter {
                    limit: Some(MAX_EVENTS_PER_PASS),
                    ..EventFilter::default()
                })
                .await
                .map_err(NotifyError::store("list events"))?;
            if events.len() == MAX_EVENTS_PER_PASS
                && events
                    .first()
                    .is_some_and(|e| e.id.as_str() > horizon.as_str())
            {
                warn!(
                    "more than {MAX_EVENTS_PER_PASS} events since the last notifier pass; the oldest were not looked at"
                );
            }
            for event in events.iter().filter(|e| e.id.as_str() >= horizon.as_str()) {
                self.notify(event, current, &rules, &mut cursor, &mut report)
                    .await?;
            }
        }
        cursor.since = Some(now);
        let horizon = id_prefix(now.checked_sub(LOOK_BACK).unwrap_or(now));
        cursor
            .delivered
            .retain(|key| key.as_str() >= horizon.as_str());
        self.cursors
            .save(&cursor)
            .await
            .map_err(NotifyError::store("save the cursor"))?;
        Ok(report)
    }

    /// Sends the messages one event calls for, each once.
    async fn notify(
        &self,
        event: &Event,
        current: &CurrentConfig,
        rules: &[NotificationRule],
        cursor: &mut NotificationCursor,
        report: &mut PassReport,
    ) -> Result<(), NotifyError> {
        let last_channel = current
            .channels
            .get(&event.application)
            .and_then(|c| c.last());
        let Some(what) = NotificationEvent::of(event, last_channel) else {
            return Ok(());
        };
        for rule in rules.iter().filter(|r| r.wants(what, event)) {
            // The event's id first: pruning keeps what is inside the look-back.
            let key = format!("{} {}/{}", event.id, rule.application, rule.name);
            if cursor.delivered.contains(&key) {
                continue;
            }
            let notification = Notification::new(rule, what, event, self.public_url.as_deref());
            if self.deliver(rule, &notification).await {
                report.delivered += 1;
            } else {
                report.given_up += 1;
            }
            cursor.delivered.insert(key);
            self.cursors
                .save(cursor)
                .await
                .map_err(NotifyError::store("save the cursor"))?;
        }
        Ok(())
    }

    /// Sends one message, trying again with backoff; `false` when it was
    /// given up on (recorded as a `notificationFailed` event).
    async fn deliver(&self, rule: &NotificationRule, notification: &Notification) -> bool {
        let mut wait = self.backoff.first;
        let mut attempt = 0;
        let failure = loop {
            attempt += 1;
            match self.sender.send(&rule.target, notification).await {
                Ok(()) => {
                    info!(
                        notification = %rule.name,
                        delivery = %notification.delivery_id,
                        event = notification.event.as_str(),
                        "notification delivered"
                    );
                    return true;
                }
                Err(failure) if failure.retryable && attempt < self.backoff.attempts => {
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
                Err(failure) => break failure,
            }
        };
        warn!(
            notification = %rule.name,
            delivery = %notification.delivery_id,
            attempts = attempt,
            "notification {} ({}) of {} not delivered: {}",
            rule.name,
            rule.target.kind(),
            notification.subject(),
            failure.message
        );
        self.record_failure(rule, notification, attempt, &failure.message)
            .await;
        false
    }

    /// Puts a failed delivery in the audit trail, where `vergence events`
    /// and the status page show it. Failing to record it is only logged:
    /// the pass goes on.
    async fn record_failure(
        &self,
        rule: &NotificationRule,
        notification: &Notification,
        attempts: u32,
        reason: &str,
    ) {
        let mut event = Event {
            id: String::new(),
            at: self.clock.now(),
            application: notification.application.clone(),
            service: notification.service.clone(),
            release_channel: notification.release_channel.clone(),
            actor: "notifier".into(),
            kind: EventKind::NotificationFailed {
                notification: rule.name.clone(),
                delivery_id: notification.delivery_id.clone(),
                attempts,
            },
            message: vergence_model::text::sentence(format!(
                "notification {} ({}) about {} was not delivered after {attempts} attempt(s): {reason}",
                rule.name,
                rule.target.kind(),
                notification.event.as_str()
            )),
        };
        let scope = format!("notify/{}/{}", rule.name, notification.delivery_id);
        Event::assign_ids(std::slice::from_mut(&mut event), &scope);
        if let Err(e) = self.store.append_events(&[event]).await {
            warn!(notification = %rule.name, "cannot record the failed delivery: {e}");
        }
    }

    /// The notification rules of the config `hash`, compiled once.
    async fn rules_of(&self, hash: &str) -> Result<Arc<Vec<NotificationRule>>, NotifyError> {
        if let Some((cached, rules)) = self.cached_rules()
            && cached == hash
        {
            return Ok(rules);
        }
        let snapshot = self
            .store
            .get_snapshot(hash)
            .await
            .map_err(NotifyError::store("read the config in force"))?
            .ok_or_else(|| NotifyError::Store {
                operation: "read the config in force",
                source: vergence_model::Error::not_found(format!("config snapshot {hash}")),
            })?;
        let compiled = self
            .compiler
            .compile(&snapshot.bundle)
            .map_err(NotifyError::store("compile the config in force"))?;
        let rules = Arc::new(compiled.notifications());
        *self
            .rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((hash.to_owned(), rules.clone()));
        Ok(rules)
    }

    fn cached_rules(&self) -> Option<(String, Arc<Vec<NotificationRule>>)> {
        self.rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The start of the ids of events recorded at `at` (ids begin with the
/// time in milliseconds, zero-padded), for comparing ids with a time.
fn id_prefix(at: Timestamp) -> String {
    format!("{:015}", at.as_millisecond().max(0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
