//! The object store: every object as JSON, one global resourceVersion
//! counter, a bounded history of change events (for watches and exact
//! reads at an older version), and subscribers that receive every change.
//!
//! All writes go through one lock, so resourceVersions are strictly
//! increasing in commit order and a watch registered under the lock sees
//! every later change exactly once.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::meta;
use crate::resources::ResourceType;
use crate::status::ApiError;

/// What happened to an object, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// The object was created.
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted.
    Deleted,
}

/// One committed change.
#[derive(Debug)]
pub(crate) struct StoreEvent {
    pub rv: u64,
    pub resource: &'static ResourceType,
    pub kind: EventType,
    /// The object after the change (for deletes: as deleted, with the
    /// deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, for updates and deletes.
    pub previous: Option<Arc<Value>>,
}

type ResourceKey = (&'static str, &'static str);
type ObjectKey = (String, String);
pub(crate) type Receiver = UnboundedReceiver<Arc<StoreEvent>>;

fn resource_key(rt: &'static ResourceType) -> ResourceKey {
    (rt.group, rt.plural)
}

#[derive(Debug, Default)]
struct State {
    objects: HashMap<ResourceKey, BTreeMap<ObjectKey, Value>>,
    rv: u64,
    history: VecDeque<Arc<StoreEvent>>,
    /// Watches and exact reads are served from any resourceVersion at or
    /// above this one: every later event is still in `history`.
    oldest_servable: u64,
    subscribers: Vec<UnboundedSender<Arc<StoreEvent>>>,
}

/// The store; see the module documentation.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
    history_limit: usize,
}

/// How a write changes an object: the closure of [`Store::write`] gets the
/// current object (if any) and answers with the new one.
pub(crate) type Mutation<'a> = dyn FnOnce(Option<&Value>) -> Result<Value, ApiError> + 'a;

impl Store {
    pub(crate) fn new(history_limit: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            history_limit: history_limit.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every
        // mutation is committed at the end), so a poisoned lock is usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub(crate) fn get(&self, rt: &'static ResourceType, ns: &str, name: &str) -> Option<Value> {
        let state = self.lock();
        state
            .objects
            .get(&resource_key(rt))
            .and_then(|objects| objects.get(&(ns.to_owned(), name.to_owned())))
            .cloned()
    }

    /// The current objects of a resource (in one namespace, or all), in
    /// namespace/name order, and the resourceVersion they are current at.
    pub(crate) fn list(&self, rt: &'static ResourceType, ns: Option<&str>) -> (Vec<Value>, u64) {
        let state = self.lock();
        (state.current(rt, ns), state.rv)
    }

    /// The objects as they were at resourceVersion `rv`, rebuilt by undoing
    /// later history; 410 Expired when that history is gone.
    pub(crate) fn list_at(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        rv: u64,
    ) -> Result<Vec<Value>, ApiError> {
        let state = self.lock();
        if rv < state.oldest_servable {
            return Err(ApiError::too_old_resource_version(
                rv,
                state.oldest_servable,
            ));
        }
        if rv > state.rv {
            return Err(ApiError::too_large_resource_version(rv, state.rv));
        }
        let mut objects: BTreeMap<ObjectKey, Value> = state
            .objects
            .get(&resource_key(rt))
            .cloned()
            .unwrap_or_default();
        for event in state.history.iter().rev().take_while(|e| e.rv > rv) {
            if event.resource != rt {
                continue;
            }
            let key = (
                meta::namespace(&event.object).to_owned(),
                meta::name(&event.object).to_owned(),
            );
            match (&event.kind, &event.previous) {
                (EventType::Added, _) => {
                    objects.remove(&key);
                }
                (_, Some(previous)) => {
                    objects.insert(key, (**previous).clone());
                }
                (_, None) => {}
            }
        }
        Ok(objects
            .into_iter()
            .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .collect())
    }

    /// Creates, updates or (with an unchanged answer) leaves one object.
    /// Assigns the resourceVersion and generation and records the event;
    /// an answer equal to the current object writes nothing, as the real
    /// server skips no-op updates. With `dry_run` nothing is stored.
    pub(crate) fn write(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        dry_run: bool,
        mutation: Box<Mutation<'_>>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let key = (ns.to_owned(), name.to_owned());
        let previous = state
            .objects
            .get(&resource_key(rt))
            .and_then(|o| o.get(&key))
            .cloned();
        let mut next = mutation(previous.as_ref())?;
        if let Some(previous) = &previous
            && same_apart_from_version(previous, &next)
        {
            return Ok(previous.clone());
        }
        let generation = match &previous {
            None => 1,
            Some(previous) => {
                let current = meta::i64_at(previous, &["metadata", "generation"]).unwrap_or(1);
                if spec_changed(previous, &next) {
                    current + 1
                } else {
                    current
                }
            }
        };
        meta::metadata_mut(&mut next).insert("generation".into(), generation.into());
        if dry_run {
            return Ok(next);
        }
        let rv = state.rv + 1;
        meta::metadata_mut(&mut next).insert("resourceVersion".into(), rv.to_string().into());
        state
            .objects
            .entry(resource_key(rt))
            .or_default()
            .insert(key, next.clone());
        let kind = if previous.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        state.commit(rt, kind, next.clone(), previous, self.history_limit);
        Ok(next)
    }

    /// Removes an object after `check` accepts it (delete preconditions);
    /// answers the object as deleted, carrying the deletion's
    /// resourceVersion as in the real DELETED event.
    pub(crate) fn delete(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        check: &dyn Fn(&Value) -> Result<(), ApiError>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let key = (ns.to_owned(), name.to_owned());
        let objects = state.objects.entry(resource_key(rt)).or_default();
        let Some(current) = objects.get(&key) else {
            return Err(ApiError::not_found(rt, name));
        };
        check(current)?;
        let previous = objects.remove(&key);
        let rv = state.rv + 1;
        let mut gone = previous.clone().unwrap_or_default();
        meta::metadata_mut(&mut gone).insert("resourceVersion".into(), rv.to_string().into());
        state.commit(
            rt,
            EventType::Deleted,
            gone.clone(),
            previous,
            self.history_limit,
        );
        Ok(gone)
    }

    /// Every change from now on.
    pub(crate) fn subscribe(&self) -> Receiver {
        let (tx, rx) = unbounded_channel();
        self.lock().subscribers.push(tx);
        rx
    }

    /// The events after `rv` still in history, and every later change;
    /// 410 Expired when events after `rv` were already dropped.
    pub(crate) fn watch_from(&self, rv: u64) -> Result<(Vec<Arc<StoreEvent>>, Receiver), ApiError> {
        let mut state = self.lock();
        if rv < state.oldest_servable {
            return Err(ApiError::too_old_resource_version(
                rv,
                state.oldest_servable,
            ));
        }
        let backlog = state
            .history
            .iter()
            .filter(|e| e.rv > rv)
            .cloned()
            .collect();
        let (tx, rx) = unbounded_channel();
        state.subscribers.push(tx);
        Ok((backlog, rx))
    }

    /// The current objects, the version they are at, and every later change:
    /// a watch that starts with the present state.
    pub(crate) fn watch_now(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
    ) -> (Vec<Value>, u64, Receiver) {
        let mut state = self.lock();
        let objects = state.current(rt, ns);
        let (tx, rx) = unbounded_channel();
        state.subscribers.push(tx);
        (objects, state.rv, rx)
    }

    /// Forgets all history: watches and exact reads from any earlier
    /// resourceVersion now get 410 Expired, as after an etcd compaction.
    pub(crate) fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.oldest_servable = state.rv;
    }
}

impl State {
    fn current(&self, rt: &'static ResourceType, ns: Option<&str>) -> Vec<Value> {
        let Some(objects) = self.objects.get(&resource_key(rt)) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => objects
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => objects.values().cloned().collect(),
        }
    }

    fn commit(
        &mut self,
        rt: &'static ResourceType,
        kind: EventType,
        object: Value,
        previous: Option<Value>,
        history_limit: usize,
    ) {
        self.rv += 1;
        let event = Arc::new(StoreEvent {
            rv: self.rv,
            resource: rt,
            kind,
            object: Arc::new(object),
            previous: previous.map(Arc::new),
        });
        self.history.push_back(event.clone());
        while self.history.len() > history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.oldest_servable = dropped.rv;
            }
        }
        self.subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// Whether two versions of an object differ only in resourceVersion.
fn same_apart_from_version(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("generation");
        }
        v
    };
    strip(a) == strip(b)
}

/// Whether anything outside `metadata` and `status` changed: what bumps
/// `metadata.generation`.
fn spec_changed(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_kind;
    use serde_json::json;

    fn cm(name: &str, data: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "data": {"k": data}})
    }

    fn put(store: &Store, name: &str, data: &str) -> Value {
        let rt = by_kind("ConfigMap").unwrap();
        let obj = cm(name, data);
        store
            .write(rt, "default", name, false, Box::new(move |_| Ok(obj)))
            .unwrap()
    }

    #[test]
    fn versions_increase_and_generation_follows_the_spec() {
        let store = Store::new(100);
        let first = put(&store, "a", "1");
        assert_eq!(first["metadata"]["resourceVersion"], "1");
        assert_eq!(first["metadata"]["generation"], 1);
        let unchanged = put(&store, "a", "1");
        assert_eq!(unchanged["metadata"]["resourceVersion"], "1");
        let changed = put(&store, "a", "2");
        assert_eq!(changed["metadata"]["resourceVersion"], "2");
        assert_eq!(changed["metadata"]["generation"], 2);
    }

    #[test]
    fn an_exact_read_rebuilds_an_older_state() {
        let store = Store::new(100);
        let rt = by_kind("ConfigMap").unwrap();
        put(&store, "a", "1");
        put(&store, "b", "1");
        put(&store, "a", "2");
        store.delete(rt, "default", "b", &|_| Ok(())).unwrap();
        let at_two = store.list_at(rt, Some("default"), 2).unwrap();
        assert_eq!(at_two.len(), 2);
        assert_eq!(at_two[0]["data"]["k"], "1");
        store.compact();
        assert_eq!(store.list_at(rt, None, 2).unwrap_err().code, 410);
        assert_eq!(store.watch_from(2).unwrap_err().code, 410);
    }

    #[test]
    fn history_beyond_the_limit_expires_old_versions() {
        let store = Store::new(2);
        for i in 0..4 {
            put(&store, "a", &i.to_string());
        }
        assert_eq!(store.watch_from(1).unwrap_err().code, 410);
        let (backlog, _rx) = store.watch_from(2).unwrap();
        assert_eq!(backlog.len(), 2);
    }
}
