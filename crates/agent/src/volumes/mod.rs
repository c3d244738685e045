//! A pod's volumes on the host, as the kubelet's volume manager and plugins prepare them before
//! the sandbox's containers start (`pkg/volume/{emptydir,configmap,secret,downwardapi,projected,
//! hostpath}`, PVC resolution from `pkg/kubelet/volumemanager/populator`), and the bind mounts of
//! one container (`pkg/kubelet/kubelet_pods.go` `makeMounts`), with the pod's managed
//! `/etc/hosts` (`ensureHostsFile`).
//!
//! Every volume materialised by the agent lives in `<pod_dir>/volumes/<volume-name>`:
//! - `emptyDir`: a directory with mode 0777. `medium: Memory` is a plain directory too (no tmpfs
//!   is mounted, so its contents count against the node's disk, not the pod's memory), and
//!   `sizeLimit` is not enforced;
//! - `configMap`, `secret`, `downwardAPI`, `projected`: files written by the
//!   [`atomic_writer`] (`..data` symlink swap), mounted read-only as the kubelet does. Secrets
//!   are plain files, not tmpfs-backed;
//! - `hostPath` resolves to its path after upstream's `type` check; `persistentVolumeClaim` (and
//!   a generic `ephemeral` volume's claim) to the `hostPath` of the bound PersistentVolume, or
//!   to the share directory of an `smb.csi.k8s.io` volume (the emulated SMB driver,
//!   [`smb_csi`]).
//!
//! Errors carry the kubelet's messages: [`VolumeError::SetUp`] displays as the `FailedMount`
//! event text (`MountVolume.SetUp failed for volume "x" : configmap "y" not found`). Because
//! these strings reach users verbatim, the displayed message includes its cause.
//!
//! The files follow the kubelet's plugins. This one holds the entry points the runtime calls:
//! [`prepare`], which dispatches on each volume's source (an `emptyDir` is set up right there:
//! its SetUp is one `mkdir`), and [`cleanup`]. `host_path.rs`, `projection.rs` (configMap,
//! secret, downwardAPI, projected with its ServiceAccount token) and
//! `persistent_volume_claim.rs` (also generic `ephemeral` volumes) set up one family each;
//! `mounts.rs` turns the prepared volumes into one container's bind mounts, `hosts_file.rs`
//! writes the pod's `/etc/hosts`, and `error.rs` holds the messages.

pub mod atomic_writer;
mod error;
mod host_path;
mod hosts_file;
pub mod local_path;
mod mounts;
mod persistent_volume_claim;
mod projection;
pub mod smb_csi;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::env::{self, EnvContext, Objects};
use atomic_writer::platform;
use error::io_err;
use persistent_volume_claim::resolve_claim;
use projection::{
    config_map_payload, downward_api_payload, fetch_config_map, fetch_secret, projected_payload,
    secret_payload, write_volume,
};

pub use error::{SetUpError, VolumeError};
pub use host_path::check_host_path;
pub use hosts_file::{
    CLUSTER_DOMAIN, ETC_HOSTS, HOSTS_FILE_NAME, etc_hosts_mount, managed_hosts_file_content,
    node_hosts_file_content, pod_hostname_and_domain, write_hosts_file,
};
pub use mounts::{HostMount, container_mounts};
pub use persistent_volume_claim::ClaimError;
pub use projection::token_refresh_period;

/// `defaultMode` when a volume source leaves it unset (the API server's default).
const DEFAULT_MODE: u32 = 0o644;
const VOLUMES_DIR: &str = "volumes";

/// One prepared volume: where it is on the host and whether every mount of it is read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostVolume {
    pub host_path: PathBuf,
    /// configMap, secret, downwardAPI and projected volumes, and PVCs with `readOnly: true`.
    pub read_only: bool,
}

/// The prepared volumes of a pod by volume name, with the warnings preparing them raised
/// (features skipped rather than failed, for the caller to surface as events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    volumes: BTreeMap<String, HostVolume>,
    warnings: Vec<String>,
}

impl PodVolumes {
    /// Adds or replaces a volume.
    pub fn insert(&mut self, name: impl Into<String>, volume: HostVolume) {
        self.volumes.insert(name.into(), volume);
    }

    pub fn get(&self, name: &str) -> Option<&HostVolume> {
        self.volumes.get(name)
    }

    /// Volumes in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostVolume)> {
        self.volumes.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.volumes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.volumes.is_empty()
    }

    /// What preparation skipped (e.g. a serviceAccountToken projection the API server cannot
    /// issue), one sentence each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Prepares every volume of `pod` (see the module docs for what each type becomes), creating
/// `<pod_dir>/volumes` as needed. Idempotent: configMap/secret/downwardAPI/projected content is
/// rewritten atomically only when it changed, so calling it again refreshes those volumes.
/// Fails on the first volume that cannot be set up.
pub async fn prepare(
    client: &kube::Client,
    pod: &Pod,
    pod_dir: &Path,
    ctx: &EnvContext,
) -> Result<PodVolumes, VolumeError> {
    let namespace = env::pod_namespace(pod);
    let volumes_dir = pod_dir.join(VOLUMES_DIR);
    fs::create_dir_all(&volumes_dir).map_err(|error| VolumeError::VolumesDir {
        path: volumes_dir.clone(),
        error,
    })?;
    let mut objects = Objects::new(client, &namespace);
    let mut prepared = PodVolumes::default();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let name = volume.name.clone();
        if !is_plain_file_name(&name) {
            return Err(VolumeError::InvalidName { volume: name });
        }
        let dir = volumes_dir.join(&name);
        let setup = |reason: SetUpError| VolumeError::SetUp {
            volume: volume.name.clone(),
            reason,
        };
        let host = if let Some(source) = &volume.empty_dir {
            if source.medium.as_deref() == Some("Memory") {
                tracing::debug!(volume = %name, "emptyDir medium Memory is a plain directory");
            }
            make_dir(&dir, 0o777).map_err(setup)?;
            writable(dir)
        } else if let Some(source) = &volume.config_map {
            let optional = source.optional.unwrap_or(false);
            let payload = match fetch_config_map(&mut objects, &source.name, optional).await {
                Ok(cm) => config_map_payload(
                    source.items.as_deref(),
                    &cm,
                    file_mode(source.default_mode, DEFAULT_MODE),
                    optional,
                ),
                Err(e) => Err(e),
            };
            write_volume(&dir, payload.map_err(setup)?).map_err(setup)?;
            read_only(dir)
        } else if let Some(source) = &volume.secret {
            let optional = source.optional.unwrap_or(false);
            let secret_name = source.secret_name.as_deref().unwrap_or("");
            let payload = match fetch_secret(&mut objects, secret_name, optional).await {
                Ok(secret) => secret_payload(
                    source.items.as_deref(),
                    &secret,
                    file_mode(source.default_mode, DEFAULT_MODE),
                    optional,
                ),
                Err(e) => Err(e),
            };
            write_volume(&dir, payload.map_err(setup)?).map_err(setup)?;
            read_only(dir)
        } else if let Some(source) = &volume.downward_api {
            let payload = downward_api_payload(
                source.items.as_deref().unwrap_or(&[]),
                pod,
                ctx,
                file_mode(source.default_mode, DEFAULT_MODE),
            );
            write_volume(&dir, payload.map_err(setup)?).map_err(setup)?;
            read_only(dir)
        } else if let Some(source) = &volume.projected {
            let default_mode = file_mode(source.default_mode, DEFAULT_MODE);
            let sources = source.sources.as_deref().unwrap_or(&[]);
            let payload = projected_payload(
                &mut objects,
                sources,
                pod,
                ctx,
                default_mode,
                &mut prepared.warnings,
                &name,
            )
            .await;
            write_volume(&dir, payload.map_err(setup)?).map_err(setup)?;
            read_only(dir)
        } else if let Some(source) = &volume.host_path {
            check_host_path(source).map_err(setup)?;
            writable(PathBuf::from(&source.path))
        } else if let Some(source) = &volume.persistent_volume_claim {
            let pv = resolve_claim(client, &namespace, &source.claim_name, None)
                .await
                .map_err(|reason| VolumeError::Claim {
                    volume: name.clone(),
                    namespace: namespace.clone(),
                    claim: source.claim_name.clone(),
                    reason: Box::new(reason),
                })?;
            check_host_path(&pv).map_err(setup)?;
            HostVolume {
                host_path: PathBuf::from(&pv.path),
                read_only: source.read_only.unwrap_or(false),
            }
        } else if volume.ephemeral.is_some() {
            // The ephemeral volume controller names the claim `<pod>-<volume>`.
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let claim = format!("{pod_name}-{name}");
            let pv = resolve_claim(client, &namespace, &claim, Some(pod))
                .await
                .map_err(|reason| VolumeError::Claim {
                    volume: name.clone(),
                    namespace: namespace.clone(),
                    claim: claim.clone(),
                    reason: Box::new(reason),
                })?;
            check_host_path(&pv).map_err(setup)?;
            writable(PathBuf::from(&pv.path))
        } else {
            return Err(setup(SetUpError::Unsupported(volume_kind(volume))));
        };
        prepared.insert(name, host);
    }
    Ok(prepared)
}

fn writable(host_path: PathBuf) -> HostVolume {
    HostVolume {
        host_path,
        read_only: false,
    }
}

fn read_only(host_path: PathBuf) -> HostVolume {
    HostVolume {
        host_path,
        read_only: true,
    }
}

/// The name of a volume's source field (`nfs`, `csi`, …), for the unsupported-type message.
fn volume_kind(volume: &Volume) -> String {
    serde_json::to_value(volume)
        .ok()
        .and_then(|v| {
            v.as_object()
                .and_then(|o| o.keys().find(|k| k.as_str() != "name").cloned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A single path component that is neither `.` nor `..`.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// A file mode from the API (`int32`, `0..=0o777`), or `default`.
fn file_mode(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map_or(default, |m| m & 0o777)
}

fn make_dir(dir: &Path, mode: u32) -> Result<(), SetUpError> {
    fs::create_dir_all(dir).map_err(io_err("mkdir", dir))?;
    // Applied explicitly: create_dir_all is subject to the umask.
    platform::set_mode(dir, mode).map_err(io_err("chmod", dir))
}

/// Removes what [`prepare`] and [`write_hosts_file`] created under `pod_dir`: the `volumes`
/// directory (symlinks are removed, never followed, so hostPath and PV directories are left
/// alone) and the hosts file. Missing entries are fine; other failures are logged, since
/// cleanup runs after the pod is gone and has no one to report to (the kubelet's orphaned pod
/// cleanup likewise logs and retries on its next housekeeping pass).
pub fn cleanup(pod_dir: &Path) {
    let volumes = pod_dir.join(VOLUMES_DIR);
    if let Err(e) = fs::remove_dir_all(&volumes)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %volumes.display(), error = %e, "failed to remove pod volumes");
    }
    let hosts = pod_dir.join(HOSTS_FILE_NAME);
    if let Err(e) = fs::remove_file(&hosts)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %hosts.display(), error = %e, "failed to remove pod hosts file");
    }
}

/// Test fixtures shared by the volume files' tests.
#[cfg(test)]
mod test_fixtures {
    use k8s_openapi::api::core::v1::Container;

    /// A container `app` with these `volumeMounts`.
    pub(super) fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "app", "volumeMounts": mounts}))
            .expect("container")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_volumes_are_named_by_their_source() {
        let v: Volume = serde_json::from_value(serde_json::json!({
            "name": "share", "nfs": {"server": "nas", "path": "/export"}
        }))
        .expect("volume");
        assert_eq!(volume_kind(&v), "nfs");
        let e = VolumeError::SetUp {
            volume: "share".into(),
            reason: SetUpError::Unsupported(volume_kind(&v)),
        };
        assert!(e.to_string().starts_with(
            "MountVolume.SetUp failed for volume \"share\" : unsupported volume type \"nfs\""
        ));
        assert_eq!(e.volume(), Some("share"));
        assert!(is_plain_file_name("cache"));
        assert!(!is_plain_file_name(".."));
        assert!(!is_plain_file_name("a/b"));
        assert_eq!(file_mode(Some(0o4755), 0o644), 0o755);
        assert_eq!(file_mode(Some(-1), 0o644), 0o644);
        assert_eq!(file_mode(None, 0o600), 0o600);
    }
}
