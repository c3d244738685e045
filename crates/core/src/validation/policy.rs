//! policy/v1 validation: PodDisruptionBudget spec and status, and metav1 Conditions.
//!
//! Mirrors upstream `pkg/apis/policy/validation/validation.go`
//! (`ValidatePodDisruptionBudgetSpec`, `ValidatePodDisruptionBudgetStatusUpdate` for v1) over
//! apps' `ValidatePositiveIntOrPercent` / `IsNotMoreThan100Percent`, and apimachinery's
//! `metav1validation.ValidateConditions`.
//!
//! Upstream prints the spec in the "both set" error with Go's `%#v` (pointer addresses
//! included); this port prints the spec's JSON instead.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::json::{arr_at, i64_at, str_at};
use super::names;
use super::pod::nonnegative;
use crate::field::{ErrorKind, FieldError, Path};

const EVICTION_POLICIES: &[&str] = &["AlwaysAllow", "IfHealthyBudget"];
const CONDITION_STATUSES: &[&str] = &["False", "True", "Unknown"];
const CONDITION_REASON_FMT: &str = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?";
const CONDITION_REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'";
const MAX_REASON_LEN: usize = 1024;
const MAX_MESSAGE_LEN: usize = 32 * 1024;

/// Upstream `ValidatePositiveIntOrPercent` followed by `IsNotMoreThan100Percent`.
fn int_or_percent(v: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    match v {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(-1);
            if n < 0 {
                errs.push(FieldError::invalid(
                    path,
                    &json!(n),
                    "must be greater than or equal to 0",
                ));
            }
        }
        Value::String(s) => {
            let msgs = names::percent(s);
            if msgs.is_empty() {
                let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(i64::MAX);
                if pct > 100 {
                    errs.push(FieldError::invalid(
                        path,
                        &json!(s),
                        "must not be greater than 100%",
                    ));
                }
            } else {
                for m in msgs {
                    errs.push(FieldError::invalid(path, &json!(s), m));
                }
            }
        }
        _ => {}
    }
}

/// Upstream `ValidatePodDisruptionBudgetSpec`: at most one of minAvailable and maxUnavailable,
/// each a non-negative integer or a percentage up to 100%, a valid selector and a known
/// unhealthy-pod eviction policy.
pub fn validate_pdb(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &path,
            Some(spec.to_string()),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    if let Some(v) = min {
        int_or_percent(v, &path.child("minAvailable"), &mut errs);
    }
    if let Some(v) = max {
        int_or_percent(v, &path.child("maxUnavailable"), &mut errs);
    }
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
        errs.extend(validate_label_selector(sel, &path.child("selector")));
    }
    if let Some(p) = str_at(spec, "unhealthyPodEvictionPolicy")
        && !EVICTION_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            path.child("unhealthyPodEvictionPolicy"),
            &json!(p),
            EVICTION_POLICIES,
        ));
    }
    errs
}

/// Upstream `metav1validation.ValidateConditions`: unique qualified types, a known status,
/// a non-negative observed generation, a transition time, a well-formed reason and a bounded
/// message.
pub fn validate_conditions(conditions: &[Value], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let p = path.index(i);
        let ty = str_at(c, "type").unwrap_or_default();
        for msg in names::qualified_name(ty) {
            errs.push(FieldError::invalid(p.child("type"), &json!(ty), msg));
        }
        if !seen.insert(ty) {
            errs.push(FieldError::duplicate(p.child("type"), &json!(ty)));
        }
        let status = str_at(c, "status").unwrap_or_default();
        if !CONDITION_STATUSES.contains(&status) {
            errs.push(FieldError::not_supported(
                p.child("status"),
                &json!(status),
                CONDITION_STATUSES,
            ));
        }
        if let Some(g) = i64_at(c, "observedGeneration")
            && g < 0
        {
            errs.push(FieldError::invalid(
                p.child("observedGeneration"),
                &json!(g),
                "must be greater than or equal to zero",
            ));
        }
        if str_at(c, "lastTransitionTime")
            .unwrap_or_default()
            .is_empty()
        {
            errs.push(FieldError::required(
                p.child("lastTransitionTime"),
                "must be set",
            ));
        }
        let reason = str_at(c, "reason").unwrap_or_default();
        if reason.is_empty() {
            errs.push(FieldError::required(p.child("reason"), "must be set"));
        } else {
            if !reason_ok(reason) {
                errs.push(FieldError::invalid(
                    p.child("reason"),
                    &json!(reason),
                    names::regex_error(
                        CONDITION_REASON_MSG,
                        CONDITION_REASON_FMT,
                        &[
                            "my_name",
                            "MY_NAME",
                            "MyName",
                            "ReasonA,ReasonB",
                            "ReasonA:ReasonB",
                        ],
                    ),
                ));
            }
            if reason.len() > MAX_REASON_LEN {
                errs.push(super::meta::too_long(&p.child("reason"), MAX_REASON_LEN));
            }
        }
        if str_at(c, "message").unwrap_or_default().len() > MAX_MESSAGE_LEN {
            errs.push(super::meta::too_long(&p.child("message"), MAX_MESSAGE_LEN));
        }
    }
    errs
}

fn reason_ok(r: &str) -> bool {
    let b = r.as_bytes();
    let Some((&first, rest)) = b.split_first() else {
        return false;
    };
    first.is_ascii_alphabetic()
        && rest
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        && rest
            .last()
            .is_none_or(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Upstream `ValidatePodDisruptionBudgetStatusUpdate` for policy/v1: valid conditions and
/// non-negative counters.
pub fn validate_pdb_status(new: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    let sp = Path::new("status");
    let mut errs = validate_conditions(arr_at(status, "conditions"), &sp.child("conditions"));
    for key in [
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ] {
        nonnegative(status, key, &sp, &mut errs);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "db", "namespace": "default"}, "spec": spec})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn pdb_with_min_available_and_selector_is_valid() {
        let spec = json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "db"}}, "unhealthyPodEvictionPolicy": "AlwaysAllow"});
        assert!(validate_pdb(&pdb(spec)).is_empty());
    }

    #[test]
    fn pdb_rejects_both_bounds_negative_ints_and_large_percentages() {
        let errs = validate_pdb(&pdb(json!({"minAvailable": -1, "maxUnavailable": "150%"})));
        let got = messages(&errs);
        assert_eq!(got.len(), 3);
        assert!(got[0].starts_with("spec: Invalid value: "));
        assert!(got[0].ends_with(": minAvailable and maxUnavailable cannot be both set"));
        assert_eq!(
            got[1],
            "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            got[2],
            "spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%"
        );
    }

    #[test]
    fn pdb_rejects_unknown_eviction_policy_and_bad_percent() {
        let errs = validate_pdb(&pdb(
            json!({"maxUnavailable": "x%", "unhealthyPodEvictionPolicy": "Sometimes"}),
        ));
        let got = messages(&errs);
        assert!(got[0].starts_with("spec.maxUnavailable: Invalid value: \"x%\": a valid percent string must be a numeric string followed by an ending '%'"));
        assert_eq!(
            got[1],
            "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Sometimes\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
        );
    }

    #[test]
    fn pdb_status_counters_must_be_non_negative_and_conditions_valid() {
        let obj = json!({"status": {"disruptionsAllowed": -1, "currentHealthy": 0, "conditions": [
            {"type": "DisruptionAllowed", "status": "Maybe", "reason": "1bad"},
        ]}});
        assert_eq!(
            messages(&validate_pdb_status(&obj))[..3],
            [
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"",
                "status.conditions[0].lastTransitionTime: Required value: must be set",
                "status.conditions[0].reason: Invalid value: \"1bad\": a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')",
            ]
        );
        assert_eq!(
            messages(&validate_pdb_status(&obj))[3],
            "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0"
        );
    }
}
