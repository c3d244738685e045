//! Columns and cells of PodDisruptionBudgets, PriorityClasses and APIServices: upstream's
//! `podDisruptionBudgetColumnDefinitions` / `printPodDisruptionBudget` and
//! `priorityClassColumnDefinitions` / `printPriorityClass`
//! (pkg/printers/internalversion/printers.go), and kube-aggregator's
//! `apiservice/etcd.REST.ConvertToTable` for APIServices.

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, get, int_at, name, opt_bool_at, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

const VALUE_DESC: &str = "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.";
const GLOBAL_DEFAULT_DESC: &str = "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.";
const PREEMPTION_POLICY_DESC: &str = "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.";

/// NAME, MIN AVAILABLE, MAX UNAVAILABLE, ALLOWED DISRUPTIONS, AGE.
pub fn pdb_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Min Available",
            "string",
            "The minimum number of pods that must be available.",
        ),
        col(
            "Max Unavailable",
            "string",
            "The maximum number of pods that may be unavailable.",
        ),
        col(
            "Allowed Disruptions",
            "integer",
            "Calculated number of pods that may be disrupted at this time.",
        ),
        AGE,
    ]
}

/// NAME, VALUE, GLOBAL-DEFAULT, AGE, PREEMPTIONPOLICY (shown by default: upstream gives the
/// column no wide priority).
pub fn priority_class_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col("Value", "integer", VALUE_DESC),
        col("Global-Default", "boolean", GLOBAL_DEFAULT_DESC),
        AGE,
        col("PreemptionPolicy", "string", PREEMPTION_POLICY_DESC),
    ]
}

/// NAME, SERVICE, AVAILABLE, AGE.
pub fn api_service_columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        col(
            "Service",
            "string",
            "The reference to the service that hosts the API endpoint.",
        ),
        col("Available", "string", "Whether this service is available."),
        AGE,
    ]
}

/// `IntOrString.String()`, or `N/A` when unset.
fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(x)) => x.clone(),
        _ => "N/A".to_string(),
    }
}

/// `printPodDisruptionBudget`.
pub fn pdb(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(int_or_string(get(obj, &["spec", "minAvailable"]))),
        s(int_or_string(get(obj, &["spec", "maxUnavailable"]))),
        Value::from(int_at(obj, &["status", "disruptionsAllowed"])),
        created(obj, now),
    ]
}

/// `printPriorityClass` (wide, so the preemption policy cell is always there).
pub fn priority_class(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        Value::from(int_at(obj, &["value"])),
        Value::Bool(opt_bool_at(obj, &["globalDefault"]).unwrap_or(false)),
        created(obj, now),
        s(str_at(obj, &["preemptionPolicy"])),
    ]
}

/// kube-aggregator's APIService row: `Local` or `namespace/name`; the `Available` condition's
/// status, with its reason when not `True`; `Unknown` without the condition.
pub fn api_service(obj: &Value, now: i64) -> Vec<Value> {
    let service = match get(obj, &["spec", "service"]).filter(|v| v.is_object()) {
        None => "Local".to_string(),
        Some(svc) => format!("{}/{}", str_at(svc, &["namespace"]), str_at(svc, &["name"])),
    };
    let available = arr_at(obj, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == "Available")
        .map_or_else(
            || "Unknown".to_string(),
            |c| {
                let status = str_at(c, &["status"]);
                let reason = str_at(c, &["reason"]);
                if status == "True" || reason.is_empty() {
                    status.to_string()
                } else {
                    format!("{status} ({reason})")
                }
            },
        );
    vec![s(name(obj)), s(service), s(available), created(obj, now)]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::tests::NOW;
    use crate::table::tests::row;

    fn meta(name: &str) -> Value {
        json!({"name": name, "creationTimestamp": crate::time::format_rfc3339(NOW - 30)})
    }

    #[test]
    fn pdb_row_shows_bounds_or_na_and_allowed_disruptions() {
        let obj = json!({"metadata": meta("db"), "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
        assert_eq!(
            row("policy", "poddisruptionbudgets", &obj),
            ["db", "50%", "N/A", "1", "30s"]
        );
        let max = json!({"metadata": meta("db"), "spec": {"maxUnavailable": 1}});
        assert_eq!(
            row("policy", "poddisruptionbudgets", &max),
            ["db", "N/A", "1", "0", "30s"]
        );
    }

    #[test]
    fn priority_class_row_includes_preemption_policy() {
        let obj = json!({"metadata": meta("system-node-critical"), "value": 2000001000, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            row("scheduling.k8s.io", "priorityclasses", &obj),
            [
                "system-node-critical",
                "2000001000",
                "false",
                "30s",
                "PreemptLowerPriority"
            ]
        );
        let cols = priority_class_columns();
        assert!(cols.iter().all(|c| c.priority == 0));
        assert_eq!(cols[2].type_, "boolean");
    }

    #[test]
    fn api_service_row_shows_service_and_availability() {
        let local = json!({"metadata": meta("v1.apps"), "spec": {}, "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &local),
            ["v1.apps", "Local", "True", "30s"]
        );
        let remote = json!({"metadata": meta("v1beta1.metrics.k8s.io"), "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &remote),
            [
                "v1beta1.metrics.k8s.io",
                "kube-system/metrics-server",
                "False (MissingEndpoints)",
                "30s"
            ]
        );
        let unknown = json!({"metadata": meta("v1.x"), "spec": {}});
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &unknown)[2],
            "Unknown"
        );
    }
}
