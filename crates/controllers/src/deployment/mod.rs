//! The Deployment controller — upstream's `pkg/controller/deployment` (`sync.go`, `rolling.go`,
//! `recreate.go`, `progress.go`, `util/deployment_util.go`).
//!
//! A Deployment owns ReplicaSets named `<deployment>-<pod-template-hash>`; the one whose template
//! equals the Deployment's (ignoring the `pod-template-hash` label) is the *new* ReplicaSet, the
//! others are old. RollingUpdate scales the new one up within `maxSurge` and the old ones down
//! within `maxUnavailable`; Recreate scales the old ones to zero, waits for their pods to go, then
//! scales the new one up. Revisions live in the `deployment.kubernetes.io/revision` annotation;
//! `kubectl rollout undo` patches an old template back, which makes that ReplicaSet the new one
//! again with the next revision. Status and the Available/Progressing conditions follow upstream.
//!
//! The files follow upstream's: this one is `deployment_controller.go` (the controller, its event
//! handlers, `syncDeployment` and the ReplicaSet claim); `sync` is `sync.go` (finding or creating
//! the new ReplicaSet, scaling, cleanup, status); `rolling` and `recreate` are the two
//! strategies; `progress` is `progress.go` (the Progressing condition and the deadline requeue);
//! `util` is `util/deployment_util.go` (annotations, revisions, fenceposts, the template hash,
//! conditions). There is no `rollback.go`: upstream's serves only the `spec.rollbackTo` of the
//! pre-`apps/v1` APIs, and `kubectl rollout undo` patches the template itself.

mod progress;
mod recreate;
mod rolling;
mod sync;
mod util;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::controller_ref_manager::ControllerRefManager;
use crate::controller_utils::{self as cu, Error, SyncResult, controller_of};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

pub use util::{
    DESIRED_REPLICAS, FOUND_NEW_RS, MAX_REPLICAS, MIN_AVAILABLE, MIN_UNAVAILABLE, NEW_RS_AVAILABLE,
    NEW_RS_CREATED, PAUSED, POD_TEMPLATE_HASH, RESUMED, REVISION, REVISION_HISTORY, RS_UPDATED,
    TIMED_OUT, compute_hash, equal_ignore_hash, max_surge, max_unavailable, resolve_fenceposts,
};
use util::{created, is_recreate};

struct Ctx {
    client: kube::Client,
    deployments: Informer<Deployment>,
    replicasets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    queue: WorkQueue,
}

/// Runs the Deployment controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>, replicasets: Informer<ReplicaSet>) {
    let deployments = Informer::<Deployment>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        deployments,
        replicasets,
        pods,
        queue: WorkQueue::named("deployment"),
    });
    let mut d_events = ctx.deployments.subscribe();
    let mut rs_events = ctx.replicasets.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.deployments, &ctx.replicasets, &ctx.pods]).await;
    ctx.queue.add_keys(&ctx.deployments.list());
    ctx.queue
        .run_workers_for(4, "deployment", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = d_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = rs_events.recv() => {
                for rs in change.objects() {
                    let ns = rs.namespace().unwrap_or_default();
                    match controller_of(&rs.metadata) {
                        Some(r) if r.kind == "Deployment" => ctx.queue.add(format!("{ns}/{}", r.name)),
                        Some(_) => {}
                        None => {
                            for d in ctx.deployments.list_namespace(&ns) {
                                if selects(&d, rs.metadata.labels.as_ref()) {
                                    ctx.queue.add(queue_key(d.as_ref()));
                                }
                            }
                        }
                    }
                }
            }
            Some(change) = pod_events.recv() => {
                // Only Recreate waits on pods: a deleted pod may let it proceed.
                if change.new.is_none()
                    && let Some(pod) = &change.old
                    && let Some(r) = controller_of(&pod.metadata)
                    && r.kind == "ReplicaSet"
                {
                    let ns = pod.namespace().unwrap_or_default();
                    if let Some(rs) = ctx.replicasets.get(&ns, &r.name)
                        && let Some(dr) = controller_of(&rs.metadata)
                        && dr.kind == "Deployment"
                    {
                        ctx.queue.add(format!("{ns}/{}", dr.name));
                    }
                }
            }
            else => return,
        }
    }
}

fn selects(d: &Deployment, labels: Option<&BTreeMap<String, String>>) -> bool {
    d.spec.as_ref().is_some_and(|s| {
        !cu::selector_is_empty(&s.selector) && cu::selector_matches(&s.selector, labels)
    })
}

/// One sync's view: the Deployment (with the status being built) and its ReplicaSets.
struct Sync<'a> {
    ctx: &'a Ctx,
    d: Deployment,
    original_status: DeploymentStatus,
    rs_api: Api<ReplicaSet>,
    /// The Deployment's ReplicaSets, kept current with this sync's own writes.
    rs: Vec<ReplicaSet>,
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(d) = ctx.deployments.get(ns, name) else {
        return Ok(None);
    };
    let mut d = d.as_ref().clone();
    let original_status = d.status.clone().unwrap_or_default();
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    let empty_selector = d
        .spec
        .as_ref()
        .is_none_or(|s| cu::selector_is_empty(&s.selector));
    if empty_selector {
        let generation = d.metadata.generation;
        if original_status.observed_generation != generation {
            let patch = json!({ "status": { "observedGeneration": generation } });
            Api::<Deployment>::namespaced(ctx.client.clone(), ns)
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        return Ok(None);
    }
    d.status.get_or_insert_default();
    let mut s = Sync {
        ctx,
        d,
        original_status,
        rs_api,
        rs: Vec::new(),
    };
    s.rs = s.claim_replicasets().await?;

    if s.d.metadata.deletion_timestamp.is_some() {
        let (new_rs, old) = s.new_and_old(false).await?;
        let all: Vec<ReplicaSet> = old.into_iter().chain(new_rs.clone()).collect();
        let st = s.calculate_status(&all, new_rs.as_ref())?;
        s.d.status = Some(st);
        return s.write_status().await;
    }

    s.check_paused_conditions();
    let paused = s.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
    if paused || s.is_scaling_event().await? {
        return s.sync_scale(paused).await;
    }
    if is_recreate(&s.d) {
        s.rollout_recreate().await
    } else {
        s.rollout_rolling().await
    }
}
impl Sync<'_> {
    fn name(&self) -> String {
        self.d.name_any()
    }

    fn status(&mut self) -> &mut DeploymentStatus {
        self.d.status.get_or_insert_default()
    }

    /// Upstream's `getReplicaSetsForDeployment` through `ClaimReplicaSets`.
    async fn claim_replicasets(&mut self) -> Result<Vec<ReplicaSet>, Error> {
        let ns = self.d.namespace().unwrap_or_default();
        let d = &self.d;
        let claimed = ControllerRefManager::new(self.ctx.client.clone(), d)
            .claim(self.ctx.replicasets.list_namespace(&ns), |rs| {
                selects(d, rs.metadata.labels.as_ref())
            })
            .await?;
        let mut owned: Vec<ReplicaSet> = claimed.into_iter().map(Arc::unwrap_or_clone).collect();
        owned.sort_by_key(created);
        Ok(owned)
    }
}
