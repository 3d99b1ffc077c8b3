//! One kind's objects in one namespace (or the cluster), kept current by a
//! watch: listed once, then followed through watch events (resumed from
//! the last resourceVersion, re-listed only when the server says the
//! history is gone). Only objects labelled as applied by Vergence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;
use tracing::warn;
use vergence_model::manifests::object_labels;

pub struct Cache {
    objects: Mutex<HashMap<String, Value>>,
    ready: watch::Receiver<bool>,
    last_error: Mutex<Option<String>>,
}

impl Cache {
    /// Starts following the objects of `api`; `changed` is called with the
    /// name of every object added, modified or deleted after the first list
    /// (and with every name when a re-list replaces the contents).
    pub fn start(api: Api<DynamicObject>, changed: impl Fn(&str) + Send + 'static) -> Arc<Self> {
        let (ready_tx, ready) = watch::channel(false);
        let cache = Arc::new(Self {
            objects: Mutex::default(),
            ready,
            last_error: Mutex::default(),
        });
        let selector = format!(
            "{}={}",
            object_labels::MANAGED_BY,
            object_labels::MANAGED_BY_VALUE
        );
        let weak = Arc::downgrade(&cache);
        tokio::spawn(async move {
            let config = watcher::Config::default().labels(&selector);
            let mut events = watcher::watcher(api, config).default_backoff().boxed();
            let mut listing: HashMap<String, Value> = HashMap::new();
            while let Some(event) = events.next().await {
                // The agent let go of the cache: stop watching.
                let Some(cache) = weak.upgrade() else { return };
                let touched: Vec<String> = match event {
                    Ok(Event::Init) => {
                        listing.clear();
                        Vec::new()
                    }
                    Ok(Event::InitApply(object)) => {
                        if let Some((name, value)) = entry(&object) {
                            listing.insert(name, value);
                        }
                        Vec::new()
                    }
                    Ok(Event::InitDone) => {
                        let mut objects = cache.lock_objects();
                        let mut names: Vec<String> = objects.keys().cloned().collect();
                        names.extend(listing.keys().cloned());
                        *objects = std::mem::take(&mut listing);
                        drop(objects);
                        *cache
                            .last_error
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = None;
                        let _ = ready_tx.send(true);
                        names
                    }
                    Ok(Event::Apply(object)) => match entry(&object) {
                        Some((name, value)) => {
                            cache.lock_objects().insert(name.clone(), value);
                            vec![name]
                        }
                        None => Vec::new(),
                    },
                    Ok(Event::Delete(object)) => match entry(&object) {
                        Some((name, _)) => {
                            cache.lock_objects().remove(&name);
                            vec![name]
                        }
                        None => Vec::new(),
                    },
                    Err(e) => {
                        warn!(error = %e, "a watch of applied objects failed; retrying");
                        *cache
                            .last_error
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                        Vec::new()
                    }
                };
                for name in touched {
                    changed(&name);
                }
            }
        });
        cache
    }

    fn lock_objects(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live object by name, as last seen.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.lock_objects().get(name).cloned()
    }

    /// Waits for the first list; the error is the watch's last failure.
    pub async fn ready_within(&self, limit: Duration) -> Result<(), String> {
        let mut ready = self.ready.clone();
        match tokio::time::timeout(limit, ready.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_else(|| format!("no answer within {}s", limit.as_secs()))),
        }
    }
}

fn entry(object: &DynamicObject) -> Option<(String, Value)> {
    let name = object.metadata.name.clone()?;
    Some((name, serde_json::to_value(object).ok()?))
}
