//! The watch cache: every stored object of every type, kept in memory from one store watch, serving
//! LIST and WATCH the way upstream's `k8s.io/apiserver/pkg/storage/cacher` does.
//!
//! One dispatcher task applies store events in revision order under a write lock, appends them to a
//! bounded history (for watch resumption) and broadcasts them. Readers take the read lock, so a list
//! snapshot and its resourceVersion always agree, and a watch registered under the same lock misses
//! nothing between its starting revision and the live stream.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value};
use tandem_core::registry::{Registry, ResourceType};
use tandem_core::selector::{SelectableFields, selectable_fields};
use tandem_store::{Event, KeyValue, Revision, Store, StoreError};
use tokio::sync::{broadcast, watch};

/// One object as served: its JSON encoding with `metadata.resourceVersion` stamped in, and what
/// selectors look at (labels and selectable fields), computed on first use.
///
/// The cache keeps bytes, not parsed trees: LIST and WATCH splice `json` without parsing, and a
/// parsed object is several times the size of its encoding. Keeping the parsed form of every
/// cached object and of every event in the watch history cost gigabytes with 30,000 pods
/// (`tandem bench nodes`). Selectors use [`Attrs`], small and kept, as upstream's cacher keeps
/// labels and fields beside each object; the rare callers that need the whole object parse it
/// when they ask ([`Object::value`]).
#[derive(Debug)]
pub struct Object {
    pub key: String,
    pub rv: Revision,
    pub json: Bytes,
    /// The parsed object, for objects built from one (never for objects from the store).
    value: Option<Value>,
    attrs: OnceLock<Attrs>,
    /// The protobuf message of the object (no envelope), encoded when a protobuf client first
    /// reads it and kept, as upstream's cacher keeps serializations: a protobuf LIST then
    /// costs a copy per object. `None` inside: the kind has no protobuf form.
    protobuf: OnceLock<Option<Bytes>>,
}

/// What label and field selectors read from an object.
#[derive(Debug, Default)]
pub struct Attrs {
    /// `metadata.labels`.
    pub labels: Map<String, Value>,
    /// Every selectable field of its type.
    pub fields: SelectableFields,
}

impl Object {
    /// Builds the served form of a stored value: stamps `resourceVersion` into the bytes without
    /// re-encoding. Returns `None` when the bytes are not JSON (a corrupt value is skipped rather
    /// than served); checking that does not build a parsed value.
    pub fn from_stored(key: &str, bytes: &[u8], rv: Revision) -> Option<Object> {
        if let Some(json) = stamp_resource_version(bytes, rv) {
            serde_json::from_slice::<serde::de::IgnoredAny>(&json).ok()?;
            return Some(Object {
                key: key.to_string(),
                rv,
                json,
                value: None,
                attrs: OnceLock::new(),
                protobuf: OnceLock::new(),
            });
        }
        // No top-level metadata object to stamp: parse and re-encode.
        let mut value: Value = serde_json::from_slice(bytes).ok()?;
        set_resource_version(&mut value, rv);
        let json = Bytes::from(serde_json::to_vec(&value).ok()?);
        Some(Object::with_value(key.to_string(), rv, value, json))
    }

    pub fn from_kv(kv: &KeyValue) -> Option<Object> {
        Self::from_stored(&kv.key, &kv.value, kv.mod_revision)
    }

    /// An object whose parsed value is already at hand; `json` must be its encoding.
    pub fn with_value(key: String, rv: Revision, value: Value, json: Bytes) -> Object {
        Object {
            key,
            rv,
            json,
            value: Some(value),
            attrs: OnceLock::new(),
            protobuf: OnceLock::new(),
        }
    }

    /// The parsed object, with `metadata.resourceVersion` set: parsed from `json` now unless the
    /// object was built from a parsed value. `from_stored` checked that `json` parses, so the
    /// `Null` fallback is unreachable in practice.
    pub fn value(&self) -> Cow<'_, Value> {
        match &self.value {
            Some(v) => Cow::Borrowed(v),
            None => Cow::Owned(serde_json::from_slice(&self.json).unwrap_or(Value::Null)),
        }
    }

    /// The object's protobuf message, without the envelope (see the `protobuf` field).
    pub fn protobuf_message(&self) -> Option<Bytes> {
        self.protobuf
            .get_or_init(|| crate::protobuf::encode_message(&self.value()).map(Bytes::from))
            .clone()
    }

    /// An owned copy of the parsed object, for a caller that will change it.
    pub fn to_value(&self) -> Option<Value> {
        match &self.value {
            Some(v) => Some(v.clone()),
            None => serde_json::from_slice(&self.json).ok(),
        }
    }

    /// Labels and selectable fields; `rt` is the object's type (the same for every call, as an
    /// object's key fixes its type).
    pub fn attrs(&self, rt: &ResourceType) -> &Attrs {
        self.attrs.get_or_init(|| {
            let value = match &self.value {
                Some(v) => Cow::Borrowed(v),
                None => Cow::Owned(
                    tandem_core::selector::selection_outline(&self.json).unwrap_or(Value::Null),
                ),
            };
            Attrs {
                labels: value
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                fields: selectable_fields(rt, &value),
            }
        })
    }

    /// `metadata.namespace`, if any.
    pub fn namespace(&self) -> Option<String> {
        self.value()
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
    }
}

/// Inserts `"resourceVersion":"<rv>"` as the first member of the top-level `metadata` object of
/// a stored encoding (stored objects never carry a resourceVersion), without re-encoding. The scan
/// tracks strings and nesting so a `"metadata"` key inside another field (a ControllerRevision's
/// `data`, a GMSACredentialSpec's `credspec`) is not mistaken for the top-level one. Returns `None`
/// when there is no top-level `metadata` object; the caller then re-encodes.
pub fn stamp_resource_version(bytes: &[u8], rv: Revision) -> Option<Bytes> {
    let at = top_level_metadata_body(bytes)?;
    let stamp = format!("\"resourceVersion\":\"{rv}\"");
    let mut out = Vec::with_capacity(bytes.len() + stamp.len() + 1);
    out.extend_from_slice(bytes.get(..at)?);
    out.extend_from_slice(stamp.as_bytes());
    let next = bytes.get(at..)?.iter().find(|b| !b.is_ascii_whitespace());
    if next != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(bytes.get(at..)?);
    Some(Bytes::from(out))
}

/// The offset just after the `{` that opens the value of the top-level `"metadata"` key.
fn top_level_metadata_body(bytes: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                let key = bytes.get(start..i)?;
                i += 1;
                if depth == 1 && key == b"metadata" {
                    let mut j = i;
                    while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
                        j += 1;
                    }
                    if bytes.get(j) == Some(&b':') {
                        j += 1;
                        while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
                            j += 1;
                        }
                        return (bytes.get(j) == Some(&b'{')).then_some(j + 1);
                    }
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Sets `metadata.resourceVersion` to the decimal revision.
pub fn set_resource_version(value: &mut Value, rv: Revision) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// The watch event types of `metav1.WatchEvent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as every watcher of its type sees it.
#[derive(Debug)]
pub struct CacheEvent {
    pub type_prefix: Arc<str>,
    pub kind: EventType,
    pub object: Arc<Object>,
    pub prev: Option<Arc<Object>>,
}

impl CacheEvent {
    pub fn rv(&self) -> Revision {
        self.object.rv
    }
}

struct Inner {
    /// Objects per type key prefix (`/registry/pods/`), ordered by key.
    types: HashMap<Arc<str>, BTreeMap<String, Arc<Object>>>,
    /// The revision the cache reflects.
    revision: Revision,
    history: VecDeque<Arc<CacheEvent>>,
    /// The encoded size of the objects in `history`.
    history_bytes: usize,
    /// Every event with a revision above this one is in `history`.
    history_floor: Revision,
}

/// How many events the cache keeps for watch resumption at most.
const HISTORY_LIMIT: usize = 200_000;
/// How much encoded object data the history holds at most. Upstream bounds its watch cache by
/// event count and age; a byte bound keeps memory flat however large the objects are (with
/// 30,000 pods and their status updates and events, 200,000 events held about 0.5 GiB). 32 MiB
/// holds about 8,000 pod changes (events are not cached at all), several seconds of a busy
/// cluster's writes: enough for a watcher to resume after its watch request times out, which is
/// what upstream sizes its cacher's window for. A watcher that falls further behind gets
/// `410 Gone` and relists, as upstream's do.
const HISTORY_BYTES: usize = 32 * 1024 * 1024;
/// Broadcast capacity: a watcher further behind than this is dropped and must resume.
const BROADCAST_CAPACITY: usize = 65_536;

/// The shared cache of all types.
pub struct Cache {
    inner: RwLock<Inner>,
    tx: broadcast::Sender<Arc<CacheEvent>>,
    progress: watch::Sender<Revision>,
    /// Set once the server shuts down: every watch ends (see [`Cache::end_watches`]). Each open
    /// watch holds one receiver, so its receiver count is the number of watches still open.
    closing: watch::Sender<bool>,
}

/// A consistent snapshot of one type's objects.
pub struct Snapshot {
    pub items: Vec<Arc<Object>>,
    pub revision: Revision,
}

/// A registered watch: the replayed history and the live receiver.
pub struct Subscription {
    pub backlog: Vec<Arc<CacheEvent>>,
    pub initial: Vec<Arc<Object>>,
    pub revision: Revision,
    pub live: broadcast::Receiver<Arc<CacheEvent>>,
}

/// Why a watch could not start.
#[derive(Debug, PartialEq, Eq)]
pub enum WatchStartError {
    /// The revision is older than the history kept.
    TooOld(Revision),
}

impl Cache {
    /// Loads every object from the store and starts following its changes.
    pub async fn start(
        store: Arc<dyn Store>,
        registry: &Registry,
    ) -> Result<Arc<Cache>, StoreError> {
        let mut types: HashMap<Arc<str>, BTreeMap<String, Arc<Object>>> = registry
            .all()
            .iter()
            .filter(|t| caches(t))
            .map(|t| (Arc::<str>::from(t.key_prefix()), BTreeMap::new()))
            .collect();
        let list = store.list("/registry/", None, None, None).await?;
        for kv in &list.items {
            if let Some(prefix) = type_prefix(&kv.key)
                && let Some(obj) = Object::from_kv(kv)
            {
                types
                    .entry(prefix)
                    .or_default()
                    .insert(kv.key.clone(), Arc::new(obj));
            }
        }
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        let (progress, _) = watch::channel(list.revision);
        let (history, history_floor) = past_history(&store, list.revision).await;
        let history_bytes = history.iter().map(|e| e.object.json.len()).sum();
        let cache = Arc::new(Cache {
            inner: RwLock::new(Inner {
                types,
                revision: list.revision,
                history,
                history_bytes,
                history_floor,
            }),
            tx,
            progress,
            closing: watch::channel(false).0,
        });
        tokio::spawn(Self::follow(cache.clone(), store, list.revision));
        Ok(cache)
    }

    async fn follow(cache: Arc<Cache>, store: Arc<dyn Store>, mut after: Revision) {
        loop {
            // Every key, not only `/registry/`: a write elsewhere (the etcd compactor's
            // `compact_rev_key`) advances the store's revision too, and a consistent read
            // waits for the cache to reach that revision.
            let mut stream = match store.watch("", after) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, after, "watch cache cannot follow the store; relisting");
                    match cache.relist(&store).await {
                        Ok(rev) => after = rev,
                        Err(e) => tracing::error!(error = %e, "relist failed"),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ev) => {
                        after = ev.revision();
                        cache.apply(&ev);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, after, "store watch ended; resuming");
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Rebuilds the cache from a fresh list (after the store could not resume the watch). Watchers
    /// older than the new floor get `410 Gone` and re-list, as upstream's do after a cacher restart.
    async fn relist(&self, store: &Arc<dyn Store>) -> Result<Revision, StoreError> {
        let list = store.list("/registry/", None, None, None).await?;
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        for map in inner.types.values_mut() {
            map.clear();
        }
        for kv in &list.items {
            if let Some(prefix) = type_prefix(&kv.key)
                && let Some(obj) = Object::from_kv(kv)
            {
                inner
                    .types
                    .entry(prefix)
                    .or_default()
                    .insert(kv.key.clone(), Arc::new(obj));
            }
        }
        inner.revision = list.revision;
        inner.history.clear();
        inner.history_bytes = 0;
        inner.history_floor = list.revision;
        drop(inner);
        self.progress.send_replace(list.revision);
        Ok(list.revision)
    }

    /// Applies one store change: to its type's map, the history and the live watchers when the
    /// type is cached; in every case the cache then reflects the change's revision, so
    /// consistent reads never wait for a change that will not reach the maps (an uncached type's,
    /// or a stored value that is not JSON).
    fn apply(&self, ev: &Event) {
        let rev = ev.revision();
        let prefix = type_prefix(ev.key());
        // The served form is built before taking the write lock, so readers (every create looks
        // its namespace up here) wait only for the map update.
        let object = prefix.as_ref().map(|_| match ev {
            Event::Put { kv, .. } => Object::from_kv(kv),
            Event::Delete { prev, revision } => {
                Object::from_stored(&prev.key, &prev.value, *revision)
            }
        });
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let change = match (prefix, object) {
            (Some(prefix), Some(object)) => Self::change(&mut inner, prefix, ev, object),
            _ => None,
        };
        inner.revision = rev;
        if let Some(cache_event) = change {
            inner.history_bytes += cache_event.object.json.len();
            inner.history.push_back(cache_event.clone());
            while inner.history.len() > HISTORY_LIMIT || inner.history_bytes > HISTORY_BYTES {
                let Some(old) = inner.history.pop_front() else {
                    break;
                };
                inner.history_bytes = inner.history_bytes.saturating_sub(old.object.json.len());
                inner.history_floor = old.rv();
            }
            // Sent under the lock so that a subscriber registered under the read lock sees every
            // event after its snapshot exactly once.
            let _ = self.tx.send(cache_event);
        }
        drop(inner);
        self.progress.send_replace(rev);
    }

    /// Updates the map of the type under `prefix` with a change whose served form is `object`
    /// (`None`: the stored value is not JSON), and returns the event watchers see, if any.
    fn change(
        inner: &mut Inner,
        prefix: Arc<str>,
        ev: &Event,
        object: Option<Object>,
    ) -> Option<Arc<CacheEvent>> {
        let map = inner.types.entry(prefix.clone()).or_default();
        match (ev, object) {
            (Event::Put { kv, .. }, None) => {
                tracing::error!(key = %kv.key, "stored value is not JSON; skipped");
                None
            }
            (Event::Delete { prev, .. }, None) => {
                map.remove(&prev.key);
                None
            }
            (Event::Put { kv, .. }, Some(object)) => {
                let object = Arc::new(object);
                let prev = map.insert(kv.key.clone(), object.clone());
                let kind = if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                Some(Arc::new(CacheEvent {
                    type_prefix: prefix,
                    kind,
                    object,
                    prev,
                }))
            }
            (Event::Delete { prev, .. }, Some(object)) => {
                let old = map.remove(&prev.key);
                Some(Arc::new(CacheEvent {
                    type_prefix: prefix,
                    kind: EventType::Deleted,
                    object: Arc::new(object),
                    prev: old,
                }))
            }
        }
    }

    /// The revision the cache reflects.
    pub fn revision(&self) -> Revision {
        *self.progress.borrow()
    }

    /// Waits until the cache reflects at least `rev` (a consistent read), or `timeout` passes.
    pub async fn wait_for(&self, rev: Revision, timeout: Duration) -> bool {
        let mut rx = self.progress.subscribe();
        let fut = rx.wait_for(|r| *r >= rev);
        matches!(tokio::time::timeout(timeout, fut).await, Ok(Ok(_)))
    }

    /// The objects of `rt` under `key_prefix` (a namespace prefix or the type prefix) that `keep`
    /// accepts, with the revision they reflect.
    pub fn snapshot(
        &self,
        rt: &ResourceType,
        key_prefix: &str,
        mut keep: impl FnMut(&Object) -> bool,
    ) -> Snapshot {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let type_prefix = rt.key_prefix();
        let items = inner
            .types
            .get(type_prefix.as_str())
            .map(|map| {
                map.range(key_prefix.to_string()..)
                    .take_while(|(k, _)| k.starts_with(key_prefix))
                    .filter(|(_, o)| keep(o))
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        Snapshot {
            items,
            revision: inner.revision,
        }
    }

    /// How many objects of each cached type there are, by group-resource (`pods`,
    /// `deployments.apps`), for `apiserver_storage_objects`.
    pub fn object_counts(&self) -> Vec<(String, usize)> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .types
            .iter()
            .filter_map(|(prefix, objects)| {
                let resource = prefix.strip_prefix(REGISTRY_ROOT)?.strip_suffix('/')?;
                Some((resource.to_string(), objects.len()))
            })
            .collect()
    }

    /// One object by key.
    pub fn get(&self, rt: &ResourceType, key: &str) -> Option<Arc<Object>> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .types
            .get(rt.key_prefix().as_str())
            .and_then(|m| m.get(key))
            .cloned()
    }

    /// The signal a watch ends on: it turns `true` when the server shuts down. A watch holds it for
    /// as long as it runs, which is what [`Cache::end_watches`] counts.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Ends every open watch, and every watch started from now on, then waits (at most `grace`)
    /// until their tasks are gone, so each response stream has ended with its final chunk,
    /// as upstream's API server ends its watches on graceful shutdown. Returns how many were
    /// still open after `grace`.
    pub async fn end_watches(&self, grace: Duration) -> usize {
        self.closing.send_replace(true);
        let deadline = tokio::time::Instant::now() + grace;
        while self.closing.receiver_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.closing.receiver_count()
    }

    /// Registers a watch of `rt` starting after revision `from`. `from = None` means "now, with the
    /// current objects as initial ADDED events" (upstream's resourceVersion "" / "0" semantics).
    pub fn subscribe(
        &self,
        rt: &ResourceType,
        key_prefix: &str,
        from: Option<Revision>,
        send_initial: bool,
    ) -> Result<Subscription, WatchStartError> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let type_prefix = rt.key_prefix();
        let live = self.tx.subscribe();
        let mut initial = Vec::new();
        if (from.is_none() || send_initial)
            && let Some(map) = inner.types.get(type_prefix.as_str())
        {
            initial = map
                .range(key_prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(key_prefix))
                .map(|(_, o)| o.clone())
                .collect();
        }
        let mut backlog = Vec::new();
        if let Some(from) = from.filter(|_| !send_initial) {
            if from < inner.history_floor {
                return Err(WatchStartError::TooOld(from));
            }
            let start = inner.history.partition_point(|e| e.rv() <= from);
            backlog = inner
                .history
                .iter()
                .skip(start)
                .filter(|e| {
                    &*e.type_prefix == type_prefix.as_str() && e.object.key.starts_with(key_prefix)
                })
                .cloned()
                .collect();
        }
        Ok(Subscription {
            backlog,
            initial,
            revision: inner.revision,
            live,
        })
    }
}

/// Revisions of stored history loaded into a fresh cache's watch history.
const PAST_HISTORY_REVISIONS: Revision = 10_000;
/// How long loading that history may take before the cache starts without it.
const PAST_HISTORY_TIMEOUT: Duration = Duration::from_secs(5);

/// The changes of the last [`PAST_HISTORY_REVISIONS`] revisions up to `current` still in the
/// store's history, as watch history, and the revision that history starts after. A client
/// whose watch was cut by a restart of the server then resumes from its last resourceVersion
/// instead of getting `410 Gone` and relisting everything (upstream's cacher starts empty and
/// answers 410; its clients relist). Bounded as the live history is; on any failure the cache
/// starts with no history (floor `current`), never with a history that has holes.
async fn past_history(
    store: &Arc<dyn Store>,
    current: Revision,
) -> (VecDeque<Arc<CacheEvent>>, Revision) {
    let floor = store
        .compacted_revision()
        .max(current - PAST_HISTORY_REVISIONS)
        .max(0);
    if floor >= current {
        return (VecDeque::new(), current);
    }
    // Every revision is one change of some key, so the stream reaches `current` exactly.
    let Ok(mut stream) = store.watch("", floor) else {
        return (VecDeque::new(), current);
    };
    let deadline = tokio::time::Instant::now() + PAST_HISTORY_TIMEOUT;
    let mut history = VecDeque::new();
    let (mut bytes, mut start) = (0usize, floor);
    loop {
        let ev = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(ev))) if ev.revision() <= current => ev,
            _ => {
                tracing::warn!(floor, current, "watch history not loaded from the store");
                return (VecDeque::new(), current);
            }
        };
        let rev = ev.revision();
        if let Some(prefix) = type_prefix(ev.key())
            && let Some(event) = crate::watch::cache_event(&prefix, &ev)
        {
            bytes += event.object.json.len();
            history.push_back(Arc::new(event));
            while history.len() > HISTORY_LIMIT || bytes > HISTORY_BYTES {
                let Some(old) = history.pop_front() else {
                    break;
                };
                bytes = bytes.saturating_sub(old.object.json.len());
                start = old.rv();
            }
        }
        if rev == current {
            return (history, start);
        }
    }
}

/// Whether the cache keeps objects of `rt`. Events are not kept: they are the most numerous
/// objects of a busy cluster (a few per pod start) and are rarely listed or watched, so they are
/// served from the store, as upstream's API server serves them (its watch cache size for
/// `events` and `events.k8s.io/events` is 0 by default, `DefaultWatchCacheSizes`). With 30,000
/// pods they would have held about 120,000 objects in memory.
pub fn caches(rt: &ResourceType) -> bool {
    rt.plural != "events"
}

/// The type prefix (`/registry/<group-resource>/`) of a storage key, for the types the cache
/// keeps: every built-in type but events, and every custom resource, whose types appear as
/// their CustomResourceDefinitions are established.
fn type_prefix(key: &str) -> Option<Arc<str>> {
    let rest = key.strip_prefix(REGISTRY_ROOT)?;
    let (resource, _) = rest.split_once('/')?;
    if matches!(resource, "events" | "events.events.k8s.io") {
        return None;
    }
    Some(Arc::from(&key[..REGISTRY_ROOT.len() + resource.len() + 1]))
}

const REGISTRY_ROOT: &str = "/registry/";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A cache following a fresh SQLite store in `dir`.
    async fn cache_on(dir: &std::path::Path) -> (Arc<dyn Store>, Arc<Cache>, Registry) {
        let store: Arc<dyn Store> = Arc::new(
            tandem_store::sqlite::SqliteStore::open(&dir.join("state.db"), Default::default())
                .expect("store opens"),
        );
        let registry = Registry::builtin();
        let cache = Cache::start(store.clone(), &registry)
            .await
            .expect("cache starts");
        (store, cache, registry)
    }

    fn rt(registry: &Registry, group: &str, plural: &str) -> Arc<ResourceType> {
        registry
            .by_plural(group, "v1", plural)
            .expect("registered type")
    }

    #[tokio::test]
    async fn events_stay_out_of_the_cache_and_still_advance_its_revision() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, cache, registry) = cache_on(dir.path()).await;
        let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"}});
        let kv = store
            .create(
                "/registry/events/default/e",
                Bytes::from(serde_json::to_vec(&event).expect("encode")),
            )
            .await
            .expect("stored");
        assert!(
            cache
                .wait_for(kv.mod_revision, Duration::from_secs(10))
                .await,
            "the cache reflects the event's revision"
        );
        let events = rt(&registry, "", "events");
        assert!(cache.get(&events, "/registry/events/default/e").is_none());
        assert!(
            cache
                .snapshot(&events, "/registry/events/", |_| true)
                .items
                .is_empty()
        );

        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}});
        store
            .create(
                "/registry/configmaps/default/c",
                Bytes::from(serde_json::to_vec(&cm).expect("encode")),
            )
            .await
            .expect("stored");
        let configmaps = rt(&registry, "", "configmaps");
        let rev = store.current_revision();
        assert!(cache.wait_for(rev, Duration::from_secs(10)).await);
        assert!(
            cache
                .get(&configmaps, "/registry/configmaps/default/c")
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_stored_value_that_is_not_json_is_skipped_but_its_revision_is_reflected() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, cache, registry) = cache_on(dir.path()).await;
        let kv = store
            .create(
                "/registry/configmaps/default/bad",
                Bytes::from_static(b"{not json"),
            )
            .await
            .expect("stored");
        assert!(
            cache
                .wait_for(kv.mod_revision, Duration::from_secs(10))
                .await,
            "a consistent read does not wait for a change the maps never take"
        );
        let configmaps = rt(&registry, "", "configmaps");
        assert!(
            cache
                .get(&configmaps, "/registry/configmaps/default/bad")
                .is_none()
        );
    }

    #[test]
    fn stamping_the_stored_bytes_matches_re_encoding() {
        for v in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "uid": "u"}, "spec": {"x": 1}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "labels": {"metadata": "{"}}, "data": {"k": "\"metadata\":{"}}),
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "data": {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}}, "metadata": {"name": "r"}, "revision": 1}),
            json!({"apiVersion": "windows.k8s.io/v1", "credspec": {"metadata": {}, "x": "\\"}, "kind": "GMSACredentialSpec", "metadata": {"name": "g"}}),
        ] {
            let stored = serde_json::to_vec(&v).expect("encode");
            let obj = Object::from_stored("k", &stored, 42).expect("stored object");
            let reparsed: Value = serde_json::from_slice(&obj.json).expect("valid JSON");
            assert_eq!(reparsed, *obj.value());
            assert_eq!(reparsed["metadata"]["resourceVersion"], "42");
        }
    }
}
