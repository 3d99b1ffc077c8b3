//! The first-class Kubernetes runtime, carried out by the agent itself.
//!
//! - **Apply**: server-side apply of every rendered object with field
//!   manager `vergence` (conflicts forced: Vergence owns what it applies),
//!   then prune: the objects the previous apply made that are no longer in
//!   the manifests are deleted. What was applied is kept in an inventory
//!   ConfigMap per instance (as `kubectl`'s ApplySets do), so prune deletes
//!   exactly what Vergence made and never lists the cluster.
//! - **Fetch**: read from watch-backed caches, one per kind and namespace,
//!   holding only objects labelled `app.kubernetes.io/managed-by=vergence`.
//!   A check costs the API server nothing; the watch's one list happens
//!   when a kind is first needed.
//! - **Changes**: every object Vergence has asked about is remembered with
//!   what was applied; when its watch shows it drifting, deleted, or its
//!   rollout moving, the agent tells Vergence at once instead of waiting
//!   for the next poll.

mod cache;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::info;
use vergence_model::KubernetesObjects;
use vergence_model::adoption::{Adopt, MAX_DIFFERENCES, Takeover};
use vergence_model::agent::protocol::{ObjectsChanged, labels};
use vergence_model::manifests::object_labels;

use crate::error::AgentError;
use cache::Cache;

/// How long a read waits for a kind's first list before it fails.
const CACHE_READY_WITHIN: Duration = Duration::from_secs(30);

/// The inventory ConfigMap's key listing what the last apply made.
const INVENTORY_KEY: &str = "objects";

/// Which cache holds an object: `apiVersion/kind`, and its namespace
/// (`None`: cluster-scoped).
type CacheKey = (String, Option<String>);

/// An object's identity: `apiVersion`, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct ObjectKey {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

impl ObjectKey {
    fn shown(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("{} {namespace}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    fn text(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or(""),
            self.name
        )
    }

    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('|');
        let (api_version, kind, namespace, name) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Some(Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
            name: name.to_owned(),
        })
    }

    /// The kind's cache: one per kind and namespace.
    fn cache_key(&self) -> CacheKey {
        (
            format!("{}/{}", self.api_version, self.kind),
            self.namespace.clone(),
        )
    }
}

/// An object of the task, resolved against the cluster's kinds.
struct Resolved {
    key: ObjectKey,
    resource: ApiResource,
    applied: Value,
}

/// Whose a live object is, as a fetch finds it.
enum Found {
    /// Vergence's (or none, or `adopt: apply`: applied like any other).
    Vergence,
    /// Someone else's that was already as described: marked now.
    Adopted,
    /// Someone else's that differs: applying takes it over.
    Takeover(Takeover),
}

/// An object Vergence has asked about, and what it last concluded.
struct Remembered {
    applied: Value,
    instance: (String, String, String),
    summary: String,
}

/// The agent's side of the Kubernetes runtime. Cheap to clone.
#[derive(Clone)]
pub struct Objects {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    default_namespace: String,
    kinds: Mutex<HashMap<String, (ApiResource, Scope)>>,
    caches: Mutex<HashMap<CacheKey, Arc<Cache>>>,
    remembered: Mutex<HashMap<ObjectKey, Remembered>>,
    changes: mpsc::UnboundedSender<ObjectsChanged>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("default_namespace", &self.inner.default_namespace)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Objects {
    /// `changes` receives what the watches see happen to remembered objects.
    pub fn new(
        client: kube::Client,
        default_namespace: String,
        changes: mpsc::UnboundedSender<ObjectsChanged>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                default_namespace,
                kinds: Mutex::default(),
                caches: Mutex::default(),
                remembered: Mutex::default(),
                changes,
            }),
        }
    }

    /// Applies the objects and prunes what the previous apply made that is
    /// gone from them; the lines say what was done, the kubectl command
    /// first.
    pub async fn apply(&self, work: &KubernetesObjects) -> Result<String, AgentError> {
        let mut lines = vec![format!("$ {}", work.kubectl_apply())];
        let desired = self.resolve_all(work).await?;
        let namespace = self.namespace_of(work);
        let previous = self.inventory(work, &namespace).await?;
        let params = PatchParams::apply(object_labels::FIELD_MANAGER).force();
        for object in &desired {
            let api = self.api(&object.resource, object.key.namespace.as_deref());
            api.patch(&object.key.name, &params, &Patch::Apply(&object.applied))
                .await
                .map_err(AgentError::kube("applying", object.key.shown()))?;
            lines.push(format!("{} serverside-applied", object.key.shown()));
            self.remember(object, work, None);
        }
        let kept: BTreeSet<&ObjectKey> = desired.iter().map(|o| &o.key).collect();
        for stale in previous.iter().filter(|k| !kept.contains(k)) {
            lock(&self.inner.remembered).remove(stale);
            if self.delete(stale).await? {
                lines.push(format!("{} pruned", stale.shown()));
            }
        }
        self.save_inventory(work, &namespace, &desired).await?;
        info!(source = %work.source, version = %work.version, objects = desired.len(), "applied");
        Ok(lines.join("\n"))
    }

    /// The live state of the objects as a structured fetch, from the
    /// watch caches.
    pub async fn fetch(&self, work: &KubernetesObjects) -> Result<String, AgentError> {
        let desired = self.resolve_all(work).await?;
        let mut objects = Vec::with_capacity(desired.len());
        for object in &desired {
            let cache = self.cache(&object.key, &object.resource).await?;
            let (live, found) = match cache.get(&object.key.name) {
                Some(live) => (Some(live), Found::Vergence),
                None => self.unlabelled(object, work).await?,
            };
            let mut observed = state::observe(&object.applied, live.as_ref());
            match found {
                Found::Vergence => {}
                Found::Adopted => {
                    observed["adopted"] = true.into();
                    observed["message"] = "adopted: it already was what the manifests describe, so it is labelled as Vergence's".into();
                }
                Found::Takeover(takeover) => {
                    observed["message"] = format!(
                        "not Vergence's; applying changes {}",
                        takeover.differences.join(", ")
                    )
                    .into();
                    observed["takeover"] = json!(takeover);
                }
            }
            self.remember(object, work, Some(state::summary(&observed)));
            objects.push(observed);
        }
        Ok(json!({ "objects": objects }).to_string())
    }

    /// An object the watch cache (Vergence's objects only) does not hold,
    /// read from the cluster: none; Vergence's all the same (applied a
    /// moment ago); or someone else's (brownfield). Someone else's object
    /// that already is what the manifests describe (the drift check's
    /// comparison, without Vergence's marks) is adopted: applied as it is,
    /// which adds the marks and makes Vergence's field manager own its
    /// fields without changing any value (no rollout). One that differs
    /// is a takeover, unless the runtime says `adopt: apply`.
    async fn unlabelled(
        &self,
        object: &Resolved,
        work: &KubernetesObjects,
    ) -> Result<(Option<Value>, Found), AgentError> {
        let api = self.api(&object.resource, object.key.namespace.as_deref());
        let shown = object.key.shown();
        let Some(live) = api
            .get_opt(&object.key.name)
            .await
            .map_err(AgentError::kube("reading", shown.clone()))?
        else {
            return Ok((None, Found::Vergence));
        };
        let live = serde_json::to_value(live).unwrap_or_default();
        let labels = &live["metadata"]["labels"];
        if labels[object_labels::MANAGED_BY] == object_labels::MANAGED_BY_VALUE {
            return Ok((Some(live), Found::Vergence));
        }
        let differences = state::differences(&state::unmarked(&object.applied, work), &live);
        if differences.is_empty() {
            let params = PatchParams::apply(object_labels::FIELD_MANAGER).force();
            let marked = api
                .patch(&object.key.name, &params, &Patch::Apply(&object.applied))
                .await
                .map_err(AgentError::kube("adopting", shown.clone()))?;
            info!(object = %shown, version = %work.version, "adopted");
            return Ok((
                Some(serde_json::to_value(marked).unwrap_or_default()),
                Found::Adopted,
            ));
        }
        let found = match work.adopt {
            Adopt::Approve => Found::Takeover(Takeover {
                object: shown,
                differences: differences
                    .iter()
                    .take(MAX_DIFFERENCES)
                    .map(|d| vergence_model::text::clip(d.to_string(), 200))
                    .collect(),
            }),
            Adopt::Apply => Found::Vergence,
        };
        Ok((Some(live), found))
    }

    fn namespace_of(&self, work: &KubernetesObjects) -> String {
        work.namespace
            .clone()
            .unwrap_or_else(|| self.inner.default_namespace.clone())
    }

    async fn resolve_all(&self, work: &KubernetesObjects) -> Result<Vec<Resolved>, AgentError> {
        let namespace = self.namespace_of(work);
        let mut resolved = Vec::with_capacity(work.objects.len());
        for text in &work.objects {
            let object: Value = serde_json::from_str(text)
                .map_err(|e| AgentError::Manifest(format!("a rendered object is not JSON: {e}")))?;
            let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let (resource, scope) = self.kind(&api_version, &kind).await?;
            let object_namespace = match scope {
                Scope::Namespaced => Some(
                    object["metadata"]["namespace"]
                        .as_str()
                        .map_or_else(|| namespace.clone(), str::to_owned),
                ),
                Scope::Cluster => None,
            };
            let applied = state::applied_form(&object, work, object_namespace.as_deref());
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            resolved.push(Resolved {
                key: ObjectKey {
                    api_version,
                    kind,
                    namespace: object_namespace,
                    name,
                },
                resource,
                applied,
            });
        }
        Ok(resolved)
    }

    /// The cluster's resource for a kind, looked up once per agent.
    async fn kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, Scope), AgentError> {
        let id = format!("{api_version}/{kind}");
        if let Some(known) = lock(&self.inner.kinds).get(&id) {
            return Ok(known.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.inner.client, &gvk)
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) if status.code == 404 => AgentError::Manifest(format!(
                    "the cluster has no kind {kind} in {api_version} (a missing CRD or a removed API version?)"
                )),
                other => AgentError::kube("looking up", format!("kind {kind} in {api_version}"))(other),
            })?;
        let found = (resource, capabilities.scope);
        lock(&self.inner.kinds).insert(id, found.clone());
        Ok(found)
    }

    fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(namespace) => Api::namespaced_with(self.inner.client.clone(), namespace, resource),
            None => Api::all_with(self.inner.client.clone(), resource),
        }
    }

    /// The kind's cache in the object's namespace, started on first use
    /// and ready (listed once) before it is read.
    async fn cache(
        &self,
        key: &ObjectKey,
        resource: &ApiResource,
    ) -> Result<Arc<Cache>, AgentError> {
        let cache_key = key.cache_key();
        let cache = {
            let mut caches = lock(&self.inner.caches);
            caches
                .entry(cache_key.clone())
                .or_insert_with(|| {
                    let api = self.api(resource, key.namespace.as_deref());
                    let weak = Arc::downgrade(&self.inner);
                    let kind = key.clone();
                    Cache::start(api, move |name| {
                        if let Some(inner) = weak.upgrade() {
                            let changed = ObjectKey {
                                name: name.to_owned(),
                                ..kind.clone()
                            };
                            inner.noticed(&changed);
                        }
                    })
                })
                .clone()
        };
        cache
            .ready_within(CACHE_READY_WITHIN)
            .await
            .map_err(|message| AgentError::Cache {
                kind: key.kind.clone(),
                scope: key
                    .namespace
                    .as_deref()
                    .map_or_else(|| "the cluster".to_owned(), |n| format!("namespace {n}")),
                message,
            })?;
        Ok(cache)
    }

    fn remember(&self, object: &Resolved, work: &KubernetesObjects, summary: Option<String>) {
        let label = |name: &str| work.selector.get(name).cloned().unwrap_or_default();
        let instance = (
            label(labels::APPLICATION),
            label(labels::SERVICE),
            label(labels::RELEASE_CHANNEL),
        );
        let mut remembered = lock(&self.inner.remembered);
        let previous = remembered.remove(&object.key).map(|r| r.summary);
        remembered.insert(
            object.key.clone(),
            Remembered {
                applied: object.applied.clone(),
                instance,
                summary: summary.or(previous).unwrap_or_default(),
            },
        );
    }

    /// Deletes an object; `false` when it was already gone.
    async fn delete(&self, key: &ObjectKey) -> Result<bool, AgentError> {
        let (resource, _) = self.kind(&key.api_version, &key.kind).await?;
        let api = self.api(&resource, key.namespace.as_deref());
        match api.delete(&key.name, &DeleteParams::background()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(AgentError::kube("pruning", key.shown())(e)),
        }
    }

    fn inventory_name(work: &KubernetesObjects) -> String {
        let label = |name: &str| work.selector.get(name).map_or("", String::as_str);
        let mut name = format!(
            "vergence-{}-{}-{}",
            label(labels::APPLICATION),
            label(labels::SERVICE),
            label(labels::RELEASE_CHANNEL)
        );
        name.truncate(253);
        name
    }

    /// What the previous apply of the instance made.
    async fn inventory(
        &self,
        work: &KubernetesObjects,
        namespace: &str,
    ) -> Result<Vec<ObjectKey>, AgentError> {
        let api: Api<ConfigMap> = Api::namespaced(self.inner.client.clone(), namespace);
        let name = Self::inventory_name(work);
        let found = api.get_opt(&name).await.map_err(AgentError::kube(
            "reading",
            format!("ConfigMap {namespace}/{name}"),
        ))?;
        let listed = found
            .and_then(|map| map.data)
            .and_then(|data| data.get(INVENTORY_KEY).cloned())
            .unwrap_or_default();
        Ok(listed.lines().filter_map(ObjectKey::parse).collect())
    }

    async fn save_inventory(
        &self,
        work: &KubernetesObjects,
        namespace: &str,
        applied: &[Resolved],
    ) -> Result<(), AgentError> {
        let api: Api<ConfigMap> = Api::namespaced(self.inner.client.clone(), namespace);
        let name = Self::inventory_name(work);
        let listed: Vec<String> = applied.iter().map(|o| o.key.text()).collect();
        let mut inventory_labels: BTreeMap<String, String> = work.selector.clone();
        // Not an applied object: kept out of the watches' selection.
        inventory_labels.insert(object_labels::MANAGED_BY.into(), "vergence-agent".into());
        let map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": inventory_labels,
                "annotations": {object_labels::VERSION: work.version}},
            "data": {INVENTORY_KEY: listed.join("\n")},
        });
        let params = PatchParams::apply(object_labels::FIELD_MANAGER).force();
        api.patch(&name, &params, &Patch::Apply(&map))
            .await
            .map_err(AgentError::kube(
                "recording",
                format!("ConfigMap {namespace}/{name}"),
            ))?;
        Ok(())
    }
}

impl Inner {
    /// A watch saw the object `key` change: tell Vergence when what it
    /// would conclude about the object, if remembered, changed.
    fn noticed(&self, key: &ObjectKey) {
        let Some(cache) = lock(&self.caches).get(&key.cache_key()).cloned() else {
            return;
        };
        let mut remembered = lock(&self.remembered);
        let Some(object) = remembered.get_mut(key) else {
            return;
        };
        let live = cache.get(&key.name);
        let observed = state::observe(&object.applied, live.as_ref());
        let summary = state::summary(&observed);
        if summary == object.summary {
            return;
        }
        object.summary = summary;
        let what = match (&live, observed["message"].as_str()) {
            (None, _) => "deleted".to_owned(),
            (Some(_), Some(message)) => message.to_owned(),
            (Some(_), None) => observed["status"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase(),
        };
        let (application, service, release_channel) = object.instance.clone();
        let _ = self.changes.send(ObjectsChanged {
            application,
            service,
            release_channel,
            changes: vec![format!("{}: {what}", key.shown())],
        });
    }
}
