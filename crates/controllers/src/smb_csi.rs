//! The emulated SMB CSI driver's control-plane half: what kubernetes-csi/csi-driver-smb's
//! controller plugin does behind the external provisioner (`sig-storage-lib-external-provisioner`
//! `ProvisionController`, kubernetes-csi/external-provisioner `csiProvisioner.Provision` and
//! `Delete`) and the external resizer, for the driver `smb.csi.k8s.io`. Nothing talks SMB: each
//! share is a directory on this machine (see [`tandem_core::smb_csi`]), and every object this
//! controller writes says so.
//!
//! - **Installation** ([`install`], run by `tandem up`/`server` as the installer, like the
//!   default local-path class): the CSIDriver `smb.csi.k8s.io` (`attachRequired: false`,
//!   `podInfoOnMount: true`, `volumeLifecycleModes: [Persistent]`) naming the share root, and the
//!   StorageClass `smb-csi` (share `//tandem-emulated-smb/share`, reclaim `Delete`, `Immediate`,
//!   `allowVolumeExpansion: true`), not the default; each only if absent, so a user's own wins.
//! - **Provisioning.** A claim the binder ([`crate::persistent_volume`]) handed to
//!   `smb.csi.k8s.io` (`volume.kubernetes.io/storage-provisioner`) gets the PersistentVolume
//!   `pvc-<claim uid>`: `spec.csi` with the driver, the handle `<server/share>#<subDir>`, the
//!   class's parameters (less the `csi.storage.k8s.io/` ones) plus `subDir` as attributes, and
//!   the node-stage secret of the class's `csi.storage.k8s.io/node-stage-secret-*` parameters;
//!   every access mode of the claim (a share serves `ReadWriteMany`, `ReadOnlyMany`,
//!   `ReadWriteOnce` alike), the requested capacity, the class's reclaim policy and mount
//!   options, no node affinity (every node reaches a share), `pv.kubernetes.io/provisioned-by`,
//!   and a `claimRef` naming the claim so the binder binds the two. `subDir` is the class's
//!   `subDir` parameter (its `${pvc.metadata.*}`/`${pv.metadata.name}` templates expanded), else
//!   the volume's name. The directory is created under the share, as `CreateVolume` does.
//!   `WaitForFirstConsumer` classes provision once the scheduler selected a node; `Immediate`
//!   ones at once. Events on the claim are the external provisioner's: `Provisioning`,
//!   `ProvisioningSucceeded` (saying the volume is emulated), `ProvisioningFailed` (`volumeMode:
//!   Block`, no size, an invalid share).
//! - **Deletion.** A volume of this driver whose claim is gone is `Released` by the binder; with
//!   reclaim `Delete` this controller removes its directory (`onDelete: delete`, the default;
//!   `retain` keeps it, `archive` renames it `archived-<subDir>`), then deletes the volume. A
//!   directory that cannot be removed leaves the volume `Released` with a `VolumeFailedDelete`
//!   event, retried.
//! - **Expansion** (the external resizer with a driver that needs no node expansion): a bound
//!   claim of a class with `allowVolumeExpansion` that asks for more than its volume holds gets
//!   the volume's capacity raised, then its own `status.capacity`, with `Resizing` and
//!   `VolumeResizeSuccessful` events. Nothing is enforced: the directory has no quota.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_core::local_path::{
    BETA_STORAGE_PROVISIONER, PROVISIONED_BY, SELECTED_NODE, STORAGE_PROVISIONER,
};
use tandem_core::smb_csi as smb;
use tandem_core::validation::quantity::Quantity;

use crate::controller_utils::{self as cu, SyncResult};
use crate::events::{self, EventType};
use crate::informer::{Informer, split_key};
use crate::local_path::{claim_class, provisioning_failed};
use crate::persistent_volume::claim_key;
use crate::workqueue::WorkQueue;

/// Events name the driver as their source, as the external provisioner does.
const COMPONENT: &str = smb::DRIVER;
/// How long a claim or volume that cannot be served now waits before the next try.
const RETRY: Duration = Duration::from_secs(10);
/// The prefix of the class parameters the external provisioner consumes itself.
const CSI_PARAMETER_PREFIX: &str = "csi.storage.k8s.io/";
const NODE_STAGE_SECRET_NAME: &str = "csi.storage.k8s.io/node-stage-secret-name";
const NODE_STAGE_SECRET_NAMESPACE: &str = "csi.storage.k8s.io/node-stage-secret-namespace";
/// Marks the CSIDriver and StorageClass tandem installed (and may update).
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Why a claim gets no volume (yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    /// `WaitForFirstConsumer` and no node selected yet: not an error, nothing to report.
    #[error("waiting for a consumer to be scheduled")]
    WaitingForConsumer,
    /// The claim or class asks for what a share cannot give.
    #[error("{0}")]
    Unsupported(String),
}

/// The CSIDriver tandem installs, naming `share_root` as where the emulated shares are.
pub fn csi_driver(share_root: &Path) -> CSIDriver {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {
            "name": smb::DRIVER,
            "labels": {MANAGED_BY: "tandem"},
            "annotations": {
                smb::EMULATED_ANNOTATION: smb::emulated_reason(share_root),
                smb::SHARE_ROOT_ANNOTATION: share_root.display().to_string(),
            },
        },
        "spec": {
            "attachRequired": false,
            "podInfoOnMount": true,
            "volumeLifecycleModes": ["Persistent"],
        },
    }))
    .unwrap_or_default()
}

/// The StorageClass `smb-csi` tandem installs (not the default class).
pub fn storage_class(share_root: &Path) -> StorageClass {
    serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": smb::CLASS,
            "labels": {MANAGED_BY: "tandem"},
            "annotations": {smb::EMULATED_ANNOTATION: smb::emulated_reason(share_root)},
        },
        "provisioner": smb::DRIVER,
        "parameters": {smb::SOURCE: smb::EMULATED_SOURCE},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))
    .unwrap_or_default()
}

/// Creates the CSIDriver and the StorageClass if missing, retrying (every 2 s, for up to ten
/// minutes) while the API does not serve them yet or refuses. `share_root` is where the
/// emulated server keeps its shares (`<data dir>/smb-share`). A CSIDriver tandem installed
/// before gets the current share root; anything else of those names is left as it is. Run once
/// at start by whoever installs the add-ons (`tandem up`/`server`, with the admin client).
pub async fn install(client: kube::Client, share_root: PathBuf) {
    // A relative data directory (`--data-dir .tandem`) still names one place for every reader.
    let share_root = std::path::absolute(&share_root).unwrap_or(share_root);
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let classes: Api<StorageClass> = Api::all(client);
    let driver = csi_driver(&share_root);
    let class = storage_class(&share_root);
    let (mut driver_done, mut class_done) = (false, false);
    for attempt in 0..300u32 {
        if !driver_done {
            driver_done = match drivers.create(&PostParams::default(), &driver).await {
                Ok(_) => true,
                Err(e) if cu::is_already_exists(&e) => refresh_driver(&drivers, &driver).await,
                Err(e) => {
                    if attempt % 30 == 29 {
                        tracing::warn!(error = %e, "cannot create the CSIDriver smb.csi.k8s.io yet");
                    }
                    false
                }
            };
        }
        if !class_done {
            class_done = match classes.create(&PostParams::default(), &class).await {
                Ok(_) => true,
                Err(e) if cu::is_already_exists(&e) => true,
                Err(e) => {
                    if attempt % 30 == 29 {
                        tracing::warn!(error = %e, "cannot create the StorageClass smb-csi yet");
                    }
                    false
                }
            };
        }
        if driver_done && class_done {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::warn!("gave up installing the emulated SMB CSI driver");
}

/// Brings the share root of a CSIDriver tandem installed up to date (the data directory may
/// have moved); a driver someone else installed is theirs. True when nothing is left to do.
async fn refresh_driver(api: &Api<CSIDriver>, wanted: &CSIDriver) -> bool {
    let existing = match api.get(smb::DRIVER).await {
        Ok(d) => d,
        Err(_) => return false,
    };
    let ours = existing.labels().get(MANAGED_BY).map(String::as_str) == Some("tandem");
    if !ours || existing.annotations() == wanted.annotations() {
        return true;
    }
    let patch = json!({"metadata": {"annotations": wanted.annotations()}});
    api.patch(smb::DRIVER, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .is_ok()
}

struct Ctx {
    client: kube::Client,
    claims: Informer<PersistentVolumeClaim>,
    volumes: Informer<PersistentVolume>,
    classes: Informer<StorageClass>,
    drivers: Informer<CSIDriver>,
    queue: WorkQueue,
}

/// Runs the provisioner, deleter and resizer until the runtime stops.
pub async fn run(client: kube::Client) {
    let ctx = Arc::new(Ctx {
        claims: Informer::start(client.clone()),
        volumes: Informer::start(client.clone()),
        classes: Informer::start(client.clone()),
        drivers: Informer::start(client.clone()),
        client,
        queue: WorkQueue::named("smb-csi"),
    });
    let mut claim_events = ctx.claims.subscribe();
    let mut volume_events = ctx.volumes.subscribe();
    let mut class_events = ctx.classes.subscribe();
    let mut driver_events = ctx.drivers.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.claims, &ctx.volumes, &ctx.classes, &ctx.drivers])
        .await;
    ctx.queue
        .run_workers_for(1, "smb-csi", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    for pvc in ctx.claims.list() {
        ctx.queue.add(claim_key(&pvc));
    }
    for pv in ctx.volumes.list() {
        ctx.queue.add(format!("pv/{}", pv.name_any()));
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
                    if is_ours(pv) {
                        ctx.queue.add(format!("pv/{}", pv.name_any()));
                        if let Some(c) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                            ctx.queue.add(format!(
                                "pvc/{}/{}",
                                c.namespace.clone().unwrap_or_default(),
                                c.name.clone().unwrap_or_default()
                            ));
                        }
                    }
                }
            }
            Some(_) = class_events.recv() => requeue_claims(&ctx),
            Some(_) = driver_events.recv() => requeue_claims(&ctx),
            else => return,
        }
    }
}

fn requeue_claims(ctx: &Ctx) {
    for pvc in ctx.claims.list() {
        ctx.queue.add(claim_key(&pvc));
    }
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    if let Some(rest) = key.strip_prefix("pvc/") {
        let (ns, name) = split_key(rest);
        return sync_claim(ctx, ns, name).await;
    }
    if let Some(name) = key.strip_prefix("pv/") {
        return sync_volume(ctx, name).await;
    }
    Ok(None)
}

/// Whether the volume was provisioned by this driver.
fn is_ours(pv: &PersistentVolume) -> bool {
    pv.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(smb::DRIVER)
}

/// Whether the binder handed the claim to this driver.
fn handed_to_us(pvc: &PersistentVolumeClaim) -> bool {
    let a = pvc.annotations();
    [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
        .iter()
        .any(|k| a.get(*k).map(String::as_str) == Some(smb::DRIVER))
}

/// The share root the installed CSIDriver names (see [`smb::share_root`]).
fn share_root(ctx: &Ctx) -> PathBuf {
    let driver = ctx.drivers.get("", smb::DRIVER);
    smb::share_root(
        driver
            .as_ref()
            .and_then(|d| d.annotations().get(smb::SHARE_ROOT_ANNOTATION))
            .map(String::as_str),
    )
}

async fn sync_claim(ctx: &Ctx, ns: &str, name: &str) -> SyncResult {
    let Some(pvc) = ctx.claims.get(ns, name) else {
        return Ok(None);
    };
    if pvc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let volume_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    if let Some(volume_name) = volume_name {
        return expand(ctx, &pvc, volume_name).await;
    }
    if !handed_to_us(&pvc) {
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
    if class.provisioner != smb::DRIVER {
        return Ok(None);
    }
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    if ctx
        .volumes
        .get("", &tandem_core::local_path::volume_name(&uid))
        .is_some()
    {
        // Provisioned already; the binder binds it.
        return Ok(None);
    }
    let root = share_root(ctx);
    let volume = match plan_volume(&pvc, &class, &root) {
        Ok(v) => v,
        Err(ProvisionError::WaitingForConsumer) => return Ok(None),
        Err(e) => {
            // Only a change of the claim or class (both requeue it) can help.
            failed(ctx, &pvc, &e.to_string()).await;
            return Ok(None);
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
    // `CreateVolume`: the subdirectory of the share. Its failure is reported; the volume is
    // still created, as a node mounting it creates the directory too.
    if let Some(dir) = directory_of(&volume, &root)
        && let Err(e) = create_dir(&dir)
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot create the emulated SMB volume directory");
    }
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.create(&PostParams::default(), &volume).await {
        Ok(_) => {}
        Err(e) if cu::is_already_exists(&e) => return Ok(None),
        Err(e) => {
            failed(ctx, &pvc, &format!("failed to create volume: {e}")).await;
            return Err(e.into());
        }
    }
    let share = volume_attribute(&volume, smb::SOURCE).unwrap_or_default();
    events::record(
        &ctx.client,
        COMPONENT,
        pvc.as_ref(),
        EventType::Normal,
        "ProvisioningSucceeded",
        &format!(
            "Successfully provisioned volume {} (emulated: no SMB server serves {share}; the volume is a directory under {} on the tandem server's machine)",
            volume.name_any(),
            root.display()
        ),
    )
    .await;
    Ok(None)
}

async fn failed(ctx: &Ctx, pvc: &PersistentVolumeClaim, msg: &str) {
    provisioning_failed(&ctx.client, COMPONENT, pvc, msg).await;
}

/// A `spec.csi.volumeAttributes` entry of the volume.
fn volume_attribute(pv: &PersistentVolume, key: &str) -> Option<String> {
    pv.spec
        .as_ref()?
        .csi
        .as_ref()?
        .volume_attributes
        .as_ref()?
        .get(key)
        .cloned()
}

/// The directory standing in for the volume under `root`, if its attributes name a valid one.
pub fn directory_of(pv: &PersistentVolume, root: &Path) -> Option<PathBuf> {
    let source = volume_attribute(pv, smb::SOURCE)?;
    let sub_dir = volume_attribute(pv, smb::SUB_DIR)?;
    smb::volume_dir(root, &source, &sub_dir).ok()
}

/// `CreateVolume`'s `mkdir` (mode 0777 on the share, as csi-driver-smb makes it).
fn create_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

/// The PersistentVolume to create for `pvc` of `class` (a class of this driver), its share kept
/// under `root`; see the module documentation.
pub fn plan_volume(
    pvc: &PersistentVolumeClaim,
    class: &StorageClass,
    root: &Path,
) -> Result<PersistentVolume, ProvisionError> {
    let spec = pvc.spec.clone().unwrap_or_default();
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && !pvc.annotations().contains_key(SELECTED_NODE)
    {
        return Err(ProvisionError::WaitingForConsumer);
    }
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(ProvisionError::Unsupported(
            "rpc error: code = InvalidArgument desc = block volume capability not supported".into(),
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
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let ns = pvc.namespace().unwrap_or_default();
    let claim = pvc.name_any();
    let pv_name = tandem_core::local_path::volume_name(&uid);
    let params = class.parameters.clone().unwrap_or_default();
    let expand = |v: &str| smb::expand_template(v, &ns, &claim, &pv_name);
    let Some(source) = params.get(smb::SOURCE).filter(|s| !s.is_empty()) else {
        return Err(ProvisionError::Unsupported(
            "rpc error: code = InvalidArgument desc = source field is missing, current context: map[]"
                .into(),
        ));
    };
    let sub_dir = params
        .get(smb::SUB_DIR)
        .map(|s| expand(s))
        .unwrap_or_else(|| pv_name.clone());
    let dir = smb::volume_dir(root, source, &sub_dir).map_err(|e| {
        ProvisionError::Unsupported(format!("rpc error: code = InvalidArgument desc = {e}"))
    })?;
    let mut attributes: BTreeMap<String, String> = params
        .iter()
        .filter(|(k, _)| !k.starts_with(CSI_PARAMETER_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    attributes.insert(smb::SUB_DIR.to_string(), sub_dir.clone());
    let mut csi = json!({
        "driver": smb::DRIVER,
        "volumeHandle": smb::volume_handle(source, &sub_dir),
        "volumeAttributes": attributes,
    });
    if let Some(secret) = params.get(NODE_STAGE_SECRET_NAME) {
        let namespace = params
            .get(NODE_STAGE_SECRET_NAMESPACE)
            .map(|n| expand(n))
            .unwrap_or_else(|| ns.clone());
        csi["nodeStageSecretRef"] = json!({"name": expand(secret), "namespace": namespace});
    }
    let annotations = BTreeMap::from([
        (PROVISIONED_BY.to_string(), smb::DRIVER.to_string()),
        (
            smb::EMULATED_ANNOTATION.to_string(),
            format!(
                "no SMB server serves {source}: the volume is the directory {} on the tandem server's machine, bind-mounted into pods of the real Linux node; pods of emulated nodes (every Windows node) run no processes and see no data",
                dir.display()
            ),
        ),
    ]);
    let volume = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "annotations": annotations},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": spec.access_modes.clone().unwrap_or_default(),
            "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            "storageClassName": class.name_any(),
            "mountOptions": class.mount_options,
            "volumeMode": "Filesystem",
            "csi": csi,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": ns,
                "name": claim,
                "uid": uid,
                "resourceVersion": pvc.resource_version(),
            },
        },
    });
    serde_json::from_value(volume).map_err(|e| ProvisionError::Unsupported(e.to_string()))
}

/// What `DeleteVolume` does with a volume's directory (`onDelete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDelete {
    Delete,
    Retain,
    Archive,
}

impl OnDelete {
    /// Reads the `onDelete` attribute (case-insensitive); anything else is the default, delete.
    pub fn parse(value: Option<&str>) -> OnDelete {
        match value.map(str::to_ascii_lowercase).as_deref() {
            Some("retain") => OnDelete::Retain,
            Some("archive") => OnDelete::Archive,
            _ => OnDelete::Delete,
        }
    }
}

/// `DeleteVolume` on the emulated share: removes, keeps or archives `dir`. A directory that is
/// already gone counts as removed.
pub fn delete_directory(dir: &Path, on_delete: OnDelete) -> io::Result<()> {
    match on_delete {
        OnDelete::Retain => Ok(()),
        OnDelete::Archive => {
            let Some(name) = dir.file_name() else {
                return Ok(());
            };
            let mut archived = std::ffi::OsString::from("archived-");
            archived.push(name);
            let target = dir.with_file_name(archived);
            match std::fs::symlink_metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            match std::fs::remove_dir_all(&target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            std::fs::rename(dir, target)
        }
        OnDelete::Delete => match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(m) if !m.is_dir() => std::fs::remove_file(dir),
            Ok(_) => match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        },
    }
}

/// Deletes a Released volume of this driver with reclaim `Delete`, its directory first.
async fn sync_volume(ctx: &Ctx, name: &str) -> SyncResult {
    let Some(pv) = ctx.volumes.get("", name) else {
        return Ok(None);
    };
    let spec = pv.spec.as_ref();
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) == Some("Delete");
    if !is_ours(&pv) || pv.metadata.deletion_timestamp.is_some() || !released || !delete {
        return Ok(None);
    }
    if let Some(dir) = directory_of(&pv, &share_root(ctx)) {
        let on_delete = OnDelete::parse(volume_attribute(&pv, smb::ON_DELETE).as_deref());
        if let Err(e) = delete_directory(&dir, on_delete) {
            events::record(
                &ctx.client,
                COMPONENT,
                pv.as_ref(),
                EventType::Warning,
                "VolumeFailedDelete",
                &format!(
                    "rpc error: code = Internal desc = failed to delete subdirectory {}: {e}",
                    dir.display()
                ),
            )
            .await;
            return Ok(Some(RETRY));
        }
    }
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(None),
        Err(e) if cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The `storage` entry of a resource list, as written and parsed.
fn storage_of(list: Option<&BTreeMap<String, ApiQuantity>>) -> Option<(ApiQuantity, Quantity)> {
    let q = list?.get("storage")?.clone();
    let parsed = Quantity::parse(&q.0)?;
    Some((q, parsed))
}

/// The external resizer for a bound claim of this driver: raises the volume's capacity to the
/// claim's request, then the claim's `status.capacity` (no node expansion: a share has none).
async fn expand(ctx: &Ctx, pvc: &PersistentVolumeClaim, volume_name: &str) -> SyncResult {
    let Some(pv) = ctx.volumes.get("", volume_name) else {
        return Ok(None);
    };
    if !is_ours(&pv) || pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Ok(None);
    }
    let requested = storage_of(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    );
    let held = storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
    let reported = storage_of(pvc.status.as_ref().and_then(|s| s.capacity.as_ref()));
    let (Some((want, want_q)), Some((have, have_q))) = (requested, held) else {
        return Ok(None);
    };
    let allowed = claim_class(pvc)
        .and_then(|c| ctx.classes.get("", c))
        .and_then(|c| c.allow_volume_expansion)
        .unwrap_or(false);
    if allowed && want_q.cmp_value(have_q) == Ordering::Greater {
        events::record(
            &ctx.client,
            COMPONENT,
            pvc,
            EventType::Normal,
            "Resizing",
            &format!("External resizer is resizing volume {volume_name}"),
        )
        .await;
        let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
        let patch = json!({"spec": {"capacity": {"storage": want}}});
        return match volumes
            .patch(volume_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            // The claim's status follows when the changed volume requeues the claim.
            Ok(_) => Ok(None),
            Err(e) if cu::is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    // The binder writes the first status; the resizer only catches up with a grown volume.
    let Some((_, reported_q)) = reported else {
        return Ok(None);
    };
    if reported_q.cmp_value(have_q) != Ordering::Less {
        return Ok(None);
    }
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &pvc.namespace().unwrap_or_default());
    let patch = json!({"status": {"capacity": {"storage": have}}});
    if !cu::merge_patch_status(&claims, &pvc.name_any(), &patch).await? {
        return Ok(None);
    }
    events::record(
        &ctx.client,
        COMPONENT,
        pvc,
        EventType::Normal,
        "VolumeResizeSuccessful",
        "Resize volume succeeded (emulated: the share's directory has no size limit)",
    )
    .await;
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    const ROOT: &str = "/data/smb-share";

    fn claim(modes: &[&str], selected: Option<&str>) -> PersistentVolumeClaim {
        let mut c = json!({
            "metadata": {"name": "billing-data", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"accessModes": modes, "storageClassName": smb::CLASS,
                     "resources": {"requests": {"storage": "50Gi"}}}
        });
        if let Some(n) = selected {
            c["metadata"]["annotations"] = json!({ SELECTED_NODE: n });
        }
        serde_json::from_value(c).unwrap()
    }

    fn plan(pvc: &PersistentVolumeClaim, class: &StorageClass) -> serde_json::Value {
        serde_json::to_value(plan_volume(pvc, class, Path::new(ROOT)).unwrap()).unwrap()
    }

    #[test]
    fn installed_objects_are_the_upstream_driver_and_a_non_default_immediate_class() {
        let driver = serde_json::to_value(csi_driver(Path::new(ROOT))).unwrap();
        assert_eq!(driver["metadata"]["name"], "smb.csi.k8s.io");
        assert_eq!(driver["spec"]["attachRequired"], false);
        assert_eq!(
            driver["spec"]["volumeLifecycleModes"],
            json!(["Persistent"])
        );
        assert_eq!(
            driver["metadata"]["annotations"][smb::SHARE_ROOT_ANNOTATION],
            ROOT
        );
        let why = driver["metadata"]["annotations"][smb::EMULATED_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(why.contains("no SMB server runs"), "{why}");
        let class = serde_json::to_value(storage_class(Path::new(ROOT))).unwrap();
        assert_eq!(class["provisioner"], "smb.csi.k8s.io");
        assert_eq!(class["parameters"]["source"], smb::EMULATED_SOURCE);
        assert_eq!(class["reclaimPolicy"], "Delete");
        assert_eq!(class["volumeBindingMode"], "Immediate");
        assert_eq!(class["allowVolumeExpansion"], true);
        assert!(
            class["metadata"]["annotations"]
                .get("storageclass.kubernetes.io/is-default-class")
                .is_none()
        );
    }

    #[test]
    fn a_shared_claim_gets_a_csi_volume_on_a_subdirectory_of_the_share() {
        let v = plan(
            &claim(&["ReadWriteMany"], None),
            &storage_class(Path::new(ROOT)),
        );
        assert_eq!(v["metadata"]["name"], "pvc-u-1");
        assert_eq!(
            v["metadata"]["annotations"][PROVISIONED_BY],
            "smb.csi.k8s.io"
        );
        let why = v["metadata"]["annotations"][smb::EMULATED_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(
            why.contains("/data/smb-share/tandem-emulated-smb/share/pvc-u-1"),
            "{why}"
        );
        assert_eq!(v["spec"]["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(v["spec"]["capacity"]["storage"], "50Gi");
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(v["spec"]["storageClassName"], "smb-csi");
        assert!(v["spec"].get("nodeAffinity").is_none(), "{v}");
        assert!(v["spec"].get("hostPath").is_none(), "{v}");
        assert_eq!(
            v["spec"]["csi"],
            json!({
                "driver": "smb.csi.k8s.io",
                "volumeHandle": "tandem-emulated-smb/share#pvc-u-1",
                "volumeAttributes": {"source": smb::EMULATED_SOURCE, "subDir": "pvc-u-1"},
            })
        );
        assert_eq!(v["spec"]["claimRef"]["uid"], "u-1");
        assert_eq!(v["spec"]["claimRef"]["namespace"], "shop");
    }

    #[test]
    fn every_access_mode_of_the_claim_is_kept() {
        let modes = ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"];
        let v = plan(&claim(&modes, None), &storage_class(Path::new(ROOT)));
        assert_eq!(v["spec"]["accessModes"], json!(modes));
    }

    #[test]
    fn class_parameters_name_the_subdirectory_and_the_node_stage_secret() {
        let mut class = storage_class(Path::new(ROOT));
        class.parameters = Some(BTreeMap::from([
            ("source".into(), "//files/team".into()),
            (
                "subDir".into(),
                "${pvc.metadata.namespace}/${pvc.metadata.name}".into(),
            ),
            ("onDelete".into(), "retain".into()),
            (NODE_STAGE_SECRET_NAME.into(), "smbcreds".into()),
            (
                NODE_STAGE_SECRET_NAMESPACE.into(),
                "${pvc.namespace}".into(),
            ),
        ]));
        class.reclaim_policy = Some("Retain".into());
        class.mount_options = Some(vec!["dir_mode=0777".into()]);
        let v = plan(&claim(&["ReadWriteMany"], None), &class);
        assert_eq!(
            v["spec"]["csi"]["volumeAttributes"],
            json!({"source": "//files/team", "subDir": "shop/billing-data", "onDelete": "retain"})
        );
        assert_eq!(
            v["spec"]["csi"]["volumeHandle"],
            "files/team#shop/billing-data"
        );
        assert_eq!(
            v["spec"]["csi"]["nodeStageSecretRef"],
            json!({"name": "smbcreds", "namespace": "shop"})
        );
        assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(v["spec"]["mountOptions"], json!(["dir_mode=0777"]));
    }

    #[test]
    fn block_claims_missing_sources_and_escaping_subdirectories_are_refused() {
        let class = storage_class(Path::new(ROOT));
        let mut block = claim(&["ReadWriteMany"], None);
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        let err = plan_volume(&block, &class, Path::new(ROOT)).unwrap_err();
        assert!(
            err.to_string()
                .contains("block volume capability not supported")
        );

        let mut no_source = class.clone();
        no_source.parameters = None;
        let err = plan_volume(
            &claim(&["ReadWriteMany"], None),
            &no_source,
            Path::new(ROOT),
        )
        .unwrap_err();
        assert!(err.to_string().contains("source field is missing"), "{err}");

        let mut escaping = class;
        escaping
            .parameters
            .as_mut()
            .unwrap()
            .insert("subDir".into(), "../../etc".into());
        let err =
            plan_volume(&claim(&["ReadWriteMany"], None), &escaping, Path::new(ROOT)).unwrap_err();
        assert!(err.to_string().contains("invalid subDir"), "{err}");
    }

    #[test]
    fn wait_for_first_consumer_classes_wait_for_a_selected_node_but_pin_none() {
        let mut class = storage_class(Path::new(ROOT));
        class.volume_binding_mode = Some("WaitForFirstConsumer".into());
        assert_eq!(
            plan_volume(&claim(&["ReadWriteMany"], None), &class, Path::new(ROOT)).unwrap_err(),
            ProvisionError::WaitingForConsumer
        );
        let v = plan(&claim(&["ReadWriteMany"], Some("win-1")), &class);
        assert!(v["spec"].get("nodeAffinity").is_none(), "{v}");
    }

    #[test]
    fn delete_removes_retain_keeps_and_archive_renames_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let share = tmp.path().join("tandem-emulated-smb/share");
        let make = |name: &str| {
            let dir = share.join(name);
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("sub/f"), b"x").unwrap();
            dir
        };
        let gone = make("pvc-1");
        delete_directory(&gone, OnDelete::parse(None)).unwrap();
        assert!(!gone.exists());
        // Already gone: still a success.
        delete_directory(&gone, OnDelete::Delete).unwrap();
        let kept = make("pvc-2");
        delete_directory(&kept, OnDelete::parse(Some("Retain"))).unwrap();
        assert!(kept.join("sub/f").exists());
        let archived = make("pvc-3");
        delete_directory(&archived, OnDelete::parse(Some("archive"))).unwrap();
        assert!(!archived.exists());
        assert!(share.join("archived-pvc-3/sub/f").exists());
        assert!(share.exists(), "the share stays");
    }

    #[test]
    fn a_volume_directory_is_found_from_its_attributes_under_the_root() {
        let pv = plan_volume(
            &claim(&["ReadWriteMany"], None),
            &storage_class(Path::new(ROOT)),
            Path::new(ROOT),
        )
        .unwrap();
        assert_eq!(
            directory_of(&pv, Path::new("/elsewhere")),
            Some(PathBuf::from(
                "/elsewhere/tandem-emulated-smb/share/pvc-u-1"
            ))
        );
    }
}
