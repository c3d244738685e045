//! The RuntimeClass admission plugin on pod create: upstream
//! `plugin/pkg/admission/runtimeclass/admission.go` (`prepareObjects`, `setOverhead`,
//! `setScheduling`, `validateOverhead`).
//!
//! - a `runtimeClassName` naming no RuntimeClass: 403 `pod rejected: RuntimeClass "<n>" not found`;
//! - `overhead.podFixed` is copied to `spec.overhead`; a pod that already sets a different
//!   overhead is refused (403), and so is a pod setting an overhead without a RuntimeClass that
//!   defines one;
//! - `scheduling.nodeSelector` is merged into `spec.nodeSelector`; a key the pod sets to another
//!   value is refused (403, upstream's `conflict: …` message);
//! - `scheduling.tolerations` are merged with [`super::tolerations::merge`] (no duplicates, no
//!   redundant entries).

use serde_json::{Map, Value};

use super::{AdmissionError, tolerations};
use crate::field::go_quote;
use crate::validation::quantity;

/// Admits a pod against its RuntimeClass. `runtime_class` is the object the caller found for
/// `name` (normally `spec.runtimeClassName`; `None` for `name` reads it from the pod). A pod
/// without a RuntimeClass only goes through the overhead check.
pub fn admit(
    pod: &mut Value,
    runtime_class: Option<&Value>,
    name: Option<&str>,
) -> Result<(), AdmissionError> {
    let name = name.map(str::to_string).or_else(|| {
        pod.get("spec")
            .and_then(|s| s.get("runtimeClassName"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    });
    let rc = match (&name, runtime_class) {
        (Some(n), None) => {
            return Err(AdmissionError::Forbidden(format!(
                "pod rejected: RuntimeClass {} not found",
                go_quote(n)
            )));
        }
        (None, _) => None,
        (Some(_), rc) => rc,
    };
    set_overhead(pod, rc)?;
    set_scheduling(pod, rc)?;
    validate_overhead(pod, rc)
}

const OVERHEAD_MISMATCH: &str =
    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead";
const OVERHEAD_WITHOUT_RC: &str =
    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead";

/// `runtimeClass.overhead` when set (not null), and its `podFixed` (null when absent).
fn rc_overhead(rc: Option<&Value>) -> Option<Value> {
    let overhead = rc?.get("overhead").filter(|v| !v.is_null())?;
    Some(overhead.get("podFixed").cloned().unwrap_or(Value::Null))
}

fn pod_overhead(pod: &Value) -> Option<&Value> {
    pod.get("spec")?.get("overhead").filter(|v| !v.is_null())
}

/// Semantic equality of two resource lists (quantities compared by value, `null` = absent).
fn resource_lists_equal(a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Null, _) | (_, Value::Null) => false,
        _ => {
            let (a, b) = (
                a.as_object().unwrap_or(&empty),
                b.as_object().unwrap_or(&empty),
            );
            a.len() == b.len()
                && a.iter().all(|(k, av)| {
                    b.get(k).is_some_and(|bv| {
                        match (quantity::from_value(av), quantity::from_value(bv)) {
                            (Some(x), Some(y)) => x.cmp_value(y).is_eq(),
                            _ => av == bv,
                        }
                    })
                })
        }
    }
}

/// Upstream `setOverhead`.
fn set_overhead(pod: &mut Value, rc: Option<&Value>) -> Result<(), AdmissionError> {
    let Some(fixed) = rc_overhead(rc) else {
        return Ok(());
    };
    if let Some(existing) = pod_overhead(pod)
        && !resource_lists_equal(&fixed, existing)
    {
        return Err(AdmissionError::Forbidden(OVERHEAD_MISMATCH.into()));
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        if fixed.is_null() {
            spec.remove("overhead");
        } else {
            spec.insert("overhead".into(), fixed);
        }
    }
    Ok(())
}

/// Upstream `validateOverhead` (the plugin's validating half).
fn validate_overhead(pod: &Value, rc: Option<&Value>) -> Result<(), AdmissionError> {
    match rc_overhead(rc) {
        Some(fixed) => {
            let pod_value = pod_overhead(pod).cloned().unwrap_or(Value::Null);
            if resource_lists_equal(&fixed, &pod_value) {
                Ok(())
            } else {
                Err(AdmissionError::Forbidden(OVERHEAD_MISMATCH.into()))
            }
        }
        None if pod_overhead(pod).is_some() => {
            Err(AdmissionError::Forbidden(OVERHEAD_WITHOUT_RC.into()))
        }
        None => Ok(()),
    }
}

/// Renders a selector value as Go's `%s` prints a string.
fn text(v: &Value) -> String {
    v.as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string())
}

/// Upstream `setScheduling`.
fn set_scheduling(pod: &mut Value, rc: Option<&Value>) -> Result<(), AdmissionError> {
    let Some(scheduling) = rc
        .and_then(|rc| rc.get("scheduling"))
        .filter(|v| v.is_object())
    else {
        return Ok(());
    };
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let rc_selector = scheduling.get("nodeSelector").and_then(Value::as_object);
    match spec.get_mut("nodeSelector").and_then(Value::as_object_mut) {
        Some(pod_selector) => {
            // Sorted for a deterministic first conflict (upstream iterates a Go map).
            let mut keys: Vec<&String> =
                rc_selector.map(|m| m.keys().collect()).unwrap_or_default();
            keys.sort();
            for key in keys {
                let Some(rc_value) = rc_selector.and_then(|m| m.get(key)) else {
                    continue;
                };
                if let Some(pod_value) = pod_selector.get(key)
                    && pod_value != rc_value
                {
                    return Err(AdmissionError::Forbidden(format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; pod.spec.nodeSelector[{key}] = {}",
                        text(rc_value),
                        text(pod_value)
                    )));
                }
                pod_selector.insert(key.clone(), rc_value.clone());
            }
        }
        None => {
            if let Some(sel) = rc_selector {
                spec.insert("nodeSelector".into(), Value::Object(sel.clone()));
            }
        }
    }
    let rc_tolerations = scheduling
        .get("tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let pod_tolerations = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let merged = tolerations::merge(pod_tolerations, rc_tolerations);
    if merged.is_empty() {
        spec.remove("tolerations");
    } else {
        spec.insert("tolerations".into(), Value::Array(merged));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn windows_2019() -> Value {
        json!({
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "windows-2019"},
            "handler": "example-container-runtime-handler",
            "scheduling": {
                "nodeSelector": {"kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64", "node.kubernetes.io/windows-build": "10.0.17763"},
                "tolerations": [{"effect": "NoSchedule", "key": "os", "operator": "Equal", "value": "windows"}]
            }
        })
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn runtime_class_missing_is_forbidden_with_upstream_message() {
        let mut p = pod(json!({"runtimeClassName": "gone", "containers": []}));
        let err = admit(&mut p, None, None).expect_err("missing RuntimeClass");
        assert_eq!(
            err,
            AdmissionError::Forbidden("pod rejected: RuntimeClass \"gone\" not found".into())
        );
        assert_eq!(err.code(), 403);
        assert_eq!(err.reason(), "Forbidden");
        assert_eq!(
            err.status_message("pods", "p"),
            "pods \"p\" is forbidden: pod rejected: RuntimeClass \"gone\" not found"
        );
    }

    #[test]
    fn runtime_class_scheduling_is_merged_into_the_pod() {
        let rc = windows_2019();
        let mut p = pod(
            json!({"runtimeClassName": "windows-2019", "nodeSelector": {"app": "web", "kubernetes.io/os": "windows"},
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}),
        );
        admit(&mut p, Some(&rc), Some("windows-2019")).expect("admitted");
        assert_eq!(
            p["spec"]["nodeSelector"],
            json!({"app": "web", "kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64", "node.kubernetes.io/windows-build": "10.0.17763"})
        );
        assert_eq!(
            p["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"effect": "NoSchedule", "key": "os", "operator": "Equal", "value": "windows"}
            ])
        );
    }

    #[test]
    fn runtime_class_node_selector_is_copied_when_pod_has_none() {
        let rc = windows_2019();
        let mut p = pod(json!({"runtimeClassName": "windows-2019"}));
        admit(&mut p, Some(&rc), None).expect("admitted");
        assert_eq!(p["spec"]["nodeSelector"], rc["scheduling"]["nodeSelector"]);
        assert_eq!(p["spec"]["tolerations"], rc["scheduling"]["tolerations"]);
    }

    #[test]
    fn runtime_class_node_selector_conflict_is_forbidden() {
        let rc = windows_2019();
        let mut p = pod(
            json!({"runtimeClassName": "windows-2019", "nodeSelector": {"node.kubernetes.io/windows-build": "10.0.20348"}}),
        );
        let err = admit(&mut p, Some(&rc), None).expect_err("conflict");
        assert_eq!(
            err,
            AdmissionError::Forbidden(
                "conflict: runtimeClass.scheduling.nodeSelector[node.kubernetes.io/windows-build] = 10.0.17763; pod.spec.nodeSelector[node.kubernetes.io/windows-build] = 10.0.20348".into()
            )
        );
    }

    #[test]
    fn runtime_class_tolerations_are_not_duplicated() {
        let rc = windows_2019();
        let mut p = pod(json!({"runtimeClassName": "windows-2019",
            "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}, {"key": "os", "operator": "Exists"}]}));
        admit(&mut p, Some(&rc), None).expect("admitted");
        // The pod's `os Exists` covers the RuntimeClass's toleration and its own Equal one.
        assert_eq!(
            p["spec"]["tolerations"],
            json!([{"key": "os", "operator": "Exists"}])
        );
        let mut p = pod(json!({"runtimeClassName": "windows-2019",
            "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]}));
        admit(&mut p, Some(&rc), None).expect("admitted");
        assert_eq!(p["spec"]["tolerations"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn runtime_class_overhead_is_copied_and_mismatch_is_forbidden() {
        let rc = json!({"metadata": {"name": "kata"}, "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}});
        let mut p = pod(json!({"runtimeClassName": "kata"}));
        admit(&mut p, Some(&rc), None).expect("admitted");
        assert_eq!(
            p["spec"]["overhead"],
            json!({"cpu": "250m", "memory": "120Mi"})
        );

        // The same overhead written differently is equal.
        let mut p = pod(
            json!({"runtimeClassName": "kata", "overhead": {"cpu": "0.25", "memory": "120Mi"}}),
        );
        admit(&mut p, Some(&rc), None).expect("semantically equal overhead");

        let mut p = pod(json!({"runtimeClassName": "kata", "overhead": {"cpu": "1"}}));
        let err = admit(&mut p, Some(&rc), None).expect_err("mismatch");
        assert_eq!(
            err,
            AdmissionError::Forbidden(
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into()
            )
        );

        let mut p = pod(json!({"overhead": {"cpu": "1"}}));
        let err = admit(&mut p, None, None).expect_err("overhead without RuntimeClass");
        assert_eq!(err, AdmissionError::Forbidden("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into()));

        let mut p = pod(json!({"runtimeClassName": "windows-2019", "overhead": {"cpu": "1"}}));
        assert!(admit(&mut p, Some(&windows_2019()), None).is_err());
    }

    #[test]
    fn runtime_class_absent_leaves_the_pod_alone() {
        let mut p = pod(json!({"nodeSelector": {"a": "b"}}));
        let before = p.clone();
        admit(&mut p, None, None).expect("admitted");
        assert_eq!(p, before);
    }

    #[test]
    fn runtime_class_admission_never_panics_on_odd_shapes() {
        let rcs = [
            json!(null),
            json!(1),
            json!({"scheduling": 1, "overhead": 2}),
            json!({"scheduling": {"nodeSelector": [], "tolerations": {}}}),
        ];
        for rc in &rcs {
            for mut p in [
                json!(null),
                json!({"spec": 1}),
                json!({"spec": {"nodeSelector": 3, "tolerations": "x"}}),
                json!({"spec": {"nodeSelector": {"a": 1}}}),
            ] {
                let _ = admit(&mut p, Some(rc), Some("x"));
            }
        }
    }
}
