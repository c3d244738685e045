//! The ReplicaSet controller — upstream's `pkg/controller/replicaset` — which also runs
//! ReplicationControllers (upstream wraps the same `ReplicaSetController` around them): keep
//! `spec.replicas` active pods matching the selector, adopting matching orphans and releasing
//! owned pods that stopped matching; create missing pods in slow-start batches and delete surplus
//! pods in upstream's order; report status through the status subresource.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::controller_ref_manager::ControllerRefManager;
use crate::controller_utils::{
    self as cu, Error, Expectations, SyncResult, controller_of, controller_ref, pod_availability,
    pod_is_active, pod_is_ready,
};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// Upstream's `BurstReplicas`: at most this many creations or deletions per sync.
pub const BURST_REPLICAS: usize = 500;

/// What the controller needs to know of a ReplicaSet or a ReplicationController.
pub trait ReplicaOwner:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + k8s_openapi::Resource
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Whether the selector is empty (such objects select nothing and are not synced).
    fn selector_is_empty(&self) -> bool;
    /// Whether `labels` match the selector.
    fn selects(&self, labels: Option<&BTreeMap<String, String>>) -> bool;
    fn replicas(&self) -> i32;
    fn min_ready_seconds(&self) -> i32;
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// The current status as (replicas, fullyLabeled, ready, available, observedGeneration).
    fn status_tuple(&self) -> (i32, i32, i32, i32, i64);
}

/// The `ReplicaOwner` methods that read the same fields of both kinds' `spec` and `status`
/// (`ReplicaSetSpec` and `ReplicationControllerSpec` differ only in the selector's type).
macro_rules! replica_owner_fields {
    () => {
        fn replicas(&self) -> i32 {
            self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
        }
        fn min_ready_seconds(&self) -> i32 {
            self.spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0)
        }
        fn template(&self) -> Option<&PodTemplateSpec> {
            self.spec.as_ref().and_then(|s| s.template.as_ref())
        }
        fn status_tuple(&self) -> (i32, i32, i32, i32, i64) {
            self.status.as_ref().map_or((0, 0, 0, 0, 0), |s| {
                (
                    s.replicas,
                    s.fully_labeled_replicas.unwrap_or(0),
                    s.ready_replicas.unwrap_or(0),
                    s.available_replicas.unwrap_or(0),
                    s.observed_generation.unwrap_or(0),
                )
            })
        }
    };
}

impl ReplicaOwner for ReplicaSet {
    fn selector_is_empty(&self) -> bool {
        self.spec
            .as_ref()
            .is_none_or(|s| cu::selector_is_empty(&s.selector))
    }
    fn selects(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.spec.as_ref().is_some_and(|s| {
            !cu::selector_is_empty(&s.selector) && cu::selector_matches(&s.selector, labels)
        })
    }
    replica_owner_fields!();
}

impl ReplicaOwner for ReplicationController {
    fn selector_is_empty(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_none_or(|s| s.is_empty())
    }
    fn selects(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_some_and(|sel| cu::map_selector_matches(sel, labels))
    }
    replica_owner_fields!();
}

struct Ctx<K: ReplicaOwner> {
    client: kube::Client,
    owners: Informer<K>,
    pods: Informer<Pod>,
    expectations: Expectations,
    queue: WorkQueue,
}

/// Runs the ReplicaSet controller on shared pod and ReplicaSet caches.
pub async fn run(client: kube::Client, pods: Informer<Pod>, replicasets: Informer<ReplicaSet>) {
    run_for::<ReplicaSet>(client, pods, replicasets).await;
}

/// Runs the controller for `K` (ReplicaSet or ReplicationController) until the runtime stops.
pub async fn run_for<K: ReplicaOwner>(
    client: kube::Client,
    pods: Informer<Pod>,
    owners: Informer<K>,
) {
    let ctx = Arc::new(Ctx {
        client,
        owners,
        pods,
        expectations: Expectations::default(),
        // Upstream's queue names: `replicaset`, and `replicationmanager` for the
        // ReplicationController manager.
        queue: WorkQueue::named(match <K as k8s_openapi::Resource>::KIND {
            "ReplicaSet" => "replicaset",
            _ => "replicationmanager",
        }),
    });
    let mut owner_events = ctx.owners.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.owners, &ctx.pods]).await;
    ctx.queue.add_keys(&ctx.owners.list());
    ctx.queue.run_workers_for(
        4,
        <K as k8s_openapi::Resource>::KIND,
        &ctx,
        |ctx, key| async move { sync(&ctx, &key).await },
    );
    loop {
        tokio::select! {
            Some(change) = owner_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = pod_events.recv() => {
                if let Some(pod) = change.new.as_ref().or(change.old.as_ref()) {
                    observe_pod(&ctx, pod, change.new.is_none());
                }
                for pod in change.objects() {
                    enqueue_for_pod(&ctx, pod);
                }
            }
            else => return,
        }
    }
}

/// Lowers the expectations of `pod`'s owner by what its event shows (`deleted`: the event is
/// the pod's deletion).
fn observe_pod<K: ReplicaOwner>(ctx: &Ctx<K>, pod: &Pod, deleted: bool) {
    if let Some(key) = cu::controller_key(pod, <K as k8s_openapi::Resource>::KIND) {
        let gone = deleted || pod.metadata.deletion_timestamp.is_some();
        ctx.expectations.observe(&key, &pod.name_any(), gone);
    }
}

/// Queues the owner of `pod`, or every owner in its namespace that would adopt it.
fn enqueue_for_pod<K: ReplicaOwner>(ctx: &Ctx<K>, pod: &Pod) {
    let ns = pod.namespace().unwrap_or_default();
    match controller_of(&pod.metadata) {
        Some(r) if r.kind == <K as k8s_openapi::Resource>::KIND => {
            ctx.queue.add(format!("{ns}/{}", r.name))
        }
        Some(_) => {}
        None => {
            if pod.metadata.deletion_timestamp.is_some() {
                return;
            }
            for o in ctx.owners.list_namespace(&ns) {
                if o.selects(pod.metadata.labels.as_ref()) {
                    ctx.queue.add(queue_key(o.as_ref()));
                }
            }
        }
    }
}

async fn sync<K: ReplicaOwner>(ctx: &Ctx<K>, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(owner) = ctx.owners.get(ns, name) else {
        ctx.expectations.forget(key);
        return Ok(None);
    };
    if owner.selector_is_empty() {
        return Ok(None);
    }
    let uid = owner.uid().unwrap_or_default();
    let deleting = owner.meta().deletion_timestamp.is_some();
    let satisfied = ctx
        .expectations
        .satisfied(key, |n| cu::seen_in(&ctx.pods, ns, n));

    let all = ctx.pods.list_namespace(ns);
    let active: Vec<Arc<Pod>> = all.into_iter().filter(|p| pod_is_active(p)).collect();
    // Upstream's `PodControllerRefManager.ClaimPods`. The controller reference is checked
    // before the selector: most pods of a namespace belong to other owners and are skipped
    // without matching labels (the selector match dominated the controller's CPU with 300
    // ReplicaSets of 100 pods in one namespace).
    let mut claims = ControllerRefManager::new(ctx.client.clone(), owner.as_ref());
    let owned = claims
        .claim(active, |pod| owner.selects(pod.metadata.labels.as_ref()))
        .await?;
    // The cached owner may not show a deletion the store already has (the garbage collector
    // orphaning its pods is what made them claimable): creating replacements for the orphans
    // would leave extra pods behind.
    let deleting = deleting || claims.owner_is_going();

    let mut result = Ok(None);
    if satisfied && !deleting {
        result = manage_replicas(ctx, key, owner.as_ref(), &uid, &owned).await;
    }
    let requeue = update_status(ctx, owner.as_ref(), &owned).await?;
    match result {
        Ok(_) => Ok(requeue),
        Err(e) => Err(e),
    }
}

/// Upstream's `manageReplicas`: create or delete the difference, at most [`BURST_REPLICAS`].
async fn manage_replicas<K: ReplicaOwner>(
    ctx: &Ctx<K>,
    key: &str,
    owner: &K,
    uid: &str,
    owned: &[Arc<Pod>],
) -> SyncResult {
    let ns = owner.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let want = usize::try_from(owner.replicas().max(0)).unwrap_or(0);
    if owned.len() < want {
        let count = (want - owned.len()).min(BURST_REPLICAS);
        let Some(template) = owner.template() else {
            return Err(Error::Invalid("spec.template is missing".into()));
        };
        let pod = pod_from_template(
            template,
            &owner.name_any(),
            controller_ref(
                <K as k8s_openapi::Resource>::API_VERSION,
                <K as k8s_openapi::Resource>::KIND,
                &owner.name_any(),
                uid,
            ),
        );
        let (created, err) = cu::slow_start_batch(count, || {
            let (api, pod) = (api.clone(), pod.clone());
            async move { api.create(&PostParams::default(), &pod).await }
        })
        .await;
        ctx.expectations
            .expect_creations(key, created.into_iter().map(|p| p.name_any()));
        if let Some(e) = err {
            if cu::is_namespace_terminating(&e) {
                return Ok(None);
            }
            return Err(e.into());
        }
        if want - owned.len() > count {
            return Ok(Some(Duration::ZERO));
        }
    } else if owned.len() > want {
        let count = (owned.len() - want).min(BURST_REPLICAS);
        let victims = pods_to_delete(owned, count);
        let names: Vec<String> = victims.iter().map(|p| p.name_any()).collect();
        ctx.expectations.expect_deletions(key, names.clone());
        let results = futures::future::join_all(names.iter().map(|n| {
            let api = api.clone();
            async move { api.delete(n, &DeleteParams::default()).await }
        }))
        .await;
        for r in results {
            match r {
                Ok(_) => {}
                Err(e) if cu::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(None)
}

/// Upstream's `getPodsToDelete`: rank pods by how many pods of this owner share their node, then
/// take the first `count` in [`cu::compare_for_deletion`] order.
fn pods_to_delete(pods: &[Arc<Pod>], count: usize) -> Vec<Arc<Pod>> {
    let node = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in pods {
        *per_node.entry(node(p)).or_default() += 1;
    }
    let mut ranked: Vec<(usize, Arc<Pod>)> = pods
        .iter()
        .map(|p| {
            let n = node(p);
            (
                if n.is_empty() {
                    0
                } else {
                    per_node.get(&n).copied().unwrap_or(0)
                },
                p.clone(),
            )
        })
        .collect();
    ranked.sort_by(|(ra, a), (rb, b)| cu::compare_for_deletion(a, *ra, b, *rb));
    ranked.into_iter().take(count).map(|(_, p)| p).collect()
}

/// A pod for `template` owned by `owner` — upstream's `GetPodFromTemplate`: labels, annotations
/// and finalizers from the template, `generateName: <owner>-`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    owner_name: &str,
    owner: OwnerReference,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    let mut prefix = format!("{owner_name}-");
    if prefix.len() > 58 {
        prefix.truncate(58);
    }
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(prefix),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Computes and writes status: replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
/// observedGeneration. Returns when to look again for pods that are ready but not yet available.
async fn update_status<K: ReplicaOwner>(
    ctx: &Ctx<K>,
    owner: &K,
    owned: &[Arc<Pod>],
) -> Result<Option<Duration>, Error> {
    let now = cu::now();
    let template_labels = owner
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut fully = 0;
    let mut ready = 0;
    let mut available = 0;
    let mut recheck: Option<Duration> = None;
    for p in owned {
        let labels = p.metadata.labels.as_ref();
        if template_labels
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        {
            fully += 1;
        }
        if pod_is_ready(p) {
            ready += 1;
            let (avail, wait) = pod_availability(p, owner.min_ready_seconds(), now);
            if avail {
                available += 1;
            } else if let Some(w) = wait {
                recheck = Some(recheck.map_or(w, |r| r.min(w)));
            }
        }
    }
    let replicas = i32::try_from(owned.len()).unwrap_or(i32::MAX);
    let generation = owner.meta().generation.unwrap_or(0);
    let new = (replicas, fully, ready, available, generation);
    if new != owner.status_tuple() {
        let ns = owner.namespace().unwrap_or_default();
        let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = json!({ "status": {
            "replicas": replicas,
            "fullyLabeledReplicas": fully,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": generation,
        }});
        cu::merge_patch_status(&api, &owner.name_any(), &patch).await?;
    }
    Ok(recheck.map(|d| d + Duration::from_millis(100)))
}
