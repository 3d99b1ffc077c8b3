//! The jobs a [`LocalRunner`](crate::LocalRunner) has in hand, queued or
//! running, so that `poll` can say so, `stop` can reach them, and a second
//! dispatch of the same job adopts the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use vergence_model::JobId;

/// Asks a job to stop: `Some(reason)` once asked.
type StopSender = watch::Sender<Option<String>>;

#[derive(Debug)]
pub(crate) struct RunningJobs {
    jobs: Mutex<HashMap<JobId, Arc<StopSender>>>,
    /// How many jobs are in hand, for [`RunningJobs::empty`].
    count: watch::Sender<usize>,
    /// Why jobs that had not started when the runner closed never will.
    closed: Mutex<Option<String>>,
}

impl Default for RunningJobs {
    fn default() -> Self {
        Self {
            jobs: Mutex::default(),
            count: watch::Sender::new(0),
            closed: Mutex::default(),
        }
    }
}

impl RunningJobs {
    /// Records that `id` is in hand; `None` when it already is.
    pub(crate) fn register(self: &Arc<Self>, id: &JobId) -> Option<Registration> {
        let mut jobs = self.lock();
        if jobs.contains_key(id) {
            return None;
        }
        let (sender, receiver) = watch::channel(None);
        jobs.insert(id.clone(), Arc::new(sender));
        self.count.send_replace(jobs.len());
        Some(Registration {
            jobs: Arc::clone(self),
            id: id.clone(),
            stop: StopSignal(Some(receiver)),
        })
    }

    pub(crate) fn contains(&self, id: &JobId) -> bool {
        self.lock().contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn ids(&self) -> Vec<JobId> {
        self.lock().keys().cloned().collect()
    }

    /// Resolves once no job is in hand.
    pub(crate) async fn empty(&self) {
        let mut count = self.count.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = count.wait_for(|n| *n == 0).await;
    }

    pub(crate) fn set_closed_reason(&self, reason: &str) {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.to_owned());
    }

    /// Asks every job in hand to stop with `reason`, then waits up to
    /// `within` for all of them to end. Returns how many there were.
    pub(crate) async fn stop_all(&self, reason: &str, within: Duration) -> usize {
        let senders: Vec<Arc<StopSender>> = self.lock().values().cloned().collect();
        for sender in &senders {
            ask_to_stop(sender, reason);
        }
        let all_closed = async {
            for sender in &senders {
                sender.closed().await;
            }
        };
        if tokio::time::timeout(within, all_closed).await.is_err() {
            tracing::warn!("stopped jobs have not all ended yet");
        }
        senders.len()
    }

    /// Asks the job to stop (the first reason given is kept) and waits up to
    /// `within` for it to end. Returns whether it was in hand.
    pub(crate) async fn stop(&self, id: &JobId, reason: &str, within: Duration) -> bool {
        let Some(sender) = self.lock().get(id).cloned() else {
            return false;
        };
        ask_to_stop(&sender, reason);
        // The job drops its receiver once its result was delivered.
        if tokio::time::timeout(within, sender.closed()).await.is_err() {
            tracing::warn!(job = %id, "a stopped job has not ended yet; its result comes later");
        }
        true
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, Arc<StopSender>>> {
        // The map stays consistent whatever panicked while holding it.
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Hands `reason` to the job unless it was asked before (the first reason
/// is kept).
fn ask_to_stop(sender: &StopSender, reason: &str) {
    sender.send_if_modified(|stop| {
        let first = stop.is_none();
        if first {
            *stop = Some(reason.to_owned());
        }
        first
    });
}

/// A job in hand; dropping it (once the job's result was delivered, or the
/// job abandoned) takes the job out of the registry.
#[derive(Debug)]
pub(crate) struct Registration {
    jobs: Arc<RunningJobs>,
    id: JobId,
    pub(crate) stop: StopSignal,
}

impl Registration {
    /// Why the runner closed before this job started.
    pub(crate) fn closed_reason(&self) -> String {
        self.jobs
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "vergence is shutting down".to_owned())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut jobs = self.jobs.lock();
        jobs.remove(&self.id);
        self.jobs.count.send_replace(jobs.len());
    }
}

/// How a job learns that it was asked to stop.
#[derive(Debug)]
pub(crate) struct StopSignal(Option<watch::Receiver<Option<String>>>);

impl StopSignal {
    /// A job nobody can stop (run through [`crate::run_job`]).
    pub(crate) fn never() -> Self {
        Self(None)
    }

    /// The reason, if the job was asked to stop already.
    pub(crate) fn reason(&self) -> Option<String> {
        self.0
            .as_ref()
            .and_then(|receiver| receiver.borrow().clone())
    }

    /// Resolves with the reason once the job is asked to stop; never
    /// resolves otherwise.
    pub(crate) async fn requested(&mut self) -> String {
        if let Some(receiver) = &mut self.0
            && let Ok(reason) = receiver.wait_for(Option::is_some).await
        {
            return reason.clone().unwrap_or_default();
        }
        // No sender, or it is gone: nobody can ask any more.
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_job_is_in_hand_until_its_registration_is_dropped() {
        let jobs = Arc::new(RunningJobs::default());
        let id = JobId("apply-1".into());
        let registration = jobs.register(&id).unwrap();
        assert!(jobs.contains(&id));
        assert!(
            jobs.register(&id).is_none(),
            "a second dispatch adopts the first"
        );
        drop(registration);
        assert!(!jobs.contains(&id));
        assert!(!jobs.stop(&id, "gone", Duration::from_secs(1)).await);
    }

    #[tokio::test]
    async fn stopping_hands_the_first_reason_to_the_job_and_waits_for_it_to_end() {
        let jobs = Arc::new(RunningJobs::default());
        let id = JobId("apply-1".into());
        let mut registration = jobs.register(&id).unwrap();
        let job = tokio::spawn(async move {
            let reason = registration.stop.requested().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(registration.stop.reason().as_deref(), Some("superseded"));
            drop(registration);
            reason
        });

        assert!(jobs.stop(&id, "superseded", Duration::from_secs(5)).await);
        assert!(!jobs.contains(&id), "stop returns once the job has ended");
        assert!(!jobs.stop(&id, "again", Duration::from_secs(5)).await);
        assert_eq!(job.await.unwrap(), "superseded");
    }
}
