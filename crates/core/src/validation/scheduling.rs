//! scheduling.k8s.io/v1 validation and defaulting: PriorityClass.
//!
//! Mirrors upstream `pkg/apis/scheduling/validation/validation.go` (`ValidatePriorityClass`,
//! `ValidatePriorityClassUpdate`), `pkg/apis/scheduling/v1/helpers.go`
//! (`IsKnownSystemPriorityClass` and its messages), core's `ValidatePreemptionPolicy` and
//! `pkg/apis/scheduling/v1/defaults.go` (`SetDefaults_PriorityClass`). The "only one
//! globalDefault" rule is admission's business, not this module's.

use serde_json::{Value, json};

use super::json::{bool_at, i64_at, str_at};
use super::meta::immutable;
use crate::field::{FieldError, Path};

/// Upstream `scheduling.SystemPriorityClassPrefix`.
pub const SYSTEM_PRIORITY_CLASS_PREFIX: &str = "system-";
/// Upstream `scheduling.HighestUserDefinablePriority`.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;
/// Upstream `SystemCriticalPriority` (2 × the highest user-definable priority).
pub const SYSTEM_CRITICAL_PRIORITY: i64 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
/// The two classes upstream creates at start-up: name and value (neither is a global default).
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", SYSTEM_CRITICAL_PRIORITY + 1000),
    ("system-cluster-critical", SYSTEM_CRITICAL_PRIORITY),
];

const PREEMPTION_POLICIES: &[&str] = &["PreemptLowerPriority", "Never"];

/// Upstream `IsKnownSystemPriorityClass`: `Err` carries upstream's explanation.
fn known_system_class(name: &str, value: i64, global_default: bool) -> Result<(), String> {
    match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
        None => Err(format!("{name} is not a known system priority class")),
        Some((n, v)) if *v != value => Err(format!("value of {n} PriorityClass must be {v}")),
        Some((n, _)) if global_default => {
            Err(format!("globalDefault of {n} PriorityClass must be false"))
        }
        Some(_) => Ok(()),
    }
}

/// Upstream `ValidatePriorityClass` (after metadata): `system-` names are reserved for the two
/// system classes (with their exact values), other classes may not exceed one billion, and
/// the preemption policy is known.
pub fn validate_priority_class(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = obj
        .get("metadata")
        .and_then(|m| str_at(m, "name"))
        .unwrap_or_default();
    let value = i64_at(obj, "value").unwrap_or(0);
    if name.starts_with(SYSTEM_PRIORITY_CLASS_PREFIX) {
        if let Err(why) =
            known_system_class(name, value, bool_at(obj, "globalDefault").unwrap_or(false))
        {
            errs.push(FieldError::forbidden(
                "metadata.name",
                format!(
                    "priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are reserved for system use only. error: {why}"
                ),
            ));
        }
    } else if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        errs.push(FieldError::forbidden(
            "value",
            format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
            ),
        ));
    }
    match obj.get("preemptionPolicy") {
        None | Some(Value::Null) => {}
        Some(p) => match p.as_str().unwrap_or_default() {
            "PreemptLowerPriority" | "Never" => {}
            "" => errs.push(FieldError::required("preemptionPolicy", "")),
            other => errs.push(FieldError::not_supported(
                "preemptionPolicy",
                &json!(other),
                PREEMPTION_POLICIES,
            )),
        },
    }
    errs
}

/// Upstream `ValidatePriorityClassUpdate`: value and preemptionPolicy never change.
pub fn validate_priority_class_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if i64_at(new, "value").unwrap_or(0) != i64_at(old, "value").unwrap_or(0) {
        errs.push(FieldError::forbidden(
            "value",
            "may not be changed in an update.",
        ));
    }
    errs.extend(immutable(
        new.get("preemptionPolicy"),
        old.get("preemptionPolicy"),
        &Path::new("preemptionPolicy"),
    ));
    errs
}

/// Upstream `SetDefaults_PriorityClass`: preemptionPolicy defaults to `PreemptLowerPriority`.
pub fn default_priority_class(obj: &mut Value) {
    super::json::set_default(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pc(name: &str, value: i64) -> Value {
        json!({"metadata": {"name": name}, "value": value})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn system_classes_with_their_values_are_valid() {
        assert!(validate_priority_class(&pc("system-node-critical", 2_000_001_000)).is_empty());
        assert!(validate_priority_class(&pc("system-cluster-critical", 2_000_000_000)).is_empty());
    }

    #[test]
    fn system_prefix_is_reserved_with_upstream_messages() {
        assert_eq!(
            messages(&validate_priority_class(&pc("system-mine", 10))),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"
            ]
        );
        assert_eq!(
            messages(&validate_priority_class(&pc("system-node-critical", 5))),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000"
            ]
        );
        let mut global = pc("system-cluster-critical", 2_000_000_000);
        global["globalDefault"] = json!(true);
        assert_eq!(
            messages(&validate_priority_class(&global)),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: globalDefault of system-cluster-critical PriorityClass must be false"
            ]
        );
    }

    #[test]
    fn user_classes_are_capped_at_one_billion() {
        assert!(validate_priority_class(&pc("high", 1_000_000_000)).is_empty());
        assert_eq!(
            messages(&validate_priority_class(&pc("higher", 1_000_000_001))),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
    }

    #[test]
    fn preemption_policy_defaults_and_is_checked() {
        let mut obj = pc("high", 1);
        default_priority_class(&mut obj);
        assert_eq!(obj["preemptionPolicy"], "PreemptLowerPriority");
        obj["preemptionPolicy"] = json!("Sometimes");
        assert_eq!(
            messages(&validate_priority_class(&obj)),
            [
                "preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""
            ]
        );
    }

    #[test]
    fn value_and_preemption_policy_are_immutable() {
        let mut old = pc("high", 1);
        default_priority_class(&mut old);
        let mut new = pc("high", 2);
        new["preemptionPolicy"] = json!("Never");
        assert_eq!(
            messages(&validate_priority_class_update(&new, &old)),
            [
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ]
        );
    }
}
