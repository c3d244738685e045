//! Validation of the remaining built-in kinds: Namespace, Node, ServiceAccount, LimitRange,
//! ResourceQuota, PodTemplate, Event (core and events.k8s.io), Lease, RuntimeClass and
//! GMSACredentialSpec.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go` (`ValidateNamespace`,
//! `ValidateNamespaceStatusUpdate`, `ValidateNode`, `ValidateNodeUpdate`, `validateNodeTaints`,
//! `ValidateLimitRange`, `ValidateResourceQuota`), `pkg/apis/core/validation/events.go`
//! (`ValidateEventCreate`, `legacyValidateEvent`), `pkg/apis/coordination/validation`
//! (`ValidateLeaseSpec`), `pkg/apis/node/validation` (`ValidateRuntimeClass`) and the
//! GMSACredentialSpec CRD schema (`credspec` required).

use std::collections::HashSet;

use serde_json::{Value, json};

use super::json::{arr_at, i64_at, obj_at, path as jpath, str_at};
use super::meta::{immutable, validate_labels};
use super::names;
use super::pod::{taint_effect, validate_tolerations};
use super::quantity::{self, QUANTITY_FORMAT_ERROR};
use crate::field::{ErrorKind, FieldError, Path};

fn finalizer_names(items: &[Value], path: &Path, errs: &mut Vec<FieldError>) {
    for f in items {
        let f = f.as_str().unwrap_or_default();
        let msgs = names::qualified_name(f);
        if !msgs.is_empty() {
            errs.extend(
                msgs.into_iter()
                    .map(|m| FieldError::invalid(path, &json!(f), m)),
            );
        } else if !f.contains('/') && f != "kubernetes" {
            errs.push(FieldError::invalid(
                path,
                &json!(f),
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
}

/// Upstream `ValidateNamespace` (after metadata).
pub fn validate_namespace(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    finalizer_names(
        arr_at(spec, "finalizers"),
        &Path::new("spec").child("finalizers"),
        &mut errs,
    );
    errs
}

/// Upstream `ValidateNamespaceStatusUpdate`: the phase follows the deletion timestamp.
pub fn validate_namespace_status(new: &Value) -> Vec<FieldError> {
    let phase = jpath(new, &["status", "phase"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let deleting = jpath(new, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null());
    match (deleting, phase) {
        (false, p) if p != "Active" => vec![FieldError::invalid(
            "status.Phase",
            &json!(p),
            "may only be 'Active' if `deletionTimestamp` is empty",
        )],
        (true, p) if p != "Terminating" => {
            vec![FieldError::invalid(
                "status.Phase",
                &json!(p),
                "may only be 'Terminating' if `deletionTimestamp` is not empty",
            )]
        }
        _ => Vec::new(),
    }
}

/// Upstream `validateNodeTaints`.
fn validate_taints(taints: &[Value], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, t) in taints.iter().enumerate() {
        let p = path.index(i);
        let key = str_at(t, "key").unwrap_or_default();
        for msg in names::qualified_name(key) {
            errs.push(FieldError::invalid(p.child("key"), &json!(key), msg));
        }
        let value = str_at(t, "value").unwrap_or_default();
        let msgs = names::label_value(value);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                p.child("value"),
                &json!(value),
                msgs.join(";"),
            ));
        }
        let effect = str_at(t, "effect").unwrap_or_default();
        taint_effect(effect, false, &p.child("effect"), &mut errs);
        if !seen.insert((key, effect)) {
            errs.push(FieldError::new(
                ErrorKind::Duplicate,
                &p,
                Some(t.to_string()),
                "taints must be unique by key and effect pair",
            ));
        }
    }
    errs
}

fn cidr_ok(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    match (ip.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
        (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
        (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
        _ => false,
    }
}

/// Upstream `ValidateNode` (after metadata): taints and pod CIDRs.
pub fn validate_node(obj: &Value) -> Vec<FieldError> {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let mut errs = validate_taints(arr_at(spec, "taints"), &Path::new("spec").child("taints"));
    for (i, c) in arr_at(spec, "podCIDRs").iter().enumerate() {
        let c = c.as_str().unwrap_or_default();
        if !cidr_ok(c) {
            errs.push(FieldError::invalid(
                Path::new("spec").child("podCIDRs").index(i),
                &json!(c),
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    errs
}

/// Upstream `ValidateNodeUpdate`: pod CIDRs and providerID may only go from unset to set.
pub fn validate_node_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_node(new);
    let null = Value::Null;
    let (ns, os) = (
        new.get("spec").unwrap_or(&null),
        old.get("spec").unwrap_or(&null),
    );
    if !arr_at(os, "podCIDRs").is_empty() && arr_at(os, "podCIDRs") != arr_at(ns, "podCIDRs") {
        errs.push(FieldError::forbidden(
            "spec.podCIDRs",
            "node updates may not change podCIDR except from \"\" to valid",
        ));
    }
    let old_provider = str_at(os, "providerID").unwrap_or_default();
    if !old_provider.is_empty() && str_at(ns, "providerID").unwrap_or_default() != old_provider {
        errs.push(FieldError::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    errs
}

fn quantities(
    map: Option<&serde_json::Map<String, Value>>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    for (k, q) in map.into_iter().flatten() {
        let p = path.key(k);
        for msg in names::qualified_name(k) {
            errs.push(FieldError::invalid(&p, &json!(k), msg));
        }
        match quantity::from_value(q) {
            None => errs.push(FieldError::new(
                ErrorKind::Invalid,
                &p,
                Some(quantity::text(q)),
                QUANTITY_FORMAT_ERROR,
            )),
            Some(v) if v.nanos() < 0 => {
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    &p,
                    Some(quantity::text(q)),
                    "must be greater than or equal to 0",
                ));
            }
            _ => {}
        }
    }
}

/// Upstream `ValidateLimitRange` (the quantity and ordering checks).
pub fn validate_limit_range(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let mut types = HashSet::new();
    for (i, item) in arr_at(spec, "limits").iter().enumerate() {
        let p = Path::new("spec").child("limits").index(i);
        let ty = str_at(item, "type").unwrap_or_default();
        if !types.insert(ty) {
            errs.push(FieldError::duplicate(p.child("type"), &json!(ty)));
        }
        for key in [
            "max",
            "min",
            "default",
            "defaultRequest",
            "maxLimitRequestRatio",
        ] {
            quantities(obj_at(item, key), &p.child(key), &mut errs);
        }
        let min = obj_at(item, "min");
        for (k, maxq) in obj_at(item, "max").into_iter().flatten() {
            if let (Some(mx), Some(mn)) = (
                quantity::from_value(maxq),
                min.and_then(|m| m.get(k)).and_then(quantity::from_value),
            ) && mn.cmp_value(mx).is_gt()
            {
                let mn_text = min
                    .and_then(|m| m.get(k))
                    .map(quantity::text)
                    .unwrap_or_default();
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    p.child("min").key(k),
                    Some(mn_text.clone()),
                    format!(
                        "min value {mn_text} is greater than max value {}",
                        quantity::text(maxq)
                    ),
                ));
            }
        }
    }
    errs
}

/// Upstream `ValidateResourceQuota` (hard limits).
pub fn validate_resource_quota(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    quantities(
        obj_at(spec, "hard"),
        &Path::new("spec").child("hard"),
        &mut errs,
    );
    for (i, s) in arr_at(spec, "scopes").iter().enumerate() {
        let s = s.as_str().unwrap_or_default();
        const SCOPES: &[&str] = &[
            "BestEffort",
            "CrossNamespacePodAffinity",
            "NotBestEffort",
            "NotTerminating",
            "PriorityClass",
            "Terminating",
        ];
        if !SCOPES.contains(&s) {
            errs.push(FieldError::not_supported(
                Path::new("spec").child("scopes").index(i),
                &json!(s),
                SCOPES,
            ));
        }
    }
    errs
}

/// Upstream `legacyValidateEvent` (core/v1 Events).
pub fn validate_core_event(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let namespace = jpath(obj, &["metadata", "namespace"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let involved_ns = jpath(obj, &["involvedObject", "namespace"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let has_event_time = obj.get("eventTime").is_some_and(|v| !v.is_null());
    let mismatch = if !has_event_time {
        if involved_ns.is_empty() {
            !namespace.is_empty() && namespace != "default"
        } else {
            namespace != involved_ns
        }
    } else {
        involved_ns.is_empty() && namespace != "default" && namespace != "kube-system"
    };
    if mismatch {
        errs.push(FieldError::invalid(
            "involvedObject.namespace",
            &json!(involved_ns),
            "does not match event.namespace",
        ));
    }
    if has_event_time {
        strict_event_fields(obj, "reportingComponent", "message", &mut errs);
    }
    errs
}

fn strict_event_fields(
    obj: &Value,
    controller_field: &str,
    note_field: &str,
    errs: &mut Vec<FieldError>,
) {
    let controller = str_at(obj, controller_field).unwrap_or_default();
    if controller.is_empty() {
        errs.push(FieldError::required(controller_field, ""));
    } else {
        for msg in names::qualified_name(controller) {
            errs.push(FieldError::invalid(
                controller_field,
                &json!(controller),
                msg,
            ));
        }
    }
    for (key, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
        let v = str_at(obj, key).unwrap_or_default();
        if v.is_empty() {
            errs.push(FieldError::required(key, ""));
        } else if v.len() > limit {
            errs.push(FieldError::invalid(
                key,
                &json!(""),
                format!("can have at most {limit} characters"),
            ));
        }
    }
    if str_at(obj, note_field).unwrap_or_default().len() > 1024 {
        errs.push(FieldError::invalid(
            note_field,
            &json!(""),
            "can have at most 1024 characters",
        ));
    }
}

/// Upstream `ValidateEventCreate` for events.k8s.io/v1 (strict).
pub fn validate_events_v1_event(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if obj.get("eventTime").is_none_or(Value::is_null) {
        errs.push(FieldError::required("eventTime", ""));
    }
    let ty = str_at(obj, "type").unwrap_or_default();
    if ty != "Normal" && ty != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            &json!(""),
            format!("has invalid value: {ty}"),
        ));
    }
    for key in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedSource",
    ] {
        if obj
            .get(key)
            .is_some_and(|v| !v.is_null() && v != &json!({}))
        {
            errs.push(FieldError::invalid(key, &json!(""), "needs to be unset"));
        }
    }
    if i64_at(obj, "deprecatedCount").is_some_and(|c| c != 0) {
        errs.push(FieldError::invalid(
            "deprecatedCount",
            &json!(""),
            "needs to be unset",
        ));
    }
    let namespace = jpath(obj, &["metadata", "namespace"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let regarding_ns = jpath(obj, &["regarding", "namespace"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    if regarding_ns.is_empty() {
        if namespace != "default" && namespace != "kube-system" {
            errs.push(FieldError::invalid(
                "regarding.namespace",
                &json!(regarding_ns),
                "does not match event.namespace",
            ));
        }
    } else if regarding_ns != namespace {
        errs.push(FieldError::invalid(
            "regarding.namespace",
            &json!(regarding_ns),
            "does not match event.namespace",
        ));
    }
    strict_event_fields(obj, "reportingController", "note", &mut errs);
    errs
}

/// Upstream `ValidateLeaseSpec`.
pub fn validate_lease(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    if let Some(d) = i64_at(spec, "leaseDurationSeconds")
        && d <= 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            &json!(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = i64_at(spec, "leaseTransitions")
        && t < 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseTransitions",
            &json!(t),
            "must be greater than or equal to 0",
        ));
    }
    errs
}

/// Upstream `ValidateRuntimeClass` (after metadata): handler is a DNS label (an empty handler
/// fails the label format, as upstream reports it), overhead quantities, scheduling node
/// selector and unique tolerations.
pub fn validate_runtime_class(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let handler = str_at(obj, "handler").unwrap_or_default();
    for msg in names::dns1123_label(handler) {
        errs.push(FieldError::invalid("handler", &json!(handler), msg));
    }
    if let Some(o) = obj.get("overhead") {
        quantities(
            obj_at(o, "podFixed"),
            &Path::new("overhead").child("podFixed"),
            &mut errs,
        );
    }
    if let Some(s) = obj.get("scheduling").filter(|s| s.is_object()) {
        let sp = Path::new("scheduling");
        errs.extend(validate_labels(
            obj_at(s, "nodeSelector"),
            &sp.child("nodeSelector"),
        ));
        let tolerations = arr_at(s, "tolerations");
        errs.extend(validate_tolerations(tolerations, &sp.child("tolerations")));
        let mut seen = HashSet::new();
        for (i, t) in tolerations.iter().enumerate() {
            let key =
                ["key", "operator", "value", "effect"].map(|k| str_at(t, k).unwrap_or_default());
            if !seen.insert(key) {
                errs.push(FieldError::duplicate(sp.child("tolerations").index(i), t));
            }
        }
    }
    errs
}

/// Upstream `ValidateRuntimeClassUpdate`: the handler is immutable.
pub fn validate_runtime_class_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_runtime_class(new);
    errs.extend(immutable(
        new.get("handler"),
        old.get("handler"),
        &Path::new("handler"),
    ));
    errs
}

/// The GMSACredentialSpec CRD schema: `credspec` is a required object.
pub fn validate_gmsa_credential_spec(obj: &Value) -> Vec<FieldError> {
    match obj.get("credspec") {
        None | Some(Value::Null) => vec![FieldError::required("credspec", "")],
        Some(Value::Object(_)) => Vec::new(),
        Some(other) => vec![FieldError::invalid(
            "credspec",
            other,
            "credspec in body must be of type object",
        )],
    }
}
