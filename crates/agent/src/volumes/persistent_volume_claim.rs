//! `persistentVolumeClaim` and generic `ephemeral` volumes: the claim followed to its bound
//! PersistentVolume, as the kubelet's volume manager does (`pkg/kubelet/volumemanager/populator`,
//! `getPVCExtractPV`/`getPVSpec`). The agent mounts a `hostPath` PersistentVolume or the share
//! directory of an `smb.csi.k8s.io` one ([`smb_csi`]).

use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::api::Api;
use tandem_core::field::go_quote;

use super::smb_csi;
use crate::env;

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

/// Follows a claim to its bound PersistentVolume and returns the volume's `hostPath` source
/// (`owner` is the pod a generic ephemeral volume's claim must be controlled by).
pub(super) async fn resolve_claim(
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
