//! `HorizontalPodAutoscaler` between `autoscaling/v2` (stored) and `autoscaling/v1`, as
//! upstream's `pkg/apis/autoscaling/v1/conversion.go` converts through the internal version:
//!
//! - a `Resource` `cpu` metric with an `averageUtilization` target is v1's
//!   `spec.targetCPUUtilizationPercentage`; the other metrics ride in the
//!   `autoscaling.alpha.kubernetes.io/metrics` annotation (v1 `MetricSpec`s);
//! - `spec.behavior` rides in `autoscaling.alpha.kubernetes.io/behavior`;
//! - the `cpu` utilization of `status.currentMetrics` is `status.currentCPUUtilizationPercentage`,
//!   and every current metric rides in `autoscaling.alpha.kubernetes.io/current-metrics`
//!   (v1 `MetricStatus`es), the conditions in `autoscaling.alpha.kubernetes.io/conditions`;
//! - a v1 object without any metric gets the 80 % CPU target the v1 API always implied.
//!
//! The functions work on JSON and tolerate any shape: what they cannot read is left out.

use serde_json::{Map, Value, json};

/// v1's other metric specs.
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// v1's current metric statuses.
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// v1's status conditions.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// v1's scaling behavior.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// The CPU utilization the v1 API implies without a target (upstream `DefaultCPUUtilization`).
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// An object of the entries whose value is present (not `None`, not `null`).
fn object(entries: Vec<(&str, Option<Value>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in entries {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            m.insert(k.to_string(), v);
        }
    }
    Value::Object(m)
}

fn at(v: &Value, path: &[&str]) -> Option<Value> {
    path.iter()
        .try_fold(v, |cur, k| cur.get(*k))
        .filter(|v| !v.is_null())
        .cloned()
}

fn is_cpu_utilization(metric: &Value) -> bool {
    metric.get("type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && metric
            .pointer("/resource/target/averageUtilization")
            .is_some_and(|v| !v.is_null())
}

/// A v2 `MetricSpec` as v1 writes it in the metrics annotation.
fn spec_to_v1(m: &Value) -> Value {
    let t = |src: &str, f: &str| at(m, &[src, "target", f]);
    object(vec![
        ("type", at(m, &["type"])),
        (
            "object",
            m.get("object").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("target", at(m, &["object", "describedObject"])),
                    ("metricName", at(m, &["object", "metric", "name"])),
                    ("targetValue", t("object", "value")),
                    ("selector", at(m, &["object", "metric", "selector"])),
                    ("averageValue", t("object", "averageValue")),
                ])
            }),
        ),
        (
            "pods",
            m.get("pods").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("metricName", at(m, &["pods", "metric", "name"])),
                    ("targetAverageValue", t("pods", "averageValue")),
                    ("selector", at(m, &["pods", "metric", "selector"])),
                ])
            }),
        ),
        (
            "resource",
            m.get("resource").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("name", at(m, &["resource", "name"])),
                    (
                        "targetAverageUtilization",
                        t("resource", "averageUtilization"),
                    ),
                    ("targetAverageValue", t("resource", "averageValue")),
                ])
            }),
        ),
        (
            "containerResource",
            m.get("containerResource")
                .filter(|v| v.is_object())
                .map(|_| {
                    object(vec![
                        ("name", at(m, &["containerResource", "name"])),
                        ("container", at(m, &["containerResource", "container"])),
                        (
                            "targetAverageUtilization",
                            t("containerResource", "averageUtilization"),
                        ),
                        ("targetAverageValue", t("containerResource", "averageValue")),
                    ])
                }),
        ),
        (
            "external",
            m.get("external").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("metricName", at(m, &["external", "metric", "name"])),
                    ("metricSelector", at(m, &["external", "metric", "selector"])),
                    ("targetValue", t("external", "value")),
                    ("targetAverageValue", t("external", "averageValue")),
                ])
            }),
        ),
    ])
}

/// A v1 `MetricSpec` from the metrics annotation, as v2.
fn spec_from_v1(m: &Value) -> Value {
    let target_type = |utilization: bool, value: bool| {
        Some(json!(if utilization {
            "Utilization"
        } else if value {
            "Value"
        } else {
            "AverageValue"
        }))
    };
    object(vec![
        ("type", at(m, &["type"])),
        (
            "object",
            m.get("object").filter(|v| v.is_object()).map(|o| {
                let avg = at(o, &["averageValue"]);
                object(vec![
                    ("describedObject", at(o, &["target"])),
                    (
                        "metric",
                        Some(object(vec![
                            ("name", at(o, &["metricName"])),
                            ("selector", at(o, &["selector"])),
                        ])),
                    ),
                    (
                        "target",
                        Some(object(vec![
                            ("type", target_type(false, avg.is_none())),
                            ("value", at(o, &["targetValue"])),
                            ("averageValue", avg),
                        ])),
                    ),
                ])
            }),
        ),
        (
            "pods",
            m.get("pods").filter(|v| v.is_object()).map(|o| {
                object(vec![
                    (
                        "metric",
                        Some(object(vec![
                            ("name", at(o, &["metricName"])),
                            ("selector", at(o, &["selector"])),
                        ])),
                    ),
                    (
                        "target",
                        Some(object(vec![
                            ("type", target_type(false, false)),
                            ("averageValue", at(o, &["targetAverageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
        (
            "resource",
            m.get("resource").filter(|v| v.is_object()).map(|o| {
                let util = at(o, &["targetAverageUtilization"]);
                object(vec![
                    ("name", at(o, &["name"])),
                    (
                        "target",
                        Some(object(vec![
                            ("type", target_type(util.is_some(), false)),
                            ("averageUtilization", util),
                            ("averageValue", at(o, &["targetAverageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
        (
            "containerResource",
            m.get("containerResource")
                .filter(|v| v.is_object())
                .map(|o| {
                    let util = at(o, &["targetAverageUtilization"]);
                    object(vec![
                        ("name", at(o, &["name"])),
                        ("container", at(o, &["container"])),
                        (
                            "target",
                            Some(object(vec![
                                ("type", target_type(util.is_some(), false)),
                                ("averageUtilization", util),
                                ("averageValue", at(o, &["targetAverageValue"])),
                            ])),
                        ),
                    ])
                }),
        ),
        (
            "external",
            m.get("external").filter(|v| v.is_object()).map(|o| {
                let value = at(o, &["targetValue"]);
                object(vec![
                    (
                        "metric",
                        Some(object(vec![
                            ("name", at(o, &["metricName"])),
                            ("selector", at(o, &["metricSelector"])),
                        ])),
                    ),
                    (
                        "target",
                        Some(object(vec![
                            ("type", target_type(false, value.is_some())),
                            ("value", value),
                            ("averageValue", at(o, &["targetAverageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
    ])
}

/// A v2 `MetricStatus` as v1 writes it in the current-metrics annotation.
fn status_to_v1(m: &Value) -> Value {
    let c = |src: &str, f: &str| at(m, &[src, "current", f]);
    object(vec![
        ("type", at(m, &["type"])),
        (
            "object",
            m.get("object").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("target", at(m, &["object", "describedObject"])),
                    ("metricName", at(m, &["object", "metric", "name"])),
                    ("currentValue", c("object", "value").or(Some(json!("0")))),
                    ("selector", at(m, &["object", "metric", "selector"])),
                    ("averageValue", c("object", "averageValue")),
                ])
            }),
        ),
        (
            "pods",
            m.get("pods").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("metricName", at(m, &["pods", "metric", "name"])),
                    (
                        "currentAverageValue",
                        c("pods", "averageValue").or(Some(json!("0"))),
                    ),
                    ("selector", at(m, &["pods", "metric", "selector"])),
                ])
            }),
        ),
        (
            "resource",
            m.get("resource").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("name", at(m, &["resource", "name"])),
                    (
                        "currentAverageUtilization",
                        c("resource", "averageUtilization"),
                    ),
                    (
                        "currentAverageValue",
                        c("resource", "averageValue").or(Some(json!("0"))),
                    ),
                ])
            }),
        ),
        (
            "containerResource",
            m.get("containerResource")
                .filter(|v| v.is_object())
                .map(|_| {
                    object(vec![
                        ("name", at(m, &["containerResource", "name"])),
                        ("container", at(m, &["containerResource", "container"])),
                        (
                            "currentAverageUtilization",
                            c("containerResource", "averageUtilization"),
                        ),
                        (
                            "currentAverageValue",
                            c("containerResource", "averageValue").or(Some(json!("0"))),
                        ),
                    ])
                }),
        ),
        (
            "external",
            m.get("external").filter(|v| v.is_object()).map(|_| {
                object(vec![
                    ("metricName", at(m, &["external", "metric", "name"])),
                    ("metricSelector", at(m, &["external", "metric", "selector"])),
                    ("currentValue", c("external", "value").or(Some(json!("0")))),
                    ("currentAverageValue", c("external", "averageValue")),
                ])
            }),
        ),
    ])
}

/// A v1 `MetricStatus` from the current-metrics annotation, as v2.
fn status_from_v1(m: &Value) -> Value {
    let metric = |o: &Value, name: &str, selector: &str| {
        Some(object(vec![
            ("name", at(o, &[name])),
            ("selector", at(o, &[selector])),
        ]))
    };
    object(vec![
        ("type", at(m, &["type"])),
        (
            "object",
            m.get("object").filter(|v| v.is_object()).map(|o| {
                object(vec![
                    ("describedObject", at(o, &["target"])),
                    ("metric", metric(o, "metricName", "selector")),
                    (
                        "current",
                        Some(object(vec![
                            ("value", at(o, &["currentValue"])),
                            ("averageValue", at(o, &["averageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
        (
            "pods",
            m.get("pods").filter(|v| v.is_object()).map(|o| {
                object(vec![
                    ("metric", metric(o, "metricName", "selector")),
                    (
                        "current",
                        Some(object(vec![(
                            "averageValue",
                            at(o, &["currentAverageValue"]),
                        )])),
                    ),
                ])
            }),
        ),
        (
            "resource",
            m.get("resource").filter(|v| v.is_object()).map(|o| {
                object(vec![
                    ("name", at(o, &["name"])),
                    (
                        "current",
                        Some(object(vec![
                            ("averageUtilization", at(o, &["currentAverageUtilization"])),
                            ("averageValue", at(o, &["currentAverageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
        (
            "containerResource",
            m.get("containerResource")
                .filter(|v| v.is_object())
                .map(|o| {
                    object(vec![
                        ("name", at(o, &["name"])),
                        ("container", at(o, &["container"])),
                        (
                            "current",
                            Some(object(vec![
                                ("averageUtilization", at(o, &["currentAverageUtilization"])),
                                ("averageValue", at(o, &["currentAverageValue"])),
                            ])),
                        ),
                    ])
                }),
        ),
        (
            "external",
            m.get("external").filter(|v| v.is_object()).map(|o| {
                object(vec![
                    ("metric", metric(o, "metricName", "metricSelector")),
                    (
                        "current",
                        Some(object(vec![
                            ("value", at(o, &["currentValue"])),
                            ("averageValue", at(o, &["currentAverageValue"])),
                        ])),
                    ),
                ])
            }),
        ),
    ])
}

fn annotations_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = obj.as_object_mut()?.entry("metadata").or_insert(json!({}));
    let meta = meta.as_object_mut()?;
    let slot = meta.entry("annotations").or_insert(json!({}));
    if slot.is_null() {
        *slot = json!({});
    }
    slot.as_object_mut()
}

/// Drops `metadata.annotations` when it is empty, as an empty map does not serialize.
fn drop_empty_annotations(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

/// Converts a stored `autoscaling/v2` HorizontalPodAutoscaler to `autoscaling/v1` in place.
pub fn v2_to_v1(obj: &mut Value) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let status = obj.get("status").cloned();
    let metrics = spec
        .get("metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let cpu = metrics
        .iter()
        .find(|m| {
            m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        })
        .and_then(|m| at(m, &["resource", "target", "averageUtilization"]));
    let others: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(spec_to_v1)
        .collect();
    let v1_spec = object(vec![
        ("scaleTargetRef", at(&spec, &["scaleTargetRef"])),
        ("minReplicas", at(&spec, &["minReplicas"])),
        (
            "maxReplicas",
            Some(at(&spec, &["maxReplicas"]).unwrap_or(json!(0))),
        ),
        ("targetCPUUtilizationPercentage", cpu),
    ]);
    let mut annotations: Vec<(&str, String)> = Vec::new();
    if !others.is_empty() {
        annotations.push((METRIC_SPECS_ANNOTATION, Value::Array(others).to_string()));
    }
    if let Some(b) = at(&spec, &["behavior"]) {
        annotations.push((BEHAVIOR_ANNOTATION, b.to_string()));
    }
    let v1_status = status.as_ref().map(|st| {
        let current = st
            .get("currentMetrics")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let cpu_now = current
            .iter()
            .filter(|m| {
                m.get("type").and_then(Value::as_str) == Some("Resource")
                    && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
            })
            .filter_map(|m| at(m, &["resource", "current", "averageUtilization"]))
            .next_back();
        if !current.is_empty() {
            let v1: Vec<Value> = current.iter().map(status_to_v1).collect();
            annotations.push((METRIC_STATUSES_ANNOTATION, Value::Array(v1).to_string()));
        }
        if let Some(conditions) = st
            .get("conditions")
            .and_then(Value::as_array)
            .filter(|c| !c.is_empty())
        {
            annotations.push((
                CONDITIONS_ANNOTATION,
                Value::Array(conditions.clone()).to_string(),
            ));
        }
        object(vec![
            ("observedGeneration", at(st, &["observedGeneration"])),
            ("lastScaleTime", at(st, &["lastScaleTime"])),
            (
                "currentReplicas",
                Some(at(st, &["currentReplicas"]).unwrap_or(json!(0))),
            ),
            (
                "desiredReplicas",
                Some(at(st, &["desiredReplicas"]).unwrap_or(json!(0))),
            ),
            ("currentCPUUtilizationPercentage", cpu_now),
        ])
    });
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!("autoscaling/v1"));
        map.insert("spec".into(), v1_spec);
        match v1_status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
    }
    if !annotations.is_empty()
        && let Some(a) = annotations_mut(obj)
    {
        for (k, v) in annotations {
            a.insert(k.to_string(), json!(v));
        }
    }
}

/// Converts an `autoscaling/v1` HorizontalPodAutoscaler to `autoscaling/v2` in place.
pub fn v1_to_v2(obj: &mut Value) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let status = obj.get("status").cloned();
    let mut taken = |key: &str| -> Option<Value> {
        let a = obj
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
            .and_then(Value::as_object_mut)?;
        let raw = a.remove(key)?;
        serde_json::from_str(raw.as_str()?).ok()
    };
    let other_metrics = taken(METRIC_SPECS_ANNOTATION);
    let behavior = taken(BEHAVIOR_ANNOTATION);
    let current_metrics = taken(METRIC_STATUSES_ANNOTATION);
    let conditions = taken(CONDITIONS_ANNOTATION);
    drop_empty_annotations(obj);

    let mut metrics: Vec<Value> = other_metrics
        .as_ref()
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(spec_from_v1).collect())
        .unwrap_or_default();
    if let Some(cpu) = at(&spec, &["targetCPUUtilizationPercentage"]) {
        metrics.push(cpu_metric(cpu));
    }
    if metrics.is_empty() {
        metrics.push(cpu_metric(json!(DEFAULT_CPU_UTILIZATION)));
    }
    let v2_spec = object(vec![
        ("scaleTargetRef", at(&spec, &["scaleTargetRef"])),
        ("minReplicas", at(&spec, &["minReplicas"])),
        (
            "maxReplicas",
            Some(at(&spec, &["maxReplicas"]).unwrap_or(json!(0))),
        ),
        ("metrics", Some(Value::Array(metrics))),
        ("behavior", behavior),
    ]);
    let v2_status = status.as_ref().map(|st| {
        let current = match current_metrics.as_ref().and_then(Value::as_array) {
            Some(ms) => Some(Value::Array(ms.iter().map(status_from_v1).collect())),
            None => at(st, &["currentCPUUtilizationPercentage"]).map(|u| {
                json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}])
            }),
        };
        object(vec![
            ("observedGeneration", at(st, &["observedGeneration"])),
            ("lastScaleTime", at(st, &["lastScaleTime"])),
            ("currentReplicas", at(st, &["currentReplicas"])),
            (
                "desiredReplicas",
                Some(at(st, &["desiredReplicas"]).unwrap_or(json!(0))),
            ),
            ("currentMetrics", current),
            ("conditions", conditions.clone()),
        ])
    });
    if let Some(map) = obj.as_object_mut() {
        map.insert("apiVersion".into(), json!("autoscaling/v2"));
        map.insert("spec".into(), v2_spec);
        match v2_status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
    }
}

fn cpu_metric(utilization: Value) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": utilization}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "64Mi"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]}}
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 250, "averageValue": "250m"}}},
                    {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "10Mi"}}}
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale", "message": "m", "lastTransitionTime": "2024-01-01T00:00:00Z"}]
            }
        })
    }

    #[test]
    fn v2_cpu_target_becomes_v1_percentage_and_the_rest_rides_in_annotations() {
        let mut o = v2();
        v2_to_v1(&mut o);
        assert_eq!(o["apiVersion"], "autoscaling/v1");
        assert_eq!(o["spec"]["targetCPUUtilizationPercentage"], 50);
        assert_eq!(o["spec"]["maxReplicas"], 5);
        assert!(o["spec"].get("metrics").is_none());
        assert_eq!(o["status"]["currentCPUUtilizationPercentage"], 250);
        assert_eq!(o["status"]["currentReplicas"], 2);
        let a = &o["metadata"]["annotations"];
        let specs: Value = serde_json::from_str(a[METRIC_SPECS_ANNOTATION].as_str().unwrap_or(""))
            .expect("metrics annotation is JSON");
        assert_eq!(
            specs,
            json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "64Mi"}}])
        );
        assert!(a[CONDITIONS_ANNOTATION].is_string());
        assert!(a[BEHAVIOR_ANNOTATION].is_string());
        assert!(a[METRIC_STATUSES_ANNOTATION].is_string());
    }

    #[test]
    fn v2_to_v1_and_back_is_lossless() {
        let mut o = v2();
        v2_to_v1(&mut o);
        v1_to_v2(&mut o);
        let want = v2();
        // The other metrics come first, then the CPU one, as upstream orders them.
        assert_eq!(o["spec"]["metrics"][0], want["spec"]["metrics"][1]);
        assert_eq!(o["spec"]["metrics"][1], want["spec"]["metrics"][0]);
        assert_eq!(o["spec"]["behavior"], want["spec"]["behavior"]);
        assert_eq!(o["status"], want["status"]);
        assert!(o["metadata"].get("annotations").is_none());
    }

    #[test]
    fn v1_without_a_target_gets_the_default_cpu_utilization() {
        let mut o = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "a"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
        v1_to_v2(&mut o);
        assert_eq!(
            o["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}])
        );
        assert!(o.get("status").is_none());
    }

    #[test]
    fn v1_cpu_status_without_annotation_becomes_a_current_metric() {
        let mut o = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "a"}, "spec": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 60},
            "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentCPUUtilizationPercentage": 30}});
        v1_to_v2(&mut o);
        assert_eq!(
            o["status"]["currentMetrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 30}}}])
        );
        assert_eq!(
            o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            60
        );
    }
}
