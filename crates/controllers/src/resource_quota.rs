//! The ResourceQuota controller (upstream `pkg/controller/resourcequota`): keeps each quota's
//! `status.hard` equal to `spec.hard` and `status.used` equal to what the objects of its
//! namespace use, as computed by `tandem_core::quota` (pods, services, claims, config maps,
//! secrets, replication controllers, quotas and `count/<resource>.<group>` of any served kind;
//! quota scopes for pods).
//!
//! As upstream: a quota is synced when it appears or its `spec.hard` changes (status writes,
//! by this controller or by the API server's admission charging a create, are not followed);
//! usage is replenished when counted objects go away — deleted, a pod finishing, a service
//! changing type, a claim changing size — because creates are charged by admission; and every
//! quota is recomputed on a full resync (`--resource-quota-sync-period`, 5 minutes). A sync
//! reads the quota and the objects from the API server (not from caches), so what it writes is
//! as current as the moment it read, and the write is conditional on the quota's
//! resourceVersion: a charge made meanwhile makes it conflict and run again.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tandem_core::quota;
use tandem_core::registry::{Registry, ResourceType};

use crate::controller_utils::{Error, SyncResult};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// Controller settings.
#[derive(Debug, Clone)]
pub struct ResourceQuotaOptions {
    /// How often every quota is recomputed from scratch (upstream
    /// `--resource-quota-sync-period`, default 5 minutes).
    pub resync_period: Duration,
    /// Concurrent syncs (upstream `--concurrent-resource-quota-syncs`, default 5).
    pub workers: usize,
}

impl Default for ResourceQuotaOptions {
    fn default() -> Self {
        ResourceQuotaOptions {
            resync_period: Duration::from_secs(300),
            workers: 5,
        }
    }
}

struct Ctx {
    client: kube::Client,
    registry: Registry,
    quotas: Informer<ResourceQuota>,
    queue: WorkQueue,
}

impl Ctx {
    /// Queues every quota of `ns` (its usage may have gone down).
    fn replenish(&self, ns: &str) {
        for q in self.quotas.list_namespace(ns) {
            self.queue.add(queue_key(q.as_ref()));
        }
    }
}

fn quota_api_resource(registry: &Registry) -> Option<Arc<ResourceType>> {
    registry.by_plural("", "v1", "resourcequotas")
}

/// Runs the controller until the runtime stops.
pub async fn run(
    client: kube::Client,
    registry: Registry,
    pods: Informer<Pod>,
    options: ResourceQuotaOptions,
) {
    if quota_api_resource(&registry).is_none() {
        return;
    }
    let quotas = Informer::<ResourceQuota>::start(client.clone());
    let services = Informer::<Service>::start(client.clone());
    let claims = Informer::<PersistentVolumeClaim>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        registry,
        quotas,
        queue: WorkQueue::named("resourcequota_primary"),
    });
    let mut quota_events = ctx.quotas.subscribe();
    let mut pod_events = pods.subscribe();
    let mut service_events = services.subscribe();
    let mut claim_events = claims.subscribe();
    // Kinds only counted: their deletions, from metadata-only watches.
    let (deleted_tx, mut deleted_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    spawn_deletion_watch::<ConfigMap>(client.clone(), deleted_tx.clone());
    spawn_deletion_watch::<Secret>(client.clone(), deleted_tx.clone());
    spawn_deletion_watch::<ReplicationController>(client.clone(), deleted_tx);
    ctx.quotas.wait_ready().await;
    ctx.queue.add_keys(&ctx.quotas.list());
    ctx.queue.run_workers_for(
        options.workers.max(1),
        "resourcequota",
        &ctx,
        |ctx, key| async move { sync(&ctx, &key).await },
    );
    let mut resync = tokio::time::interval(options.resync_period);
    resync.tick().await;
    loop {
        tokio::select! {
            Some(change) = quota_events.recv() => {
                if let Some(new) = &change.new
                    && needs_sync(change.old.as_deref(), new)
                {
                    ctx.queue.add(queue_key(new.as_ref()));
                }
            }
            Some(change) = pod_events.recv() => {
                let ns = change.objects().next().and_then(|p| p.namespace()).unwrap_or_default();
                let stopped_counting = match (&change.old, &change.new) {
                    (_, None) => true,
                    (Some(old), Some(new)) => pod_charged(old) && !pod_charged(new),
                    (None, Some(_)) => false,
                };
                if stopped_counting {
                    ctx.replenish(&ns);
                }
            }
            Some(change) = service_events.recv() => {
                let ns = change.objects().next().and_then(|s| s.namespace()).unwrap_or_default();
                let changed = match (&change.old, &change.new) {
                    (_, None) => true,
                    (Some(old), Some(new)) => service_type(old) != service_type(new),
                    (None, Some(_)) => false,
                };
                if changed {
                    ctx.replenish(&ns);
                }
            }
            Some(change) = claim_events.recv() => {
                let ns = change.objects().next().and_then(|c| c.namespace()).unwrap_or_default();
                let changed = match (&change.old, &change.new) {
                    (_, None) => true,
                    (Some(old), Some(new)) => claim_storage(old) != claim_storage(new),
                    (None, Some(_)) => false,
                };
                if changed {
                    ctx.replenish(&ns);
                }
            }
            Some(ns) = deleted_rx.recv() => ctx.replenish(&ns),
            _ = resync.tick() => {
                ctx.queue.add_keys(&ctx.quotas.list());
            }
            else => return,
        }
    }
}

/// Upstream `addQuota`/update filter: a quota needs a sync when it is new, when `spec.hard`
/// changed, or when its status does not yet cover `spec.hard`.
fn needs_sync(old: Option<&ResourceQuota>, new: &ResourceQuota) -> bool {
    let list = |o: &ResourceQuota, pointer: &str| {
        let v = serde_json::to_value(o).unwrap_or_default();
        quota::resource_list(v.pointer(pointer))
    };
    let hard = |o: &ResourceQuota| list(o, "/spec/hard");
    let spec_hard = hard(new);
    let status_hard = list(new, "/status/hard");
    let used = list(new, "/status/used");
    let spec_changed = old.is_none_or(|o| {
        let before = hard(o);
        before.len() != spec_hard.len() || before.iter().any(|(k, v)| spec_hard.get(k) != Some(v))
    });
    let status_behind = status_hard.len() != spec_hard.len()
        || spec_hard
            .iter()
            .any(|(k, v)| status_hard.get(k) != Some(v) || !used.contains_key(k));
    spec_changed || status_behind
}

/// Whether a pod still counts for compute quota: not finished, not deleted (upstream
/// `QuotaV1Pod`; a pod past its grace period goes away soon after).
fn pod_charged(pod: &Pod) -> bool {
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    !finished && pod.metadata.deletion_timestamp.is_none()
}

/// Upstream `GetQuotaServiceType`: the type that decides node port and load balancer usage.
fn service_type(svc: &Service) -> Option<String> {
    svc.spec.as_ref().and_then(|s| s.type_.clone())
}

/// Upstream `RequiresQuotaReplenish`: the storage a claim is charged for changed.
fn claim_storage(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
}

/// Watches the metadata of `K` and sends the namespace of every deleted object.
fn spawn_deletion_watch<K>(client: kube::Client, tx: tokio::sync::mpsc::UnboundedSender<String>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    crate::scope::spawn(async move {
        let api: Api<PartialObjectMeta<K>> = Api::all(client);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Delete(obj)) = event
                && tx.send(obj.metadata.namespace.unwrap_or_default()).is_err()
            {
                return;
            }
        }
    });
}

/// The served type of a group and resource, at its preferred (first registered) version.
fn resource_type(registry: &Registry, group: &str, resource: &str) -> Option<Arc<ResourceType>> {
    registry
        .all()
        .iter()
        .find(|rt| rt.group == group && rt.plural == resource && rt.namespaced)
        .cloned()
}

/// Every object of a type in `ns`, as JSON, read from the API server.
async fn list_objects(ctx: &Ctx, rt: &ResourceType, ns: &str) -> Result<Vec<Value>, Error> {
    let api = crate::dynamic::api_for(&ctx.client, rt, Some(ns));
    let list = api.list(&ListParams::default()).await?;
    list.items
        .into_iter()
        .map(|o| serde_json::to_value(o).map_err(Error::from))
        .collect()
}

/// Upstream `syncResourceQuota`: recomputes one quota's usage and writes its status when it
/// changed.
async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(quota_rt) = quota_api_resource(&ctx.registry) else {
        return Ok(None);
    };
    let api = crate::dynamic::api_for(&ctx.client, &quota_rt, Some(ns));
    let Some(current) = api.get_opt(name).await? else {
        return Ok(None);
    };
    let mut value = serde_json::to_value(&current)?;
    let now = crate::controller_utils::now().as_second();
    let mut usages = Vec::new();
    for evaluator in quota::evaluators_for(&value) {
        let (group, resource) = evaluator.group_resource();
        let objects = match resource_type(&ctx.registry, group, resource) {
            Some(rt) => list_objects(ctx, &rt, ns).await?,
            None => Vec::new(),
        };
        usages.push(quota::usage_of(&value, &evaluator, &objects, now));
    }
    let status = quota::status(&value, &usages);
    if quota::same_status(value.get("status"), &status) {
        return Ok(None);
    }
    value["status"] = status;
    let updated: DynamicObject = serde_json::from_value(value)?;
    api.replace_status(name, &PostParams::default(), &updated)
        .await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn quota(v: Value) -> ResourceQuota {
        serde_json::from_value(v).expect("quota")
    }

    #[test]
    fn new_quota_and_changed_hard_need_a_sync_but_status_writes_do_not() {
        let synced = quota(
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
            "spec": {"hard": {"pods": "2"}}, "status": {"hard": {"pods": "2"}, "used": {"pods": "0"}}}),
        );
        assert!(needs_sync(None, &synced));
        let charged = quota(
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
            "spec": {"hard": {"pods": "2"}}, "status": {"hard": {"pods": "2"}, "used": {"pods": "1"}}}),
        );
        assert!(!needs_sync(Some(&synced), &charged));
        let raised = quota(
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
            "spec": {"hard": {"pods": "3"}}, "status": {"hard": {"pods": "2"}, "used": {"pods": "1"}}}),
        );
        assert!(needs_sync(Some(&charged), &raised));
    }

    #[test]
    fn finished_or_deleted_pods_stop_counting() {
        let running: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}}),
        )
        .expect("pod");
        let done: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}),
        )
        .expect("pod");
        let deleting: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2024-01-01T00:00:00Z"}}),
        )
        .expect("pod");
        assert!(pod_charged(&running));
        assert!(!pod_charged(&done));
        assert!(!pod_charged(&deleting));
    }
}
