//! storage.k8s.io/v1 validation and defaulting: StorageClass, CSIDriver, CSINode and
//! VolumeAttachment (PersistentVolumes and claims live in [`super::storage`]).
//!
//! Mirrors upstream `pkg/apis/storage/validation/validation.go` (`ValidateStorageClass`,
//! `ValidateStorageClassUpdate`, `validateParameters`, `validateAllowedTopologies`,
//! `ValidateCSIDriver`, `ValidateCSIDriverUpdate`, `ValidateCSINode`,
//! `ValidateCSINodeUpdate`, `ValidateVolumeAttachment`, `ValidateVolumeAttachmentV1`,
//! `ValidateVolumeAttachmentUpdate`), core's `ValidateCSIDriverName` and
//! `ValidateTopologySelectorTerm`, and `pkg/apis/storage/v1/defaults.go`
//! (`SetDefaults_StorageClass`, `SetDefaults_CSIDriver`).
//!
//! Upstream prints struct values (a CSINode driver, a VolumeAttachment spec) in "field is
//! immutable" errors with Go's `%#v`; this port prints their JSON.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::json::{arr_at, i64_at, obj_at, str_at};
use super::meta::{immutable, too_long};
use super::names;
use crate::field::{ErrorKind, FieldError, Path};

const MAX_PROVISIONER_PARAMETER_SIZE: usize = 256 * 1024;
const MAX_PROVISIONER_PARAMETER_LEN: usize = 512;
const MAX_ATTACHED_VOLUME_METADATA_SIZE: usize = 256 * 1024;
const MAX_VOLUME_ERROR_MESSAGE_SIZE: usize = 1024;
/// Upstream `csiNodeIDLongerMaxLength` (the CSINode strategy allows long node IDs).
const CSI_NODE_ID_MAX_LENGTH: usize = 256;
const RECLAIM_POLICIES: &[&str] = &["Delete", "Retain"];
const BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];

fn invalid_each(msgs: Vec<String>, path: &Path, value: &str, errs: &mut Vec<FieldError>) {
    for msg in msgs {
        errs.push(FieldError::invalid(path, &json!(value), msg));
    }
}

/// A Go string field: absent reads as `""`.
fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    str_at(v, key).unwrap_or_default()
}

/// Upstream core `ValidateCSIDriverName`: required, at most 63 characters, and (lower-cased)
/// a DNS subdomain.
fn csi_driver_name(name: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    if name.len() > 63 {
        errs.push(too_long(path, 63));
    }
    invalid_each(
        names::dns1123_subdomain(&name.to_lowercase()),
        path,
        name,
        errs,
    );
}

// ---------------------------------------------------------------------------------------------
// StorageClass

/// Upstream `validateParameters` (with `allowEmpty`): at most 512 entries of non-empty keys and
/// 256 KiB in total.
fn validate_parameters(obj: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(params) = obj_at(obj, "parameters") else {
        return;
    };
    if params.len() > MAX_PROVISIONER_PARAMETER_LEN {
        errs.push(too_long(path, MAX_PROVISIONER_PARAMETER_LEN));
        return;
    }
    let mut total = 0usize;
    for (k, v) in params {
        if k.is_empty() {
            errs.push(FieldError::invalid(
                path,
                &json!(k),
                "field can not be empty.",
            ));
        }
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > MAX_PROVISIONER_PARAMETER_SIZE {
        errs.push(too_long(path, MAX_PROVISIONER_PARAMETER_SIZE));
    }
}

/// Upstream `ValidateTopologySelectorTerm` over each allowed topology, plus the duplicate-term
/// check of `validateAllowedTopologies`.
fn validate_allowed_topologies(terms: &[Value], path: &Path, errs: &mut Vec<FieldError>) {
    let mut seen_terms: Vec<Vec<(String, Vec<String>)>> = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let tp = path.index(i);
        let ep = tp.child("matchLabelExpressions");
        let mut keys = HashSet::new();
        let mut expr_map: Vec<(String, Vec<String>)> = Vec::new();
        for (j, req) in arr_at(term, "matchLabelExpressions").iter().enumerate() {
            let rp = ep.index(j);
            let values = arr_at(req, "values");
            if values.is_empty() {
                errs.push(FieldError::required(rp.child("values"), ""));
            }
            let mut set: Vec<String> = Vec::new();
            for (k, v) in values.iter().enumerate() {
                let v = v.as_str().unwrap_or_default().to_string();
                if set.contains(&v) {
                    errs.push(FieldError::duplicate(
                        rp.child("values").index(k),
                        &json!(v),
                    ));
                } else {
                    set.push(v);
                }
            }
            set.sort();
            let key = s(req, "key");
            invalid_each(names::qualified_name(key), &rp.child("key"), key, errs);
            if !keys.insert(key) {
                errs.push(FieldError::duplicate(rp.child("key"), &json!(key)));
            }
            expr_map.retain(|(k, _)| k != key);
            expr_map.push((key.to_string(), set));
        }
        expr_map.sort();
        if seen_terms.contains(&expr_map) {
            errs.push(FieldError::duplicate(&ep, &json!("")));
        }
        seen_terms.push(expr_map);
    }
}

/// Upstream `ValidateStorageClass` (after metadata).
pub fn validate_storage_class(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let provisioner = s(obj, "provisioner");
    if provisioner.is_empty() {
        errs.push(FieldError::required("provisioner", ""));
    } else {
        let lower = provisioner.to_lowercase();
        invalid_each(
            names::qualified_name(&lower),
            &Path::new("provisioner"),
            &lower,
            &mut errs,
        );
    }
    validate_parameters(obj, &Path::new("parameters"), &mut errs);
    if let Some(p) = str_at(obj, "reclaimPolicy")
        && !p.is_empty()
        && !RECLAIM_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            "reclaimPolicy",
            &json!(p),
            RECLAIM_POLICIES,
        ));
    }
    match obj.get("volumeBindingMode") {
        None | Some(Value::Null) => errs.push(FieldError::required("volumeBindingMode", "")),
        Some(m) => {
            let m = m.as_str().unwrap_or_default();
            if !BINDING_MODES.contains(&m) {
                errs.push(FieldError::not_supported(
                    "volumeBindingMode",
                    &json!(m),
                    BINDING_MODES,
                ));
            }
        }
    }
    validate_allowed_topologies(
        arr_at(obj, "allowedTopologies"),
        &Path::new("allowedTopologies"),
        &mut errs,
    );
    errs
}

/// Upstream `ValidateStorageClassUpdate` (after the create checks): parameters, provisioner
/// and reclaim policy may not change; the binding mode is immutable.
pub fn validate_storage_class_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_storage_class(new);
    let params = |o: &Value| obj_at(o, "parameters").filter(|m| !m.is_empty()).cloned();
    if params(new) != params(old) {
        errs.push(FieldError::forbidden(
            "parameters",
            "updates to parameters are forbidden.",
        ));
    }
    if s(new, "provisioner") != s(old, "provisioner") {
        errs.push(FieldError::forbidden(
            "provisioner",
            "updates to provisioner are forbidden.",
        ));
    }
    if s(new, "reclaimPolicy") != s(old, "reclaimPolicy") {
        errs.push(FieldError::forbidden(
            "reclaimPolicy",
            "updates to reclaimPolicy are forbidden.",
        ));
    }
    errs.extend(immutable(
        new.get("volumeBindingMode"),
        old.get("volumeBindingMode"),
        &Path::new("volumeBindingMode"),
    ));
    errs
}

/// Upstream `SetDefaults_StorageClass`: reclaim policy `Delete`, binding mode `Immediate`.
pub fn default_storage_class(obj: &mut Value) {
    super::json::set_default_str(obj, "reclaimPolicy", "Delete");
    super::json::set_default_str(obj, "volumeBindingMode", "Immediate");
}

// ---------------------------------------------------------------------------------------------
// CSIDriver

/// Upstream `validateCSIDriverSpec`.
fn validate_csi_driver_spec(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    // Upstream reports attachRequired under its misspelt path `attachedRequired`.
    for (key, at) in [
        ("attachRequired", "attachedRequired"),
        ("podInfoOnMount", "podInfoOnMount"),
        ("storageCapacity", "storageCapacity"),
    ] {
        if spec.get(key).is_none_or(Value::is_null) {
            errs.push(FieldError::required(path.child(at), ""));
        }
    }
    if let Some(p) = str_at(spec, "fsGroupPolicy")
        && !FS_GROUP_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            path.child("fsGroupPolicy"),
            &json!(p),
            FS_GROUP_POLICIES,
        ));
    }
    let mut audiences = HashSet::new();
    for (i, t) in arr_at(spec, "tokenRequests").iter().enumerate() {
        let tp = path.child("tokenRequests").index(i);
        let audience = s(t, "audience");
        if !audiences.insert(audience) {
            errs.push(FieldError::duplicate(
                tp.child("audience"),
                &json!(audience),
            ));
            continue;
        }
        if let Some(secs) = i64_at(t, "expirationSeconds") {
            if secs < 600 {
                errs.push(FieldError::invalid(
                    tp.child("expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if secs > 1 << 32 {
                errs.push(FieldError::invalid(
                    tp.child("expirationSeconds"),
                    &json!(secs),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    for mode in arr_at(spec, "volumeLifecycleModes") {
        let mode = mode.as_str().unwrap_or_default();
        if !LIFECYCLE_MODES.contains(&mode) {
            errs.push(FieldError::not_supported(
                path.child("volumeLifecycleModes"),
                &json!(mode),
                LIFECYCLE_MODES,
            ));
        }
    }
    if spec.get("seLinuxMount").is_none_or(Value::is_null) {
        errs.push(FieldError::required(path.child("seLinuxMount"), ""));
    }
    if let Some(p) = i64_at(spec, "nodeAllocatableUpdatePeriodSeconds")
        && p < 10
    {
        errs.push(FieldError::invalid(
            path.child("nodeAllocatableUpdatePeriodSeconds"),
            &json!(p),
            "must be greater than or equal to 10 seconds",
        ));
    }
    errs
}

/// Upstream `ValidateCSIDriver` (after metadata).
pub fn validate_csi_driver(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    validate_csi_driver_spec(obj.get("spec").unwrap_or(&null), &Path::new("spec"))
}

/// Upstream `ValidateCSIDriverUpdate`: the spec again; attachRequired and the lifecycle modes
/// are immutable.
pub fn validate_csi_driver_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_csi_driver(new);
    let null = Value::Null;
    let (ns, os) = (
        new.get("spec").unwrap_or(&null),
        old.get("spec").unwrap_or(&null),
    );
    let sp = Path::new("spec");
    errs.extend(immutable(
        ns.get("attachRequired"),
        os.get("attachRequired"),
        &sp.child("attachedRequired"),
    ));
    let modes = |s: &Value| {
        s.get("volumeLifecycleModes")
            .filter(|m| m != &&json!([]))
            .cloned()
    };
    errs.extend(immutable(
        modes(ns).as_ref(),
        modes(os).as_ref(),
        &sp.child("volumeLifecycleModes"),
    ));
    errs
}

/// Upstream `SetDefaults_CSIDriver` (with `SELinuxMountReadWriteOncePod` on).
pub fn default_csi_driver(obj: &mut Value) {
    let Some(spec) = super::json::ensure_obj(obj, "spec") else {
        return;
    };
    for (key, v) in [
        ("attachRequired", json!(true)),
        ("podInfoOnMount", json!(false)),
        ("storageCapacity", json!(false)),
        ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
        ("requiresRepublish", json!(false)),
        ("seLinuxMount", json!(false)),
    ] {
        super::json::set_default(spec, key, v);
    }
    if arr_at(spec, "volumeLifecycleModes").is_empty()
        && let Some(m) = spec.as_object_mut()
    {
        m.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

// ---------------------------------------------------------------------------------------------
// CSINode

/// Upstream `ValidateCSINode` (after metadata): each driver has a valid unique name, a node ID
/// of at most 256 characters, a non-negative allocatable count and unique qualified topology
/// keys.
pub fn validate_csi_node(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let dp = Path::new("spec").child("drivers");
    let mut seen = HashSet::new();
    for (i, d) in arr_at(spec, "drivers").iter().enumerate() {
        let p = dp.index(i);
        let name = s(d, "name");
        csi_driver_name(name, &p.child("name"), &mut errs);
        let node_id = s(d, "nodeID");
        if node_id.is_empty() {
            errs.push(FieldError::required(p.child("nodeID"), ""));
        }
        if node_id.len() > CSI_NODE_ID_MAX_LENGTH {
            errs.push(FieldError::invalid(
                p.child("nodeID"),
                &json!(node_id),
                format!("must be {CSI_NODE_ID_MAX_LENGTH} characters or less"),
            ));
        }
        if let Some(a) = d.get("allocatable").filter(|a| !a.is_null()) {
            super::pod::nonnegative(a, "count", &p.child("allocatable"), &mut errs);
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(p.child("name"), &json!(name)));
        }
        let mut keys = HashSet::new();
        for key in arr_at(d, "topologyKeys") {
            let key = key.as_str().unwrap_or_default();
            if key.is_empty() {
                errs.push(FieldError::required(&p, ""));
            }
            if !keys.insert(key) {
                errs.push(FieldError::duplicate(&p, &json!(key)));
            }
            invalid_each(names::qualified_name(key), &p, key, &mut errs);
        }
    }
    errs
}

/// Upstream `ValidateCSINodeUpdate`: a driver present before and after may not change.
pub fn validate_csi_node_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_csi_node(new);
    let drivers = |o: &Value| {
        o.get("spec")
            .map(|s| arr_at(s, "drivers").to_vec())
            .unwrap_or_default()
    };
    let (new_drivers, old_drivers) = (drivers(new), drivers(old));
    for od in &old_drivers {
        for nd in &new_drivers {
            if s(od, "name") == s(nd, "name") && od != nd {
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    "spec.drivers",
                    Some(nd.to_string()),
                    "field is immutable",
                ));
            }
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// VolumeAttachment

/// Upstream `validateVolumeAttachmentSource`, with the inline-volume checks of
/// `ValidatePersistentVolumeSpec` that matter for a CSI inline spec.
fn validate_source(source: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let pv = source.get("persistentVolumeName").filter(|v| !v.is_null());
    let inline = source.get("inlineVolumeSpec").filter(|v| !v.is_null());
    match (pv, inline) {
        (None, None) => errs.push(FieldError::required(
            path,
            "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        )),
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            path,
            "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        )),
        (Some(name), None) => {
            if name.as_str().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(
                    path.child("persistentVolumeName"),
                    "must specify non empty persistentVolumeName",
                ));
            }
        }
        (None, Some(spec)) => {
            let ip = path.child("inlineVolumeSpec");
            if arr_at(spec, "accessModes").is_empty() {
                errs.push(FieldError::required(ip.child("accessModes"), ""));
            }
            if spec.get("claimRef").is_some_and(|v| !v.is_null()) {
                errs.push(FieldError::forbidden(
                    ip.child("claimRef"),
                    "may not be specified in the context of inline volumes",
                ));
            }
            if obj_at(spec, "capacity").is_some_and(|c| !c.is_empty()) {
                errs.push(FieldError::forbidden(
                    ip.child("capacity"),
                    "may not be specified in the context of inline volumes",
                ));
            }
            match spec.get("csi").filter(|v| !v.is_null()) {
                None => errs.push(FieldError::required(
                    ip.child("csi"),
                    "has to be specified in the context of inline volumes",
                )),
                Some(csi) => {
                    for key in ["driver", "volumeHandle"] {
                        if s(csi, key).is_empty() {
                            errs.push(FieldError::required(ip.child("csi").child(key), ""));
                        }
                    }
                }
            }
        }
    }
}

/// Upstream `validateVolumeError`.
fn validate_volume_error(e: Option<&Value>, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(e) = e.filter(|e| !e.is_null()) else {
        return;
    };
    if s(e, "message").len() > MAX_VOLUME_ERROR_MESSAGE_SIZE {
        // Upstream reports the metadata limit here, not the message limit.
        errs.push(too_long(
            &path.child("message"),
            MAX_ATTACHED_VOLUME_METADATA_SIZE,
        ));
    }
    if let Some(code) = i64_at(e, "errorCode")
        && code < 0
    {
        errs.push(FieldError::invalid(
            path.child("errorCode"),
            &json!(code),
            names::inclusive_range_error(0, i64::from(i32::MAX)),
        ));
    }
}

/// Upstream `ValidateVolumeAttachment` plus `ValidateVolumeAttachmentV1`: attacher, source,
/// node name and status (attachment metadata size, error messages and codes).
pub fn validate_volume_attachment(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let sp = Path::new("spec");
    let attacher = s(spec, "attacher");
    if attacher.is_empty() {
        errs.push(FieldError::required(sp.child("attacher"), ""));
    }
    validate_source(
        spec.get("source").unwrap_or(&null),
        &sp.child("source"),
        &mut errs,
    );
    let node = s(spec, "nodeName");
    invalid_each(
        names::dns1123_subdomain(node),
        &sp.child("nodeName"),
        node,
        &mut errs,
    );
    let status = obj.get("status").unwrap_or(&null);
    let stp = Path::new("status");
    let metadata_size: usize = obj_at(status, "attachmentMetadata")
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if metadata_size > MAX_ATTACHED_VOLUME_METADATA_SIZE {
        errs.push(too_long(
            &stp.child("attachmentMetadata"),
            MAX_ATTACHED_VOLUME_METADATA_SIZE,
        ));
    }
    validate_volume_error(
        status.get("attachError"),
        &stp.child("attachError"),
        &mut errs,
    );
    validate_volume_error(
        status.get("detachError"),
        &stp.child("detachError"),
        &mut errs,
    );
    // The v1 tightening: the attacher is a CSI driver name, the PV name a subdomain.
    csi_driver_name(attacher, &sp.child("attacher"), &mut errs);
    if let Some(pv) = jpath_str(spec, &["source", "persistentVolumeName"]) {
        invalid_each(
            names::dns1123_subdomain(pv),
            &sp.child("source").child("persistentVolumeName"),
            pv,
            &mut errs,
        );
    }
    errs
}

fn jpath_str<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    super::json::path(v, keys).and_then(Value::as_str)
}

/// Upstream `ValidateVolumeAttachmentUpdate`: the object again, and the spec never changes.
pub fn validate_volume_attachment_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_volume_attachment(new);
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    if ns != old.get("spec").unwrap_or(&null) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            "spec",
            Some(ns.to_string()),
            "field is immutable",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn sc(extra: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "fast"}, "provisioner": "example.com/disk"});
        if let (Some(m), Some(e)) = (obj.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        default_storage_class(&mut obj);
        obj
    }

    #[test]
    fn storage_class_defaults_reclaim_policy_and_binding_mode() {
        let obj = sc(json!({}));
        assert_eq!(obj["reclaimPolicy"], "Delete");
        assert_eq!(obj["volumeBindingMode"], "Immediate");
        assert!(validate_storage_class(&obj).is_empty());
    }

    #[test]
    fn storage_class_rejects_bad_provisioner_policy_and_mode() {
        let obj = json!({"provisioner": "bad provisioner", "reclaimPolicy": "Recycle", "volumeBindingMode": "Later"});
        let got = messages(&validate_storage_class(&obj));
        assert!(got[0].starts_with("provisioner: Invalid value: \"bad provisioner\": name part must consist of alphanumeric characters"));
        assert_eq!(
            got[1],
            "reclaimPolicy: Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\""
        );
        assert_eq!(
            got[2],
            "volumeBindingMode: Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\""
        );
        assert_eq!(
            messages(&validate_storage_class(
                &json!({"volumeBindingMode": "Immediate"})
            )),
            ["provisioner: Required value"]
        );
    }

    #[test]
    fn storage_class_parameter_count_is_limited() {
        let params: serde_json::Map<String, Value> =
            (0..513).map(|i| (format!("k{i}"), json!("v"))).collect();
        let obj = sc(json!({"parameters": params}));
        assert_eq!(
            messages(&validate_storage_class(&obj)),
            ["parameters: Too long: may not be more than 512 bytes"]
        );
    }

    #[test]
    fn storage_class_allowed_topologies_reject_duplicates_and_empty_values() {
        let obj = sc(json!({"allowedTopologies": [
            {"matchLabelExpressions": [{"key": "zone", "values": ["a", "a"]}]},
            {"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]},
            {"matchLabelExpressions": [{"key": "zone", "values": []}]},
        ]}));
        assert_eq!(
            messages(&validate_storage_class(&obj)),
            [
                "allowedTopologies[0].matchLabelExpressions[0].values[1]: Duplicate value: \"a\"",
                "allowedTopologies[1].matchLabelExpressions: Duplicate value: \"\"",
                "allowedTopologies[2].matchLabelExpressions[0].values: Required value",
            ]
        );
    }

    #[test]
    fn storage_class_update_forbids_changing_provisioner_parameters_policy_and_mode() {
        let old = sc(json!({"parameters": {"type": "ssd"}}));
        let new = sc(
            json!({"provisioner": "example.com/other", "parameters": {"type": "hdd"}, "reclaimPolicy": "Retain", "volumeBindingMode": "WaitForFirstConsumer"}),
        );
        assert_eq!(
            messages(&validate_storage_class_update(&new, &old)),
            [
                "parameters: Forbidden: updates to parameters are forbidden.",
                "provisioner: Forbidden: updates to provisioner are forbidden.",
                "reclaimPolicy: Forbidden: updates to reclaimPolicy are forbidden.",
                "volumeBindingMode: Invalid value: \"WaitForFirstConsumer\": field is immutable",
            ]
        );
        let mut relabelled = old.clone();
        relabelled["allowVolumeExpansion"] = json!(true);
        assert!(validate_storage_class_update(&relabelled, &old).is_empty());
    }

    #[test]
    fn csi_driver_defaults_fill_every_flag() {
        let mut obj = json!({"metadata": {"name": "disk.csi.example.com"}, "spec": {}});
        default_csi_driver(&mut obj);
        assert_eq!(
            obj["spec"],
            json!({
                "attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
                "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false,
                "seLinuxMount": false, "volumeLifecycleModes": ["Persistent"],
            })
        );
        assert!(validate_csi_driver(&obj).is_empty());
    }

    #[test]
    fn csi_driver_rejects_unknown_modes_and_changes_to_immutables() {
        let mut old = json!({"spec": {}});
        default_csi_driver(&mut old);
        let mut new = old.clone();
        new["spec"]["attachRequired"] = json!(false);
        new["spec"]["volumeLifecycleModes"] = json!(["Persistent", "Forever"]);
        new["spec"]["fsGroupPolicy"] = json!("Sometimes");
        assert_eq!(
            messages(&validate_csi_driver_update(&new, &old)),
            [
                "spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
                "spec.volumeLifecycleModes: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
                "spec.attachedRequired: Invalid value: false: field is immutable",
                "spec.volumeLifecycleModes: Invalid value: [\"Persistent\",\"Forever\"]: field is immutable",
            ]
        );
    }

    #[test]
    fn csi_node_drivers_are_unique_with_node_ids() {
        let obj = json!({"spec": {"drivers": [
            {"name": "disk.csi.example.com", "nodeID": "n1", "topologyKeys": ["zone", "zone"]},
            {"name": "disk.csi.example.com", "nodeID": ""},
        ]}});
        assert_eq!(
            messages(&validate_csi_node(&obj)),
            [
                "spec.drivers[0]: Duplicate value: \"zone\"",
                "spec.drivers[1].nodeID: Required value",
                "spec.drivers[1].name: Duplicate value: \"disk.csi.example.com\"",
            ]
        );
    }

    #[test]
    fn csi_node_existing_driver_may_not_change() {
        let old = json!({"spec": {"drivers": [{"name": "d.example.com", "nodeID": "n1"}]}});
        let new = json!({"spec": {"drivers": [{"name": "d.example.com", "nodeID": "n2"}]}});
        assert_eq!(
            messages(&validate_csi_node_update(&new, &old)),
            [
                "spec.drivers: Invalid value: {\"name\":\"d.example.com\",\"nodeID\":\"n2\"}: field is immutable"
            ]
        );
    }

    #[test]
    fn volume_attachment_needs_exactly_one_source_and_a_fixed_spec() {
        let va = |source: Value| json!({"spec": {"attacher": "disk.csi.example.com", "nodeName": "node-1", "source": source}});
        assert!(
            validate_volume_attachment(&va(json!({"persistentVolumeName": "pv-1"}))).is_empty()
        );
        assert_eq!(
            messages(&validate_volume_attachment(&va(json!({})))),
            [
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
            ]
        );
        assert_eq!(
            messages(&validate_volume_attachment(&va(
                json!({"persistentVolumeName": "a", "inlineVolumeSpec": {}})
            ))),
            [
                "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
            ]
        );
        let old = va(json!({"persistentVolumeName": "pv-1"}));
        let new = va(json!({"persistentVolumeName": "pv-2"}));
        let got = messages(&validate_volume_attachment_update(&new, &old));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("spec: Invalid value: {"));
        assert!(got[0].ends_with("}: field is immutable"));
    }

    #[test]
    fn volume_attachment_status_error_codes_are_non_negative() {
        let obj = json!({"spec": {"attacher": "a.example.com", "nodeName": "n", "source": {"persistentVolumeName": "p"}},
            "status": {"attached": false, "attachError": {"errorCode": -1}}});
        assert_eq!(
            messages(&validate_volume_attachment(&obj)),
            [
                "status.attachError.errorCode: Invalid value: -1: must be between 0 and 2147483647, inclusive"
            ]
        );
    }
}
