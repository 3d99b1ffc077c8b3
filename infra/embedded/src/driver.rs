//! The embedded engine loop: takes due instances from the [`LocalQueue`],
//! steps them concurrently (never the same instance twice at once) and
//! reports events as they happen. It runs until every instance is settled
//! (`vergence up`) or until told to stop (`vergence up --watch`, `serve`).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::warn;

use vergence_engine::{Engine, Settled, StepReport, enqueue_due, prune_artifacts, settled};
use vergence_model::ports::{
    ArtifactStore, Clock, InstanceFilter, StateStore, WorkItem, WorkQueue,
};
use vergence_model::{Event, InstanceKey, JobId, JobRecord, JobState};

use crate::queue::LocalQueue;

/// How often the store is asked for due instances, which also picks up
/// releases and approvals recorded by other `vergence` processes.
const STORE_POLL: Duration = Duration::from_secs(2);

/// Most due instances taken per store poll; the rest come with the next.
const MAX_DUE_PER_POLL: usize = 1000;

/// Store polls between two prunings of the files of pruned jobs (a minute).
const PRUNE_ARTIFACTS_EVERY: u32 = 30;

/// When to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriveMode {
    /// Until every instance is converged, failed or waiting on a person,
    /// on time, or on another channel that is itself settled.
    UntilSettled,
    /// Until the shutdown future completes.
    Forever,
}

/// Receives what happens while driving.
pub trait Progress: Send + Sync {
    /// The events one step recorded, in order.
    fn events(&self, events: &[Event]);
    fn step_failed(&self, key: &InstanceKey, error: &vergence_model::Error);
    /// `key` waits on a job another process started (another `vergence
    /// up`, `up --watch` or `serve` on the same state); said once per job.
    fn held_elsewhere(&self, key: &InstanceKey, job: &JobRecord) {
        let _ = (key, job);
    }
}

/// Runs the engine over the embedded adapters.
pub struct Driver {
    engine: Engine,
    store: Arc<dyn StateStore>,
    queue: Arc<LocalQueue>,
    clock: Arc<dyn Clock>,
    max_parallel_steps: usize,
    /// Where jobs' files are kept: those of pruned jobs are deleted.
    artifacts: Option<Arc<dyn ArtifactStore>>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("max_parallel_steps", &self.max_parallel_steps)
            .finish_non_exhaustive()
    }
}

impl Driver {
    pub fn new(
        engine: Engine,
        store: Arc<dyn StateStore>,
        queue: Arc<LocalQueue>,
        clock: Arc<dyn Clock>,
        max_parallel_steps: usize,
    ) -> Self {
        Self {
            engine,
            store,
            queue,
            clock,
            max_parallel_steps: max_parallel_steps.max(1),
            artifacts: None,
        }
    }

    /// Deletes the files of jobs the store pruned, every minute and when
    /// the run ends.
    pub fn with_artifacts(mut self, artifacts: Arc<dyn ArtifactStore>) -> Self {
        self.artifacts = Some(artifacts);
        self
    }

    /// Drives until `mode` says stop or `shutdown` completes; then prunes
    /// the files of pruned jobs once more.
    pub async fn run(
        &self,
        mode: DriveMode,
        progress: Arc<dyn Progress>,
        shutdown: impl Future<Output = ()>,
    ) -> vergence_model::Result<()> {
        let driven = self.drive(mode, progress, shutdown).await;
        if driven.is_ok() {
            self.prune_artifacts().await;
        }
        driven
    }

    /// Never fails the run: files left now go with a later pruning.
    async fn prune_artifacts(&self) {
        let Some(artifacts) = &self.artifacts else {
            return;
        };
        match prune_artifacts(self.store.as_ref(), artifacts.as_ref()).await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(jobs = deleted, "deleted the files of pruned jobs"),
            Err(e) => {
                warn!(error = %e, "cannot delete the files of pruned jobs; trying again later")
            }
        }
    }

    async fn drive(
        &self,
        mode: DriveMode,
        progress: Arc<dyn Progress>,
        shutdown: impl Future<Output = ()>,
    ) -> vergence_model::Result<()> {
        let mut state = self.initial_state().await?;
        let mut steps: JoinSet<(InstanceKey, vergence_model::Result<StepReport>)> = JoinSet::new();
        let mut running: HashSet<InstanceKey> = HashSet::new();
        let mut again: HashSet<InstanceKey> = HashSet::new();
        // Jobs this driver's steps dispatched, and jobs of others it told
        // about, so each is said once.
        let mut mine: HashSet<JobId> = HashSet::new();
        let mut told: HashSet<JobId> = HashSet::new();
        let mut poll = tokio::time::interval(STORE_POLL);
        let mut polls: u32 = 0;
        tokio::pin!(shutdown);
        loop {
            if mode == DriveMode::UntilSettled
                && steps.is_empty()
                && self.nothing_due_now()
                && all_settled(&state)
            {
                return Ok(());
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                key = self.queue.next(), if steps.len() < self.max_parallel_steps => {
                    if running.contains(&key) {
                        again.insert(key);
                    } else {
                        running.insert(key.clone());
                        let engine = self.engine.clone();
                        steps.spawn(async move {
                            let result = engine.step(&key).await;
                            (key, result)
                        });
                    }
                }
                Some(joined) = steps.join_next() => {
                    let (key, result) = match joined {
                        Ok(done) => done,
                        Err(e) => {
                            warn!(error = %e, "a step task panicked");
                            continue;
                        }
                    };
                    running.remove(&key);
                    if let Ok(report) = &result {
                        mine.extend(report.dispatched.iter().cloned());
                    }
                    self.after_step(&key, result, &mut state, progress.as_ref()).await?;
                    if again.remove(&key) {
                        self.queue.enqueue(&[WorkItem { instance: key, not_before: self.clock.now() }]).await?;
                    }
                }
                _ = poll.tick() => {
                    self.enqueue_due().await?;
                    polls = polls.wrapping_add(1);
                    if polls.is_multiple_of(PRUNE_ARTIFACTS_EVERY) {
                        self.prune_artifacts().await;
                    }
                    // In every mode: `up --watch` and `serve` share a state too.
                    if steps.is_empty() {
                        self.refresh(&mut state, &mine, &mut told, progress.as_ref()).await?;
                    }
                }
            }
        }
    }

    async fn initial_state(&self) -> vergence_model::Result<BTreeMap<InstanceKey, Settled>> {
        let records = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?;
        let now = self.clock.now();
        let mut items = Vec::new();
        let mut state = BTreeMap::new();
        for record in records {
            if let Some(at) = record.next_check_at {
                items.push(WorkItem {
                    instance: record.key.clone(),
                    not_before: at.min(now),
                });
            }
            state.insert(record.key.clone(), settled(&record));
        }
        self.queue.enqueue(&items).await?;
        Ok(state)
    }

    /// Reads where every instance stands again. Another process sharing
    /// the state (a second `up`, a `serve`) may have finished what this one
    /// waits for without this one stepping it: the instance's next check
    /// can be an hour away, or the job's deadline. An instance waiting on
    /// another process's job is stepped, so its runner is asked about the
    /// job: a process that died without reporting is found out at once.
    /// Only while idle, so a busy run does not read the whole state every
    /// poll.
    async fn refresh(
        &self,
        state: &mut BTreeMap<InstanceKey, Settled>,
        mine: &HashSet<JobId>,
        told: &mut HashSet<JobId>,
        progress: &dyn Progress,
    ) -> vergence_model::Result<()> {
        let records = self
            .store
            .list_instances(&InstanceFilter::default())
            .await?;
        state.clear();
        let mut ask = Vec::new();
        for record in records {
            let now = settled(&record);
            if now == Settled::Progressing
                && let Some(flight) = &record.state.in_flight
                && !mine.contains(&flight.job_id)
                && let Some(job) = self.store.get_job(&flight.job_id).await?
                && matches!(job.state, JobState::Dispatched { .. })
            {
                if told.insert(job.id.clone()) {
                    progress.held_elsewhere(&record.key, &job);
                }
                ask.push(WorkItem {
                    instance: record.key.clone(),
                    not_before: self.clock.now(),
                });
            }
            state.insert(record.key, now);
        }
        self.queue.enqueue(&ask).await?;
        Ok(())
    }

    async fn after_step(
        &self,
        key: &InstanceKey,
        result: vergence_model::Result<StepReport>,
        state: &mut BTreeMap<InstanceKey, Settled>,
        progress: &dyn Progress,
    ) -> vergence_model::Result<()> {
        match result {
            Ok(report) => {
                if !report.events.is_empty() {
                    progress.events(&report.events);
                }
                match report.settled {
                    Some(s) => state.insert(key.clone(), s),
                    None => state.remove(key),
                };
            }
            // The state cannot be written at all (a full disk, a read-only
            // or damaged file): every step would fail the same way, so the
            // run ends with the error instead of retrying forever.
            Err(
                e @ vergence_model::Error::Store {
                    retryable: false, ..
                },
            ) => return Err(e),
            Err(e) => {
                progress.step_failed(key, &e);
                // Retry soon; a persistent failure shows up on every attempt.
                let at = self
                    .clock
                    .now()
                    .checked_add(jiff::SignedDuration::from_secs(5))
                    .unwrap_or_else(|_| self.clock.now());
                self.queue
                    .enqueue(&[WorkItem {
                        instance: key.clone(),
                        not_before: at,
                    }])
                    .await?;
            }
        }
        Ok(())
    }

    fn nothing_due_now(&self) -> bool {
        self.queue
            .next_due_at()
            .is_none_or(|at| at > self.clock.now())
    }

    async fn enqueue_due(&self) -> vergence_model::Result<()> {
        let now = self.clock.now();
        enqueue_due(
            self.store.as_ref(),
            self.queue.as_ref(),
            now,
            MAX_DUE_PER_POLL,
        )
        .await?;
        Ok(())
    }
}

/// True when no instance can get further without a person, time, or a
/// settled upstream channel.
fn all_settled(state: &BTreeMap<InstanceKey, Settled>) -> bool {
    state.keys().all(|key| is_settled(key, state, 0))
}

fn is_settled(key: &InstanceKey, state: &BTreeMap<InstanceKey, Settled>, depth: usize) -> bool {
    match state.get(key) {
        None => true,
        Some(Settled::Progressing) => false,
        Some(Settled::Upstream(channel)) => {
            // Preconditions cannot form cycles; the bound is a guard.
            depth < 64 && is_settled(&key.in_channel(channel), state, depth + 1)
        }
        Some(_) => true,
    }
}
