//! The emulated SMB CSI driver's shared vocabulary: what the installer, the provisioner and the
//! node agents agree on. Pure: names, annotation keys, the volume handle, and the mapping of a
//! share to the directory that stands in for it.
//!
//! It follows kubernetes-csi/csi-driver-smb (driver `smb.csi.k8s.io`): a StorageClass names a
//! share (`source: //server/share`), `CreateVolume` makes a subdirectory of it (by default the
//! PersistentVolume's name) and answers with a volume whose handle is `<server/share>#<subDir>`
//! and whose attributes are the class's parameters plus `subDir`; `DeleteVolume` removes (or
//! keeps, `onDelete: retain`, or renames, `onDelete: archive`) that subdirectory. The node
//! plugin mounts `//server/share/<subDir>` into the pod, on Linux and Windows nodes alike.
//!
//! tandem runs no SMB server and mounts no CIFS: every share is **emulated** by a directory on the
//! tandem server's machine, `<share root>/<server>/<share>[/<path>]`, whose subdirectories are
//! the volumes. The share root (`<data dir>/smb-share` under `tandem up`/`server`) is published
//! by the installer on the CSIDriver ([`SHARE_ROOT_ANNOTATION`]); without it,
//! [`DEFAULT_SHARE_ROOT`] is used. Pods on the real Linux node bind-mount the volume's directory,
//! so two pods there share their files (`ReadWriteMany` for real, on one machine); pods on
//! emulated nodes (every Windows node) run no processes, so nothing reads or writes there.

use std::path::{Component, Path, PathBuf};

/// The CSI driver name (a CSIDriver's name, a StorageClass's `provisioner`, a volume's
/// `spec.csi.driver`).
pub const DRIVER: &str = "smb.csi.k8s.io";
/// The StorageClass the installer creates (not the default class).
pub const CLASS: &str = "smb-csi";
/// The share of the installed class: served by no SMB server, emulated by a directory.
pub const EMULATED_SOURCE: &str = "//tandem-emulated-smb/share";
/// Where shares are kept when the CSIDriver names no [`SHARE_ROOT_ANNOTATION`].
pub const DEFAULT_SHARE_ROOT: &str = "/var/lib/tandem/smb-share";

/// On the CSIDriver, StorageClass and PersistentVolumes: why nothing here is a real SMB share.
pub const EMULATED_ANNOTATION: &str = "smb.csi.tandem.dev/emulated";
/// On the CSIDriver: the directory under which the emulated server keeps its shares.
pub const SHARE_ROOT_ANNOTATION: &str = "smb.csi.tandem.dev/share-root";
/// Upstream kubelet: on a Node, the node ID of each CSI driver registered there (a JSON object).
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// Class parameter and volume attribute: the share, `//server/share[/path]`.
pub const SOURCE: &str = "source";
/// Class parameter and volume attribute: the volume's directory under the share.
pub const SUB_DIR: &str = "subDir";
/// Class parameter: what `DeleteVolume` does with the directory (`delete`, `retain`, `archive`).
pub const ON_DELETE: &str = "onDelete";

/// The text every emulated object carries in [`EMULATED_ANNOTATION`].
pub fn emulated_reason(root: &Path) -> String {
    format!(
        "tandem emulates the SMB CSI driver: no SMB server runs and no CIFS share is mounted; each share is a directory under {} on the tandem server's machine, bind-mounted into pods of the real Linux node; pods of emulated nodes (every Windows node) run no processes",
        root.display()
    )
}

/// The volume handle of a provisioned volume: `<source without leading or trailing slashes>#<subDir>`.
pub fn volume_handle(source: &str, sub_dir: &str) -> String {
    format!("{}#{}", source.trim_matches('/'), sub_dir.trim_matches('/'))
}

/// Why a share or subdirectory cannot name a directory of the emulated server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// `source` is not `//server/share[/path]`.
    #[error("invalid source {0:?}: want //server/share[/path]")]
    InvalidSource(String),
    /// `subDir` is absolute, empty or steps out with `..`.
    #[error("invalid subDir {0:?}: want a relative path without \"..\"")]
    InvalidSubDir(String),
}

/// A single plain path component: not empty, `.`, `..`, and without separators or NUL.
fn plain(part: &str) -> bool {
    !part.is_empty() && part != "." && part != ".." && !part.contains(['/', '\\', '\0', ':'])
}

/// The directory standing in for the share `source` under `root`: `<root>/<server>/<share>…`.
/// Backslashes are read as slashes (`\\server\share`, as Windows writes it).
pub fn share_dir(root: &Path, source: &str) -> Result<PathBuf, ShareError> {
    let normalized = source.replace('\\', "/");
    let Some(rest) = normalized.strip_prefix("//") else {
        return Err(ShareError::InvalidSource(source.to_string()));
    };
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    if parts.len() < 2 || !parts.iter().all(|p| plain(p)) {
        return Err(ShareError::InvalidSource(source.to_string()));
    }
    let mut dir = root.to_path_buf();
    dir.extend(parts);
    Ok(dir)
}

/// The directory of the volume `sub_dir` of the share `source` under `root`.
pub fn volume_dir(root: &Path, source: &str, sub_dir: &str) -> Result<PathBuf, ShareError> {
    let share = share_dir(root, source)?;
    let trimmed = sub_dir.trim_matches('/');
    let parts: Vec<&str> = trimmed.split('/').collect();
    if trimmed.is_empty() || !parts.iter().all(|p| plain(p)) {
        return Err(ShareError::InvalidSubDir(sub_dir.to_string()));
    }
    let mut dir = share;
    dir.extend(parts);
    Ok(dir)
}

/// Whether `root` may hold shares: an absolute path without `..`.
pub fn valid_root(root: &str) -> bool {
    let p = Path::new(root);
    p.is_absolute() && !p.components().any(|c| c == Component::ParentDir)
}

/// The share root a CSIDriver's annotations name, else [`DEFAULT_SHARE_ROOT`].
pub fn share_root(annotation: Option<&str>) -> PathBuf {
    PathBuf::from(
        annotation
            .filter(|r| valid_root(r))
            .unwrap_or(DEFAULT_SHARE_ROOT),
    )
}

/// Expands the templates csi-driver-smb accepts in `subDir` (`${pvc.metadata.name}`,
/// `${pvc.metadata.namespace}`, `${pv.metadata.name}`) and the external provisioner's secret
/// templates (`${pvc.name}`, `${pvc.namespace}`, `${pv.name}`).
pub fn expand_template(value: &str, pvc_namespace: &str, pvc_name: &str, pv_name: &str) -> String {
    value
        .replace("${pvc.metadata.name}", pvc_name)
        .replace("${pvc.metadata.namespace}", pvc_namespace)
        .replace("${pv.metadata.name}", pv_name)
        .replace("${pvc.name}", pvc_name)
        .replace("${pvc.namespace}", pvc_namespace)
        .replace("${pv.name}", pv_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_map_to_directories_under_the_root() {
        let root = Path::new("/data/smb-share");
        assert_eq!(
            share_dir(root, EMULATED_SOURCE).unwrap_or_default(),
            PathBuf::from("/data/smb-share/tandem-emulated-smb/share")
        );
        assert_eq!(
            volume_dir(root, "\\\\files\\team\\sub", "pvc-1").unwrap_or_default(),
            PathBuf::from("/data/smb-share/files/team/sub/pvc-1")
        );
        assert_eq!(
            volume_dir(root, "//files/team/", "/a/b/").unwrap_or_default(),
            PathBuf::from("/data/smb-share/files/team/a/b")
        );
    }

    #[test]
    fn sources_and_subdirectories_cannot_leave_the_root() {
        let root = Path::new("/r");
        for bad in [
            "files/team",
            "//files",
            "//../etc",
            "//files/..",
            "//a/b/../../x",
            "",
        ] {
            assert_eq!(
                share_dir(root, bad),
                Err(ShareError::InvalidSource(bad.to_string())),
                "{bad}"
            );
        }
        for bad in ["", "/", "..", "a/../../x", "a//b", "c:"] {
            assert_eq!(
                volume_dir(root, "//s/h", bad),
                Err(ShareError::InvalidSubDir(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn volume_handles_join_share_and_subdirectory() {
        assert_eq!(
            volume_handle(EMULATED_SOURCE, "pvc-1"),
            "tandem-emulated-smb/share#pvc-1"
        );
    }

    #[test]
    fn share_root_falls_back_to_the_default_for_missing_or_unsafe_values() {
        assert_eq!(share_root(Some("/d/smb")), PathBuf::from("/d/smb"));
        assert_eq!(share_root(None), PathBuf::from(DEFAULT_SHARE_ROOT));
        assert_eq!(share_root(Some("rel")), PathBuf::from(DEFAULT_SHARE_ROOT));
        assert_eq!(
            share_root(Some("/d/../etc")),
            PathBuf::from(DEFAULT_SHARE_ROOT)
        );
    }

    #[test]
    fn templates_expand_claim_and_volume_names() {
        assert_eq!(
            expand_template(
                "${pvc.metadata.namespace}/${pvc.metadata.name}-${pv.metadata.name}",
                "shop",
                "data",
                "pvc-1"
            ),
            "shop/data-pvc-1"
        );
        assert_eq!(
            expand_template("${pvc.namespace}", "shop", "data", "pvc-1"),
            "shop"
        );
    }
}
