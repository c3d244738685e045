//! Columns and cells of HorizontalPodAutoscalers: upstream's
//! `horizontalPodAutoscalerColumnDefinitions`, `printHorizontalPodAutoscaler` and
//! `formatHPAMetrics` (pkg/printers/internalversion/printers.go), which print the v2 form:
//! NAME, REFERENCE (`Kind/name`), TARGETS (`cpu: 250%/50%`, `<unknown>/50%` before the first
//! measurement, at most two metrics then `+ N more...`), MINPODS, MAXPODS, REPLICAS, AGE.

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, get, int_at, name, opt_int_at, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

const REFERENCE_DESC: &str = "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.";
const TARGETS_DESC: &str = "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).  The desired replica count is calculated multiplying the ratio between the target value and the current value by the current number of pods.  Ergo, metrics used must decrease as the pod count is increased, and vice-versa.  See the individual metric source types for more information about how each type of metric must respond. If not set, the default metric will be set to 80% average CPU utilization.";
const MINPODS_DESC: &str = "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be 0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object or External metric is configured.  Scaling is active as long as at least one metric value is available.";
const MAXPODS_DESC: &str = "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas.";
const REPLICAS_DESC: &str = "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.";

const UNKNOWN: &str = "<unknown>";

/// NAME, REFERENCE, TARGETS, MINPODS, MAXPODS, REPLICAS, AGE.
pub fn hpa_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("Reference", "string", REFERENCE_DESC),
        col("Targets", "string", TARGETS_DESC),
        col("MinPods", "string", MINPODS_DESC),
        col("MaxPods", "integer", MAXPODS_DESC),
        col("Replicas", "integer", REPLICAS_DESC),
        AGE,
    ]
}

/// A quantity as printed (`Quantity.String()`); stored quantities are kept as written.
fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(q)) => q.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

/// The status entry at `i` when it carries the `source` block, as upstream pairs specs and
/// statuses by position.
fn status_at<'a>(statuses: &'a [Value], i: usize, source: &str) -> Option<&'a Value> {
    statuses
        .get(i)
        .and_then(|st| st.get(source))
        .filter(|v| !v.is_null())
}

/// `cpu: 250%/50%` or `memory: 10Mi/64Mi` for a Resource or ContainerResource metric.
fn resource_target(spec: &Value, current: Option<&Value>, source: &str) -> String {
    let res = get(spec, &[source]).unwrap_or(&Value::Null);
    let name = str_at(res, &["name"]);
    if let Some(avg) = get(res, &["target", "averageValue"]).filter(|v| !v.is_null()) {
        let now = current.map_or_else(
            || UNKNOWN.to_string(),
            |c| quantity(get(c, &["current", "averageValue"])),
        );
        return format!("{name}: {now}/{}", quantity(Some(avg)));
    }
    let now = current
        .and_then(|c| opt_int_at(c, &["current", "averageUtilization"]))
        .map_or_else(|| UNKNOWN.to_string(), |u| format!("{u}%"));
    let target = opt_int_at(res, &["target", "averageUtilization"])
        .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
    format!("{name}: {now}/{target}")
}

/// `value/target` or `value/target (avg)` for an Object or External metric.
fn value_target(spec: &Value, current: Option<&Value>, source: &str) -> String {
    let target = get(spec, &[source, "target"]).unwrap_or(&Value::Null);
    if let Some(avg) = get(target, &["averageValue"]).filter(|v| !v.is_null()) {
        let now = current
            .and_then(|c| get(c, &["current", "averageValue"]))
            .filter(|v| !v.is_null())
            .map_or_else(|| UNKNOWN.to_string(), |v| quantity(Some(v)));
        return format!("{now}/{} (avg)", quantity(Some(avg)));
    }
    let now = current.map_or_else(
        || UNKNOWN.to_string(),
        |c| quantity(get(c, &["current", "value"])),
    );
    format!("{now}/{}", quantity(get(target, &["value"])))
}

/// Upstream `formatHPAMetrics`.
pub fn format_metrics(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    const MAXIMUM: usize = 2;
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| match str_at(spec, &["type"]) {
            "External" => value_target(spec, status_at(statuses, i, "external"), "external"),
            "Object" => value_target(spec, status_at(statuses, i, "object"), "object"),
            "Pods" => {
                let now = status_at(statuses, i, "pods").map_or_else(
                    || UNKNOWN.to_string(),
                    |c| quantity(get(c, &["current", "averageValue"])),
                );
                format!(
                    "{now}/{}",
                    quantity(get(spec, &["pods", "target", "averageValue"]))
                )
            }
            "Resource" => resource_target(spec, status_at(statuses, i, "resource"), "resource"),
            "ContainerResource" => resource_target(
                spec,
                status_at(statuses, i, "containerResource"),
                "containerResource",
            ),
            _ => "<unknown type>".to_string(),
        })
        .collect();
    if list.len() > MAXIMUM {
        format!(
            "{} + {} more...",
            list[..MAXIMUM].join(", "),
            list.len() - MAXIMUM
        )
    } else {
        list.join(", ")
    }
}

/// `printHorizontalPodAutoscaler`, over the v2 form (a v1 object is converted first).
pub fn hpa(obj: &Value, now: i64) -> Vec<Value> {
    let converted;
    let obj = if str_at(obj, &["apiVersion"]) == "autoscaling/v1" {
        let mut v2 = obj.clone();
        crate::conversion::convert_object(&mut v2, "autoscaling/v2");
        converted = v2;
        &converted
    } else {
        obj
    };
    let reference = format!(
        "{}/{}",
        str_at(obj, &["spec", "scaleTargetRef", "kind"]),
        str_at(obj, &["spec", "scaleTargetRef", "name"])
    );
    let targets = format_metrics(
        arr_at(obj, &["spec", "metrics"]),
        arr_at(obj, &["status", "currentMetrics"]),
    );
    let min_pods = opt_int_at(obj, &["spec", "minReplicas"])
        .map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        s(name(obj)),
        s(reference),
        s(targets),
        s(min_pods),
        Value::from(int_at(obj, &["spec", "maxReplicas"])),
        Value::from(int_at(obj, &["status", "currentReplicas"])),
        created(obj, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cpu(target: i64) -> Value {
        json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}})
    }

    #[test]
    fn targets_show_unknown_before_the_first_measurement() {
        assert_eq!(format_metrics(&[cpu(50)], &[]), "cpu: <unknown>/50%");
        assert_eq!(format_metrics(&[], &[]), "<none>");
    }

    #[test]
    fn targets_pair_specs_and_statuses_by_position() {
        let mem = json!({"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "64Mi"}}});
        let statuses = [
            json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 250, "averageValue": "250m"}}}),
            json!({"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "10Mi"}}}),
        ];
        assert_eq!(
            format_metrics(&[cpu(50), mem.clone()], &statuses),
            "cpu: 250%/50%, memory: 10Mi/64Mi"
        );
        let pods = json!({"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}});
        assert_eq!(
            format_metrics(&[cpu(50), mem, pods], &statuses),
            "cpu: 250%/50%, memory: 10Mi/64Mi + 1 more..."
        );
    }

    #[test]
    fn row_has_upstream_cells_for_v2_and_v1_objects() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 3, "metrics": [cpu(50)]},
            "status": {"currentReplicas": 2, "desiredReplicas": 2}});
        let now = super::super::age::parse_rfc3339("2024-01-01T00:05:00Z").unwrap_or(0);
        let want = vec![
            json!("web"),
            json!("Deployment/web"),
            json!("cpu: <unknown>/50%"),
            json!("1"),
            json!(3),
            json!(2),
            json!("5m"),
        ];
        assert_eq!(hpa(&v2, now), want);
        let mut v1 = v2.clone();
        crate::conversion::convert_object(&mut v1, "autoscaling/v1");
        assert_eq!(hpa(&v1, now), want);
        assert_eq!(hpa_columns().len(), 7);
    }
}
