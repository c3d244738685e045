//! ObjectMeta validation: names, namespaces, labels, annotations, finalizers, owner references,
//! and the fields an update may not change.
//!
//! Mirrors upstream `k8s.io/apimachinery/pkg/api/validation/objectmeta.go`
//! (`ValidateObjectMetaAccessor`, `ValidateObjectMetaUpdate`, `ValidateAnnotations`,
//! `ValidateOwnerReferences`, `ValidateFinalizers`), `metav1validation.ValidateLabels` and core's
//! `validateKubeFinalizerName`.

use serde_json::{Map, Value, json};

use super::json::{arr_at, obj_at, str_at};
use super::names;
use crate::field::{ErrorKind, FieldError, Path};

/// How an object's `metadata.name` must look (upstream `ValidateNameFunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: most kinds.
    Subdomain,
    /// `NameIsDNSLabel`: Namespace.
    Label,
    /// `NameIsDNS1035Label`: Service.
    Dns1035,
    /// `ValidatePathSegmentName`: kinds whose names are only URL path segments (Node is a
    /// subdomain upstream; events and RBAC use this).
    PathSegment,
}

/// Upstream `TotalAnnotationSizeLimitB`.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The detail upstream's `field.TooLong` prints for a byte limit (v1.32 wording).
pub fn too_long(path: &Path, max: usize) -> FieldError {
    FieldError::new(
        ErrorKind::TooLong,
        path,
        None,
        format!("may not be more than {max} bytes"),
    )
}

/// Masks a trailing dash so a `generateName` prefix validates like a full name
/// (upstream `maskTrailingDash`).
fn mask_trailing_dash(name: &str) -> String {
    match name.strip_suffix('-') {
        Some(stem) if !stem.is_empty() => format!("{stem}a"),
        _ => name.to_string(),
    }
}

/// Failure messages for a name under `rule`.
pub fn name_errors(rule: NameRule, name: &str) -> Vec<String> {
    match rule {
        NameRule::Subdomain => names::dns1123_subdomain(name),
        NameRule::Label => names::dns1123_label(name),
        NameRule::Dns1035 => names::dns1035_label(name),
        NameRule::PathSegment => names::path_segment_name(name),
    }
}

/// Upstream `ValidateLabels`: keys are qualified names, values label values. Errors sit at the
/// map's path (not the key), as upstream reports them.
pub fn validate_labels(labels: Option<&Map<String, Value>>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(labels) = labels else { return errs };
    for (k, v) in labels {
        for msg in names::qualified_name(k) {
            errs.push(FieldError::invalid(path, &json!(k), msg));
        }
        let v = v.as_str().unwrap_or_default();
        for msg in names::label_value(v) {
            errs.push(FieldError::invalid(path, &json!(v), msg));
        }
    }
    errs
}

/// Upstream `ValidateAnnotations`: qualified keys (checked lower-cased) and a 256 KiB total.
pub fn validate_annotations(
    annotations: Option<&Map<String, Value>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(annotations) = annotations else {
        return errs;
    };
    let mut total = 0usize;
    for (k, v) in annotations {
        for msg in names::qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, &json!(k), msg));
        }
        total += k.len() + v.as_str().map(str::len).unwrap_or(0);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// Upstream `ValidateFinalizers` plus core's `validateKubeFinalizerName`.
fn validate_finalizers(meta: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in arr_at(meta, "finalizers") {
        let f = f.as_str().unwrap_or_default();
        let msgs = names::qualified_name(f);
        if !msgs.is_empty() {
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(path, &json!(f), m)),
            );
        } else if !f.contains('/')
            && !matches!(
                f,
                "kubernetes"
                    | "orphan"
                    | "foregroundDeletion"
                    // The API server's own, on every CRD (apiextensions validates finalizers
                    // only as qualified names).
                    | "customresourcecleanup.apiextensions.k8s.io"
            )
        {
            errs.push(FieldError::invalid(
                path,
                &json!(f),
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errs
}

/// Upstream `validateOwnerReference` for each reference.
fn validate_owner_references(meta: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut controllers = 0;
    for r in arr_at(meta, "ownerReferences") {
        let api_version = str_at(r, "apiVersion").unwrap_or_default();
        let version = api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() {
            errs.push(FieldError::invalid(
                path.child("apiVersion"),
                &json!(api_version),
                "version must not be empty",
            ));
        }
        for (key, detail) in [
            ("kind", "must not be empty"),
            ("name", "must not be empty"),
            ("uid", "must not be empty"),
        ] {
            let v = str_at(r, key).unwrap_or_default();
            if v.is_empty() {
                errs.push(FieldError::invalid(path.child(key), &json!(v), detail));
            }
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            None,
            "Only one reference can have Controller set to true",
        ));
    }
    errs
}

/// Upstream `ValidateObjectMeta` for one object: name (or generateName), namespace presence per
/// scope, labels, annotations, finalizers, owner references, generation.
pub fn validate_object_meta(obj: &Value, namespaced: bool, rule: NameRule) -> Vec<FieldError> {
    let path = Path::new("metadata");
    let mut errs = Vec::new();
    let empty = Value::Object(Map::new());
    let meta = obj
        .get("metadata")
        .filter(|m| m.is_object())
        .unwrap_or(&empty);
    let generate_name = str_at(meta, "generateName").unwrap_or_default();
    if !generate_name.is_empty() {
        for msg in name_errors(rule, &mask_trailing_dash(generate_name)) {
            errs.push(FieldError::invalid(
                path.child("generateName"),
                &json!(generate_name),
                msg,
            ));
        }
    }
    let name = str_at(meta, "name").unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for msg in name_errors(rule, name) {
            errs.push(FieldError::invalid(path.child("name"), &json!(name), msg));
        }
    }
    let namespace = str_at(meta, "namespace").unwrap_or_default();
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else {
            for msg in names::dns1123_label(namespace) {
                errs.push(FieldError::invalid(
                    path.child("namespace"),
                    &json!(namespace),
                    msg,
                ));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "not allowed on this type",
        ));
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(FieldError::invalid(
            path.child("generation"),
            &json!(g),
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_labels(
        obj_at(meta, "labels"),
        &path.child("labels"),
    ));
    errs.extend(validate_annotations(
        obj_at(meta, "annotations"),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        meta,
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_finalizers(meta, &path.child("finalizers")));
    errs
}

/// Upstream `ValidateImmutableField`: `field is immutable` with the new value.
pub fn immutable(new: Option<&Value>, old: Option<&Value>, path: &Path) -> Option<FieldError> {
    let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    let (n, o) = (norm(new), norm(old));
    if n == o {
        None
    } else {
        Some(FieldError::invalid(
            path,
            n.as_ref().unwrap_or(&Value::Null),
            "field is immutable",
        ))
    }
}

/// Upstream `ValidateObjectMetaUpdate`: identity fields are immutable and the new labels,
/// annotations, finalizers and owner references must be valid. (The resourceVersion
/// precondition is the API server's business.)
pub fn validate_object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let path = Path::new("metadata");
    let empty = Value::Object(Map::new());
    let nm = new
        .get("metadata")
        .filter(|m| m.is_object())
        .unwrap_or(&empty);
    let om = old
        .get("metadata")
        .filter(|m| m.is_object())
        .unwrap_or(&empty);
    let mut errs = Vec::new();
    if let (Some(n), Some(o)) = (
        nm.get("generation").and_then(Value::as_i64),
        om.get("generation").and_then(Value::as_i64),
    ) && n < o
    {
        errs.push(FieldError::invalid(
            path.child("generation"),
            &json!(n),
            "must not be decremented",
        ));
    }
    for key in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        errs.extend(immutable(nm.get(key), om.get(key), &path.child(key)));
    }
    if om.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        let old_f: Vec<&Value> = arr_at(om, "finalizers").iter().collect();
        for f in arr_at(nm, "finalizers") {
            if !old_f.contains(&f) {
                errs.push(FieldError::forbidden(path.child("finalizers"), format!("no new finalizers can be added if the object is being deleted, found new finalizer {}", f.as_str().unwrap_or_default())));
            }
        }
    }
    errs.extend(validate_labels(obj_at(nm, "labels"), &path.child("labels")));
    errs.extend(validate_annotations(
        obj_at(nm, "annotations"),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        nm,
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_finalizers(nm, &path.child("finalizers")));
    errs
}
