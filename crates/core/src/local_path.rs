//! The built-in local-path provisioner's shared vocabulary: what the controller that provisions
//! volumes, the scheduler that delays their binding and the node agent that owns their
//! directories must agree on. Pure: names, annotation keys, and the encoding of the reclaim
//! handshake.
//!
//! It follows rancher/local-path-provisioner (as k3s ships it): a volume is a directory
//! `<root>/pvc-<claim uid>_<namespace>_<claim>` on one node, exposed as a `hostPath`
//! PersistentVolume whose required node affinity names that node; reclaim `Delete` removes the
//! directory. The annotations on claims and volumes are upstream's external-provisioner contract
//! (`pkg/controller/volume/persistentvolume`, `sig-storage-lib-external-provisioner`).
//!
//! Reclaim handshake (tandem's, because the node agent may not read PersistentVolumes it does
//! not mount — the Node authorizer): the controller lists, on the Node object, the directories
//! of Released volumes to remove ([`CLEANUP_ANNOTATION`], a JSON object volume name → path); the
//! agent removes them and answers with the names it removed ([`CLEANED_ANNOTATION`], a JSON
//! array, always a subset of the request); the controller then deletes those volumes and drops
//! them from the request, and the agent drops them from its answer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// The provisioner name of the built-in local-path provisioner (a StorageClass's `provisioner`).
pub const PROVISIONER: &str = "tandem.io/local-path";
/// The StorageClass created at start, the cluster default.
pub const DEFAULT_CLASS: &str = "local-path";
/// Where a node keeps local-path volumes unless it says otherwise ([`ROOT_ANNOTATION`]).
pub const DEFAULT_ROOT: &str = "/var/lib/tandem/storage";

/// On a Node: the directory under which the agent keeps local-path volumes (set by the agent).
pub const ROOT_ANNOTATION: &str = "local-path.tandem.dev/root";
/// On a Node: the volumes whose directories the agent must remove (set by the controller).
pub const CLEANUP_ANNOTATION: &str = "local-path.tandem.dev/cleanup";
/// On a Node: the volumes whose directories the agent removed (set by the agent).
pub const CLEANED_ANNOTATION: &str = "local-path.tandem.dev/cleaned";
/// On a PersistentVolume of an emulated node: why no directory holds its data.
pub const EMULATED_ANNOTATION: &str = "local-path.tandem.dev/emulated";

/// Upstream: on a volume, the provisioner that created it.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Upstream: on a claim, the node the scheduler chose for its first consumer.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Upstream: on a claim, the provisioner the binder handed it to.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// Upstream: the beta spelling, still written alongside.
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The node label a volume's node affinity names.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The PersistentVolume name for a claim (upstream's `pvc-<claim uid>`).
pub fn volume_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

/// The directory name of a claim's volume under the node's root (rancher's layout).
pub fn directory_name(claim_uid: &str, namespace: &str, claim: &str) -> String {
    format!("pvc-{claim_uid}_{namespace}_{claim}")
}

/// The class a claim names (`spec.storageClassName`, else the legacy beta annotation) —
/// upstream's `storagehelpers.GetPersistentVolumeClaimClass`, which the provisioners and the
/// scheduler's VolumeBinding plugin read alike.
pub fn claim_class(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .or_else(|| {
            pvc.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
                .map(String::as_str)
        })
        .filter(|c| !c.is_empty())
}

/// Whether `root` may hold local-path volumes: an absolute path without `..`.
pub fn valid_root(root: &str) -> bool {
    let p = Path::new(root);
    p.is_absolute() && !p.components().any(|c| c == Component::ParentDir)
}

/// Whether `path` is a volume directory directly under `root` (`<root>/pvc-…`), the only
/// paths an agent agrees to remove.
pub fn is_volume_directory(root: &Path, path: &Path) -> bool {
    if path.components().any(|c| c == Component::ParentDir) {
        return false;
    }
    path.parent() == Some(root)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("pvc-") && n.len() > 4)
}

/// Reads [`CLEANUP_ANNOTATION`] (volume name → directory); anything unparsable reads as empty.
pub fn parse_cleanup(value: Option<&str>) -> BTreeMap<String, String> {
    value
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// Writes [`CLEANUP_ANNOTATION`]; `None` (remove the annotation) when nothing is requested.
pub fn format_cleanup(requests: &BTreeMap<String, String>) -> Option<String> {
    (!requests.is_empty()).then(|| serde_json::to_string(requests).unwrap_or_default())
}

/// Reads [`CLEANED_ANNOTATION`]; anything unparsable reads as empty.
pub fn parse_cleaned(value: Option<&str>) -> BTreeSet<String> {
    value
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// Writes [`CLEANED_ANNOTATION`]; `None` when empty.
pub fn format_cleaned(done: &BTreeSet<String>) -> Option<String> {
    (!done.is_empty()).then(|| serde_json::to_string(done).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_provisioner_layout() {
        assert_eq!(volume_name("u1"), "pvc-u1");
        assert_eq!(directory_name("u1", "shop", "data"), "pvc-u1_shop_data");
    }

    #[test]
    fn only_direct_pvc_children_of_the_root_are_volume_directories() {
        let root = Path::new("/var/lib/tandem/storage");
        assert!(is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage/pvc-1_ns_c")
        ));
        assert!(!is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage")
        ));
        assert!(!is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage/pvc-")
        ));
        assert!(!is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage/data")
        ));
        assert!(!is_volume_directory(root, Path::new("/etc/pvc-1")));
        assert!(!is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage/pvc-1/../../x")
        ));
        assert!(!is_volume_directory(
            root,
            Path::new("/var/lib/tandem/storage/pvc-1/nested")
        ));
    }

    #[test]
    fn roots_must_be_absolute_without_backsteps() {
        assert!(valid_root("/data/storage"));
        assert!(!valid_root("data"));
        assert!(!valid_root("/data/../etc"));
    }

    #[test]
    fn handshake_annotations_round_trip_and_tolerate_garbage() {
        let req = BTreeMap::from([("pvc-1".to_string(), "/r/pvc-1_a_b".to_string())]);
        let text = format_cleanup(&req);
        assert_eq!(parse_cleanup(text.as_deref()), req);
        assert_eq!(format_cleanup(&BTreeMap::new()), None);
        assert!(parse_cleanup(Some("not json")).is_empty());
        let done = BTreeSet::from(["pvc-1".to_string()]);
        assert_eq!(parse_cleaned(format_cleaned(&done).as_deref()), done);
        assert!(parse_cleaned(Some("{")).is_empty());
    }
}
