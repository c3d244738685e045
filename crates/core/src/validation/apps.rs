//! Workload validation: Deployment, ReplicaSet, DaemonSet, StatefulSet, ControllerRevision (apps/v1)
//! and ReplicationController (core/v1), plus the label-selector rules they share.
//!
//! Mirrors upstream `pkg/apis/apps/validation/validation.go` (`ValidateDeploymentSpec`,
//! `ValidateReplicaSetSpec`, `ValidateDaemonSetSpec`, `ValidateStatefulSetSpec`,
//! `ValidatePodTemplateSpecForReplicaSet`, `ValidateStatefulSetUpdate`, …),
//! `metav1validation.ValidateLabelSelector` and core's `ValidateReplicationControllerSpec`.

use serde_json::{Map, Value, json};

use super::json::{arr_at, go_string_map, i64_at, obj_at, path as jpath, str_at};
use super::meta::{immutable, validate_labels};
use super::names;
use super::pod::{nonnegative, validate_pod_template};
use crate::field::{FieldError, Path};
use crate::selector::LabelSelector;

/// Upstream `ValidateLabelSelector` (metav1 validation).
pub fn validate_label_selector(sel: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_labels(obj_at(sel, "matchLabels"), &path.child("matchLabels"));
    for (i, req) in arr_at(sel, "matchExpressions").iter().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let values = arr_at(req, "values");
        match str_at(req, "operator").unwrap_or_default() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        p.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        p.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => errs.push(FieldError::invalid(
                p.child("operator"),
                &json!(other),
                "not a valid selector operator",
            )),
        }
        let key = str_at(req, "key").unwrap_or_default();
        for msg in names::qualified_name(key) {
            errs.push(FieldError::invalid(p.child("key"), &json!(key), msg));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or_default();
            for msg in names::label_value(v) {
                errs.push(FieldError::invalid(
                    p.child("values").index(j),
                    &json!(v),
                    msg,
                ));
            }
        }
    }
    errs
}

/// Whether a metav1 `LabelSelector` matches a label set (`LabelSelectorAsSelector(..).Matches`,
/// absent labels reading as none). A selector that does not convert matches nothing; the
/// reason is reported by [`validate_label_selector`].
pub fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let none = Map::new();
    LabelSelector::from_json(sel).is_ok_and(|s| s.matches(labels.unwrap_or(&none)))
}

fn selector_is_empty(sel: &Value) -> bool {
    obj_at(sel, "matchLabels").is_none_or(Map::is_empty)
        && arr_at(sel, "matchExpressions").is_empty()
}

/// Selector presence, syntax and non-emptiness (`empty selector is invalid for <kind>`).
fn validate_workload_selector(spec: &Value, what: &str, path: &Path, errs: &mut Vec<FieldError>) {
    match spec.get("selector").filter(|s| s.is_object()) {
        None => errs.push(FieldError::required(path.child("selector"), "")),
        Some(sel) => {
            errs.extend(validate_label_selector(sel, &path.child("selector")));
            if selector_is_empty(sel) {
                errs.push(FieldError::invalid(
                    path.child("selector"),
                    sel,
                    format!("empty selector is invalid for {what}"),
                ));
            }
        }
    }
}

/// The `selector does not match template labels` error at `<template>.metadata.labels`.
pub fn template_labels_mismatch(template_path: &Path, template: &Value) -> FieldError {
    let labels = jpath(template, &["metadata", "labels"]).and_then(Value::as_object);
    FieldError::new(
        crate::field::ErrorKind::Invalid,
        template_path.child("metadata").child("labels"),
        Some(go_string_map(labels)),
        "`selector` does not match template `labels`",
    )
}

/// Upstream `ValidatePodTemplateSpecForReplicaSet` (and the StatefulSet/DaemonSet/RC variants):
/// labels match the selector, the template is valid, restartPolicy is Always and
/// activeDeadlineSeconds is unset.
fn validate_template_for_controller(
    spec: &Value,
    owner: &str,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    let tp = path.child("template");
    let Some(template) = spec.get("template").filter(|t| t.is_object()) else {
        errs.push(FieldError::required(&tp, ""));
        return;
    };
    if let Some(sel) = spec.get("selector").filter(|s| s.is_object())
        && !selector_is_empty(sel)
        && !selector_matches(
            sel,
            jpath(template, &["metadata", "labels"]).and_then(Value::as_object),
        )
    {
        errs.push(template_labels_mismatch(&tp, template));
    }
    errs.extend(validate_pod_template(template, &tp));
    let restart = jpath(template, &["spec", "restartPolicy"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    if restart != "Always" {
        errs.push(FieldError::not_supported(
            tp.child("spec").child("restartPolicy"),
            &json!(restart),
            &["Always"],
        ));
    }
    if jpath(template, &["spec", "activeDeadlineSeconds"]).is_some_and(|v| !v.is_null()) {
        errs.push(FieldError::forbidden(
            tp.child("spec").child("activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
}

/// Upstream `ValidatePositiveIntOrPercent` + `IsNotMoreThan100Percent`.
fn int_or_percent(v: Option<&Value>, path: &Path, errs: &mut Vec<FieldError>) -> Option<i64> {
    match v? {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(-1);
            if n < 0 {
                errs.push(FieldError::invalid(
                    path,
                    &json!(n),
                    "must be greater than or equal to 0",
                ));
            }
            Some(n)
        }
        Value::String(s) => {
            let msgs = names::percent(s);
            if !msgs.is_empty() {
                errs.extend(
                    msgs.into_iter()
                        .map(|m| FieldError::invalid(path, &json!(s), m)),
                );
                return None;
            }
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(i64::MAX);
            if pct > 100 {
                errs.push(FieldError::invalid(
                    path,
                    &json!(s),
                    "must not be greater than 100%",
                ));
            }
            Some(pct)
        }
        _ => None,
    }
}

fn validate_rolling_update(ru: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let unavailable = int_or_percent(
        ru.get("maxUnavailable"),
        &path.child("maxUnavailable"),
        errs,
    );
    let surge = int_or_percent(ru.get("maxSurge"), &path.child("maxSurge"), errs);
    if unavailable == Some(0) && surge.is_none_or(|s| s == 0) {
        errs.push(FieldError::invalid(
            path.child("maxUnavailable"),
            ru.get("maxUnavailable").unwrap_or(&Value::Null),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
}

/// Upstream `ValidateDeploymentSpec`.
pub fn validate_deployment(obj: &Value) -> Vec<FieldError> {
    let path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    nonnegative(spec, "replicas", &path, &mut errs);
    validate_workload_selector(spec, "deployment", &path, &mut errs);
    validate_template_for_controller(spec, "ReplicaSet", &path, &mut errs);
    if let Some(strategy) = spec.get("strategy").filter(|v| v.is_object()) {
        let sp = path.child("strategy");
        match str_at(strategy, "type").unwrap_or_default() {
            "Recreate" => {
                if strategy.get("rollingUpdate").is_some_and(|v| !v.is_null()) {
                    errs.push(FieldError::forbidden(
                        sp.child("rollingUpdate"),
                        "may not be specified when strategy `type` is 'Recreate'",
                    ));
                }
            }
            "RollingUpdate" => match strategy.get("rollingUpdate").filter(|v| v.is_object()) {
                Some(ru) => validate_rolling_update(ru, &sp.child("rollingUpdate"), &mut errs),
                None => errs.push(FieldError::required(
                    sp.child("rollingUpdate"),
                    "this should be defaulted and never be nil",
                )),
            },
            other => errs.push(FieldError::not_supported(
                sp.child("type"),
                &json!(other),
                &["Recreate", "RollingUpdate"],
            )),
        }
    }
    nonnegative(spec, "minReadySeconds", &path, &mut errs);
    nonnegative(spec, "revisionHistoryLimit", &path, &mut errs);
    if let Some(pds) = i64_at(spec, "progressDeadlineSeconds") {
        nonnegative(spec, "progressDeadlineSeconds", &path, &mut errs);
        if pds <= i64_at(spec, "minReadySeconds").unwrap_or(0) {
            errs.push(FieldError::invalid(
                path.child("progressDeadlineSeconds"),
                &json!(pds),
                "must be greater than minReadySeconds",
            ));
        }
    }
    errs
}

/// Upstream `ValidateReplicaSetSpec`.
pub fn validate_replica_set(obj: &Value) -> Vec<FieldError> {
    let path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    nonnegative(spec, "replicas", &path, &mut errs);
    nonnegative(spec, "minReadySeconds", &path, &mut errs);
    validate_workload_selector(spec, "deployment", &path, &mut errs);
    validate_template_for_controller(spec, "ReplicaSet", &path, &mut errs);
    errs
}

/// Upstream `ValidateDaemonSetSpec`.
pub fn validate_daemon_set(obj: &Value) -> Vec<FieldError> {
    let path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    validate_workload_selector(spec, "daemonset", &path, &mut errs);
    validate_template_for_controller(spec, "DaemonSet", &path, &mut errs);
    nonnegative(spec, "minReadySeconds", &path, &mut errs);
    nonnegative(spec, "templateGeneration", &path, &mut errs);
    nonnegative(spec, "revisionHistoryLimit", &path, &mut errs);
    if let Some(us) = spec.get("updateStrategy").filter(|v| v.is_object()) {
        let up = path.child("updateStrategy");
        match str_at(us, "type").unwrap_or_default() {
            "OnDelete" => {}
            "RollingUpdate" => match us.get("rollingUpdate").filter(|v| v.is_object()) {
                Some(ru) => validate_rolling_update(ru, &up.child("rollingUpdate"), &mut errs),
                None => errs.push(FieldError::required(up.child("rollingUpdate"), "")),
            },
            _ => errs.push(FieldError::not_supported(
                &up,
                us,
                &["RollingUpdate", "OnDelete"],
            )),
        }
    }
    errs
}

/// Upstream `ValidateStatefulSetSpec`.
pub fn validate_stateful_set(obj: &Value) -> Vec<FieldError> {
    let path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    match str_at(spec, "podManagementPolicy").unwrap_or_default() {
        "" => errs.push(FieldError::required(path.child("podManagementPolicy"), "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(FieldError::invalid(
            path.child("podManagementPolicy"),
            &json!(other),
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let us = spec.get("updateStrategy").unwrap_or(&null);
    let up = path.child("updateStrategy");
    let ru = us.get("rollingUpdate").filter(|v| !v.is_null());
    match str_at(us, "type").unwrap_or_default() {
        "" => errs.push(FieldError::required(&up, "")),
        "OnDelete" => {
            if let Some(ru) = ru {
                errs.push(FieldError::invalid(
                    up.child("rollingUpdate"),
                    ru,
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = ru {
                nonnegative(ru, "partition", &up.child("rollingUpdate"), &mut errs);
            }
        }
        _ => errs.push(FieldError::invalid(
            &up,
            us,
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(policy) = spec
        .get("persistentVolumeClaimRetentionPolicy")
        .filter(|v| v.is_object())
    {
        for key in ["whenDeleted", "whenScaled"] {
            let v = str_at(policy, key).unwrap_or_default();
            if v != "Retain" && v != "Delete" {
                errs.push(FieldError::not_supported(
                    path.child("persistentVolumeClaimRetentionPolicy")
                        .child(key),
                    &json!(v),
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    nonnegative(spec, "replicas", &path, &mut errs);
    nonnegative(spec, "minReadySeconds", &path, &mut errs);
    nonnegative(spec, "revisionHistoryLimit", &path, &mut errs);
    if let Some(ord) = spec.get("ordinals") {
        nonnegative(ord, "start", &path.child("ordinals"), &mut errs);
    }
    validate_workload_selector(spec, "statefulset", &path, &mut errs);
    validate_template_for_controller(spec, "StatefulSet", &path, &mut errs);
    if let Some(svc) = str_at(spec, "serviceName").filter(|s| !s.is_empty()) {
        for msg in names::dns1123_label(svc) {
            errs.push(FieldError::invalid(
                path.child("serviceName"),
                &json!(svc),
                msg,
            ));
        }
    }
    for (i, t) in arr_at(spec, "volumeClaimTemplates").iter().enumerate() {
        let tp = path.child("volumeClaimTemplates").index(i);
        let name = jpath(t, &["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(
                tp.child("metadata").child("name"),
                "name or generateName is required",
            ));
        }
        errs.extend(super::storage::validate_pvc_spec(
            t.get("spec").unwrap_or(&null),
            &tp.child("spec"),
        ));
    }
    errs
}

/// Upstream `ValidateReplicationControllerSpec`.
pub fn validate_replication_controller(obj: &Value) -> Vec<FieldError> {
    let path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let mut errs = Vec::new();
    nonnegative(spec, "minReadySeconds", &path, &mut errs);
    match obj_at(spec, "selector") {
        Some(sel) if !sel.is_empty() => {
            errs.extend(validate_labels(Some(sel), &path.child("selector")))
        }
        _ => errs.push(FieldError::required(path.child("selector"), "")),
    }
    nonnegative(spec, "replicas", &path, &mut errs);
    // An RC selector is a plain label map: wrap it as matchLabels to reuse the matcher.
    let as_selector =
        json!({ "matchLabels": spec.get("selector").cloned().unwrap_or(Value::Null) });
    let mut view = spec.clone();
    if let Some(m) = view.as_object_mut() {
        m.insert("selector".into(), as_selector);
    }
    validate_template_for_controller(&view, "ReplicationController", &path, &mut errs);
    errs
}

/// Upstream `ValidateControllerRevision`.
pub fn validate_controller_revision(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if obj.get("data").is_none_or(Value::is_null) {
        errs.push(FieldError::required("data", "data is mandatory"));
    }
    nonnegative(obj, "revision", &Path::default(), &mut errs);
    errs
}

/// apps/v1 update rules: the selector is immutable (Deployment, ReplicaSet, DaemonSet,
/// StatefulSet); a StatefulSet may change only a few spec fields; ControllerRevision data is
/// immutable. Upstream: the strategies' `ValidateUpdate` and `ValidateStatefulSetUpdate`.
pub fn validate_apps_update(kind: &str, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    let os = old.get("spec").unwrap_or(&null);
    match kind {
        "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet" => {
            errs.extend(immutable(
                ns.get("selector"),
                os.get("selector"),
                &Path::new("spec").child("selector"),
            ));
        }
        "ControllerRevision" => {
            errs.extend(immutable(
                new.get("data"),
                old.get("data"),
                &Path::new("data"),
            ));
        }
        _ => {}
    }
    if kind == "StatefulSet" {
        let mut clone = ns.clone();
        if let Some(m) = clone.as_object_mut() {
            for key in [
                "replicas",
                "template",
                "updateStrategy",
                "minReadySeconds",
                "ordinals",
                "revisionHistoryLimit",
                "persistentVolumeClaimRetentionPolicy",
            ] {
                match os.get(key) {
                    Some(v) => m.insert(key.into(), v.clone()),
                    None => m.remove(key),
                };
            }
        }
        if clone != *os {
            errs.push(FieldError::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
    errs
}
