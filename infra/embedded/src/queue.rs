//! The in-process work queue with timers: each instance is queued at most
//! once, at the earliest time anyone asked for; [`LocalQueue::next`] waits
//! until an item is due or a new one arrives.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use jiff::Timestamp;
use tokio::sync::Notify;

use vergence_model::InstanceKey;
use vergence_model::ports::{Clock, WorkItem, WorkQueue};

#[derive(Debug, Default)]
struct Pending {
    /// Earliest requested time per instance.
    by_key: BTreeMap<InstanceKey, Timestamp>,
    /// The same entries ordered by time.
    by_time: BTreeSet<(Timestamp, InstanceKey)>,
}

/// The embedded [`WorkQueue`].
pub struct LocalQueue {
    pending: Mutex<Pending>,
    arrived: Notify,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue")
            .field("pending", &self.len())
            .finish_non_exhaustive()
    }
}

impl LocalQueue {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            arrived: Notify::new(),
            clock,
        }
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, key: &InstanceKey, at: Timestamp) {
        let mut pending = self.pending();
        match pending.by_key.get(key).copied() {
            Some(existing) if existing <= at => {}
            Some(existing) => {
                pending.by_time.remove(&(existing, key.clone()));
                pending.by_key.insert(key.clone(), at);
                pending.by_time.insert((at, key.clone()));
            }
            None => {
                pending.by_key.insert(key.clone(), at);
                pending.by_time.insert((at, key.clone()));
            }
        }
    }

    /// Takes an item that is due now, if any.
    pub fn pop_due(&self) -> Option<InstanceKey> {
        let now = self.clock.now();
        let mut pending = self.pending();
        let (at, key) = pending.by_time.first().cloned()?;
        if at > now {
            return None;
        }
        pending.by_time.remove(&(at, key.clone()));
        pending.by_key.remove(&key);
        Some(key)
    }

    /// When the earliest queued item is due.
    pub fn next_due_at(&self) -> Option<Timestamp> {
        self.pending().by_time.first().map(|(at, _)| *at)
    }

    pub fn len(&self) -> usize {
        self.pending().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for the next due item.
    pub async fn next(&self) -> InstanceKey {
        loop {
            if let Some(key) = self.pop_due() {
                return key;
            }
            let wait = self.next_due_at().map(|at| {
                let millis = at.duration_since(self.clock.now()).as_millis().max(0);
                std::time::Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
            });
            match wait {
                Some(wait) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.arrived.notified() => {}
                    }
                }
                None => self.arrived.notified().await,
            }
        }
    }
}

#[async_trait]
impl WorkQueue for LocalQueue {
    async fn enqueue(&self, items: &[WorkItem]) -> vergence_model::Result<()> {
        for item in items {
            self.push(&item.instance, item.not_before);
        }
        // notify_one keeps a permit when nobody waits, so no wake-up is lost.
        self.arrived.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use vergence_model::ports::ManualClock;

    use super::*;

    fn key(service: &str) -> InstanceKey {
        InstanceKey::new(
            "shop".parse().unwrap(),
            service.parse().unwrap(),
            "prod".parse().unwrap(),
        )
    }

    #[tokio::test]
    async fn keeps_one_entry_per_instance_at_the_earliest_time() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let clock = Arc::new(ManualClock::new(start));
        let queue = LocalQueue::new(clock.clone());
        let later = start.checked_add(SignedDuration::from_secs(60)).unwrap();
        let item = |s: &str, at| WorkItem {
            instance: key(s),
            not_before: at,
        };
        queue
            .enqueue(&[item("a", later), item("b", later), item("a", start)])
            .await
            .unwrap();
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.pop_due(), Some(key("a")));
        assert_eq!(queue.pop_due(), None, "b is not due yet");
        queue
            .enqueue(&[item(
                "b",
                start.checked_add(SignedDuration::from_secs(90)).unwrap(),
            )])
            .await
            .unwrap();
        assert_eq!(
            queue.next_due_at(),
            Some(later),
            "a later request never delays an earlier one"
        );
        clock.set(later);
        assert_eq!(queue.next().await, key("b"));
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn next_wakes_up_when_an_item_arrives() {
        let queue = Arc::new(LocalQueue::new(Arc::new(
            vergence_model::ports::SystemClock,
        )));
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        queue
            .enqueue(&[WorkItem {
                instance: key("web"),
                not_before: Timestamp::now(),
            }])
            .await
            .unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, key("web"));
    }
}
