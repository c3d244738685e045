//! Why a pod's volumes or a container's mounts could not be prepared, with the kubelet's
//! messages: [`VolumeError::SetUp`] displays as the `FailedMount` event text
//! (`MountVolume.SetUp failed for volume "x" : configmap "y" not found`), several failures of
//! one volume as Go's `utilerrors.NewAggregate`.

use std::io;
use std::path::{Path, PathBuf};

use tandem_core::field::go_quote;

use super::atomic_writer::WriteError;
use super::persistent_volume_claim::ClaimError;
use crate::env::EnvError;

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

pub(super) fn aggregate(mut errs: Vec<SetUpError>) -> Result<(), SetUpError> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        _ => Err(SetUpError::Aggregate(errs)),
    }
}

pub(super) fn io_err(
    op: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> SetUpError + use<> {
    let path = path.to_path_buf();
    move |error| SetUpError::Io { op, path, error }
}
