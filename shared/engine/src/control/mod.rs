//! Control operations: what the CLI and the HTTP API do on behalf of people
//! and CI — apply a config, push a release, approve, ask for fresh checks,
//! read status, events and plans. Each validates everything before writing
//! anything, so a rejected request stores nothing.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use vergence_model::ConfigBundle;
use vergence_model::error::{Error, Result};
use vergence_model::ports::{
    self, ChannelOrder, Clock, CompiledConfig, Compiler, CurrentConfig, MAX_CONFLICT_RETRIES,
    StateStore, WorkItem, WorkQueue,
};
use vergence_model::{Event, InstanceKey, InstanceRecord};

mod breakglass;
mod config;
mod delivery;
mod explain;
mod metrics;
mod policy;

pub use breakglass::{DEFAULT_OVERRIDE, MAX_OVERRIDE};
pub use config::{ApplyReport, PartVersion, PlanAction, PlanEntry, PreparedPush};
pub use policy::{PauseAction, StepFailure};

/// The control operations, over the injected store, queue and compiler.
#[derive(Clone)]
pub struct Control {
    store: Arc<dyn StateStore>,
    queue: Arc<dyn WorkQueue>,
    clock: Arc<dyn Clock>,
    compiler: Arc<dyn Compiler>,
    /// The config in force, compiled once per snapshot hash rather than on
    /// every operation that needs it.
    current: Arc<Mutex<Option<Arc<dyn CompiledConfig>>>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").finish_non_exhaustive()
    }
}

impl Control {
    pub fn new(
        store: Arc<dyn StateStore>,
        queue: Arc<dyn WorkQueue>,
        clock: Arc<dyn Clock>,
        compiler: Arc<dyn Compiler>,
    ) -> Self {
        Self {
            store,
            queue,
            clock,
            compiler,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// Checks a config without storing anything.
    pub fn validate(&self, bundle: &ConfigBundle) -> Result<Arc<dyn CompiledConfig>> {
        self.compiler.compile(bundle)
    }

    /// The config in force, compiled (once per snapshot).
    pub async fn current_model(&self) -> Result<Option<Arc<dyn CompiledConfig>>> {
        let Some(current) = self.store.current_config().await? else {
            return Ok(None);
        };
        if let Some(cached) = self.cached(&current.hash) {
            return Ok(Some(cached));
        }
        let snapshot = self
            .store
            .get_snapshot(&current.hash)
            .await?
            .ok_or_else(|| Error::not_found(format!("config snapshot {}", current.hash)))?;
        let model = self.validate(&snapshot.bundle)?;
        self.remember(&model);
        Ok(Some(model))
    }

    fn cached(&self, hash: &str) -> Option<Arc<dyn CompiledConfig>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|m| m.hash() == hash).cloned()
    }

    /// The config this control compiled last, in force or not by now.
    fn last_compiled(&self) -> Option<Arc<dyn CompiledConfig>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.clone()
    }

    fn remember(&self, model: &Arc<dyn CompiledConfig>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(model.clone());
    }

    async fn require_model(&self) -> Result<Arc<dyn CompiledConfig>> {
        self.current_model().await?.ok_or_else(|| {
            Error::not_found(
                "config (apply one first with `vergence up` or `vergence configs push`)",
            )
        })
    }

    /// Re-reads and rewrites an instance until the write wins the revision
    /// check. `change` returns the events to record with the write.
    async fn update_instance(
        &self,
        key: &InstanceKey,
        change: impl Fn(&mut InstanceRecord) -> Vec<Event>,
    ) -> Result<InstanceRecord> {
        let store = self.store.as_ref();
        ports::update_instance(store, self.clock.as_ref(), key, |r| Some(change(r)))
            .await?
            .ok_or_else(|| Error::not_found(format!("instance {key}")))
    }

    async fn append_events(&self, mut events: Vec<Event>, scope: &str) -> Result<()> {
        Event::assign_ids(&mut events, scope);
        self.store.append_events(&events).await
    }

    /// Wakes instances whose records an operation did not write (an
    /// approval, an alert): their `next_check_at` becomes now, so that any
    /// other process stepping this state (`up --watch`, `serve`, the
    /// scheduler) finds them due at its next store poll, not at their next
    /// fetch, which can be an hour away. The in-process queue only reaches
    /// the engine of this process.
    async fn wake_everywhere(&self, keys: &[InstanceKey]) -> Result<()> {
        let store = self.store.as_ref();
        for key in keys {
            let now = self.clock.now();
            ports::update_instance(store, self.clock.as_ref(), key, |r| {
                r.next_check_at.is_none_or(|at| at > now).then(Vec::new)
            })
            .await?;
        }
        self.wake(keys).await
    }

    async fn wake(&self, keys: &[InstanceKey]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let unique: BTreeSet<&InstanceKey> = keys.iter().collect();
        let items: Vec<WorkItem> = unique
            .into_iter()
            .map(|k| WorkItem {
                instance: k.clone(),
                not_before: now,
            })
            .collect();
        self.queue.enqueue(&items).await
    }
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(10)]
}

/// Each application's release channels in promotion order.
fn channel_order(model: &dyn CompiledConfig) -> ChannelOrder {
    model
        .applications()
        .into_iter()
        .map(|app| {
            let order = model.promotion_order(&app);
            (app, order)
        })
        .collect()
}

impl Control {
    /// The pointer to the config in force, with its applications and their
    /// channel order; cheap, and compiles nothing.
    pub async fn current_config(&self) -> Result<Option<CurrentConfig>> {
        self.store.current_config().await
    }
}
