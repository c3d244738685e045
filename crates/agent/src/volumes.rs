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

pub mod atomic_writer;
pub mod local_path;
pub mod smb_csi;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, HostAlias, HostPathVolumeSource, KeyToPath,
    PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use kube::api::{Api, PostParams};
use tandem_core::field::go_quote;
use tandem_core::validation::names;

use crate::env::{self, EnvContext, EnvError, Objects};
use atomic_writer::{FileProjection, Payload, WriteError, platform};

/// The cluster DNS domain of pod FQDNs in `/etc/hosts` (the kubelet's `--cluster-domain`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The file name of the pod's managed hosts file inside its pod directory (upstream's).
pub const HOSTS_FILE_NAME: &str = "etc-hosts";
/// Where containers see the hosts file.
pub const ETC_HOSTS: &str = "/etc/hosts";
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

/// One bind mount of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMount {
    /// The absolute path inside the container.
    pub container_path: String,
    /// The host path to bind (a `subPath` already resolved, symlinks included).
    pub host_path: PathBuf,
    pub read_only: bool,
}

/// Why a pod's volumes or a container's mounts could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A volume plugin's SetUp failed; the text of the kubelet's `FailedMount` event.
    #[error("MountVolume.SetUp failed for volume {} : {reason}", go_quote(.volume))]
    SetUp { volume: String, reason: SetUpError },
    /// A `persistentVolumeClaim` (or `ephemeral`) volume's claim cannot be used (the volume
    /// manager's wording).
    #[error("error processing PVC {namespace}/{claim}: {reason}")]
    Claim {
        volume: String,
        namespace: String,
        claim: String,
        reason: Box<ClaimError>,
    },
    /// A volume name that cannot be a directory name (API validation requires a DNS label).
    #[error("volume name {} is not a valid directory name", go_quote(.volume))]
    InvalidName { volume: String },
    /// The pod's volumes directory could not be created.
    #[error("mkdir {}: {error}", .path.display())]
    VolumesDir { path: PathBuf, error: io::Error },
    /// A `volumeMount` names no volume of the pod.
    #[error("cannot find volume {} to mount into container {}", go_quote(.volume), go_quote(.container))]
    MissingVolume { volume: String, container: String },
    #[error("error SubPath `{0}` must not be an absolute path")]
    AbsoluteSubPath(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    SubPathBacksteps(String),
    /// `subPathExpr` refers to variables the container does not define (or defines empty).
    #[error("missing value for {0}")]
    SubPathExpr(String),
    /// The `subPath` directory could not be created inside the volume (details are logged, not
    /// shown, as upstream does: they could reveal the host filesystem).
    #[error("failed to create subPath directory for volumeMount {} of container {}", go_quote(.mount), go_quote(.container))]
    SubPathCreate { mount: String, container: String },
    /// The `subPath` does not resolve inside its volume (a symlink escaping it, say).
    #[error("failed to prepare subPath for volumeMount {} of container {}", go_quote(.mount), go_quote(.container))]
    SubPathPrepare { mount: String, container: String },
}

impl VolumeError {
    /// The pod volume the failure concerns, if it concerns one.
    pub fn volume(&self) -> Option<&str> {
        match self {
            VolumeError::SetUp { volume, .. }
            | VolumeError::Claim { volume, .. }
            | VolumeError::InvalidName { volume }
            | VolumeError::MissingVolume { volume, .. } => Some(volume),
            _ => None,
        }
    }
}

/// Why one volume's SetUp failed; `Display` is the plugin's message.
#[derive(Debug, thiserror::Error)]
pub enum SetUpError {
    #[error("configmap {} not found", go_quote(.0))]
    ConfigMapNotFound(String),
    #[error("secret {} not found", go_quote(.0))]
    SecretNotFound(String),
    /// An `items` entry names a key the ConfigMap lacks (and the source is not optional).
    #[error("configmap references non-existent config key: {0}")]
    MissingConfigMapKey(String),
    /// An `items` entry names a key the Secret lacks (and the source is not optional).
    #[error("references non-existent secret key: {0}")]
    MissingSecretKey(String),
    /// A downward API item could not be resolved, or an object could not be read.
    #[error("{0}")]
    Field(EnvError),
    /// The atomic writer refused a path or failed to write.
    #[error("{0}")]
    Write(WriteError),
    #[error("hostPath type check failed: {path} is not a {expected}")]
    HostPathType {
        path: String,
        expected: &'static str,
    },
    #[error("{0} is an invalid volume type")]
    InvalidHostPathType(String),
    #[error("invalid HostPath `{0}`: must not contain '..'")]
    HostPathBacksteps(String),
    /// A filesystem operation failed (Go `*PathError` wording).
    #[error("{op} {}: {error}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// The TokenRequest for a serviceAccountToken projection failed.
    #[error("failed to fetch token: {0}")]
    Token(String),
    /// A volume source (or projected source) the agent cannot set up.
    #[error("unsupported volume type {}: the tandem agent sets up emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and ephemeral volumes", go_quote(.0))]
    Unsupported(String),
    /// Several failures of one volume (projected sources, downward API items), upstream's
    /// aggregate form: `[first, second]`.
    #[error("{}", aggregate_message(.0))]
    Aggregate(Vec<SetUpError>),
}

/// Go's `utilerrors.NewAggregate(...).Error()`: one message as is, several (deduplicated) in
/// brackets.
fn aggregate_message(errs: &[SetUpError]) -> String {
    let mut seen = Vec::<String>::new();
    for e in errs {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

fn aggregate(mut errs: Vec<SetUpError>) -> Result<(), SetUpError> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(SetUpError::Aggregate(errs)),
    }
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SetUpError + use<> {
    let path = path.to_path_buf();
    move |error| SetUpError::Io { op, path, error }
}

/// Why a claim cannot back a volume (`getPVCExtractPV`/`getPVSpec` wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("failed to fetch PVC from API server: {0}")]
    FetchClaim(String),
    #[error("PVC is being deleted")]
    BeingDeleted,
    #[error("PVC is not bound")]
    NotBound,
    #[error("PVC has empty pvc.Spec.VolumeName")]
    NoVolumeName,
    #[error("failed to fetch PV {name} from API server: {message}")]
    FetchVolume { name: String, message: String },
    #[error(
        "found PV object {0} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
    )]
    VolumeNotBound(String),
    #[error(
        "found PV object {name} but its pv.Spec.ClaimRef.UID {ref_uid} does not point to claim.UID {claim_uid}"
    )]
    ClaimUidMismatch {
        name: String,
        ref_uid: String,
        claim_uid: String,
    },
    /// A generic ephemeral volume's claim that the pod does not control.
    #[error("PVC {namespace}/{claim} was not created for pod {namespace}/{pod} (pod is not owner)")]
    NotOwner {
        namespace: String,
        claim: String,
        pod: String,
    },
    /// The bound PersistentVolume is not `hostPath` (the only kind the agent can mount).
    #[error(
        "PV {name} has a {kind} source; the tandem agent can only mount hostPath and smb.csi.k8s.io persistent volumes"
    )]
    NotHostPath { name: String, kind: String },
    /// The bound PersistentVolume of the emulated SMB CSI driver cannot be mounted.
    #[error("MountVolume.MountDevice failed for volume {} : {reason}", go_quote(.name))]
    Smb {
        name: String,
        reason: smb_csi::MountError,
    },
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

fn write_volume(dir: &Path, payload: Payload) -> Result<(), SetUpError> {
    make_dir(dir, 0o755)?;
    atomic_writer::write(dir, &payload).map_err(SetUpError::Write)
}

async fn fetch_config_map(
    objects: &mut Objects<'_>,
    name: &str,
    optional: bool,
) -> Result<ConfigMap, SetUpError> {
    match objects.config_map(name, optional).await {
        Ok(found) => Ok(found.unwrap_or_default()),
        Err(EnvError::ConfigMapNotFound { name }) => Err(SetUpError::ConfigMapNotFound(name)),
        Err(other) => Err(SetUpError::Field(other)),
    }
}

async fn fetch_secret(
    objects: &mut Objects<'_>,
    name: &str,
    optional: bool,
) -> Result<Secret, SetUpError> {
    if name.is_empty() {
        return if optional {
            Ok(Secret::default())
        } else {
            Err(SetUpError::SecretNotFound(String::new()))
        };
    }
    match objects.secret(name, optional).await {
        Ok(found) => Ok(found.unwrap_or_default()),
        Err(EnvError::SecretNotFound { name }) => Err(SetUpError::SecretNotFound(name)),
        Err(other) => Err(SetUpError::Field(other)),
    }
}

/// Upstream `configmap.MakePayload`: every key of `data` and `binaryData` with `default_mode`,
/// or just `items` (`key` → `path`, with its own `mode`); a missing item key is an error unless
/// the source is optional.
fn config_map_payload(
    items: Option<&[KeyToPath]>,
    config_map: &ConfigMap,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let text = config_map.data.as_ref();
    let binary = config_map.binary_data.as_ref();
    let lookup = |key: &str| -> Option<Vec<u8>> {
        text.and_then(|d| d.get(key))
            .map(|v| v.as_bytes().to_vec())
            .or_else(|| binary.and_then(|d| d.get(key)).map(|v| v.0.clone()))
    };
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            let text_files = text
                .into_iter()
                .flatten()
                .map(|(k, v)| (k, v.as_bytes().to_vec()));
            let binary_files = binary.into_iter().flatten().map(|(k, v)| (k, v.0.clone()));
            for (key, data) in text_files.chain(binary_files) {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data,
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(data) = lookup(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(SetUpError::MissingConfigMapKey(item.key.clone()));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data,
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// Upstream `secret.MakePayload`: like [`config_map_payload`] over the Secret's decoded `data`.
fn secret_payload(
    items: Option<&[KeyToPath]>,
    secret: &Secret,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let data = secret.data.as_ref();
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, value) in data.into_iter().flatten() {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data: value.0.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(value) = data.and_then(|d| d.get(&item.key)) else {
                    if optional {
                        continue;
                    }
                    return Err(SetUpError::MissingSecretKey(item.key.clone()));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: value.0.clone(),
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// Upstream `downwardapi.CollectData`: one file per item, `fieldRef` limited to the metadata
/// paths (labels and annotations as sorted `key="value"` lines), `resourceFieldRef` against the
/// named container with limits defaulted to the node's allocatable. Failures of all items are
/// reported together.
fn downward_api_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    ctx: &EnvContext,
    default_mode: u32,
) -> Result<Payload, SetUpError> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            env::metadata_field_value(pod, &field.field_path)
        } else if let Some(resource) = &item.resource_field_ref {
            let name = resource.container_name.as_deref().unwrap_or("");
            env::find_container(pod, name)
                .and_then(|c| env::container_resource_value(resource, c, &ctx.node_allocatable))
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                payload.insert(
                    atomic_writer::clean_path(&item.path),
                    FileProjection {
                        data: v.into_bytes(),
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
            Err(e) => errors.push(SetUpError::Field(e)),
        }
    }
    aggregate(errors)?;
    Ok(payload)
}

/// Upstream `projected.collectData`: the sources' payloads merged in order (a later source
/// wins a path). A serviceAccountToken source is skipped with a warning when the API server
/// has no TokenRequest (`serviceaccounts/token`) endpoint.
async fn projected_payload(
    objects: &mut Objects<'_>,
    sources: &[VolumeProjection],
    pod: &Pod,
    ctx: &EnvContext,
    default_mode: u32,
    warnings: &mut Vec<String>,
    volume: &str,
) -> Result<Payload, SetUpError> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for source in sources {
        let part = if let Some(cm) = &source.config_map {
            let optional = cm.optional.unwrap_or(false);
            match fetch_config_map(objects, &cm.name, optional).await {
                Ok(found) => {
                    config_map_payload(cm.items.as_deref(), &found, default_mode, optional)
                }
                Err(e) => Err(e),
            }
        } else if let Some(s) = &source.secret {
            let optional = s.optional.unwrap_or(false);
            match fetch_secret(objects, &s.name, optional).await {
                Ok(found) => secret_payload(s.items.as_deref(), &found, default_mode, optional),
                Err(e) => Err(e),
            }
        } else if let Some(d) = &source.downward_api {
            downward_api_payload(d.items.as_deref().unwrap_or(&[]), pod, ctx, default_mode)
        } else if let Some(token) = &source.service_account_token {
            // Upstream narrows the token file to 0600 when fsGroup will make it group-readable.
            let fs_group = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.fs_group)
                .is_some();
            let mode = if fs_group { 0o600 } else { default_mode };
            match service_account_token(objects.client(), pod, token).await {
                Ok(Some(t)) => Ok(Payload::from([(
                    token.path.clone(),
                    FileProjection {
                        data: t.into_bytes(),
                        mode,
                    },
                )])),
                Ok(None) => {
                    let msg = format!(
                        "volume {volume}: skipped the serviceAccountToken projection {}: the API server does not serve serviceaccounts/token",
                        go_quote(&token.path)
                    );
                    tracing::warn!("{msg}");
                    warnings.push(msg);
                    Ok(Payload::new())
                }
                Err(e) => Err(e),
            }
        } else if source.cluster_trust_bundle.is_some() {
            Err(SetUpError::Unsupported(
                "projected clusterTrustBundle".to_owned(),
            ))
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => payload.extend(p),
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors)?;
    Ok(payload)
}

/// How often a pod's projected ServiceAccount tokens must be rewritten: 80 % of the shortest
/// requested lifetime (one hour when unset), as the kubelet's token manager refreshes them.
/// `None` when the pod projects no token.
pub fn token_refresh_period(pod: &Pod) -> Option<std::time::Duration> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes
        .iter()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| t.expiration_seconds.unwrap_or(3600).max(600))
        .min()
        .map(|secs| std::time::Duration::from_secs(secs as u64 * 8 / 10))
}

/// Requests a pod-bound token for the pod's service account (the kubelet's token manager
/// without its cache). `None` when the API server has no `serviceaccounts/token` route: a 404
/// without details (as opposed to a missing ServiceAccount, whose 404 names it) or a 405.
async fn service_account_token(
    client: &kube::Client,
    pod: &Pod,
    projection: &ServiceAccountTokenProjection,
) -> Result<Option<String>, SetUpError> {
    let namespace = env::pod_namespace(pod);
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: projection
                .audience
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
            expiration_seconds: projection.expiration_seconds,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    match api
        .create_token_request(&account, &PostParams::default(), &request)
        .await
    {
        Ok(tr) => Ok(Some(tr.status.map(|s| s.token).unwrap_or_default())),
        Err(kube::Error::Api(status))
            if (status.code == 404 && status.details.is_none()) || status.code == 405 =>
        {
            Ok(None)
        }
        Err(e) => Err(SetUpError::Token(env::api_message(&e))),
    }
}

/// The kubelet's hostPath SetUp (`checkType`, v1.33 wording): no `..` in the path, then the
/// `type` check. `DirectoryOrCreate` creates the directory (0755) and `FileOrCreate` an empty
/// file (0644) when nothing exists there; the other types only check. An unset or empty
/// `type` checks nothing. Like upstream, `File` accepts anything that exists and is not a
/// directory.
pub fn check_host_path(source: &HostPathVolumeSource) -> Result<(), SetUpError> {
    let path = source.path.as_str();
    if path.split('/').any(|c| c == "..") {
        return Err(SetUpError::HostPathBacksteps(path.to_owned()));
    }
    let kind = source.type_.as_deref().unwrap_or("");
    let meta = fs::metadata(path).ok();
    let not_a = |expected: &'static str| SetUpError::HostPathType {
        path: path.to_owned(),
        expected,
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" | "Directory" => {
            if kind == "DirectoryOrCreate" && meta.is_none() {
                return fs::create_dir_all(path).map_err(io_err("mkdir", Path::new(path)));
            }
            match meta {
                Some(m) if m.is_dir() => Ok(()),
                _ => Err(not_a("directory")),
            }
        }
        "FileOrCreate" | "File" => {
            if kind == "FileOrCreate" && meta.is_none() {
                return create_empty_file(Path::new(path));
            }
            match meta {
                Some(m) if !m.is_dir() => Ok(()),
                _ => Err(not_a("file")),
            }
        }
        "Socket" => special_file(meta.as_ref(), SpecialFile::Socket).ok_or(not_a("socket file")),
        "CharDevice" => {
            special_file(meta.as_ref(), SpecialFile::CharDevice).ok_or(not_a("character device"))
        }
        "BlockDevice" => {
            special_file(meta.as_ref(), SpecialFile::BlockDevice).ok_or(not_a("block device"))
        }
        other => Err(SetUpError::InvalidHostPathType(other.to_owned())),
    }
}

fn create_empty_file(path: &Path) -> Result<(), SetUpError> {
    let mut options = fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    options.open(path).map(drop).map_err(io_err("open", path))
}

#[derive(Clone, Copy)]
enum SpecialFile {
    Socket,
    CharDevice,
    BlockDevice,
}

/// `Some(())` when `meta` is that kind of special file.
#[cfg(unix)]
fn special_file(meta: Option<&fs::Metadata>, kind: SpecialFile) -> Option<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta?.file_type();
    let matches = match kind {
        SpecialFile::Socket => t.is_socket(),
        SpecialFile::CharDevice => t.is_char_device(),
        SpecialFile::BlockDevice => t.is_block_device(),
    };
    matches.then_some(())
}

#[cfg(not(unix))]
fn special_file(_meta: Option<&fs::Metadata>, _kind: SpecialFile) -> Option<()> {
    None
}

/// Follows a claim to its bound PersistentVolume and returns the volume's `hostPath` source
/// (`owner` is the pod a generic ephemeral volume's claim must be controlled by).
async fn resolve_claim(
    client: &kube::Client,
    namespace: &str,
    claim: &str,
    owner: Option<&Pod>,
) -> Result<HostPathVolumeSource, ClaimError> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pvc = claims
        .get_opt(claim)
        .await
        .map_err(|e| ClaimError::FetchClaim(env::api_message(&e)))?
        .ok_or_else(|| {
            ClaimError::FetchClaim(format!(
                "persistentvolumeclaims {} not found",
                go_quote(claim)
            ))
        })?;
    if let Some(pod) = owner {
        let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
        let controlled = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true) && r.uid == pod_uid);
        if !controlled {
            return Err(ClaimError::NotOwner {
                namespace: namespace.to_owned(),
                claim: claim.to_owned(),
                pod: pod.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err(ClaimError::BeingDeleted);
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(ClaimError::NotBound);
    }
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|n| !n.is_empty())
        .ok_or(ClaimError::NoVolumeName)?;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes
        .get_opt(&pv_name)
        .await
        .map_err(|e| ClaimError::FetchVolume {
            name: pv_name.clone(),
            message: env::api_message(&e),
        })?
        .ok_or_else(|| ClaimError::FetchVolume {
            name: pv_name.clone(),
            message: format!("persistentvolumes {} not found", go_quote(&pv_name)),
        })?;
    let spec = pv.spec.unwrap_or_default();
    let claim_ref = spec
        .claim_ref
        .as_ref()
        .ok_or_else(|| ClaimError::VolumeNotBound(pv_name.clone()))?;
    let claim_uid = pvc.metadata.uid.clone().unwrap_or_default();
    let ref_uid = claim_ref.uid.clone().unwrap_or_default();
    if ref_uid != claim_uid {
        return Err(ClaimError::ClaimUidMismatch {
            name: pv_name,
            ref_uid,
            claim_uid,
        });
    }
    if let Some(csi) = spec.csi.as_ref().filter(|c| smb_csi::is_smb(Some(c))) {
        return smb_csi::resolve(client, csi)
            .await
            .map_err(|reason| ClaimError::Smb {
                name: pv_name,
                reason,
            });
    }
    match spec.host_path {
        Some(source) => Ok(source),
        None => {
            let kind = serde_json::to_value(&spec)
                .ok()
                .and_then(|v| {
                    v.as_object().and_then(|o| {
                        o.keys()
                            .find(|k| !PV_SPEC_NON_SOURCE_FIELDS.contains(&k.as_str()))
                            .cloned()
                    })
                })
                .unwrap_or_else(|| "unknown".to_owned());
            Err(ClaimError::NotHostPath {
                name: pv_name,
                kind,
            })
        }
    }
}

/// PersistentVolumeSpec fields that are not a volume source.
const PV_SPEC_NON_SOURCE_FIELDS: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

/// The bind mounts of `container` (upstream `makeMounts`, without the hosts file: see
/// [`etc_hosts_mount`]), in `volumeMounts` order.
///
/// - a mount naming a volume `volumes` lacks is an error;
/// - `subPathExpr` is expanded against `env` (the container's resolved environment, as
///   [`crate::env::container_env`] returns it); a reference to an undefined or empty variable is
///   an error;
/// - a `subPath` must be relative and free of `..`; a missing subPath directory is created
///   inside the volume with the volume root's permissions, never through a symlink leading out
///   of the volume, and the result is resolved to its real path, which must stay inside the
///   volume;
/// - the mount is read-only when the mount or the volume says so;
/// - a relative `mountPath` is made absolute.
pub fn container_mounts(
    container: &Container,
    volumes: &PodVolumes,
    env: &[(String, String)],
) -> Result<Vec<HostMount>, VolumeError> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let volume = volumes
            .get(&mount.name)
            .ok_or_else(|| VolumeError::MissingVolume {
                volume: mount.name.clone(),
                container: container.name.clone(),
            })?;
        let sub_path = match mount.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => expand_sub_path_expr(expr, env)?,
            None => mount.sub_path.clone().unwrap_or_default(),
        };
        let host_path = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            validate_sub_path(&sub_path)?;
            resolve_sub_path(&volume.host_path, &sub_path, &mount.name, &container.name)?
        };
        mounts.push(HostMount {
            container_path: absolute_container_path(&mount.mount_path),
            host_path,
            read_only: mount.read_only.unwrap_or(false) || volume.read_only,
        });
    }
    Ok(mounts)
}

/// The mount of the pod's managed hosts file at `/etc/hosts`, unless the container mounts
/// something there itself (upstream `makeMounts`). Whether a pod gets the file at all
/// (upstream: once it has an IP or uses the host network) is the caller's decision.
pub fn etc_hosts_mount(container: &Container, hosts_file: &Path) -> Option<HostMount> {
    let taken = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == ETC_HOSTS);
    (!taken).then(|| HostMount {
        container_path: ETC_HOSTS.to_owned(),
        host_path: hosts_file.to_path_buf(),
        read_only: false,
    })
}

/// Upstream `ExpandContainerVolumeMounts`: `$(VAR)` in `subPathExpr`; undefined or empty
/// variables are reported together, sorted.
fn expand_sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, VolumeError> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut missing = BTreeSet::new();
    let expanded = env::expand(expr, |name| match map.get(name) {
        Some(v) if !v.is_empty() => (*v).to_owned(),
        _ => {
            missing.insert(name.to_owned());
            String::new()
        }
    });
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(VolumeError::SubPathExpr(
            missing.into_iter().collect::<Vec<_>>().join(", "),
        ))
    }
}

/// A subPath is relative and has no `..` component (upstream `makeMounts` with
/// `ValidatePathNoBacksteps`).
fn validate_sub_path(sub_path: &str) -> Result<(), VolumeError> {
    if sub_path.starts_with('/') || Path::new(sub_path).is_absolute() {
        return Err(VolumeError::AbsoluteSubPath(sub_path.to_owned()));
    }
    if sub_path.split('/').any(|c| c == "..") {
        return Err(VolumeError::SubPathBacksteps(sub_path.to_owned()));
    }
    Ok(())
}

fn resolve_sub_path(
    volume_root: &Path,
    sub_path: &str,
    mount: &str,
    container: &str,
) -> Result<PathBuf, VolumeError> {
    let create_failed = || VolumeError::SubPathCreate {
        mount: mount.to_owned(),
        container: container.to_owned(),
    };
    let prepare_failed = || VolumeError::SubPathPrepare {
        mount: mount.to_owned(),
        container: container.to_owned(),
    };
    let root = fs::canonicalize(volume_root).map_err(|e| {
        tracing::warn!(path = %volume_root.display(), error = %e, "volume root for subPath not found");
        prepare_failed()
    })?;
    let full = root.join(sub_path);
    if fs::metadata(&full).is_err() {
        let perm = fs::metadata(&root)
            .ok()
            .and_then(|m| platform::mode(&m))
            .unwrap_or(0o755);
        safe_make_dir(&root, sub_path, perm).map_err(|e| {
            tracing::warn!(%mount, %container, error = %e, "failed to create subPath directory");
            create_failed()
        })?;
    }
    let real = fs::canonicalize(&full).map_err(|e| {
        tracing::warn!(%mount, %container, error = %e, "failed to resolve subPath");
        prepare_failed()
    })?;
    if !real.starts_with(&root) {
        tracing::warn!(%mount, %container, path = %real.display(), "subPath resolves outside its volume");
        return Err(prepare_failed());
    }
    Ok(real)
}

/// Creates `sub_path` under `root` (already canonical) one component at a time, refusing to
/// follow a symlink out of `root` (upstream `SafeMakeDir`).
fn safe_make_dir(root: &Path, sub_path: &str, perm: u32) -> io::Result<()> {
    let mut current = root.to_path_buf();
    for component in sub_path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let next = current.join(component);
        match fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = fs::canonicalize(&next)?;
                if !real.starts_with(root) || !real.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} resolves to {}, outside the volume or not a directory",
                            next.display(),
                            real.display()
                        ),
                    ));
                }
                current = real;
            }
            Ok(meta) if meta.is_dir() => current = next,
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    next.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&next)?;
                platform::set_mode(&next, perm)?;
                current = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Upstream `MakeAbsolutePath` for Linux: a `mountPath` without a leading `/` gets one.
fn absolute_container_path(path: &str) -> String {
    if path.starts_with('/') || Path::new(path).is_absolute() {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

/// Writes the pod's hosts file to `<pod_dir>/etc-hosts` (mode 0644) and returns its path
/// (upstream `ensureHostsFile`). A pod on the pod network gets the kubelet's managed file:
/// localhost entries, `pod_ip` with the pod's hostname (and its FQDN
/// `<hostname>.<subdomain>.<namespace>.svc.cluster.local` when `subdomain` is set), then
/// `hostAliases`. A `hostNetwork` pod gets the node's `/etc/hosts` plus its `hostAliases`.
///
/// The file is rewritten in place, not replaced, so containers that already bind-mount it see
/// the new content. Without `pod_ip` the managed file has no pod entry (upstream does not
/// mount it at all until the pod has an IP).
pub fn write_hosts_file(pod: &Pod, pod_ip: Option<&str>, pod_dir: &Path) -> io::Result<PathBuf> {
    let spec = pod.spec.as_ref();
    let aliases = spec.and_then(|s| s.host_aliases.as_deref()).unwrap_or(&[]);
    let content = if spec.and_then(|s| s.host_network).unwrap_or(false) {
        let node = fs::read_to_string(ETC_HOSTS)?;
        node_hosts_file_content(&node, aliases)
    } else {
        let (hostname, domain) = pod_hostname_and_domain(pod)
            .map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))?;
        let ips: Vec<&str> = pod_ip.into_iter().collect();
        managed_hosts_file_content(&ips, &hostname, &domain, aliases)
    };
    fs::create_dir_all(pod_dir)?;
    let path = pod_dir.join(HOSTS_FILE_NAME);
    fs::write(&path, content)?;
    platform::set_mode(&path, 0o644)?;
    Ok(path)
}

/// Upstream `GeneratePodHostNameAndDomain`: the hostname is `spec.hostname` or the pod name,
/// cut to 63 characters without a trailing `-`/`.`; the domain is
/// `<subdomain>.<namespace>.svc.<cluster domain>` when `spec.subdomain` is set, else empty.
pub fn pod_hostname_and_domain(pod: &Pod) -> Result<(String, String), String> {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut hostname = pod_name.clone();
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        let errs = names::dns1123_label(h);
        if !errs.is_empty() {
            return Err(format!(
                "pod Hostname {} is not a valid DNS label: {}",
                go_quote(h),
                errs.join(";")
            ));
        }
        hostname = h.to_owned();
    }
    if hostname.len() > 63 {
        let cut: String = hostname.chars().take(63).collect();
        let trimmed = cut.trim_end_matches(['-', '.']).to_owned();
        if trimmed.is_empty() {
            return Err(format!(
                "hostname for pod {} was invalid: {}",
                go_quote(&pod_name),
                go_quote(&hostname)
            ));
        }
        hostname = trimmed;
    }
    let mut domain = String::new();
    if let Some(sub) = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        let errs = names::dns1123_label(sub);
        if !errs.is_empty() {
            return Err(format!(
                "pod Subdomain {} is not a valid DNS label: {}",
                go_quote(sub),
                errs.join(";")
            ));
        }
        domain = format!("{sub}.{}.svc.{CLUSTER_DOMAIN}", env::pod_namespace(pod));
    }
    Ok((hostname, domain))
}

/// Upstream `managedHostsFileContent`.
pub fn managed_hosts_file_content(
    ips: &[&str],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file.\n");
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&host_alias_entries(aliases));
    out
}

/// Upstream `nodeHostsFileContent`: the node's file under a header, then the aliases.
pub fn node_hosts_file_content(node_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from("# Kubernetes-managed hosts file (host network).\n");
    out.push_str(node_hosts);
    out.push_str(&host_alias_entries(aliases));
    out
}

/// Upstream `hostsEntriesFromHostAliases`: a blank line, a comment, then one line per alias IP
/// with its hostnames tab-separated.
fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.as_deref().unwrap_or(&[]).join("\t");
        out.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::VolumeMount;

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "app", "volumeMounts": mounts}))
            .expect("container")
    }

    fn volumes(root: &Path, read_only: bool) -> PodVolumes {
        let mut v = PodVolumes::default();
        v.insert(
            "data",
            HostVolume {
                host_path: root.to_path_buf(),
                read_only,
            },
        );
        v
    }

    fn err_text<T: std::fmt::Debug>(r: Result<T, VolumeError>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn hosts_file_has_localhost_pod_entry_fqdn_and_aliases() {
        let aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }];
        let content = managed_hosts_file_content(
            &["10.0.0.5"],
            "web-0",
            "web.shop.svc.cluster.local",
            &aliases,
        );
        assert_eq!(
            content,
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.0.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n\
             \n\
             # Entries added by HostAliases.\n\
             10.1.2.3\tfoo.local\tbar.local\n"
        );
        let plain = managed_hosts_file_content(&["10.0.0.5"], "web", "", &[]);
        assert!(plain.ends_with("fe00::2\tip6-allrouters\n10.0.0.5\tweb\n"));
        let host = node_hosts_file_content("127.0.0.1 localhost\n", &aliases);
        assert!(host.starts_with(
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries"
        ));
    }

    #[test]
    fn hostname_comes_from_spec_or_name_and_is_truncated() {
        let pod = |spec: serde_json::Value, name: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"},
                "spec": spec
            }))
            .expect("pod")
        };
        let p = pod(
            serde_json::json!({"containers": [], "hostname": "web-0", "subdomain": "web"}),
            "x",
        );
        assert_eq!(
            pod_hostname_and_domain(&p),
            Ok(("web-0".into(), "web.shop.svc.cluster.local".into()))
        );
        let long = format!("{}-{}", "a".repeat(62), "b".repeat(5));
        let p = pod(serde_json::json!({"containers": []}), &long);
        assert_eq!(
            pod_hostname_and_domain(&p),
            Ok(("a".repeat(62), String::new()))
        );
        let p = pod(
            serde_json::json!({"containers": [], "hostname": "Bad_Name"}),
            "x",
        );
        assert!(
            pod_hostname_and_domain(&p)
                .expect_err("invalid")
                .starts_with("pod Hostname \"Bad_Name\" is not a valid DNS label: ")
        );
    }

    #[test]
    fn write_hosts_file_puts_it_in_the_pod_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": []}
        }))
        .expect("pod");
        let path = write_hosts_file(&p, Some("10.0.0.7"), dir.path()).expect("write");
        assert_eq!(path, dir.path().join("etc-hosts"));
        let text = fs::read_to_string(&path).expect("read");
        assert!(text.ends_with("10.0.0.7\tweb\n"));
        let c = container(serde_json::json!([]));
        assert_eq!(
            etc_hosts_mount(&c, &path),
            Some(HostMount {
                container_path: "/etc/hosts".into(),
                host_path: path.clone(),
                read_only: false
            })
        );
        let own = container(serde_json::json!([{"name": "data", "mountPath": "/etc/hosts"}]));
        assert_eq!(etc_hosts_mount(&own, &path), None);
        fs::create_dir_all(dir.path().join("volumes/cache/sub")).expect("volume dir");
        cleanup(dir.path());
        assert!(!path.exists());
        assert!(!dir.path().join("volumes").exists());
        cleanup(dir.path());
    }

    #[test]
    fn sub_paths_must_be_relative_without_backsteps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vols = volumes(dir.path(), false);
        let mount = |sub: &str| {
            container(serde_json::json!([{"name": "data", "mountPath": "/d", "subPath": sub}]))
        };
        assert_eq!(
            err_text(container_mounts(&mount("/etc"), &vols, &[])),
            "error SubPath `/etc` must not be an absolute path"
        );
        assert_eq!(
            err_text(container_mounts(&mount("a/../../b"), &vols, &[])),
            "unable to provision SubPath `a/../../b`: must not contain '..'"
        );
        // `..` inside a name is not a backstep.
        let ok = container_mounts(&mount("a..b/c"), &vols, &[]).expect("mounts");
        assert!(ok[0].host_path.ends_with("a..b/c"));
        assert!(ok[0].host_path.is_dir());
    }

    #[test]
    fn sub_path_creates_directories_and_resolves_inside_the_volume() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("vol");
        fs::create_dir(&root).expect("root");
        platform::set_mode(&root, 0o777).expect("chmod");
        let vols = volumes(&root, false);
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "logs", "subPath": "a/b", "readOnly": true},
            {"name": "data", "mountPath": "/whole"}
        ]));
        let mounts = container_mounts(&c, &vols, &[]).expect("mounts");
        let real_root = fs::canonicalize(&root).expect("canonical");
        assert_eq!(
            mounts,
            vec![
                HostMount {
                    container_path: "/logs".into(),
                    host_path: real_root.join("a/b"),
                    read_only: true
                },
                HostMount {
                    container_path: "/whole".into(),
                    host_path: root.clone(),
                    read_only: false
                },
            ]
        );
        let meta = fs::metadata(real_root.join("a")).expect("a");
        assert_eq!(platform::mode(&meta), Some(0o777));

        // A volume's read-only flag wins over the mount's.
        let ro = volumes(&root, true);
        let c = container(serde_json::json!([{"name": "data", "mountPath": "/d"}]));
        assert!(container_mounts(&c, &ro, &[]).expect("mounts")[0].read_only);

        // Missing volume.
        let c = container(serde_json::json!([{"name": "nope", "mountPath": "/d"}]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "cannot find volume \"nope\" to mount into container \"app\""
        );
    }

    #[cfg(unix)]
    #[test]
    fn sub_path_symlinks_may_not_leave_the_volume() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("vol");
        let outside = dir.path().join("outside");
        fs::create_dir(&root).expect("root");
        fs::create_dir(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, root.join("escape")).expect("symlink");
        let vols = volumes(&root, false);
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "/d", "subPath": "escape"}
        ]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "failed to prepare subPath for volumeMount \"data\" of container \"app\""
        );
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "/d", "subPath": "escape/new"}
        ]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "failed to create subPath directory for volumeMount \"data\" of container \"app\""
        );
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn sub_path_expr_expands_against_the_container_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vols = volumes(dir.path(), false);
        let env = vec![
            ("POD_NAME".to_string(), "web-0".to_string()),
            ("EMPTY".to_string(), String::new()),
        ];
        let mut c = container(serde_json::json!([]));
        c.volume_mounts = Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/logs".into(),
            sub_path_expr: Some("logs/$(POD_NAME)".into()),
            ..VolumeMount::default()
        }]);
        let mounts = container_mounts(&c, &vols, &env).expect("mounts");
        assert!(mounts[0].host_path.ends_with("logs/web-0"));
        if let Some(m) = c.volume_mounts.as_mut().and_then(|m| m.first_mut()) {
            m.sub_path_expr = Some("$(ZED)/$(EMPTY)/$(ALPHA)".into());
        }
        assert_eq!(
            err_text(container_mounts(&c, &vols, &env)),
            "missing value for ALPHA, EMPTY, ZED"
        );
    }

    fn cm(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn config_map_payload_projects_all_keys_or_items() {
        let c = cm(&[("a", "1"), ("b", "2")], &[("bin", b"\x00\x01")]);
        let all = config_map_payload(None, &c, 0o640, false).expect("payload");
        assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b", "bin"]);
        assert!(all.values().all(|f| f.mode == 0o640));
        assert_eq!(all["bin"].data, vec![0, 1]);

        let items = [
            item("a", "conf/a.txt", Some(0o400)),
            item("bin", "b.bin", None),
        ];
        let some = config_map_payload(Some(&items), &c, 0o644, false).expect("payload");
        assert_eq!(some["conf/a.txt"].mode, 0o400);
        assert_eq!(some["conf/a.txt"].data, b"1");
        assert_eq!(some["b.bin"].mode, 0o644);
        assert_eq!(some.len(), 2);

        let missing = [item("zz", "zz", None)];
        assert_eq!(
            config_map_payload(Some(&missing), &c, 0o644, false)
                .expect_err("missing key")
                .to_string(),
            "configmap references non-existent config key: zz"
        );
        assert!(
            config_map_payload(Some(&missing), &c, 0o644, true)
                .expect("optional")
                .is_empty()
        );
        let s = Secret::default();
        assert_eq!(
            secret_payload(Some(&missing), &s, 0o644, false)
                .expect_err("missing key")
                .to_string(),
            "references non-existent secret key: zz"
        );
    }

    #[test]
    fn downward_api_payload_formats_maps_and_aggregates_errors() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "labels": {"tier": "fe", "app": "web"}},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"memory": "64Mi"}}}]}
        }))
        .expect("pod");
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "./name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
            {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "requests.memory", "divisor": "1Mi"}}
        ]))
        .expect("items");
        let payload =
            downward_api_payload(&items, &p, &EnvContext::default(), 0o644).expect("payload");
        assert_eq!(payload["labels"].data, b"app=\"web\"\ntier=\"fe\"");
        assert_eq!(payload["name"].data, b"web");
        assert_eq!(payload["name"].mode, 0o400);
        assert_eq!(payload["mem"].data, b"64");

        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}},
            {"path": "x", "resourceFieldRef": {"containerName": "gone", "resource": "limits.cpu"}}
        ]))
        .expect("items");
        assert_eq!(
            downward_api_payload(&bad, &p, &EnvContext::default(), 0o644)
                .expect_err("errors")
                .to_string(),
            "[unsupported fieldPath: spec.nodeName, container gone not found]"
        );
    }

    #[test]
    fn host_path_types_are_checked_with_the_kubelet_messages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = |path: &Path, kind: &str| HostPathVolumeSource {
            path: path.to_string_lossy().into_owned(),
            type_: Some(kind.to_owned()),
        };
        let new_dir = dir.path().join("made/deep");
        check_host_path(&src(&new_dir, "DirectoryOrCreate")).expect("created");
        assert!(new_dir.is_dir());
        let new_file = dir.path().join("made/file");
        check_host_path(&src(&new_file, "FileOrCreate")).expect("created");
        assert!(new_file.is_file());
        check_host_path(&src(&new_file, "File")).expect("is a file");
        check_host_path(&src(&new_file, "")).expect("unchecked");

        let missing = dir.path().join("missing");
        let msg = |s: HostPathVolumeSource| check_host_path(&s).expect_err("fails").to_string();
        assert_eq!(
            msg(src(&missing, "Directory")),
            format!(
                "hostPath type check failed: {} is not a directory",
                missing.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "File")),
            format!(
                "hostPath type check failed: {} is not a file",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_file, "DirectoryOrCreate")),
            format!(
                "hostPath type check failed: {} is not a directory",
                new_file.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "Socket")),
            format!(
                "hostPath type check failed: {} is not a socket file",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "CharDevice")),
            format!(
                "hostPath type check failed: {} is not a character device",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "Weird")),
            "Weird is an invalid volume type"
        );
        assert_eq!(
            msg(src(Path::new("/tmp/../etc"), "")),
            "invalid HostPath `/tmp/../etc`: must not contain '..'"
        );
    }

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

    #[test]
    fn projected_tokens_are_refreshed_at_four_fifths_of_their_lifetime() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "volumes": [
                {"name": "a", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}},
                {"name": "b", "projected": {"sources": [{"serviceAccountToken": {"path": "t2", "expirationSeconds": 1000}}]}}
            ]}
        }))
        .expect("pod");
        assert_eq!(
            token_refresh_period(&pod),
            Some(std::time::Duration::from_secs(800))
        );
        let plain: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("pod");
        assert_eq!(token_refresh_period(&plain), None);
    }
}
