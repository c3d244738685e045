//! The StatefulSet controller — upstream's `pkg/controller/statefulset`.
//!
//! Pods have stable names `<set>-<ordinal>` (hostname the pod name, subdomain the set's
//! `serviceName`) and, for each `volumeClaimTemplates` entry, a PVC `<template>-<set>-<ordinal>`
//! created before the pod and kept after it (upstream's default `Retain` policy).
//!
//! `OrderedReady` (the default) creates ordinal *n* only when 0..n are Running and Ready, and
//! removes surplus pods from the highest ordinal down, one at a time, only while the rest are
//! healthy. `Parallel` creates and deletes them all at once (`updateStatefulSet` with
//! `monotonic = false`).
//!
//! Revisions: each distinct pod template is stored in a ControllerRevision
//! `<set>-<hash>` (`history.NewControllerRevision`, data `{"spec":{"template":…,"$patch":"replace"}}`)
//! and pods carry its name in the `controller-revision-hash` label. `RollingUpdate` replaces pods
//! not at the update revision from the highest ordinal down to `partition`, one at a time and
//! only while every pod is healthy; ordinals below `partition` are (re)created at the current
//! revision. When every pod is updated and ready the current revision becomes the update
//! revision (`completeRollingUpdate`). `OnDelete` only uses the update revision for pods it
//! recreates. Revisions beyond `revisionHistoryLimit` (10) that no pod uses are deleted.
//!
//! Not done: `persistentVolumeClaimRetentionPolicy`, `ordinals.start`, `minReadySeconds`,
//! `maxUnavailable`, adopting orphan pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::controller_utils::{self as cu, SyncResult, controller_of, controller_ref};
use crate::daemonset::CONTROLLER_REVISION_HASH;
use crate::deployment::compute_hash;
use crate::informer::{Informer, split_key};
use crate::workqueue::WorkQueue;

/// Label with the pod's name, for per-pod Services.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label with the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

struct Ctx {
    client: kube::Client,
    sets: Informer<StatefulSet>,
    pods: Informer<Pod>,
    revisions: Informer<ControllerRevision>,
    queue: WorkQueue,
}

/// Runs the StatefulSet controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>) {
    let ctx = Arc::new(Ctx {
        sets: Informer::start(client.clone()),
        revisions: Informer::start(client.clone()),
        client,
        pods,
        queue: WorkQueue::named("statefulset"),
    });
    let mut set_events = ctx.sets.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.sets, &ctx.pods, &ctx.revisions]).await;
    ctx.queue.add_keys(&ctx.sets.list());
    ctx.queue
        .run_workers_for(4, "statefulset", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = set_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = pod_events.recv() => {
                ctx.queue.add_controller_keys(change.objects(), "StatefulSet");
            }
            else => return,
        }
    }
}

/// The ordinal of a pod named `<set>-<ordinal>`.
pub fn ordinal_of(set: &str, pod: &str) -> Option<usize> {
    let rest = pod.strip_prefix(set)?.strip_prefix('-')?;
    if rest.starts_with('+') || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok()
}

/// Running and Ready, not terminating — upstream `isHealthy`.
fn is_healthy(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && cu::pod_is_ready(p)
        && p.metadata.deletion_timestamp.is_none()
}

fn is_failed(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

fn revision_label(p: &Pod) -> Option<&str> {
    p.labels().get(CONTROLLER_REVISION_HASH).map(String::as_str)
}

/// The ControllerRevision data for a template (`getPatch`).
fn revision_data(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = serde_json::to_value(template).unwrap_or_default();
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    json!({ "spec": { "template": t } })
}

fn template_of(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.as_ref()?.0.get("spec")?.get("template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// The PVC name for claim template `claim` of `set`'s pod `ordinal`.
pub fn claim_name(claim: &str, set: &str, ordinal: usize) -> String {
    format!("{claim}-{set}-{ordinal}")
}

/// Upstream's `newStatefulSetPod` for `template` at `revision`.
fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: usize) -> Pod {
    let name = format!("{}-{ordinal}", set.name_any());
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(CONTROLLER_REVISION_HASH.into(), revision.into());
    let spec = set.spec.clone().unwrap_or_default();
    let mut pod_spec = template.spec.clone().unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    if !spec.service_name.as_deref().unwrap_or_default().is_empty() {
        pod_spec.subdomain = spec.service_name.clone();
    }
    for claim in spec.volume_claim_templates.iter().flatten() {
        let cname = claim.metadata.name.clone().unwrap_or_default();
        let volume = Volume {
            name: cname.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&cname, &set.name_any(), ordinal),
                read_only: None,
            }),
            ..Default::default()
        };
        let volumes = pod_spec.volumes.get_or_insert_default();
        volumes.retain(|v| v.name != cname);
        volumes.push(volume);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.namespace(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![controller_ref(
                "apps/v1",
                "StatefulSet",
                &set.name_any(),
                &set.uid().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

/// Creates the pod's missing PVCs (`createPersistentVolumeClaims`).
async fn ensure_claims(ctx: &Ctx, set: &StatefulSet, ordinal: usize) -> Result<(), cu::Error> {
    let ns = set.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = set.spec.clone().unwrap_or_default();
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    for claim in spec.volume_claim_templates.iter().flatten() {
        let name = claim_name(
            claim.metadata.name.as_deref().unwrap_or_default(),
            &set.name_any(),
            ordinal,
        );
        if api.get_opt(&name).await?.is_some() {
            continue;
        }
        let mut labels: BTreeMap<String, String> =
            claim.metadata.labels.clone().unwrap_or_default();
        labels.extend(selector_labels.clone());
        let pvc = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(ns.clone()),
                labels: Some(labels),
                annotations: claim.metadata.annotations.clone(),
                ..Default::default()
            },
            spec: claim.spec.clone(),
            status: None,
        };
        match api.create(&PostParams::default(), &pvc).await {
            Ok(_) => {}
            Err(e) if cu::is_already_exists(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Finds or creates the ControllerRevision of the set's current template; returns all revisions
/// of the set and the name of the update revision (`getStatefulSetRevisions`).
async fn revisions(
    ctx: &Ctx,
    set: &StatefulSet,
) -> Result<(Vec<Arc<ControllerRevision>>, String), cu::Error> {
    let ns = set.namespace().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let mut revs: Vec<Arc<ControllerRevision>> = ctx
        .revisions
        .list_namespace(&ns)
        .into_iter()
        .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
        .collect();
    revs.sort_by_key(|r| r.revision);
    let spec = set.spec.clone().unwrap_or_default();
    let data = revision_data(&spec.template);
    if let Some(r) = revs
        .iter()
        .rev()
        .find(|r| r.data.as_ref().map(|d| &d.0) == Some(&data))
    {
        return Ok((revs.clone(), r.name_any()));
    }
    let next = revs.last().map_or(1, |r| r.revision + 1);
    let collision = set.status.as_ref().and_then(|s| s.collision_count);
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let name = format!(
        "{}-{}",
        set.name_any(),
        compute_hash(&spec.template, collision)
    );
    let mut labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(CONTROLLER_REVISION_HASH.into(), name.clone());
    let rev = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: Some(vec![controller_ref(
                "apps/v1",
                "StatefulSet",
                &set.name_any(),
                &uid,
            )]),
            ..Default::default()
        },
        data: Some(RawExtension(data.clone())),
        revision: next,
    };
    match api.create(&PostParams::default(), &rev).await {
        Ok(r) => {
            revs.push(Arc::new(r));
            Ok((revs, name))
        }
        Err(e) if cu::is_already_exists(&e) => {
            // Same name: either the cache lags (same data) or a hash collision.
            let existing = api.get(&name).await?;
            if existing.data.as_ref().map(|d| &d.0) == Some(&data) {
                revs.push(Arc::new(existing));
                Ok((revs, name))
            } else {
                let count = collision.unwrap_or(0) + 1;
                Api::<StatefulSet>::namespaced(ctx.client.clone(), &ns)
                    .patch_status(
                        &set.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&json!({ "status": { "collisionCount": count } })),
                    )
                    .await?;
                Err(cu::Error::Retry(
                    "controller revision hash collision".into(),
                ))
            }
        }
        Err(e) => Err(e.into()),
    }
}

async fn delete_pod(api: &Api<Pod>, pod: &Pod) -> Result<(), cu::Error> {
    match api.delete(&pod.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if cu::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn create_pod(
    ctx: &Ctx,
    api: &Api<Pod>,
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: usize,
) -> Result<(), cu::Error> {
    ensure_claims(ctx, set, ordinal).await?;
    let pod = new_pod(set, template, revision, ordinal);
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(()),
        Err(e) if cu::is_already_exists(&e) || cu::is_namespace_terminating(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(set) = ctx.sets.get(ns, name) else {
        return Ok(None);
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let spec = set.spec.clone().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let (revs, update_revision) = revisions(ctx, &set).await?;
    let rev_by_name: HashMap<String, &Arc<ControllerRevision>> =
        revs.iter().map(|r| (r.name_any(), r)).collect();
    let current_revision = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .filter(|r| rev_by_name.contains_key(r))
        .unwrap_or_else(|| update_revision.clone());
    let current_template = rev_by_name
        .get(&current_revision)
        .and_then(|r| template_of(r))
        .unwrap_or_else(|| spec.template.clone());

    let replicas = usize::try_from(spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let monotonic = spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref() != Some("OnDelete");
    let partition = strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.partition)
        .map_or(0, |p| usize::try_from(p.max(0)).unwrap_or(0));

    let owned: Vec<(usize, Arc<Pod>)> = ctx
        .pods
        .list_namespace(ns)
        .into_iter()
        .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
        .filter_map(|p| ordinal_of(name, &p.name_any()).map(|o| (o, p)))
        .collect();
    let mut slots: Vec<Option<Arc<Pod>>> = vec![None; replicas];
    let mut condemned: Vec<(usize, Arc<Pod>)> = Vec::new();
    for (o, p) in &owned {
        if *o < replicas {
            slots[*o] = Some(p.clone());
        } else {
            condemned.push((*o, p.clone()));
        }
    }
    condemned.sort_by_key(|c| std::cmp::Reverse(c.0));

    let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let result = reconcile(
        ctx,
        &pod_api,
        &set,
        &slots,
        &condemned,
        Revisions {
            current: (&current_revision, &current_template),
            update: (&update_revision, &spec.template),
        },
        Policy {
            monotonic,
            rolling,
            partition,
        },
    )
    .await;

    update_status(
        ctx,
        &set,
        &owned,
        &current_revision,
        &update_revision,
        replicas,
    )
    .await?;
    truncate_history(
        ctx,
        &set,
        &revs,
        &owned,
        &current_revision,
        &update_revision,
    )
    .await?;
    result.map(|()| None)
}

struct Revisions<'a> {
    current: (&'a str, &'a PodTemplateSpec),
    update: (&'a str, &'a PodTemplateSpec),
}

struct Policy {
    monotonic: bool,
    rolling: bool,
    partition: usize,
}

/// Upstream's `updateStatefulSet`: create, replace, delete and roll, in order.
async fn reconcile(
    ctx: &Ctx,
    api: &Api<Pod>,
    set: &StatefulSet,
    slots: &[Option<Arc<Pod>>],
    condemned: &[(usize, Arc<Pod>)],
    revs: Revisions<'_>,
    policy: Policy,
) -> Result<(), cu::Error> {
    let differs = revs.current.0 != revs.update.0;
    for (ordinal, slot) in slots.iter().enumerate() {
        match slot {
            None => {
                // `newVersionedStatefulSetPod`: below the partition of a rolling update the
                // current revision is used.
                let (rev, template) = if differs && policy.rolling && ordinal < policy.partition {
                    revs.current
                } else {
                    revs.update
                };
                create_pod(ctx, api, set, template, rev, ordinal).await?;
                if policy.monotonic {
                    return Ok(());
                }
            }
            Some(p) if is_failed(p) && p.metadata.deletion_timestamp.is_none() => {
                delete_pod(api, p).await?;
                if policy.monotonic {
                    return Ok(());
                }
            }
            Some(p) if policy.monotonic && !is_healthy(p) => return Ok(()),
            Some(_) => {}
        }
    }
    // Surplus pods, highest ordinal first.
    for (_, p) in condemned {
        if p.metadata.deletion_timestamp.is_some() {
            if policy.monotonic {
                return Ok(());
            }
            continue;
        }
        delete_pod(api, p).await?;
        if policy.monotonic {
            return Ok(());
        }
    }
    if !policy.rolling {
        return Ok(());
    }
    // Rolling update: one pod at a time from the top, only while every pod is healthy.
    if slots
        .iter()
        .any(|s| !s.as_ref().is_some_and(|p| is_healthy(p)))
    {
        return Ok(());
    }
    for p in slots.iter().skip(policy.partition).rev().flatten() {
        if revision_label(p) != Some(revs.update.0) {
            return delete_pod(api, p).await;
        }
    }
    Ok(())
}

async fn update_status(
    ctx: &Ctx,
    set: &StatefulSet,
    owned: &[(usize, Arc<Pod>)],
    current_revision: &str,
    update_revision: &str,
    replicas: usize,
) -> Result<(), cu::Error> {
    let live: Vec<&Arc<Pod>> = owned
        .iter()
        .map(|(_, p)| p)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let count = |f: &dyn Fn(&Pod) -> bool| {
        i32::try_from(live.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
    };
    let total = count(&|_| true);
    let ready = count(&|p| cu::pod_is_ready(p));
    let mut current = count(&|p| revision_label(p) == Some(current_revision));
    let updated = count(&|p| revision_label(p) == Some(update_revision));
    let mut current_revision = current_revision.to_string();
    let want = i32::try_from(replicas).unwrap_or(i32::MAX);
    // `completeRollingUpdate`.
    if updated == want && ready == want && total == want {
        current_revision = update_revision.to_string();
        current = updated;
    }
    let old = set.status.clone().unwrap_or_default();
    let status = json!({
        "observedGeneration": set.metadata.generation,
        "replicas": total,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
    });
    let unchanged = old.observed_generation == set.metadata.generation
        && old.replicas == total
        && old.ready_replicas.unwrap_or(0) == ready
        && old.available_replicas.unwrap_or(0) == ready
        && old.current_replicas.unwrap_or(0) == current
        && old.updated_replicas.unwrap_or(0) == updated
        && old.current_revision.as_deref() == Some(current_revision.as_str())
        && old.update_revision.as_deref() == Some(update_revision);
    if unchanged {
        return Ok(());
    }
    let api: Api<StatefulSet> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    cu::merge_patch_status(&api, &set.name_any(), &json!({ "status": status })).await?;
    Ok(())
}

/// Deletes the oldest revisions beyond `revisionHistoryLimit` that no pod uses
/// (`truncateHistory`).
async fn truncate_history(
    ctx: &Ctx,
    set: &StatefulSet,
    revs: &[Arc<ControllerRevision>],
    owned: &[(usize, Arc<Pod>)],
    current: &str,
    update: &str,
) -> Result<(), cu::Error> {
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0);
    let in_use = |n: &str| {
        n == current || n == update || owned.iter().any(|(_, p)| revision_label(p) == Some(n))
    };
    let history: Vec<&Arc<ControllerRevision>> =
        revs.iter().filter(|r| !in_use(&r.name_any())).collect();
    let excess = history
        .len()
        .saturating_sub(usize::try_from(limit).unwrap_or(0));
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    for r in history.into_iter().take(excess) {
        match api.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_parse_only_from_canonical_names() {
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-012"), None);
        assert_eq!(ordinal_of("web", "webx-1"), None);
        assert_eq!(ordinal_of("web", "web-a"), None);
    }

    #[test]
    fn revision_data_round_trips_the_template() {
        let t: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": { "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "c", "image": "nginx" }] }
        }))
        .unwrap_or_default();
        let rev = ControllerRevision {
            data: Some(RawExtension(revision_data(&t))),
            ..Default::default()
        };
        assert_eq!(template_of(&rev), Some(t));
    }
}
