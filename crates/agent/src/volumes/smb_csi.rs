//! The node's side of the emulated SMB CSI driver `smb.csi.k8s.io` (kubernetes-csi/
//! csi-driver-smb's node plugin, and the kubelet's CSI plugin registration in
//! `pkg/volume/csi/nodeinfomanager`).
//!
//! - **Registration.** Every agent, emulated or real, Linux or Windows (csi-driver-smb runs on
//!   both), registers the driver as the kubelet does once a node plugin announces itself: its
//!   CSINode (named after the node, owned by the Node) lists
//!   `{name: smb.csi.k8s.io, nodeID: <node>}`, and its Node carries the driver's node ID in
//!   `csi.volume.kubernetes.io/nodeid`. A driver entry already there is left alone (the entries
//!   are immutable).
//! - **Mounting on the real Linux node.** No SMB server runs: the share `//server/share` of a
//!   volume is the directory `<share root>/server/share` on this machine (see
//!   [`tandem_core::smb_csi`]); the share root is the one the installed CSIDriver names. A pod's
//!   claim bound to such a volume resolves to `<share root>/server/share/<subDir>` (created
//!   with mode 0777, csi-driver-smb's default `dir_mode`), which the runtime bind-mounts: every
//!   pod of this node using the claim sees the same files, so `ReadWriteMany` holds on one
//!   machine. Credentials (`nodeStageSecretRef`) are not read: the emulated share takes anyone.
//! - **Emulated nodes** (every Windows node) run no processes; their runtime never resolves the
//!   claim, so nothing is mounted there, as the volume's `smb.csi.tandem.dev/emulated`
//!   annotation says.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, HostPathVolumeSource, Node};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_core::smb_csi as smb;

/// Why an SMB volume cannot be mounted on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// The CSIDriver (and with it the share root) could not be read.
    #[error("failed to get CSIDriver smb.csi.k8s.io: {0}")]
    Driver(String),
    /// The volume's attributes name no share, or one outside the root.
    #[error("rpc error: code = InvalidArgument desc = {0}")]
    Share(String),
    /// The volume's directory could not be created.
    #[error("rpc error: code = Internal desc = failed to create {path}: {error}")]
    Create { path: String, error: String },
}

/// Whether a PersistentVolume's CSI source belongs to this driver.
pub fn is_smb(csi: Option<&CSIPersistentVolumeSource>) -> bool {
    csi.is_some_and(|c| c.driver == smb::DRIVER)
}

/// The directory of the volume `csi` under the share root `root`.
pub fn volume_dir(root: &Path, csi: &CSIPersistentVolumeSource) -> Result<PathBuf, MountError> {
    let attributes = csi.volume_attributes.clone().unwrap_or_default();
    let source = attributes
        .get(smb::SOURCE)
        .ok_or_else(|| MountError::Share("source field is missing".into()))?;
    // A static volume without `subDir` mounts the share itself, as csi-driver-smb does.
    match attributes.get(smb::SUB_DIR).filter(|s| !s.is_empty()) {
        Some(sub_dir) => smb::volume_dir(root, source, sub_dir),
        None => smb::share_dir(root, source),
    }
    .map_err(|e| MountError::Share(e.to_string()))
}

/// Resolves an SMB volume to the host directory that stands in for it, creating it: the
/// share root comes from the CSIDriver the installer annotated.
pub async fn resolve(
    client: &kube::Client,
    csi: &CSIPersistentVolumeSource,
) -> Result<HostPathVolumeSource, MountError> {
    let drivers: Api<CSIDriver> = Api::all(client.clone());
    let driver = drivers
        .get_opt(smb::DRIVER)
        .await
        .map_err(|e| MountError::Driver(crate::env::api_message(&e)))?;
    let root = smb::share_root(
        driver
            .as_ref()
            .and_then(|d| d.metadata.annotations.as_ref())
            .and_then(|a| a.get(smb::SHARE_ROOT_ANNOTATION))
            .map(String::as_str),
    );
    let dir = volume_dir(&root, csi)?;
    create_dir(&dir).map_err(|error| MountError::Create {
        path: dir.display().to_string(),
        error: error.to_string(),
    })?;
    Ok(HostPathVolumeSource {
        path: dir.display().to_string(),
        type_: Some("Directory".into()),
    })
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

/// The CSINode of `node` with this driver registered, from the one stored (if any): `None` when
/// nothing needs to change.
pub fn with_driver(existing: Option<&CSINode>, node: &Node) -> Option<CSINode> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let entry = json!({"name": smb::DRIVER, "nodeID": name});
    match existing {
        Some(c) => {
            if c.spec.drivers.iter().any(|d| d.name == smb::DRIVER) {
                return None;
            }
            let mut updated = c.clone();
            updated
                .spec
                .drivers
                .push(serde_json::from_value(entry).ok()?);
            Some(updated)
        }
        None => serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": name,
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node.metadata.uid.clone().unwrap_or_default(),
                }],
            },
            "spec": {"drivers": [entry]},
        }))
        .ok(),
    }
}

/// The Node's `csi.volume.kubernetes.io/nodeid` with this driver's ID added; `None` when it is
/// there already.
pub fn node_id_annotation(node: &Node) -> Option<String> {
    let mut ids: serde_json::Map<String, serde_json::Value> = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(smb::NODE_ID_ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let name = node.metadata.name.clone().unwrap_or_default();
    if ids.get(smb::DRIVER).and_then(|v| v.as_str()) == Some(name.as_str()) {
        return None;
    }
    ids.insert(smb::DRIVER.into(), name.into());
    serde_json::to_string(&ids).ok()
}

async fn register_once(client: &kube::Client, node_name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(node_name).await?;
    if let Some(ids) = node_id_annotation(&node) {
        let patch = json!({"metadata": {"annotations": {smb::NODE_ID_ANNOTATION: ids}}});
        nodes
            .patch(node_name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let existing = csinodes.get_opt(node_name).await?;
    match (with_driver(existing.as_ref(), &node), existing.is_some()) {
        (None, _) => Ok(()),
        (Some(c), false) => csinodes.create(&PostParams::default(), &c).await.map(drop),
        (Some(c), true) => csinodes
            .replace(node_name, &PostParams::default(), &c)
            .await
            .map(drop),
    }
}

/// Registers the driver on the node (see the module documentation), retrying every 2 s for up
/// to a minute while the API refuses (a conflict with another writer is retried too).
pub async fn register(client: kube::Client, node_name: String) {
    for attempt in 0..30u32 {
        match register_once(&client, &node_name).await {
            Ok(()) => return,
            Err(e) => {
                if attempt == 29 {
                    tracing::warn!(node = %node_name, error = %e, "cannot register the CSI driver smb.csi.k8s.io in the node's CSINode");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn node() -> Node {
        serde_json::from_value(json!({"metadata": {"name": "win-1", "uid": "n-1",
            "annotations": {smb::NODE_ID_ANNOTATION: "{\"other.csi\":\"x\"}"}}}))
        .unwrap()
    }

    fn csi(attributes: serde_json::Value) -> CSIPersistentVolumeSource {
        serde_json::from_value(json!({"driver": smb::DRIVER, "volumeHandle": "h",
            "volumeAttributes": attributes}))
        .unwrap()
    }

    #[test]
    fn a_new_csinode_lists_the_driver_and_is_owned_by_the_node() {
        let c = with_driver(None, &node()).unwrap();
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["metadata"]["name"], "win-1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "n-1");
        assert_eq!(
            v["spec"]["drivers"],
            json!([{"name": smb::DRIVER, "nodeID": "win-1"}])
        );
    }

    #[test]
    fn an_existing_csinode_keeps_its_drivers_and_gains_this_one_once() {
        let existing: CSINode = serde_json::from_value(json!({"metadata": {"name": "win-1"},
            "spec": {"drivers": [{"name": "other.csi", "nodeID": "x"}]}}))
        .unwrap();
        let c = with_driver(Some(&existing), &node()).unwrap();
        let names: Vec<&str> = c.spec.drivers.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["other.csi", smb::DRIVER]);
        assert!(with_driver(Some(&c), &node()).is_none());
    }

    #[test]
    fn the_node_id_annotation_keeps_other_drivers() {
        let ids: serde_json::Value =
            serde_json::from_str(&node_id_annotation(&node()).unwrap()).unwrap();
        assert_eq!(ids, json!({"other.csi": "x", smb::DRIVER: "win-1"}));
        let mut done = node();
        done.metadata.annotations =
            Some([(smb::NODE_ID_ANNOTATION.to_string(), ids.to_string())].into());
        assert!(node_id_annotation(&done).is_none());
    }

    #[test]
    fn volumes_resolve_to_their_subdirectory_of_the_share_or_the_share() {
        let root = Path::new("/srv/smb");
        assert_eq!(
            volume_dir(
                root,
                &csi(json!({"source": smb::EMULATED_SOURCE, "subDir": "pvc-1"}))
            )
            .unwrap(),
            PathBuf::from("/srv/smb/tandem-emulated-smb/share/pvc-1")
        );
        assert_eq!(
            volume_dir(root, &csi(json!({"source": "//files/team"}))).unwrap(),
            PathBuf::from("/srv/smb/files/team")
        );
        assert!(matches!(
            volume_dir(root, &csi(json!({"subDir": "x"}))),
            Err(MountError::Share(_))
        ));
        assert!(matches!(
            volume_dir(
                root,
                &csi(json!({"source": "//a/b", "subDir": "../../etc"}))
            ),
            Err(MountError::Share(_))
        ));
    }

    #[test]
    fn a_missing_directory_is_created_writable_for_everyone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tandem-emulated-smb/share/pvc-1");
        create_dir(&dir).unwrap();
        assert!(dir.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o777);
        }
    }
}
