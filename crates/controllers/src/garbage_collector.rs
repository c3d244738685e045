//! The garbage collector: cascading deletion through `ownerReferences`, as upstream's
//! `pkg/controller/garbagecollector` does it.
//!
//! - **Background**: an object all of whose owners are gone is deleted.
//! - **Foreground**: an owner being deleted with the `foregroundDeletion` finalizer first gets its
//!   dependents deleted (themselves in the foreground), then loses the finalizer and goes away.
//! - **Orphan**: an owner being deleted with the `orphan` finalizer has its ownerReference removed
//!   from every dependent, then loses the finalizer.
//!
//! The collector keeps a graph of every object's uid, owners and deletion state from one watch per
//! type, and reconciles a queue of uids whose situation may have changed. Custom resources are
//! watched too, as upstream's collector follows discovery: a watch per established CRD at its
//! storage version, started when the CRD is established and ended when it goes.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tandem_core::registry::{Registry, ResourceType};
use tokio::sync::{Mutex, Notify};

use crate::dynamic::api_for;

/// One object as the graph knows it.
#[derive(Debug, Clone)]
struct Node {
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    name: String,
    owners: Vec<Owner>,
    deleting: bool,
    finalizers: Vec<String>,
    resource_version: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    uid: String,
    api_version: String,
    kind: String,
    name: String,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    /// owner uid → dependent uids.
    dependents: HashMap<String, BTreeSet<String>>,
}

impl Graph {
    fn upsert(&mut self, uid: &str, node: Node) -> Vec<String> {
        let mut touched = vec![uid.to_string()];
        if let Some(old) = self.nodes.get(uid) {
            for o in &old.owners {
                if let Some(set) = self.dependents.get_mut(&o.uid) {
                    set.remove(uid);
                }
            }
        }
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.to_string());
            touched.push(o.uid.clone());
        }
        touched.extend(self.dependents.get(uid).into_iter().flatten().cloned());
        self.nodes.insert(uid.to_string(), node);
        touched
    }

    fn remove(&mut self, uid: &str) -> Vec<String> {
        let mut touched = Vec::new();
        if let Some(old) = self.nodes.remove(uid) {
            for o in &old.owners {
                if let Some(set) = self.dependents.get_mut(&o.uid) {
                    set.remove(uid);
                }
                touched.push(o.uid.clone());
            }
        }
        touched.extend(self.dependents.get(uid).into_iter().flatten().cloned());
        touched
    }
}

fn node_of(rt: &Arc<ResourceType>, obj: &DynamicObject) -> Option<(String, Node)> {
    let uid = obj.metadata.uid.clone()?;
    let owners = obj
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| Owner {
            uid: o.uid.clone(),
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
        .collect();
    Some((
        uid,
        Node {
            rt: rt.clone(),
            namespace: obj.metadata.namespace.clone(),
            name: obj.metadata.name.clone().unwrap_or_default(),
            owners,
            deleting: obj.metadata.deletion_timestamp.is_some(),
            finalizers: obj.metadata.finalizers.clone().unwrap_or_default(),
            resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
        },
    ))
}

struct Shared {
    graph: Mutex<Graph>,
    queue: Mutex<(VecDeque<String>, HashSet<String>)>,
    wake: Notify,
    /// The custom types watched, by (apiVersion, kind) of their storage version, each with the
    /// sender whose drop ends its watch.
    custom: std::sync::Mutex<HashMap<(String, String), CustomWatch>>,
}

struct CustomWatch {
    rt: Arc<ResourceType>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Shared {
    async fn enqueue(&self, uids: Vec<String>) {
        let mut q = self.queue.lock().await;
        for u in uids {
            if q.1.insert(u.clone()) {
                q.0.push_back(u);
            }
        }
        drop(q);
        self.wake.notify_one();
    }
}

/// Runs the collector until the runtime stops.
pub async fn run(client: kube::Client, registry: Registry) {
    let shared = Arc::new(Shared {
        graph: Mutex::new(Graph::default()),
        queue: Mutex::new((VecDeque::new(), HashSet::new())),
        wake: Notify::new(),
        custom: Default::default(),
    });
    // Create-only kinds (the reviews) are never stored, so own and are owned by nothing.
    // A kind served at several versions is watched once, at its storage version.
    for rt in registry
        .all()
        .iter()
        .filter(|t| t.supports("watch") && tandem_core::conversion::is_storage_version(t))
    {
        crate::scope::spawn(watch_type(client.clone(), rt.clone(), shared.clone()));
    }
    if let Some(crds) = registry.by_plural(
        tandem_core::apiextensions::crd::GROUP,
        "v1",
        "customresourcedefinitions",
    ) {
        crate::scope::spawn(watch_crds(client.clone(), crds, shared.clone()));
    }
    let registry = Arc::new(registry);
    loop {
        let next = {
            let mut q = shared.queue.lock().await;
            let n = q.0.pop_front();
            if let Some(u) = &n {
                q.1.remove(u);
            }
            n
        };
        let Some(uid) = next else {
            shared.wake.notified().await;
            continue;
        };
        if let Err(e) = reconcile(&client, &registry, &shared, &uid).await {
            tracing::debug!(%uid, error = %e, "garbage collection will retry");
            let shared = shared.clone();
            crate::scope::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                shared.enqueue(vec![uid]).await;
            });
        }
    }
}

/// Follows the CRDs: an established one gets a watch of its storage version (a new one when
/// that version changes), a deleted one loses it.
async fn watch_crds(client: kube::Client, crd_type: Arc<ResourceType>, shared: Arc<Shared>) {
    use tandem_core::apiextensions::crd;
    let api = api_for(&client, &crd_type, None);
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    // CRD name → the (apiVersion, kind) it is watched under.
    let mut watched: HashMap<String, (String, String)> = HashMap::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                let Some(name) = obj.metadata.name.clone() else {
                    continue;
                };
                let Ok(crd) = serde_json::to_value(&obj) else {
                    continue;
                };
                let rt = crd::is_established(&crd)
                    .then(|| crd::storage_version(&crd))
                    .flatten()
                    .and_then(|v| crd::resource_type(&crd, &v))
                    .map(Arc::new);
                let key = rt.as_ref().map(|rt| (rt.api_version(), rt.kind.clone()));
                if watched.get(&name) == key.as_ref() {
                    continue;
                }
                let mut custom = shared.custom.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(old) = watched.remove(&name) {
                    custom.remove(&old);
                }
                if let (Some(rt), Some(key)) = (rt, key) {
                    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                    let watch = watch_type(client.clone(), rt.clone(), shared.clone());
                    crate::scope::spawn(async move {
                        tokio::select! {
                            _ = watch => {}
                            _ = stopped => {}
                        }
                    });
                    custom.insert(key.clone(), CustomWatch { rt, _stop: stop });
                    watched.insert(name, key);
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let Some(key) = obj.metadata.name.and_then(|n| watched.remove(&n)) {
                    shared
                        .custom
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::debug!(error = %e, "garbage collector CRD watch error; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

async fn watch_type(client: kube::Client, rt: Arc<ResourceType>, shared: Arc<Shared>) {
    let api = api_for(&client, &rt, None);
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let mut seen: HashSet<String> = HashSet::new();
    let mut init: HashSet<String> = HashSet::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                if let Some((uid, node)) = node_of(&rt, &obj) {
                    init.insert(uid.clone());
                    seen.insert(uid.clone());
                    let touched = shared.graph.lock().await.upsert(&uid, node);
                    shared.enqueue(touched).await;
                }
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let Some(uid) = obj.metadata.uid.clone() {
                    seen.remove(&uid);
                    let touched = shared.graph.lock().await.remove(&uid);
                    shared.enqueue(touched).await;
                }
            }
            Ok(watcher::Event::Init) => init.clear(),
            Ok(watcher::Event::InitDone) => {
                // Objects that vanished while the watch was re-listing.
                let gone: Vec<String> = seen.difference(&init).cloned().collect();
                for uid in gone {
                    seen.remove(&uid);
                    let touched = shared.graph.lock().await.remove(&uid);
                    shared.enqueue(touched).await;
                }
            }
            Err(e) => {
                tracing::debug!(resource = %rt.plural, error = %e, "garbage collector watch error; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum GcError {
    #[error("API call failed")]
    Api(#[from] kube::Error),
    #[error("waiting for {0} dependents to go away")]
    Waiting(usize),
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

async fn reconcile(
    client: &kube::Client,
    registry: &Registry,
    shared: &Shared,
    uid: &str,
) -> Result<(), GcError> {
    let (node, dependents) = {
        let g = shared.graph.lock().await;
        let Some(node) = g.nodes.get(uid).cloned() else {
            return Ok(());
        };
        let deps: Vec<(String, Node)> = g
            .dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| g.nodes.get(d).map(|n| (d.clone(), n.clone())))
            .collect();
        (node, deps)
    };
    let api = api_for(client, &node.rt, node.namespace.as_deref());

    if node.deleting && node.finalizers.iter().any(|f| f == "orphan") {
        for (dep_uid, dep) in &dependents {
            let remaining: Vec<Value> = dep
                .owners
                .iter()
                .filter(|o| o.uid != uid)
                .map(|o| json!({"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid}))
                .collect();
            let dep_api = api_for(client, &dep.rt, dep.namespace.as_deref());
            // Re-read to keep the full ownerReference entries (controller, blockOwnerDeletion).
            let current = match dep_api.get(&dep.name).await {
                Ok(c) => c,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            if current.metadata.uid.as_deref() != Some(dep_uid) {
                continue;
            }
            let kept: Vec<Value> = current
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| o.uid != uid)
                .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
                .collect();
            let refs = if kept.len() == remaining.len() {
                kept
            } else {
                remaining
            };
            let patch = json!({"metadata": {"ownerReferences": if refs.is_empty() { Value::Null } else { json!(refs) }, "resourceVersion": current.metadata.resource_version}});
            match dep_api
                .patch(&dep.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return remove_finalizer(&api, &node, "orphan").await;
    }

    if node.deleting && node.finalizers.iter().any(|f| f == "foregroundDeletion") {
        let mut waiting = 0;
        for (dep_uid, dep) in &dependents {
            waiting += 1;
            if dep.deleting {
                continue;
            }
            let dep_api = api_for(client, &dep.rt, dep.namespace.as_deref());
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Foreground),
                preconditions: Some(Preconditions {
                    uid: Some(dep_uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match dep_api.delete(&dep.name, &dp).await {
                Ok(_) => {}
                Err(e)
                    if is_not_found(&e) || matches!(&e, kube::Error::Api(s) if s.code == 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if waiting > 0 {
            return Err(GcError::Waiting(waiting));
        }
        return remove_finalizer(&api, &node, "foregroundDeletion").await;
    }

    if !node.owners.is_empty() && !node.deleting {
        let mut any_alive = false;
        for owner in &node.owners {
            if owner_exists(client, registry, shared, &node, owner).await? {
                any_alive = true;
                break;
            }
        }
        if !any_alive {
            let dp = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&node.name, &dp).await {
                Ok(_) => {
                    tracing::info!(resource = %node.rt.plural, name = %node.name, "garbage collected: all owners are gone")
                }
                Err(e)
                    if is_not_found(&e) || matches!(&e, kube::Error::Api(s) if s.code == 409) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Whether an owner exists: in the graph by uid, else confirmed by a GET of its name (the graph may
/// lag behind), as upstream's `isDangling` does.
async fn owner_exists(
    client: &kube::Client,
    registry: &Registry,
    shared: &Shared,
    node: &Node,
    owner: &Owner,
) -> Result<bool, GcError> {
    if let Some(n) = shared.graph.lock().await.nodes.get(&owner.uid) {
        // An owner being deleted in the foreground still exists.
        return Ok(!n.name.is_empty());
    }
    let custom = || {
        shared
            .custom
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(owner.api_version.clone(), owner.kind.clone()))
            .map(|w| w.rt.clone())
    };
    let Some(rt) = registry
        .by_kind(&owner.api_version, &owner.kind)
        .or_else(custom)
    else {
        // An owner of a kind this server does not serve cannot be checked; keep the dependent.
        return Ok(true);
    };
    let ns = if rt.namespaced {
        node.namespace.as_deref()
    } else {
        None
    };
    match api_for(client, &rt, ns).get(&owner.name).await {
        Ok(o) => Ok(o.metadata.uid.as_deref() == Some(owner.uid.as_str())),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn remove_finalizer(
    api: &kube::Api<DynamicObject>,
    node: &Node,
    finalizer: &str,
) -> Result<(), GcError> {
    let remaining: Vec<&String> = node.finalizers.iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": if remaining.is_empty() { Value::Null } else { json!(remaining) }, "resourceVersion": node.resource_version}});
    match api
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(owners: &[&str]) -> Node {
        Node {
            rt: Arc::new(
                Registry::builtin()
                    .by_kind("v1", "Pod")
                    .expect("pods")
                    .as_ref()
                    .clone(),
            ),
            namespace: Some("default".into()),
            name: "x".into(),
            owners: owners
                .iter()
                .map(|u| Owner {
                    uid: u.to_string(),
                    api_version: "apps/v1".into(),
                    kind: "ReplicaSet".into(),
                    name: "rs".into(),
                })
                .collect(),
            deleting: false,
            finalizers: vec![],
            resource_version: "1".into(),
        }
    }

    #[test]
    fn graph_tracks_dependents_and_forgets_removed_owners() {
        let mut g = Graph::default();
        let touched = g.upsert("pod-1", node(&["rs-1"]));
        assert!(touched.contains(&"rs-1".to_string()));
        assert_eq!(g.dependents.get("rs-1").map(|s| s.len()), Some(1));
        // Re-parenting moves the dependent.
        g.upsert("pod-1", node(&["rs-2"]));
        assert_eq!(g.dependents.get("rs-1").map(|s| s.len()), Some(0));
        let touched = g.remove("rs-2");
        assert!(
            touched.contains(&"pod-1".to_string()),
            "removing an owner requeues its dependents"
        );
    }
}
