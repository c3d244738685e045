//! PersistentVolumeClaim and PersistentVolume validation.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go`:
//! `ValidatePersistentVolumeClaimSpec`, `ValidatePersistentVolumeClaimUpdate`,
//! `ValidatePersistentVolumeSpec` and `ValidatePersistentVolumeUpdate`.

use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::json::{arr_at, obj_at, path as jpath, str_at};
use super::names;
use super::quantity::{self, QUANTITY_FORMAT_ERROR};
use crate::field::{ErrorKind, FieldError, Path};

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const PV_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "nfs",
    "rbd",
    "quobyte",
    "cinder",
    "cephfs",
    "iscsi",
    "fc",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
    "flocker",
];

fn access_modes(spec: &Value, path: &Path, required_detail: &str, errs: &mut Vec<FieldError>) {
    let modes = arr_at(spec, "accessModes");
    if modes.is_empty() {
        errs.push(FieldError::required(
            path.child("accessModes"),
            required_detail,
        ));
    }
    let mut rwop = false;
    for m in modes {
        let m = m.as_str().unwrap_or_default();
        rwop |= m == "ReadWriteOncePod";
        if !ACCESS_MODES.contains(&m) {
            errs.push(FieldError::not_supported(
                path.child("accessModes"),
                &json!(m),
                ACCESS_MODES,
            ));
        }
    }
    if rwop && modes.len() > 1 {
        errs.push(FieldError::forbidden(
            path.child("accessModes"),
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn volume_mode(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(m) = str_at(spec, "volumeMode")
        && m != "Block"
        && m != "Filesystem"
    {
        errs.push(FieldError::not_supported(
            path.child("volumeMode"),
            &json!(m),
            &["Block", "Filesystem"],
        ));
    }
}

/// Upstream `ValidatePersistentVolumeClaimSpec`.
pub fn validate_pvc_spec(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    access_modes(spec, path, "at least 1 access mode is required", &mut errs);
    if let Some(sel) = spec.get("selector").filter(|s| s.is_object()) {
        errs.extend(validate_label_selector(sel, &path.child("selector")));
    }
    let storage_path = path.child("resources").key("storage");
    match jpath(spec, &["resources", "requests", "storage"]) {
        None => errs.push(FieldError::required(&storage_path, "")),
        Some(q) => match quantity::from_value(q) {
            None => errs.push(FieldError::new(
                ErrorKind::Invalid,
                &storage_path,
                Some(quantity::text(q)),
                QUANTITY_FORMAT_ERROR,
            )),
            Some(v) if v.nanos() <= 0 => errs.push(FieldError::invalid(
                &storage_path,
                &json!(quantity::text(q)),
                "must be greater than zero",
            )),
            Some(_) => {}
        },
    }
    if let Some(sc) = str_at(spec, "storageClassName").filter(|s| !s.is_empty()) {
        for msg in names::dns1123_subdomain(sc) {
            errs.push(FieldError::invalid(
                path.child("storageClassName"),
                &json!(sc),
                msg,
            ));
        }
    }
    volume_mode(spec, path, &mut errs);
    errs
}

/// Upstream `ValidatePersistentVolumeClaimUpdate`: the spec is immutable except the storage
/// request of a bound claim (which may only grow) and a once-set `volumeName`.
pub fn validate_pvc_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    let os = old.get("spec").unwrap_or(&null);
    let mut errs = validate_pvc_spec(ns, &Path::new("spec"));
    let mut new_clone = ns.clone();
    let mut old_clone = os.clone();
    if str_at(os, "volumeName").unwrap_or_default().is_empty()
        && let Some(m) = old_clone.as_object_mut()
    {
        match ns.get("volumeName") {
            Some(v) => m.insert("volumeName".into(), v.clone()),
            None => m.remove("volumeName"),
        };
    }
    let bound = jpath(new, &["status", "phase"]).and_then(Value::as_str) == Some("Bound")
        || jpath(old, &["status", "phase"]).and_then(Value::as_str) == Some("Bound");
    if bound
        && let Some(req) = new_clone
            .get_mut("resources")
            .and_then(|r| r.get_mut("requests"))
            .and_then(Value::as_object_mut)
    {
        match jpath(os, &["resources", "requests", "storage"]) {
            Some(v) => req.insert("storage".into(), v.clone()),
            None => req.remove("storage"),
        };
    }
    if new_clone != old_clone {
        errs.push(FieldError::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests for bound claims",
        ));
    }
    let size =
        |s: &Value| jpath(s, &["resources", "requests", "storage"]).and_then(quantity::from_value);
    if let (Some(n), Some(o)) = (size(ns), size(os))
        && n.cmp_value(o).is_lt()
    {
        errs.push(FieldError::forbidden(
            "spec.resources.requests.storage",
            "field can not be less than previous value",
        ));
    }
    errs
}

/// Upstream `ValidatePersistentVolumeSpec` (the common checks).
pub fn validate_pv(obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let mut errs = Vec::new();
    access_modes(spec, &path, "", &mut errs);
    match obj_at(spec, "capacity") {
        None => errs.push(FieldError::required(path.child("capacity"), "")),
        Some(c) if c.is_empty() => errs.push(FieldError::required(path.child("capacity"), "")),
        Some(c) => {
            if !c.contains_key("storage") || c.len() > 1 {
                errs.push(FieldError::not_supported(
                    path.child("capacity"),
                    &Value::Object(c.clone()),
                    &["storage"],
                ));
            }
            for (k, q) in c {
                match quantity::from_value(q) {
                    None => errs.push(FieldError::new(
                        ErrorKind::Invalid,
                        path.child("capacity").key(k),
                        Some(quantity::text(q)),
                        QUANTITY_FORMAT_ERROR,
                    )),
                    Some(v) if v.nanos() <= 0 && k == "storage" => {
                        errs.push(FieldError::invalid(
                            path.child("capacity").key(k),
                            &json!(quantity::text(q)),
                            "must be greater than zero",
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(p) = str_at(spec, "persistentVolumeReclaimPolicy").filter(|p| !p.is_empty())
        && !["Delete", "Recycle", "Retain"].contains(&p)
    {
        errs.push(FieldError::not_supported(
            path.child("persistentVolumeReclaimPolicy"),
            &json!(p),
            &["Delete", "Recycle", "Retain"],
        ));
    }
    let sources: Vec<&str> = PV_SOURCES
        .iter()
        .copied()
        .filter(|k| spec.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    match sources.as_slice() {
        [] => errs.push(FieldError::required(&path, "must specify a volume type")),
        [one] => {
            let src = &spec[*one];
            if *one == "hostPath" && str_at(src, "path").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(
                    path.child("hostPath").child("path"),
                    "",
                ));
            }
            if *one == "local" && str_at(src, "path").unwrap_or_default().is_empty() {
                errs.push(FieldError::required(path.child("local").child("path"), ""));
            }
            if *one == "csi" {
                for key in ["driver", "volumeHandle"] {
                    if str_at(src, key).unwrap_or_default().is_empty() {
                        errs.push(FieldError::required(path.child("csi").child(key), ""));
                    }
                }
            }
        }
        [_, rest @ ..] => {
            for k in rest {
                errs.push(FieldError::forbidden(
                    path.child(k),
                    "may not specify more than 1 volume type",
                ));
            }
        }
    }
    if let Some(sc) = str_at(spec, "storageClassName").filter(|s| !s.is_empty()) {
        for msg in names::dns1123_subdomain(sc) {
            errs.push(FieldError::invalid(
                path.child("storageClassName"),
                &json!(sc),
                msg,
            ));
        }
    }
    volume_mode(spec, &path, &mut errs);
    errs
}

/// Upstream `ValidatePersistentVolumeUpdate`: the volume source is immutable.
pub fn validate_pv_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_pv(new);
    let null = Value::Null;
    let (ns, os) = (
        new.get("spec").unwrap_or(&null),
        old.get("spec").unwrap_or(&null),
    );
    if PV_SOURCES.iter().any(|k| ns.get(*k) != os.get(*k)) {
        errs.push(FieldError::forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    if ns.get("volumeMode") != os.get("volumeMode") {
        errs.push(FieldError::invalid(
            "spec.volumeMode",
            ns.get("volumeMode").unwrap_or(&null),
            "field is immutable",
        ));
    }
    errs
}
