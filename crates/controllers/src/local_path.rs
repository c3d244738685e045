//! The built-in local-path provisioner: what k3s ships as rancher/local-path-provisioner, as an
//! external provisioner in upstream's sense (`sig-storage-lib-external-provisioner`'s
//! `ProvisionController`, driven by the annotations `pkg/controller/volume/persistentvolume`
//! writes).
//!
//! - **Provisioning.** The binder ([`crate::persistent_volume`]) hands a claim of a class with a
//!   provisioner over by annotating it `volume.kubernetes.io/storage-provisioner`. For claims
//!   handed to `tandem.io/local-path`, this controller creates the PersistentVolume
//!   `pvc-<claim uid>`: a `hostPath` (`DirectoryOrCreate`) at
//!   `<root>/pvc-<uid>_<namespace>_<claim>` on one node, with a required node affinity to that
//!   node (`kubernetes.io/hostname`), the requested capacity, the class's reclaim policy and
//!   mount options, `pv.kubernetes.io/provisioned-by`, and a `claimRef` naming the claim, so
//!   the binder binds the two. The node is the claim's `volume.kubernetes.io/selected-node`
//!   (set by the scheduler) for `WaitForFirstConsumer` classes; for `Immediate` ones, the first
//!   Ready, schedulable Linux node (by name) that fits the class's `allowedTopologies`.
//!   `<root>` is the node's [`ROOT_ANNOTATION`](lp::ROOT_ANNOTATION) (its agent's data
//!   directory) or `/var/lib/tandem/storage`. Events on the claim are upstream's:
//!   `Provisioning`, `ProvisioningSucceeded`, `ProvisioningFailed`. A claim this provisioner can
//!   never serve (shared access modes, block mode, no size) gives its selected node back, so
//!   the scheduler's wait for it ends.
//! - **Emulated nodes** (the emulated runtime, which every Windows node of tandem uses) run no
//!   processes, so nothing ever writes to their directories: their volumes carry the
//!   [`EMULATED_ANNOTATION`](lp::EMULATED_ANNOTATION) and the `ProvisioningSucceeded` event says
//!   so.
//! - **Reclaim.** A provisioned volume whose claim is gone is `Released` by the binder. With
//!   reclaim policy `Delete`, its directory must go first, and only the node's agent can remove
//!   it: this controller lists such volumes on their Node
//!   ([`CLEANUP_ANNOTATION`](lp::CLEANUP_ANNOTATION)), the agent removes the directories and
//!   answers ([`CLEANED_ANNOTATION`](lp::CLEANED_ANNOTATION)), and this controller deletes the
//!   volumes (see [`tandem_core::local_path`]). A volume whose node no longer exists is deleted
//!   at once (its disk went with it), and so is one of an emulated node (no directory was ever
//!   written; emulated agents take no part in the handshake). `Retain` keeps the volume and its
//!   directory.
//!
//! The default StorageClass `local-path` is installed by [`install_default_class`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_core::local_path as lp;
pub use tandem_core::local_path::claim_class;

use crate::controller_utils::{self as cu, SyncResult};
use crate::events::{self, EventType};
use crate::informer::{Informer, split_key};
use crate::persistent_volume::claim_key;
use crate::workqueue::WorkQueue;

/// Events name the provisioner as their source, as external provisioners do.
const COMPONENT: &str = lp::PROVISIONER;
/// How long a claim that cannot be provisioned now waits before the next try.
const RETRY: Duration = Duration::from_secs(10);

/// Why a claim gets no volume (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    /// `WaitForFirstConsumer` and no node selected yet: not an error, nothing to report.
    #[error("waiting for a consumer to be scheduled")]
    WaitingForConsumer,
    /// The selected node does not exist.
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// `Immediate` binding and no node can hold the volume.
    #[error("no Ready, schedulable Linux node fits the storage class's allowedTopologies")]
    NoNode,
    /// The claim asks for what a node directory cannot give.
    #[error("{0}")]
    Unsupported(String),
}

/// The default StorageClass tandem installs: `local-path`, the cluster default,
/// `WaitForFirstConsumer`, reclaim `Delete` (k3s' `local-storage` manifest).
pub fn default_class() -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": lp::DEFAULT_CLASS,
            "annotations": {
                tandem_core::admission::default_storage_class::IS_DEFAULT_CLASS: "true",
            },
        },
        "provisioner": lp::PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .unwrap_or_default()
}

/// Creates the default StorageClass if it is missing, retrying (every 2 s, for up to ten
/// minutes) while the API does not serve StorageClasses yet or refuses. Run by whoever installs
/// the cluster's add-ons (`tandem server`/`up` with the admin client), once at start: a class
/// deleted later is created again at the next start, as k3s' add-on manifests are.
pub async fn install_default_class(client: kube::Client) {
    let api: Api<StorageClass> = Api::all(client);
    for attempt in 0..300u32 {
        match api.create(&PostParams::default(), &default_class()).await {
            Ok(_) => return,
            Err(e) if cu::is_already_exists(&e) => return,
            Err(e) => {
                if attempt % 30 == 29 {
                    tracing::warn!(error = %e, "cannot create the default StorageClass local-path yet");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::warn!("gave up creating the default StorageClass local-path");
}

struct Ctx {
    client: kube::Client,
    claims: Informer<PersistentVolumeClaim>,
    volumes: Informer<PersistentVolume>,
    classes: Informer<StorageClass>,
    nodes: Informer<Node>,
    queue: WorkQueue,
}

/// Runs the provisioner until the runtime stops. `nodes` is the shared Node informer.
pub async fn run(client: kube::Client, nodes: Informer<Node>) {
    let ctx = Arc::new(Ctx {
        claims: Informer::start(client.clone()),
        volumes: Informer::start(client.clone()),
        classes: Informer::start(client.clone()),
        nodes,
        client,
        queue: WorkQueue::named("local-path"),
    });
    let mut claim_events = ctx.claims.subscribe();
    let mut volume_events = ctx.volumes.subscribe();
    let mut class_events = ctx.classes.subscribe();
    let mut node_events = ctx.nodes.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.claims, &ctx.volumes, &ctx.classes, &ctx.nodes])
        .await;
    ctx.queue
        .run_workers_for(1, "local-path", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    for pvc in ctx.claims.list() {
        ctx.queue.add(claim_key(&pvc));
    }
    for node in ctx.nodes.list() {
        ctx.queue.add(format!("node/{}", node.name_any()));
    }
    loop {
        tokio::select! {
            Some(change) = claim_events.recv() => {
                for pvc in change.objects() {
                    ctx.queue.add(claim_key(pvc));
                }
            }
            Some(change) = volume_events.recv() => {
                for pv in change.objects() {
                    if let Some(host) = provisioned_node(pv) {
                        ctx.queue.add(format!("node/{host}"));
                    }
                }
            }
            Some(_) = class_events.recv() => requeue_waiting_claims(&ctx),
            Some(change) = node_events.recv() => {
                for node in change.objects() {
                    ctx.queue.add(format!("node/{}", node.name_any()));
                }
                // A node that became Ready may take an Immediate claim.
                requeue_waiting_claims(&ctx);
            }
            else => return,
        }
    }
}

fn requeue_waiting_claims(ctx: &Ctx) {
    for pvc in ctx.claims.list() {
        if handed_to_us(&pvc) && volume_name_of(&pvc).is_none() {
            ctx.queue.add(claim_key(&pvc));
        }
    }
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    if let Some(rest) = key.strip_prefix("pvc/") {
        let (ns, name) = split_key(rest);
        return sync_claim(ctx, ns, name).await;
    }
    if let Some(host) = key.strip_prefix("node/") {
        return sync_node(ctx, host).await;
    }
    Ok(None)
}

/// Whether the binder handed the claim to this provisioner.
fn handed_to_us(pvc: &PersistentVolumeClaim) -> bool {
    let a = pvc.annotations();
    [lp::STORAGE_PROVISIONER, lp::BETA_STORAGE_PROVISIONER]
        .iter()
        .any(|k| a.get(*k).map(String::as_str) == Some(lp::PROVISIONER))
}

fn volume_name_of(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty())
}

async fn sync_claim(ctx: &Ctx, ns: &str, name: &str) -> SyncResult {
    let Some(pvc) = ctx.claims.get(ns, name) else {
        return Ok(None);
    };
    if pvc.metadata.deletion_timestamp.is_some()
        || volume_name_of(&pvc).is_some()
        || !handed_to_us(&pvc)
    {
        return Ok(None);
    }
    let Some(class_name) = claim_class(&pvc) else {
        return Ok(None);
    };
    let Some(class) = ctx.classes.get("", class_name) else {
        let msg = format!("storageclass.storage.k8s.io {class_name:?} not found");
        failed(ctx, &pvc, &msg).await;
        return Ok(Some(RETRY));
    };
    if class.provisioner != lp::PROVISIONER {
        return Ok(None);
    }
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    if ctx.volumes.get("", &lp::volume_name(&uid)).is_some() {
        // Provisioned already; the binder binds it.
        return Ok(None);
    }
    let nodes = ctx.nodes.list();
    let volume = match plan_volume(&pvc, &class, &nodes) {
        Ok(v) => v,
        Err(ProvisionError::WaitingForConsumer) => return Ok(None),
        Err(e @ ProvisionError::Unsupported(_)) => {
            // Only a change of the claim (which requeues it) can help. A node selected for it
            // is given back, so the scheduler's binding fails now rather than at its timeout
            // (the provisioning library's `rescheduleProvisioning`).
            failed(ctx, &pvc, &e.to_string()).await;
            if pvc.annotations().contains_key(lp::SELECTED_NODE) {
                let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
                let patch = json!({"metadata": {"annotations": {lp::SELECTED_NODE: null}}});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if cu::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(None);
        }
        Err(e) => {
            failed(ctx, &pvc, &e.to_string()).await;
            return Ok(Some(RETRY));
        }
    };
    events::record(
        &ctx.client,
        COMPONENT,
        pvc.as_ref(),
        EventType::Normal,
        "Provisioning",
        &format!("External provisioner is provisioning volume for claim \"{ns}/{name}\""),
    )
    .await;
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &volume).await {
        Ok(_) => {}
        Err(e) if cu::is_already_exists(&e) => return Ok(None),
        Err(e) => {
            failed(ctx, &pvc, &format!("failed to create volume: {e}")).await;
            return Err(e.into());
        }
    }
    let mut msg = format!("Successfully provisioned volume {}", volume.name_any());
    if let Some(why) = volume.annotations().get(lp::EMULATED_ANNOTATION) {
        msg.push_str(&format!(" (emulated: {why})"));
    }
    events::record(
        &ctx.client,
        COMPONENT,
        pvc.as_ref(),
        EventType::Normal,
        "ProvisioningSucceeded",
        &msg,
    )
    .await;
    Ok(None)
}

async fn failed(ctx: &Ctx, pvc: &PersistentVolumeClaim, msg: &str) {
    provisioning_failed(&ctx.client, COMPONENT, pvc, msg).await;
}

/// The provisioning library's `ProvisioningFailed` warning on a claim
/// (`sig-storage-lib-external-provisioner`'s `provisionClaimOperation`), recorded by both of
/// tandem's provisioners.
pub(crate) async fn provisioning_failed(
    client: &kube::Client,
    component: &str,
    pvc: &PersistentVolumeClaim,
    msg: &str,
) {
    events::record(
        client,
        component,
        pvc,
        EventType::Warning,
        "ProvisioningFailed",
        &format!(
            "failed to provision volume with StorageClass \"{}\": {msg}",
            claim_class(pvc).unwrap_or_default()
        ),
    )
    .await;
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn hostname_of(node: &Node) -> String {
    node_label(node, lp::HOSTNAME_LABEL)
        .map(str::to_string)
        .unwrap_or_else(|| node.name_any())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn is_emulated(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .is_some_and(|i| i.container_runtime_version.starts_with("emulated"))
}

/// Whether the node fits the class's `allowedTopologies` (any term; every expression of a term
/// must find the node's label among its values). No topologies: every node fits.
pub fn fits_topologies(class: &StorageClass, node: &Node) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or_default();
    terms.is_empty()
        || terms.iter().any(|t| {
            t.match_label_expressions
                .iter()
                .flatten()
                .all(|e| node_label(node, &e.key).is_some_and(|v| e.values.iter().any(|x| x == v)))
        })
}

/// The PersistentVolume to create for `pvc` of `class` (a local-path class), with `nodes` the
/// cluster's nodes; see the module documentation.
pub fn plan_volume(
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    nodes: &[Arc<Node>],
) -> Result<PersistentVolume, ProvisionError> {
    let spec = pvc.spec.clone().unwrap_or_default();
    let modes = spec.access_modes.clone().unwrap_or_default();
    if let Some(m) = modes
        .iter()
        .find(|m| !matches!(m.as_str(), "ReadWriteOnce" | "ReadWriteOncePod"))
    {
        return Err(ProvisionError::Unsupported(format!(
            "access mode {m} is not supported: a local-path volume is one directory on one node (ReadWriteOnce, ReadWriteOncePod)"
        )));
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(ProvisionError::Unsupported(
            "volumeMode Block is not supported: a local-path volume is a directory".into(),
        ));
    }
    let Some(size) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
    else {
        return Err(ProvisionError::Unsupported(
            "the claim requests no storage".into(),
        ));
    };
    let wait_for_consumer = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    let node = if wait_for_consumer {
        let Some(selected) = pvc.annotations().get(lp::SELECTED_NODE) else {
            return Err(ProvisionError::WaitingForConsumer);
        };
        nodes
            .iter()
            .find(|n| n.name_any() == *selected)
            .ok_or_else(|| ProvisionError::NodeNotFound(selected.clone()))?
    } else {
        let mut candidates: Vec<&Arc<Node>> = nodes
            .iter()
            .filter(|n| {
                node_label(n, "kubernetes.io/os") == Some("linux")
                    && !n
                        .spec
                        .as_ref()
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false)
                    && is_ready(n)
                    && fits_topologies(class, n)
            })
            .collect();
        candidates.sort_by_key(|n| n.name_any());
        candidates
            .into_iter()
            .next()
            .ok_or(ProvisionError::NoNode)?
    };
    let root = node
        .annotations()
        .get(lp::ROOT_ANNOTATION)
        .filter(|r| lp::valid_root(r))
        .map_or(lp::DEFAULT_ROOT, String::as_str)
        .trim_end_matches('/');
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let path = format!("{root}/{}", lp::directory_name(&uid, &ns, &name));
    let mut annotations =
        BTreeMap::from([(lp::PROVISIONED_BY.to_string(), lp::PROVISIONER.to_string())]);
    if is_emulated(node) {
        let os = node_label(node, "kubernetes.io/os").unwrap_or("linux");
        annotations.insert(
            lp::EMULATED_ANNOTATION.to_string(),
            format!(
                "node {} runs the emulated runtime ({os}): no process writes to {path}, the volume holds no data",
                node.name_any()
            ),
        );
    }
    let volume = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": lp::volume_name(&uid),
            "annotations": annotations,
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            "storageClassName": class.name_any(),
            "mountOptions": class.mount_options,
            "volumeMode": "Filesystem",
            "hostPath": {"path": path, "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                "key": lp::HOSTNAME_LABEL, "operator": "In", "values": [hostname_of(node)],
            }]}]}},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": ns,
                "name": name,
                "uid": uid,
                "resourceVersion": pvc.resource_version(),
            },
        },
    });
    serde_json::from_value(volume).map_err(|e| ProvisionError::Unsupported(e.to_string()))
}

/// The hostname a provisioned volume's node affinity names, for volumes of this provisioner.
pub fn provisioned_node(pv: &PersistentVolume) -> Option<String> {
    if pv.annotations().get(lp::PROVISIONED_BY).map(String::as_str) != Some(lp::PROVISIONER) {
        return None;
    }
    pv.spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|e| e.key == lp::HOSTNAME_LABEL && e.operator == "In")
        .and_then(|e| e.values.as_ref()?.first().cloned())
}

/// Whether the volume waits for its directory to be removed: ours, Released, reclaim Delete.
fn awaits_cleanup(pv: &PersistentVolume) -> bool {
    let spec = pv.spec.as_ref();
    pv.metadata.deletion_timestamp.is_none()
        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
        && spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) == Some("Delete")
}

/// Reconciles the reclaim handshake of one node (named by its hostname label or its name).
async fn sync_node(ctx: &Ctx, host: &str) -> SyncResult {
    let released: Vec<Arc<PersistentVolume>> = ctx
        .volumes
        .list()
        .into_iter()
        .filter(|pv| provisioned_node(pv).as_deref() == Some(host) && awaits_cleanup(pv))
        .collect();
    let node = ctx
        .nodes
        .list()
        .into_iter()
        .find(|n| hostname_of(n) == host || n.name_any() == host);
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let delete = |name: String| {
        let api = api.clone();
        async move {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if cu::is_not_found(&e) => Ok(()),
                Err(e) => Err(e),
            }
        }
    };
    let Some(node) = node.filter(|n| !is_emulated(n)) else {
        // The node and its disk are gone, or it is emulated and never wrote a directory:
        // nothing is left to remove.
        for pv in released {
            delete(pv.name_any()).await?;
        }
        return Ok(None);
    };
    let annotations = node.annotations();
    let cleaned = lp::parse_cleaned(annotations.get(lp::CLEANED_ANNOTATION).map(String::as_str));
    let mut wanted = BTreeMap::new();
    for pv in released {
        let name = pv.name_any();
        if cleaned.contains(&name) {
            delete(name).await?;
            continue;
        }
        if let Some(path) = pv.spec.as_ref().and_then(|s| s.host_path.as_ref()) {
            wanted.insert(name, path.path.clone());
        }
    }
    let current = lp::parse_cleanup(annotations.get(lp::CLEANUP_ANNOTATION).map(String::as_str));
    if current != wanted {
        let patch = json!({"metadata": {"annotations": {
            lp::CLEANUP_ANNOTATION: lp::format_cleanup(&wanted),
        }}});
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        match nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn node(name: &str, os: &str, runtime: &str, root: Option<&str>) -> Arc<Node> {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/os": os, "kubernetes.io/hostname": name, "zone": "a"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"containerRuntimeVersion": runtime, "architecture": "amd64",
                                    "bootID": "", "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                                    "machineID": "", "operatingSystem": os, "osImage": "", "systemUUID": ""}}
        });
        if let Some(r) = root {
            n["metadata"]["annotations"] = json!({ lp::ROOT_ANNOTATION: r });
        }
        Arc::new(serde_json::from_value(n).unwrap())
    }

    fn class(mode: &str) -> StorageClass {
        let mut c = default_class();
        c.volume_binding_mode = Some(mode.into());
        c
    }

    fn claim(selected: Option<&str>, modes: &[&str]) -> PersistentVolumeClaim {
        let mut c = json!({
            "metadata": {"name": "data", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"accessModes": modes, "storageClassName": "local-path",
                     "resources": {"requests": {"storage": "2Gi"}}}
        });
        if let Some(n) = selected {
            c["metadata"]["annotations"] = json!({ lp::SELECTED_NODE: n });
        }
        serde_json::from_value(c).unwrap()
    }

    #[test]
    fn wait_for_first_consumer_provisions_on_the_selected_node() {
        let nodes = [
            node("a", "linux", "containerd://2.0", Some("/data/a/storage")),
            node("b", "linux", "containerd://2.0", None),
        ];
        let c = class("WaitForFirstConsumer");
        assert_eq!(
            plan_volume(&claim(None, &["ReadWriteOnce"]), &c, &nodes).unwrap_err(),
            ProvisionError::WaitingForConsumer
        );
        let pv = plan_volume(&claim(Some("a"), &["ReadWriteOnce"]), &c, &nodes).unwrap();
        let v = serde_json::to_value(&pv).unwrap();
        assert_eq!(v["metadata"]["name"], "pvc-u-1");
        assert_eq!(
            v["metadata"]["annotations"][lp::PROVISIONED_BY],
            lp::PROVISIONER
        );
        assert!(
            v["metadata"]["annotations"]
                .get(lp::EMULATED_ANNOTATION)
                .is_none()
        );
        assert_eq!(
            v["spec"]["hostPath"]["path"],
            "/data/a/storage/pvc-u-1_shop_data"
        );
        assert_eq!(v["spec"]["hostPath"]["type"], "DirectoryOrCreate");
        assert_eq!(v["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(v["spec"]["claimRef"]["uid"], "u-1");
        assert_eq!(
            v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
                [0],
            "a"
        );
        assert_eq!(provisioned_node(&pv).as_deref(), Some("a"));
        let on_b = plan_volume(&claim(Some("b"), &["ReadWriteOnce"]), &c, &nodes).unwrap();
        assert_eq!(
            on_b.spec.unwrap().host_path.unwrap().path,
            "/var/lib/tandem/storage/pvc-u-1_shop_data"
        );
        assert_eq!(
            plan_volume(&claim(Some("gone"), &["ReadWriteOnce"]), &c, &nodes).unwrap_err(),
            ProvisionError::NodeNotFound("gone".into())
        );
    }

    #[test]
    fn immediate_binding_picks_a_ready_linux_node_in_the_allowed_topologies() {
        let nodes = [
            node("a-win", "windows", "emulated://tandem-0.1.0", None),
            node("b", "linux", "containerd://2.0", None),
        ];
        let mut c = class("Immediate");
        let pv = plan_volume(&claim(None, &["ReadWriteOnce"]), &c, &nodes).unwrap();
        assert_eq!(provisioned_node(&pv).as_deref(), Some("b"));
        c.allowed_topologies = serde_json::from_value(json!([
            {"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}
        ]))
        .unwrap();
        assert_eq!(
            plan_volume(&claim(None, &["ReadWriteOnce"]), &c, &nodes).unwrap_err(),
            ProvisionError::NoNode
        );
    }

    #[test]
    fn volumes_on_emulated_windows_nodes_say_they_are_emulated() {
        let nodes = [node("win", "windows", "emulated://tandem-0.1.0", None)];
        let pv = plan_volume(
            &claim(Some("win"), &["ReadWriteOnce"]),
            &class("WaitForFirstConsumer"),
            &nodes,
        )
        .unwrap();
        let why = pv.annotations().get(lp::EMULATED_ANNOTATION).unwrap();
        assert!(why.contains("emulated runtime (windows)"), "{why}");
    }

    #[test]
    fn shared_access_modes_are_refused() {
        let nodes = [node("a", "linux", "containerd://2.0", None)];
        let err = plan_volume(
            &claim(Some("a"), &["ReadWriteMany"]),
            &class("WaitForFirstConsumer"),
            &nodes,
        )
        .unwrap_err();
        assert!(matches!(err, ProvisionError::Unsupported(m) if m.contains("ReadWriteMany")));
    }

    #[test]
    fn retain_class_gives_retain_volumes() {
        let nodes = [node("a", "linux", "containerd://2.0", None)];
        let mut c = class("WaitForFirstConsumer");
        c.reclaim_policy = Some("Retain".into());
        let pv = plan_volume(&claim(Some("a"), &["ReadWriteOnce"]), &c, &nodes).unwrap();
        assert_eq!(
            pv.spec.unwrap().persistent_volume_reclaim_policy.as_deref(),
            Some("Retain")
        );
    }
}
