//! Shared informers: one watch per type feeding an in-memory cache that every controller reads,
//! and a fan-out of changes to the controllers that subscribed — client-go's `SharedInformer`.
//!
//! kube-rs' reflector does the caching part, but its shared subscription does not deliver deletions
//! (a subscriber is handed a key that is no longer in the store), and workload controllers must see
//! a pod go to replace it. This informer hands every subscriber the old and the new object, so a
//! deletion arrives with the last state the cache knew.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

/// A cache key: namespace (empty for cluster-scoped objects) and name.
pub type ObjectKey = (String, String);

/// One change as subscribers see it: `old` is `None` for an addition, `new` is `None` for a
/// deletion.
#[derive(Debug)]
pub struct Change<K> {
    pub old: Option<Arc<K>>,
    pub new: Option<Arc<K>>,
}

impl<K> Change<K> {
    /// The objects of the change (old then new), for mapping both to the keys they concern.
    pub fn objects(&self) -> impl Iterator<Item = &Arc<K>> {
        self.old.iter().chain(self.new.iter())
    }
}

struct Inner<K> {
    store: RwLock<BTreeMap<ObjectKey, Arc<K>>>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Change<K>>>>,
    ready: watch::Sender<bool>,
}

/// A shared cache of one resource type, kept current by one watch. Cheap to clone.
pub struct Informer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            inner: self.inner.clone(),
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> ObjectKey {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    /// Starts watching every object of `K` in the cluster; the cache fills in the background.
    pub fn start(client: kube::Client) -> Self {
        Self::start_with(Api::all(client), watcher::Config::default())
    }

    /// Starts watching through `api` with `config` (for example a label selector).
    pub fn start_with(api: Api<K>, config: watcher::Config) -> Self {
        let (ready, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            store: RwLock::default(),
            subscribers: Mutex::default(),
            ready,
        });
        let weak = Arc::downgrade(&inner);
        crate::scope::spawn(async move {
            let mut stream = watcher(api, config).default_backoff().boxed();
            let mut buffer: Option<BTreeMap<ObjectKey, Arc<K>>> = None;
            while let Some(event) = stream.next().await {
                let Some(inner) = weak.upgrade() else { return };
                match event {
                    Ok(watcher::Event::Apply(obj)) => {
                        let new = Arc::new(trimmed(obj));
                        let old = write(&inner.store).insert(key_of(new.as_ref()), new.clone());
                        inner.publish(Change {
                            old,
                            new: Some(new),
                        });
                    }
                    Ok(watcher::Event::Delete(obj)) => {
                        let key = key_of(&obj);
                        let old = write(&inner.store)
                            .remove(&key)
                            .unwrap_or_else(|| Arc::new(trimmed(obj)));
                        inner.publish(Change {
                            old: Some(old),
                            new: None,
                        });
                    }
                    Ok(watcher::Event::Init) => buffer = Some(BTreeMap::new()),
                    Ok(watcher::Event::InitApply(obj)) => {
                        let obj = Arc::new(trimmed(obj));
                        buffer
                            .get_or_insert_default()
                            .insert(key_of(obj.as_ref()), obj);
                    }
                    Ok(watcher::Event::InitDone) => {
                        let fresh = buffer.take().unwrap_or_default();
                        let previous = std::mem::replace(&mut *write(&inner.store), fresh.clone());
                        for (key, new) in &fresh {
                            let old = previous.get(key).cloned();
                            let unchanged = old.as_ref().is_some_and(|o| {
                                o.meta().resource_version == new.meta().resource_version
                            });
                            if !unchanged {
                                inner.publish(Change {
                                    old,
                                    new: Some(new.clone()),
                                });
                            }
                        }
                        for (key, old) in previous {
                            if !fresh.contains_key(&key) {
                                inner.publish(Change {
                                    old: Some(old),
                                    new: None,
                                });
                            }
                        }
                        inner.ready.send_replace(true);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, kind = %K::kind(&Default::default()), "watch error; retrying")
                    }
                }
            }
        });
        Informer { inner }
    }
}

/// Drops `metadata.managedFields` before an object enters the cache, as upstream's controllers
/// do with client-go's `cache.TransformStripManagedFields`: no controller reads them, and they
/// are a large share of every cached pod. A controller that writes a cached object back sends no
/// managedFields, which the API server takes as "unchanged".
fn trimmed<K: Resource>(mut obj: K) -> K {
    obj.meta_mut().managed_fields = None;
    obj
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

impl<K> Inner<K> {
    fn publish(&self, change: Change<K>) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| {
            s.send(Change {
                old: change.old.clone(),
                new: change.new.clone(),
            })
            .is_ok()
        });
    }
}

impl<K: Resource> Informer<K> {
    /// A channel of every change from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Change<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner
            .subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// Waits until the first complete list has been loaded.
    pub async fn wait_ready(&self) {
        let mut rx = self.inner.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// One object by namespace (empty for cluster-scoped) and name.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        read(&self.inner.store)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object in `namespace`.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        let store = read(&self.inner.store);
        store
            .range((namespace.to_string(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every object in the cache.
    pub fn list(&self) -> Vec<Arc<K>> {
        read(&self.inner.store).values().cloned().collect()
    }
}

/// An informer seen only as a cache that loads a first list (client-go's `HasSynced`), so that
/// informers of different kinds can be waited for together.
pub trait HasSynced {
    /// A receiver that turns `true` once the first complete list is loaded.
    fn synced(&self) -> watch::Receiver<bool>;
}

impl<K> HasSynced for Informer<K> {
    fn synced(&self) -> watch::Receiver<bool> {
        self.inner.ready.subscribe()
    }
}

/// Waits until each of `informers` has loaded its first list (client-go's
/// `cache.WaitForCacheSync`); [`Informer::wait_ready`] for several at once.
pub async fn wait_for_cache_sync(informers: &[&(dyn HasSynced + Sync)]) {
    for informer in informers {
        let _ = informer.synced().wait_for(|ready| *ready).await;
    }
}

/// The key of an object as the work queues use it: `namespace/name`, or `name` when cluster-scoped.
pub fn queue_key<K: Resource>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.name_any()),
        _ => obj.name_any(),
    }
}

/// Splits a queue key back into namespace (empty when cluster-scoped) and name.
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}
