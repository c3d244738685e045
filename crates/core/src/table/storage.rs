//! Columns and cells of storage.k8s.io objects: upstream's `storageClassColumnDefinitions`,
//! `csiDriverColumnDefinitions`, `csiNodeColumnDefinitions` and
//! `volumeAttachmentColumnDefinitions` with `printStorageClass` (the ` (default)` suffix of
//! `storageutil.IsDefaultAnnotation`), `printCSIDriver`, `printCSINode` and
//! `printVolumeAttachment` (pkg/printers/internalversion/printers.go). Descriptions are the
//! storage/v1 field documentation upstream reads through `SwaggerDoc()`.

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, arr_len, get, name, opt_bool_at, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

const PROVISIONER_DESC: &str = "provisioner indicates the type of the provisioner.";
const RECLAIM_POLICY_DESC: &str = "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.";
const VOLUME_BINDING_MODE_DESC: &str = "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.";
const ALLOW_VOLUME_EXPANSION_DESC: &str =
    "allowVolumeExpansion shows whether the storage class allow volume expand.";
const ATTACH_REQUIRED_DESC: &str = "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the CSIDriverRegistry feature gate is enabled and the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable.";
const POD_INFO_ON_MOUNT_DESC: &str = "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.\n\nThe CSI driver specifies podInfoOnMount as part of driver deployment. If true, Kubelet will pass pod information as VolumeContext in the CSI NodePublishVolume() calls. The CSI driver is responsible for parsing and validating the information passed in as VolumeContext.\n\nThe following VolumeContext will be passed if podInfoOnMount is set to true. This list might grow, but the prefix will be used. \"csi.storage.k8s.io/pod.name\": pod.Name \"csi.storage.k8s.io/pod.namespace\": pod.Namespace \"csi.storage.k8s.io/pod.uid\": string(pod.UID) \"csi.storage.k8s.io/ephemeral\": \"true\" if the volume is an ephemeral inline volume\n                                defined by a CSIVolumeSource, otherwise \"false\"\n\n\"csi.storage.k8s.io/ephemeral\" is a new feature in Kubernetes 1.16. It is only required for drivers which support both the \"Persistent\" and \"Ephemeral\" VolumeLifecycleMode. Other drivers can leave pod info disabled and/or ignore this field. As Kubernetes 1.15 doesn't support this field, drivers can only support one mode when deployed on such a cluster and the deployment determines which mode that is, for example via a command line parameter of the driver.\n\nThis field was immutable in Kubernetes < 1.29 and now is mutable.";
const STORAGE_CAPACITY_DESC: &str = "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.\n\nThe check can be enabled immediately when deploying a driver. In that case, provisioning new volumes with late binding will pause until the driver deployment has published some suitable CSIStorageCapacity object.\n\nAlternatively, the driver can be deployed with the field unset or false and it can be flipped later when storage capacity information has been published.\n\nThis field was immutable in Kubernetes <= 1.22 and now is mutable.";
const TOKEN_REQUESTS_DESC: &str = "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication. Kubelet will pass the tokens in VolumeContext in the CSI NodePublishVolume calls. The CSI driver should parse and validate the following VolumeContext: \"csi.storage.k8s.io/serviceAccount.tokens\": {\n  \"<audience>\": {\n    \"token\": <token>,\n    \"expirationTimestamp\": <expiration timestamp in RFC3339>,\n  },\n  ...\n}\n\nNote: Audience in each TokenRequest should be different and at most one token is empty string. To receive a new token after expiry, RequiresRepublish can be used to trigger NodePublishVolume periodically.";
const REQUIRES_REPUBLISH_DESC: &str = "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false.\n\nNote: After a successful initial NodePublishVolume call, subsequent calls to NodePublishVolume should only update the contents of the volume. New mount points will not be seen by a running container.";
const MODES_DESC: &str = "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is \"Persistent\", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism.\n\nThe other mode is \"Ephemeral\". In this mode, volumes are defined inline inside the pod spec with CSIVolumeSource and their lifecycle is tied to the lifecycle of that pod. A driver has to be aware of this because it is only going to get a NodePublishVolume call for such a volume.\n\nFor more information about implementing this mode, see https://kubernetes-csi.github.io/docs/ephemeral-local-volumes.html A driver can support one or more of these modes and more modes may be added in the future.\n\nThis field is beta. This field is immutable.";
const ATTACHER_DESC: &str = "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().";
const PV_DESC: &str =
    "persistentVolumeName represents the name of the persistent volume to attach.";
const NODE_DESC: &str = "nodeName represents the node that the volume should be attached to.";
const STORAGE_CLASS_NAME_DESC: &str = "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable.";
const CAPACITY_DESC: &str = "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.";
const ATTACHED_DESC: &str = "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher.";

/// The annotation marking the default StorageClass, and its beta form.
pub const IS_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_IS_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// NAME, PROVISIONER, RECLAIMPOLICY, VOLUMEBINDINGMODE, ALLOWVOLUMEEXPANSION, AGE.
pub fn storage_class_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("Provisioner", "string", PROVISIONER_DESC),
        col("ReclaimPolicy", "string", RECLAIM_POLICY_DESC),
        col("VolumeBindingMode", "string", VOLUME_BINDING_MODE_DESC),
        col(
            "AllowVolumeExpansion",
            "string",
            ALLOW_VOLUME_EXPANSION_DESC,
        ),
        AGE,
    ]
}

/// NAME, ATTACHREQUIRED, PODINFOONMOUNT, STORAGECAPACITY, TOKENREQUESTS, REQUIRESREPUBLISH,
/// MODES, AGE.
pub fn csi_driver_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("AttachRequired", "boolean", ATTACH_REQUIRED_DESC),
        col("PodInfoOnMount", "boolean", POD_INFO_ON_MOUNT_DESC),
        col("StorageCapacity", "boolean", STORAGE_CAPACITY_DESC),
        col("TokenRequests", "string", TOKEN_REQUESTS_DESC),
        col("RequiresRepublish", "boolean", REQUIRES_REPUBLISH_DESC),
        col("Modes", "string", MODES_DESC),
        AGE,
    ]
}

/// NAME, DRIVERS, AGE.
pub fn csi_node_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Drivers",
            "integer",
            "Drivers indicates the number of CSI drivers registered on the node",
        ),
        AGE,
    ]
}

/// NAME, ATTACHER, PV, NODE, ATTACHED, AGE. (Upstream also marks Attacher with the `name`
/// format, a slip kubectl ignores since it decorates only the first such column; here only
/// NAME carries it.)
pub fn volume_attachment_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("Attacher", "string", ATTACHER_DESC),
        col("PV", "string", PV_DESC),
        col("Node", "string", NODE_DESC),
        col("Attached", "boolean", ATTACHED_DESC),
        AGE,
    ]
}

/// `printCSIStorageCapacity`'s columns: no age, as upstream.
pub fn csi_storage_capacity_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("StorageClassName", "string", STORAGE_CLASS_NAME_DESC),
        col("Capacity", "string", CAPACITY_DESC),
    ]
}

/// `printCSIStorageCapacity`: `<unset>` when no capacity is reported.
pub fn csi_storage_capacity(obj: &Value) -> Vec<Value> {
    let capacity = match get(obj, &["capacity"]) {
        Some(Value::String(q)) => q.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "<unset>".to_string(),
    };
    vec![
        s(name(obj)),
        s(str_at(obj, &["storageClassName"])),
        Value::String(capacity),
    ]
}

/// `storageutil.IsDefaultAnnotation`: either annotation set to `true`.
fn is_default_class(obj: &Value) -> bool {
    [
        IS_DEFAULT_CLASS_ANNOTATION,
        BETA_IS_DEFAULT_CLASS_ANNOTATION,
    ]
    .iter()
    .any(|a| str_at(obj, &["metadata", "annotations", a]) == "true")
}

/// `printStorageClass`: unset policies print their defaults (`Delete`, `Immediate`, `false`).
pub fn storage_class(obj: &Value, now: i64) -> Vec<Value> {
    let mut display = name(obj).to_string();
    if is_default_class(obj) {
        display.push_str(" (default)");
    }
    let or = |key: &str, default: &'static str| {
        get(obj, &[key])
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    vec![
        s(display),
        s(str_at(obj, &["provisioner"])),
        s(or("reclaimPolicy", "Delete")),
        s(or("volumeBindingMode", "Immediate")),
        Value::Bool(opt_bool_at(obj, &["allowVolumeExpansion"]).unwrap_or(false)),
        created(obj, now),
    ]
}

/// `printCSIDriver`: unset flags print their defaults; token requests list their audiences
/// (`<unset>` when the list is absent); modes are comma-joined (`<none>` when empty).
pub fn csi_driver(obj: &Value, now: i64) -> Vec<Value> {
    let flag =
        |key: &str, default: bool| Value::Bool(opt_bool_at(obj, &["spec", key]).unwrap_or(default));
    let token_requests = match get(obj, &["spec", "tokenRequests"]).and_then(Value::as_array) {
        None => "<unset>".to_string(),
        Some(list) => list
            .iter()
            .map(|t| str_at(t, &["audience"]))
            .collect::<Vec<_>>()
            .join(","),
    };
    let modes = arr_at(obj, &["spec", "volumeLifecycleModes"])
        .iter()
        .map(|m| m.as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(",");
    vec![
        s(name(obj)),
        flag("attachRequired", true),
        flag("podInfoOnMount", false),
        flag("storageCapacity", false),
        s(token_requests),
        flag("requiresRepublish", false),
        s(if modes.is_empty() {
            "<none>".to_string()
        } else {
            modes
        }),
        created(obj, now),
    ]
}

/// `printCSINode`: the number of registered drivers.
pub fn csi_node(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        Value::from(arr_len(obj, &["spec", "drivers"])),
        created(obj, now),
    ]
}

/// `printVolumeAttachment`.
pub fn volume_attachment(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "attacher"])),
        s(str_at(obj, &["spec", "source", "persistentVolumeName"])),
        s(str_at(obj, &["spec", "nodeName"])),
        Value::Bool(opt_bool_at(obj, &["status", "attached"]).unwrap_or(false)),
        created(obj, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::tests::NOW;

    fn row(plural: &str, obj: &Value) -> Vec<String> {
        crate::table::tests::row("storage.k8s.io", plural, obj)
    }

    fn meta(name: &str) -> Value {
        json!({"name": name, "creationTimestamp": crate::time::format_rfc3339(NOW - 3600)})
    }

    #[test]
    fn default_storage_class_is_suffixed_and_unset_fields_print_defaults() {
        let mut obj = json!({"metadata": meta("standard"), "provisioner": "rancher.io/local-path"});
        obj["metadata"]["annotations"] = json!({IS_DEFAULT_CLASS_ANNOTATION: "true"});
        assert_eq!(
            row("storageclasses", &obj),
            [
                "standard (default)",
                "rancher.io/local-path",
                "Delete",
                "Immediate",
                "false",
                "60m"
            ]
        );
        let cols: Vec<&str> = storage_class_columns().iter().map(|c| c.name).collect();
        assert_eq!(
            cols,
            [
                "Name",
                "Provisioner",
                "ReclaimPolicy",
                "VolumeBindingMode",
                "AllowVolumeExpansion",
                "Age"
            ]
        );
    }

    #[test]
    fn csi_driver_row_lists_flags_audiences_and_modes() {
        let obj = json!({"metadata": meta("disk.csi.example.com"), "spec": {
            "attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            "tokenRequests": [{"audience": "vault"}, {"audience": ""}]}});
        assert_eq!(
            row("csidrivers", &obj),
            [
                "disk.csi.example.com",
                "false",
                "true",
                "false",
                "vault,",
                "false",
                "Persistent,Ephemeral",
                "60m"
            ]
        );
        let bare = json!({"metadata": meta("d"), "spec": {}});
        assert_eq!(row("csidrivers", &bare)[4], "<unset>");
        assert_eq!(row("csidrivers", &bare)[6], "<none>");
    }

    #[test]
    fn csi_node_and_volume_attachment_rows() {
        let node = json!({"metadata": meta("node-1"), "spec": {"drivers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(row("csinodes", &node), ["node-1", "2", "60m"]);
        let va = json!({"metadata": meta("csi-123"), "spec": {"attacher": "disk.csi.example.com", "nodeName": "node-1",
            "source": {"persistentVolumeName": "pv-1"}}, "status": {"attached": true}});
        assert_eq!(
            row("volumeattachments", &va),
            [
                "csi-123",
                "disk.csi.example.com",
                "pv-1",
                "node-1",
                "true",
                "60m"
            ]
        );
    }
}
