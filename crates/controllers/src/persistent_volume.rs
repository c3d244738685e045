//! The PersistentVolume binder — upstream's `pkg/controller/volume/persistentvolume`
//! (`PersistentVolumeController.syncClaim`/`syncVolume`, `syncUnboundClaim`):
//!
//! - a PersistentVolume without a claim is `Available`; one whose claim is gone is `Released`
//!   (reclaim policy `Retain`) or deleted (`Delete`; the data on the node stays — tandem has no
//!   volume plugins that could delete it). A dynamically provisioned volume
//!   (`pv.kubernetes.io/provisioned-by`) with `Delete` is only `Released`: its provisioner
//!   deletes it once the storage is gone, as upstream leaves it to external provisioners
//!   (tandem's own: [`crate::local_path`]);
//! - a Pending claim naming a volume (`spec.volumeName`) is bound to it if the volume is free or
//!   already reserved for the claim; a claim without one gets the smallest Available volume
//!   that matches its storage class, access modes, volume mode, selector and requested size;
//! - binding writes the volume's `claimRef` first, then the claim's `volumeName`, then both
//!   statuses (`Bound`, the claim's capacity and access modes), as upstream orders it so a crash
//!   between steps is finished by the next sync;
//! - a Bound claim whose volume disappeared is `Lost`;
//! - delayed binding (a class with `volumeBindingMode: WaitForFirstConsumer`): until the
//!   scheduler sets `volume.kubernetes.io/selected-node` on the claim, only a volume already
//!   reserved for the claim is bound, and the claim gets upstream's `WaitForFirstConsumer` event;
//!   once a node is selected, a free volume qualifies only if its node affinity admits that
//!   node (read from the node's name and `kubernetes.io/hostname`, which tandem's agents keep
//!   equal);
//! - dynamic provisioning: a claim nothing matches, of a class with a provisioner, is handed to
//!   that provisioner by annotating it `volume.kubernetes.io/storage-provisioner` (and the beta
//!   spelling), with upstream's `ExternalProvisioning` event; the provisioner creates a volume
//!   reserved for the claim (`claimRef`), which the next sync binds. Only
//!   `kubernetes.io/no-provisioner` classes stay without (a `FailedBinding` event), as does a
//!   claim without a class or of a missing class.
//!
//! Events about one claim and reason are recorded once per controller run, not at every sync
//! (a Pending claim is synced again at every volume change).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeStatus,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use tandem_core::local_path::{
    BETA_STORAGE_PROVISIONER, HOSTNAME_LABEL, PROVISIONED_BY, SELECTED_NODE, STORAGE_PROVISIONER,
};
use tandem_core::scheduling::node_affinity::{NodeView, match_node_selector_terms};
use tandem_core::validation::quantity::Quantity;

use crate::controller_utils::{self as cu, SyncResult};
use crate::events::{self, EventType};
use crate::informer::{Informer, split_key};
use crate::workqueue::WorkQueue;

const COMPONENT: &str = "persistentvolume-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner name of classes whose volumes an administrator creates by hand.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

struct Ctx {
    client: kube::Client,
    volumes: Informer<PersistentVolume>,
    claims: Informer<PersistentVolumeClaim>,
    classes: Informer<StorageClass>,
    queue: WorkQueue,
    /// `<claim uid>/<reason>` of the events already recorded.
    reported: Mutex<HashSet<String>>,
}

/// Runs the binder until the runtime stops.
pub async fn run(client: kube::Client) {
    let ctx = Arc::new(Ctx {
        volumes: Informer::start(client.clone()),
        claims: Informer::start(client.clone()),
        classes: Informer::start(client.clone()),
        client,
        queue: WorkQueue::named("volumes"),
        reported: Mutex::default(),
    });
    let mut pv_events = ctx.volumes.subscribe();
    let mut pvc_events = ctx.claims.subscribe();
    let mut class_events = ctx.classes.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.volumes, &ctx.claims, &ctx.classes]).await;
    ctx.queue
        .run_workers_for(1, "persistentvolume", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    for pv in ctx.volumes.list() {
        ctx.queue.add(format!("pv/{}", pv.name_any()));
    }
    for pvc in ctx.claims.list() {
        ctx.queue.add(claim_key(&pvc));
    }
    loop {
        tokio::select! {
            Some(change) = pv_events.recv() => {
                for pv in change.objects() {
                    ctx.queue.add(format!("pv/{}", pv.name_any()));
                    if let Some(c) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                        ctx.queue.add(format!(
                            "pvc/{}/{}",
                            c.namespace.clone().unwrap_or_default(),
                            c.name.clone().unwrap_or_default()
                        ));
                    }
                }
                // A volume that appeared or was freed may satisfy a waiting claim.
                for pvc in ctx.claims.list() {
                    if phase_of_claim(&pvc) == "Pending" {
                        ctx.queue.add(claim_key(&pvc));
                    }
                }
            }
            Some(change) = pvc_events.recv() => {
                for pvc in change.objects() {
                    ctx.queue.add(claim_key(pvc));
                    if let Some(v) = pvc.spec.as_ref().and_then(|s| s.volume_name.as_ref()) {
                        ctx.queue.add(format!("pv/{v}"));
                    }
                }
                if let (Some(gone), None) = (&change.old, &change.new) {
                    forget_reports(&ctx, gone);
                }
            }
            Some(_) = class_events.recv() => {
                for pvc in ctx.claims.list() {
                    if phase_of_claim(&pvc) == "Pending" {
                        ctx.queue.add(claim_key(&pvc));
                    }
                }
            }
            else => return,
        }
    }
}

/// The queue key of a claim in the storage controllers' queues: `pvc/<namespace>/<name>`.
pub(crate) fn claim_key(pvc: &PersistentVolumeClaim) -> String {
    format!(
        "pvc/{}/{}",
        pvc.namespace().unwrap_or_default(),
        pvc.name_any()
    )
}

fn phase_of_claim(pvc: &PersistentVolumeClaim) -> &str {
    pvc.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn phase_of_volume(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    if let Some(name) = key.strip_prefix("pv/") {
        return sync_volume(ctx, name).await;
    }
    if let Some(rest) = key.strip_prefix("pvc/") {
        let (ns, name) = split_key(rest);
        return sync_claim(ctx, ns, name).await;
    }
    Ok(None)
}

async fn set_volume_phase(ctx: &Ctx, pv: &PersistentVolume, phase: &str) -> SyncResult {
    if phase_of_volume(pv) == phase {
        return Ok(None);
    }
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let status = PersistentVolumeStatus {
        phase: Some(phase.to_string()),
        ..PersistentVolumeStatus::default()
    };
    cu::merge_patch_status(&api, &pv.name_any(), &json!({ "status": status })).await?;
    Ok(None)
}

async fn sync_volume(ctx: &Ctx, name: &str) -> SyncResult {
    let Some(pv) = ctx.volumes.get("", name) else {
        return Ok(None);
    };
    if pv.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()) else {
        return set_volume_phase(ctx, &pv, "Available").await;
    };
    let ns = claim_ref.namespace.clone().unwrap_or_default();
    let claim_name = claim_ref.name.clone().unwrap_or_default();
    let claim = ctx.claims.get(&ns, &claim_name);
    let claim_gone = match (&claim, &claim_ref.uid) {
        (None, Some(_)) => true,
        (Some(c), Some(uid)) => c.metadata.uid.as_deref() != Some(uid.as_str()),
        _ => false,
    };
    if !claim_gone {
        let bound_here = claim
            .as_ref()
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.volume_name.as_deref())
            == Some(name);
        return if bound_here {
            set_volume_phase(ctx, &pv, "Bound").await
        } else if claim_ref.uid.is_none() {
            // Pre-bound to a claim that has not taken it yet.
            set_volume_phase(ctx, &pv, "Available").await
        } else {
            // Binding in progress: the claim's sync finishes it.
            Ok(None)
        };
    }
    let policy = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain");
    let provisioned = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| !p.is_empty());
    if policy == "Delete" && !provisioned {
        let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
        return match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(None),
            Err(e) if cu::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    set_volume_phase(ctx, &pv, "Released").await
}

/// Requested storage of a claim in bytes (0 when unset).
fn requested_bytes(pvc: &PersistentVolumeClaim) -> i128 {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .map_or(0, |q| q.nanos() / 1_000_000_000)
}

fn capacity_bytes(pv: &PersistentVolume) -> i128 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .map_or(0, |q| q.nanos() / 1_000_000_000)
}

/// Whether `pv` can serve `pvc`: class, access modes, volume mode, selector and size, as
/// upstream's `findMatchingVolume` checks them.
pub fn volume_matches(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let (Some(vs), Some(cs)) = (pv.spec.as_ref(), pvc.spec.as_ref()) else {
        return false;
    };
    let class = |c: Option<&String>| c.cloned().unwrap_or_default();
    if class(vs.storage_class_name.as_ref()) != class(cs.storage_class_name.as_ref()) {
        return false;
    }
    let mode = |m: Option<&String>| m.cloned().unwrap_or_else(|| "Filesystem".into());
    if mode(vs.volume_mode.as_ref()) != mode(cs.volume_mode.as_ref()) {
        return false;
    }
    let offered = vs.access_modes.clone().unwrap_or_default();
    if !cs
        .access_modes
        .iter()
        .flatten()
        .all(|m| offered.contains(m))
    {
        return false;
    }
    if let Some(sel) = &cs.selector
        && !cu::selector_matches(sel, pv.metadata.labels.as_ref())
    {
        return false;
    }
    capacity_bytes(pv) >= requested_bytes(pvc)
}

async fn sync_claim(ctx: &Ctx, ns: &str, name: &str) -> SyncResult {
    let Some(pvc) = ctx.claims.get(ns, name) else {
        return Ok(None);
    };
    if pvc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let wanted = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
    if phase_of_claim(&pvc) == "Bound" {
        return match wanted.as_deref().and_then(|v| ctx.volumes.get("", v)) {
            Some(_) => Ok(None),
            None => {
                set_claim_status(ctx, &pvc, "Lost", None).await?;
                events::record(
                    &ctx.client,
                    COMPONENT,
                    pvc.as_ref(),
                    EventType::Warning,
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                )
                .await;
                Ok(None)
            }
        };
    }
    let pv = match &wanted {
        Some(v) => match ctx.volumes.get("", v) {
            Some(pv) => {
                let reserved_for_other = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .is_some_and(|c| {
                        c.name.as_deref() != Some(name) || c.namespace.as_deref() != Some(ns)
                    });
                if reserved_for_other {
                    events::record(
                        &ctx.client,
                        COMPONENT,
                        pvc.as_ref(),
                        EventType::Warning,
                        "FailedBinding",
                        &format!("volume \"{v}\" already bound to a different claim."),
                    )
                    .await;
                    return Ok(None);
                }
                pv
            }
            None => return Ok(None),
        },
        None => {
            let class = claim_class(&pvc).and_then(|c| ctx.classes.get("", c));
            let delayed = class
                .as_ref()
                .and_then(|c| c.volume_binding_mode.as_deref())
                == Some("WaitForFirstConsumer");
            let selected = pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE))
                .cloned();
            let mut candidates: Vec<Arc<PersistentVolume>> = ctx
                .volumes
                .list()
                .into_iter()
                .filter(|pv| {
                    let Some(spec) = pv.spec.as_ref() else {
                        return false;
                    };
                    let reserved_here = spec.claim_ref.as_ref().is_some_and(|c| {
                        c.name.as_deref() == Some(name) && c.namespace.as_deref() == Some(ns)
                    });
                    let usable = match (delayed, &selected) {
                        (false, _) => true,
                        (true, _) if reserved_here => true,
                        (true, None) => false,
                        (true, Some(node)) => admits_node(pv, node),
                    };
                    pv.metadata.deletion_timestamp.is_none()
                        && (spec.claim_ref.is_none() || reserved_here)
                        && usable
                        && volume_matches(pv, &pvc)
                })
                .collect();
            candidates.sort_by_key(|pv| (capacity_bytes(pv), pv.name_any()));
            match candidates.into_iter().next() {
                Some(pv) => pv,
                None => return no_volume(ctx, &pvc, class.as_deref(), delayed, selected).await,
            }
        }
    };
    bind(ctx, &pv, &pvc, wanted.is_none()).await
}

/// The class a claim names (`spec.storageClassName`, else the legacy beta annotation).
fn claim_class(pvc: &PersistentVolumeClaim) -> Option<&str> {
    crate::local_path::claim_class(pvc)
}

/// Whether a volume's required node affinity admits the node `node` (named, and labelled
/// `kubernetes.io/hostname`, alike). A volume without node affinity admits every node.
fn admits_node(pv: &PersistentVolume, node: &str) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    let labels = BTreeMap::from([(HOSTNAME_LABEL.to_string(), node.to_string())]);
    let node = NodeView {
        name: node,
        labels: &labels,
    };
    match_node_selector_terms(&required.node_selector_terms, node)
}

/// Forgets the events recorded about a deleted claim.
fn forget_reports(ctx: &Ctx, pvc: &PersistentVolumeClaim) {
    let prefix = format!("{}/", pvc.metadata.uid.as_deref().unwrap_or_default());
    if let Ok(mut r) = ctx.reported.lock() {
        r.retain(|k| !k.starts_with(&prefix));
    }
}

/// Records an event about a claim once per claim and reason.
async fn report_once(
    ctx: &Ctx,
    pvc: &PersistentVolumeClaim,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let key = format!(
        "{}/{reason}",
        pvc.metadata.uid.as_deref().unwrap_or_default()
    );
    let first = ctx
        .reported
        .lock()
        .map(|mut r| r.insert(key))
        .unwrap_or(true);
    if first {
        events::record(&ctx.client, COMPONENT, pvc, type_, reason, message).await;
    }
}

/// No existing volume fits an unbound claim: wait for its first consumer, hand it to its
/// class's provisioner, or say why nothing can happen (upstream `syncUnboundClaim`).
async fn no_volume(
    ctx: &Ctx,
    pvc: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    delayed: bool,
    selected: Option<String>,
) -> SyncResult {
    let class_name = claim_class(pvc).unwrap_or_default().to_string();
    let Some(class) = class else {
        let msg = if class_name.is_empty() {
            "no persistent volumes available for this claim and no storage class is set".to_string()
        } else {
            format!("storageclass.storage.k8s.io \"{class_name}\" not found")
        };
        report_once(ctx, pvc, EventType::Normal, "FailedBinding", &msg).await;
        return Ok(None);
    };
    if delayed && selected.is_none() {
        report_once(
            ctx,
            pvc,
            EventType::Normal,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        )
        .await;
        return Ok(None);
    }
    if class.provisioner == NO_PROVISIONER {
        report_once(
            ctx,
            pvc,
            EventType::Normal,
            "FailedBinding",
            "no persistent volumes available for this claim",
        )
        .await;
        return Ok(None);
    }
    let annotations = pvc.metadata.annotations.clone().unwrap_or_default();
    let handed = [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
        .iter()
        .all(|k| annotations.get(*k) == Some(&class.provisioner));
    if !handed {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(ctx.client.clone(), &pvc.namespace().unwrap_or_default());
        let patch = json!({"metadata": {"annotations": {
            STORAGE_PROVISIONER: class.provisioner,
            BETA_STORAGE_PROVISIONER: class.provisioner,
        }}});
        match api
            .patch(
                &pvc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    report_once(
        ctx,
        pvc,
        EventType::Normal,
        "ExternalProvisioning",
        &format!(
            "Waiting for a volume to be created either by the external provisioner '{}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
            class.provisioner
        ),
    )
    .await;
    Ok(None)
}

async fn bind(
    ctx: &Ctx,
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
    by_controller: bool,
) -> SyncResult {
    let pv_name = pv.name_any();
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let pv_api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    // 1. The volume's claimRef (with the claim's uid: the binding is now final).
    let claim_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: Some(ns.clone()),
        name: Some(name.clone()),
        uid: pvc.metadata.uid.clone(),
        resource_version: pvc.metadata.resource_version.clone(),
        field_path: None,
    };
    let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    if current.and_then(|c| c.uid.as_ref()) != pvc.metadata.uid.as_ref() {
        let mut patch = json!({ "spec": { "claimRef": claim_ref } });
        if by_controller {
            patch["metadata"] = json!({ "annotations": { BOUND_BY_CONTROLLER: "yes" } });
        }
        match pv_api
            .patch(&pv_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    set_volume_phase(ctx, pv, "Bound").await?;
    // 2. The claim's volumeName and the bind-completed annotation.
    let mut annotations = BTreeMap::from([(BIND_COMPLETED.to_string(), "yes".to_string())]);
    if by_controller {
        annotations.insert(BOUND_BY_CONTROLLER.to_string(), "yes".to_string());
    }
    let patch = json!({
        "metadata": { "annotations": annotations },
        "spec": { "volumeName": pv_name },
    });
    match pvc_api
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        Err(e) if cu::is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // 3. The claim's status.
    set_claim_status(ctx, pvc, "Bound", Some(pv)).await?;
    Ok(None)
}

async fn set_claim_status(
    ctx: &Ctx,
    pvc: &PersistentVolumeClaim,
    phase: &str,
    pv: Option<&PersistentVolume>,
) -> SyncResult {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &pvc.namespace().unwrap_or_default());
    let status = PersistentVolumeClaimStatus {
        phase: Some(phase.to_string()),
        access_modes: pv.and_then(|v| v.spec.as_ref().and_then(|s| s.access_modes.clone())),
        capacity: pv.and_then(|v| v.spec.as_ref().and_then(|s| s.capacity.clone())),
        ..PersistentVolumeClaimStatus::default()
    };
    cu::merge_patch_status(&api, &pvc.name_any(), &json!({ "status": status })).await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn pv(json: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json).unwrap()
    }

    fn pvc(json: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn matching_follows_class_modes_size_and_selector() {
        let claim = pvc(json!({
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "manual",
                     "resources": {"requests": {"storage": "1Gi"}},
                     "selector": {"matchLabels": {"tier": "fast"}}}
        }));
        let good = pv(json!({
            "metadata": {"name": "a", "labels": {"tier": "fast"}},
            "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
                     "storageClassName": "manual", "hostPath": {"path": "/tmp/a"}}
        }));
        assert!(volume_matches(&good, &claim));
        let mut small = good.clone();
        small.spec.as_mut().unwrap().capacity = Some(BTreeMap::from([(
            "storage".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("512Mi".into()),
        )]));
        assert!(!volume_matches(&small, &claim));
        let mut other_class = good.clone();
        other_class.spec.as_mut().unwrap().storage_class_name = Some("slow".into());
        assert!(!volume_matches(&other_class, &claim));
        let mut unlabelled = good.clone();
        unlabelled.metadata.labels = None;
        assert!(!volume_matches(&unlabelled, &claim));
        let mut rwx_only = good;
        rwx_only.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
        assert!(!volume_matches(&rwx_only, &claim));
    }
}
