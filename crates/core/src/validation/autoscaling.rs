//! autoscaling/v2 HorizontalPodAutoscaler: defaults and validation.
//!
//! Defaults follow upstream `pkg/apis/autoscaling/v2/defaults.go`
//! (`SetDefaults_HorizontalPodAutoscaler`: `minReplicas` 1, a CPU 80 % target when no metric is
//! given, and — only when `behavior` is set — every unset scaling rule field from the default
//! scale-up rules (no window, `Max` of 4 Pods or 100 % per 15 s) and scale-down rules (`Max` of
//! 100 % per 15 s; the window is left for the controller's
//! `--horizontal-pod-autoscaler-downscale-stabilization`)).
//!
//! Validation follows `pkg/apis/autoscaling/validation/validation.go`
//! (`ValidateHorizontalPodAutoscaler`, `…Update`, `…StatusUpdate`) with the `HPAScaleToZero`
//! gate off, as upstream ships it: `minReplicas` must be at least 1, unless an update keeps an
//! object that already had 0.

use serde_json::{Value, json};

use super::json::{arr_at, i64_at, str_at};
use super::names;
use super::pod::nonnegative;
use super::quantity::Quantity;
use crate::field::{ErrorKind, FieldError, Path};

/// Largest `periodSeconds` of a scaling policy (upstream `MaxPeriodSeconds`).
pub const MAX_PERIOD_SECONDS: i64 = 1800;
/// Largest `stabilizationWindowSeconds` (upstream `MaxStabilizationWindowSeconds`).
pub const MAX_STABILIZATION_WINDOW_SECONDS: i64 = 3600;
/// The CPU utilization target of an HPA given no metric (upstream `DefaultCPUUtilization`).
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

const METRIC_SOURCE_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

/// Upstream `GenerateHPAScaleUpRules`' defaults.
fn default_scale_up() -> Value {
    json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// Upstream `GenerateHPAScaleDownRules`' defaults (no window: the controller's flag decides).
fn default_scale_down() -> Value {
    json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]})
}

/// Upstream `copyHPAScalingRules`: the set fields of `rules` over `defaults`.
fn fill_rules(rules: Option<&Value>, mut defaults: Value) -> Value {
    if let (Some(Value::Object(set)), Some(out)) = (rules, defaults.as_object_mut()) {
        for (k, v) in set {
            if !v.is_null() {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    defaults
}

/// Upstream `SetDefaults_HorizontalPodAutoscaler` (autoscaling/v2).
pub fn default_hpa(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("minReplicas").is_none_or(Value::is_null) {
        spec.insert("minReplicas".into(), json!(1));
    }
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}}}]),
        );
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = fill_rules(behavior.get("scaleUp"), default_scale_up());
        let down = fill_rules(behavior.get("scaleDown"), default_scale_down());
        behavior.insert("scaleUp".into(), up);
        behavior.insert("scaleDown".into(), down);
    }
}

/// A quantity field's rendering in an error (upstream prints `Quantity.String()`, unquoted).
fn quantity_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn positive_quantity(v: &Value) -> bool {
    super::quantity::from_value(v).is_some_and(|q| q > Quantity::parse("0").unwrap_or(q))
}

/// Upstream `ValidateCrossVersionObjectReference`.
fn cross_version_ref(r: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    for key in ["kind", "name"] {
        let p = path.child(key);
        match str_at(r, key).filter(|s| !s.is_empty()) {
            None => errs.push(FieldError::required(&p, "")),
            Some(v) => {
                for msg in names::path_segment_name(v) {
                    errs.push(FieldError::invalid(&p, &json!(v), msg));
                }
            }
        }
    }
}

/// Upstream `validateMetricTarget`.
fn metric_target(t: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let ty = str_at(t, "type").unwrap_or("");
    if ty.is_empty() {
        errs.push(FieldError::required(
            path.child("type"),
            "must specify a metric target type",
        ));
    }
    if !matches!(ty, "Utilization" | "Value" | "AverageValue") {
        errs.push(FieldError::invalid(
            path.child("type"),
            &json!(ty),
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    for key in ["value", "averageValue"] {
        if let Some(q) = t.get(key).filter(|v| !v.is_null())
            && !positive_quantity(q)
        {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                path.child(key),
                Some(quantity_value(q)),
                "must be positive",
            ));
        }
    }
    if let Some(u) = i64_at(t, "averageUtilization")
        && u < 1
    {
        errs.push(FieldError::invalid(
            path.child("averageUtilization"),
            &json!(u),
            "must be greater than 0",
        ));
    }
}

/// Upstream `validateMetricIdentifier`.
fn metric_identifier(id: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let p = path.child("name");
    match str_at(id, "name").filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(&p, "must specify a metric name")),
        Some(n) => {
            for msg in names::path_segment_name(n) {
                errs.push(FieldError::invalid(&p, &json!(n), msg));
            }
        }
    }
}

fn set(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

/// The resource sources' common rule: a utilization or an average value, not both.
fn utilization_or_value(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    let target = src.get("target").unwrap_or(&null);
    let tp = path.child("target");
    metric_target(target, &tp, errs);
    let util = set(target, "averageUtilization");
    let avg = set(target, "averageValue");
    if !util && !avg {
        errs.push(FieldError::required(
            tp.child("averageUtilization"),
            "must set either a target raw value or a target utilization",
        ));
    }
    if util && avg {
        errs.push(FieldError::forbidden(
            tp.child("averageValue"),
            "may not set both a target raw value and a target utilization",
        ));
    }
}

fn resource_source(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if str_at(src, "name").is_none_or(str::is_empty) {
        errs.push(FieldError::required(
            path.child("name"),
            "must specify a resource name",
        ));
    }
    utilization_or_value(src, path, errs);
}

/// Upstream `ValidateContainerResourceName` for names without a domain: the standard
/// container resources.
fn container_resource_name(name: &str, path: &Path, errs: &mut Vec<FieldError>) {
    let standard =
        matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    if !name.contains('/') && !standard {
        errs.push(FieldError::invalid(
            path,
            &json!(name),
            "must be a standard resource for containers",
        ));
    }
}

fn container_resource_source(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    match str_at(src, "name").filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(
            path.child("name"),
            "must specify a resource name",
        )),
        Some(n) => container_resource_name(n, &path.child("name"), errs),
    }
    match str_at(src, "container").filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(
            path.child("container"),
            "must specify a container",
        )),
        Some(c) => {
            for msg in names::dns1123_label(c) {
                errs.push(FieldError::invalid(path.child("container"), &json!(c), msg));
            }
        }
    }
    utilization_or_value(src, path, errs);
}

fn object_source(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    cross_version_ref(
        src.get("describedObject").unwrap_or(&null),
        &path.child("describedObject"),
        errs,
    );
    metric_identifier(
        src.get("metric").unwrap_or(&null),
        &path.child("metric"),
        errs,
    );
    let target = src.get("target").unwrap_or(&null);
    metric_target(target, &path.child("target"), errs);
    if !set(target, "value") && !set(target, "averageValue") {
        errs.push(FieldError::required(
            path.child("target").child("averageValue"),
            "must set either a target value or averageValue",
        ));
    }
}

fn external_source(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    metric_identifier(
        src.get("metric").unwrap_or(&null),
        &path.child("metric"),
        errs,
    );
    let target = src.get("target").unwrap_or(&null);
    metric_target(target, &path.child("target"), errs);
    let value = set(target, "value");
    let avg = set(target, "averageValue");
    if !value && !avg {
        errs.push(FieldError::required(
            path.child("target").child("averageValue"),
            "must set either a target value for metric or a per-pod target",
        ));
    }
    if value && avg {
        errs.push(FieldError::forbidden(
            path.child("target").child("value"),
            "may not set both a target value for metric and a per-pod target",
        ));
    }
}

fn pods_source(src: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    metric_identifier(
        src.get("metric").unwrap_or(&null),
        &path.child("metric"),
        errs,
    );
    let target = src.get("target").unwrap_or(&null);
    metric_target(target, &path.child("target"), errs);
    if !set(target, "averageValue") {
        errs.push(FieldError::required(
            path.child("target").child("averageValue"),
            "must specify a positive target averageValue",
        ));
    }
}

/// Upstream `validateMetricSpec`: a known type, and exactly the source block it names.
fn metric_spec(m: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let ty = str_at(m, "type").unwrap_or("");
    if ty.is_empty() {
        errs.push(FieldError::required(
            path.child("type"),
            "must specify a metric source type",
        ));
    }
    if !METRIC_SOURCE_TYPES.contains(&ty) {
        errs.push(FieldError::not_supported(
            path.child("type"),
            &json!(ty),
            METRIC_SOURCE_TYPES,
        ));
    }
    // Only the first source present is validated, as upstream's `typesPresent.Len() == 1`.
    type Check = fn(&Value, &Path, &mut Vec<FieldError>);
    let sources: [(&str, Check); 5] = [
        ("object", object_source),
        ("external", external_source),
        ("pods", pods_source),
        ("resource", resource_source),
        ("containerResource", container_resource_source),
    ];
    let mut present = Vec::new();
    for (key, check) in sources {
        if let Some(src) = m.get(key).filter(|v| !v.is_null()) {
            present.push(key);
            if present.len() == 1 {
                check(src, &path.child(key), errs);
            }
        }
    }
    let expected = match ty {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "External" => "external",
        "ContainerResource" => "containerResource",
        _ => {
            errs.push(FieldError::not_supported(
                path.child("type"),
                &json!(ty),
                METRIC_SOURCE_TYPES,
            ));
            ""
        }
    };
    if !expected.is_empty() && !present.contains(&expected) {
        errs.push(FieldError::required(
            path.child(expected),
            "must populate information for the given metric source",
        ));
    }
    if present.len() != 1 {
        for key in present.iter().filter(|k| **k != expected) {
            errs.push(FieldError::forbidden(
                path.child(key),
                "must populate the given metric source only",
            ));
        }
    }
}

/// Upstream `validateScalingRules`.
fn scaling_rules(rules: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(w) = i64_at(rules, "stabilizationWindowSeconds") {
        let p = path.child("stabilizationWindowSeconds");
        if w < 0 {
            errs.push(FieldError::invalid(
                &p,
                &json!(w),
                "must be greater than or equal to zero",
            ));
        }
        if w > MAX_STABILIZATION_WINDOW_SECONDS {
            errs.push(FieldError::invalid(
                &p,
                &json!(w),
                format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            ));
        }
    }
    if let Some(sp) = str_at(rules, "selectPolicy")
        && !SELECT_POLICIES.contains(&sp)
    {
        errs.push(FieldError::not_supported(
            path.child("selectPolicy"),
            &json!(sp),
            SELECT_POLICIES,
        ));
    }
    let pp = path.child("policies");
    let policies = arr_at(rules, "policies");
    if policies.is_empty() {
        errs.push(FieldError::required(
            &pp,
            "must specify at least one Policy",
        ));
    }
    for (i, policy) in policies.iter().enumerate() {
        let ip = pp.index(i);
        let ty = str_at(policy, "type").unwrap_or("");
        if !POLICY_TYPES.contains(&ty) {
            errs.push(FieldError::not_supported(
                ip.child("type"),
                &json!(ty),
                POLICY_TYPES,
            ));
        }
        let value = i64_at(policy, "value").unwrap_or(0);
        if value <= 0 {
            errs.push(FieldError::invalid(
                ip.child("value"),
                &json!(value),
                "must be greater than zero",
            ));
        }
        let period = i64_at(policy, "periodSeconds").unwrap_or(0);
        if period <= 0 {
            errs.push(FieldError::invalid(
                ip.child("periodSeconds"),
                &json!(period),
                "must be greater than zero",
            ));
        }
        if period > MAX_PERIOD_SECONDS {
            errs.push(FieldError::invalid(
                ip.child("periodSeconds"),
                &json!(period),
                format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
            ));
        }
    }
}

/// Upstream `validateHorizontalPodAutoscalerSpec` (ObjectMeta is checked by the caller).
/// `old` is the stored object on update: one whose `minReplicas` was already 0 may keep it.
pub fn validate_hpa(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let old_zero = old
        .and_then(|o| o.pointer("/spec/minReplicas"))
        .and_then(Value::as_i64)
        == Some(0);
    let lower_bound = if old_zero { 0 } else { 1 };
    let min = i64_at(spec, "minReplicas");
    let max = i64_at(spec, "maxReplicas").unwrap_or(0);
    if let Some(m) = min
        && m < lower_bound
    {
        errs.push(FieldError::invalid(
            path.child("minReplicas"),
            &json!(m),
            format!("must be greater than or equal to {lower_bound}"),
        ));
    }
    if max < 1 {
        errs.push(FieldError::invalid(
            path.child("maxReplicas"),
            &json!(max),
            "must be greater than 0",
        ));
    }
    if let Some(m) = min
        && max < m
    {
        errs.push(FieldError::invalid(
            path.child("maxReplicas"),
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    cross_version_ref(
        spec.get("scaleTargetRef").unwrap_or(&null),
        &path.child("scaleTargetRef"),
        &mut errs,
    );
    let mp = path.child("metrics");
    let metrics = arr_at(spec, "metrics");
    for (i, m) in metrics.iter().enumerate() {
        metric_spec(m, &mp.index(i), &mut errs);
    }
    if min == Some(0)
        && !metrics
            .iter()
            .any(|m| matches!(str_at(m, "type"), Some("Object" | "External")))
    {
        errs.push(FieldError::forbidden(
            &mp,
            "must specify at least one Object or External metric to support scaling to zero replicas",
        ));
    }
    if let Some(behavior) = spec.get("behavior").filter(|b| b.is_object()) {
        let bp = path.child("behavior");
        for key in ["scaleUp", "scaleDown"] {
            if let Some(rules) = behavior.get(key).filter(|r| r.is_object()) {
                scaling_rules(rules, &bp.child(key), &mut errs);
            }
        }
    }
    errs
}

/// Upstream `ValidateHorizontalPodAutoscalerStatusUpdate` (after ObjectMeta): non-negative
/// replica counts.
pub fn validate_hpa_status(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let status = obj.get("status").unwrap_or(&null);
    let path = Path::new("status");
    nonnegative(status, "currentReplicas", &path, &mut errs);
    nonnegative(status, "desiredReplicas", &path, &mut errs);
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hpa(spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("scaleTargetRef").is_none() {
            spec["scaleTargetRef"] =
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
        }
        let mut o = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"}, "spec": spec});
        default_hpa(&mut o);
        o
    }

    fn fields(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.cause_message()))
            .collect()
    }

    #[test]
    fn defaults_fill_min_replicas_and_the_cpu_target() {
        let o = hpa(json!({"maxReplicas": 3}));
        assert_eq!(o["spec"]["minReplicas"], 1);
        assert_eq!(
            o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(o["spec"].get("behavior").is_none());
        assert!(validate_hpa(&o, None).is_empty());
    }

    #[test]
    fn behavior_defaults_fill_only_unset_rule_fields() {
        let o = hpa(
            json!({"maxReplicas": 3, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}),
        );
        let b = &o["spec"]["behavior"];
        assert_eq!(b["scaleDown"]["stabilizationWindowSeconds"], 60);
        assert_eq!(b["scaleDown"]["selectPolicy"], "Max");
        assert_eq!(
            b["scaleDown"]["policies"],
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}])
        );
        assert_eq!(b["scaleUp"]["stabilizationWindowSeconds"], 0);
        assert_eq!(
            b["scaleUp"]["policies"][0],
            json!({"type": "Pods", "value": 4, "periodSeconds": 15})
        );
        assert!(validate_hpa(&o, None).is_empty());
    }

    #[test]
    fn replica_bounds_are_enforced_with_upstream_messages() {
        let o = hpa(json!({"minReplicas": 0, "maxReplicas": 0}));
        assert_eq!(
            fields(&validate_hpa(&o, None)),
            [
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.maxReplicas: Invalid value: 0: must be greater than 0",
                "spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas",
            ]
        );
        let o = hpa(json!({"minReplicas": 5, "maxReplicas": 3}));
        assert_eq!(
            fields(&validate_hpa(&o, None)),
            ["spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"]
        );
    }

    #[test]
    fn an_update_may_keep_a_zero_min_replicas() {
        let old = hpa(json!({"minReplicas": 0, "maxReplicas": 3,
            "metrics": [{"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}]}));
        assert!(validate_hpa(&old, Some(&old)).is_empty());
    }

    #[test]
    fn scale_target_ref_needs_kind_and_name() {
        let o = hpa(json!({"maxReplicas": 3, "scaleTargetRef": {"name": "a/b"}}));
        assert_eq!(
            fields(&validate_hpa(&o, None)),
            [
                "spec.scaleTargetRef.kind: Required value",
                "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
            ]
        );
    }

    #[test]
    fn metric_specs_are_checked_per_type_and_target() {
        let o = hpa(json!({"maxReplicas": 3, "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue"}}},
            {"type": "Pods", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
            {"type": "Bogus"},
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50, "averageValue": "-1"}}},
        ]}));
        assert_eq!(
            fields(&validate_hpa(&o, None)),
            [
                "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
                "spec.metrics[1].resource.target.averageUtilization: Required value: must set either a target raw value or a target utilization",
                "spec.metrics[2].pods: Required value: must populate information for the given metric source",
                "spec.metrics[3].type: Unsupported value: \"Bogus\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
                "spec.metrics[3].type: Unsupported value: \"Bogus\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
                "spec.metrics[4].resource.target.averageValue: Invalid value: -1: must be positive",
                "spec.metrics[4].resource.target.averageValue: Forbidden: may not set both a target raw value and a target utilization",
            ]
        );
    }

    #[test]
    fn behavior_rules_are_bounded() {
        let o = hpa(json!({"maxReplicas": 3, "behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 3601, "selectPolicy": "Most", "policies": [
                {"type": "Nodes", "value": 0, "periodSeconds": 1801}]},
            "scaleDown": {"stabilizationWindowSeconds": -1, "policies": []}}}));
        assert_eq!(
            fields(&validate_hpa(&o, None)),
            [
                "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 3601: must be less than or equal to 3600",
                "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"Most\": supported values: \"Disabled\", \"Max\", \"Min\"",
                "spec.behavior.scaleUp.policies[0].type: Unsupported value: \"Nodes\": supported values: \"Percent\", \"Pods\"",
                "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
                "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800",
                "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: -1: must be greater than or equal to zero",
                "spec.behavior.scaleDown.policies: Required value: must specify at least one Policy",
            ]
        );
    }

    #[test]
    fn status_replicas_must_not_be_negative() {
        let mut o = hpa(json!({"maxReplicas": 3}));
        o["status"] = json!({"currentReplicas": -1, "desiredReplicas": 2});
        assert_eq!(
            fields(&validate_hpa_status(&o)),
            ["status.currentReplicas: Invalid value: -1: must be greater than or equal to 0"]
        );
    }
}
