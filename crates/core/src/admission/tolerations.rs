//! Toleration merging without duplicates or redundant entries: upstream
//! `pkg/util/tolerations/merge.DoTolerationsMerge` and `IsSuperset`, used by the RuntimeClass
//! plugin to fold `scheduling.tolerations` into a pod.

use serde_json::Value;

/// A toleration's fields as upstream compares them (absent strings read as empty).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Toleration<'a> {
    key: &'a str,
    operator: &'a str,
    value: &'a str,
    effect: &'a str,
    seconds: Option<i64>,
}

impl<'a> Toleration<'a> {
    fn of(v: &'a Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        Toleration {
            key: s("key"),
            operator: s("operator"),
            value: s("value"),
            effect: s("effect"),
            seconds: v.get("tolerationSeconds").and_then(Value::as_i64),
        }
    }
}

/// Upstream `IsSuperset`: whether toleration `ss` tolerates every taint `t` tolerates.
pub fn is_superset(ss: &Value, t: &Value) -> bool {
    let (ss, t) = (Toleration::of(ss), Toleration::of(t));
    if ss == t {
        return true;
    }
    // An empty key with Exists matches all keys and values.
    if t.key != ss.key && (!ss.key.is_empty() || ss.operator != "Exists") {
        return false;
    }
    // An empty effect matches all effects.
    if t.effect != ss.effect && !ss.effect.is_empty() {
        return false;
    }
    if ss.effect == "NoExecute"
        && let Some(limit) = ss.seconds
        && t.seconds.is_none_or(|s| s > limit)
    {
        return false;
    }
    match ss.operator {
        "Equal" | "" => t.operator == "Equal" && t.value == ss.value,
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `DoTolerationsMerge(first, second)`: all tolerations of both lists, first then
/// second, dropping any toleration another one already covers (equal ones keep the first).
pub fn merge(first: &[Value], second: &[Value]) -> Vec<Value> {
    let all: Vec<&Value> = first.iter().chain(second).collect();
    let mut merged: Vec<Value> = Vec::new();
    'next: for (i, t) in all.iter().enumerate() {
        for m in &merged {
            if is_superset(m, t) {
                continue 'next;
            }
        }
        for t2 in &all[i + 1..] {
            if Toleration::of(t) != Toleration::of(t2) && is_superset(t2, t) {
                continue 'next;
            }
        }
        merged.push((*t).clone());
    }
    merged
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn toleration_merge_drops_duplicates_and_redundant_entries() {
        let os =
            json!({"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"});
        let os_any_effect = json!({"key": "os", "operator": "Equal", "value": "windows"});
        let os_exists = json!({"key": "os", "operator": "Exists"});
        let all = json!({"operator": "Exists"});
        let ne300 = json!({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
        let ne600 = json!({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600});
        let ne_forever = json!({"key": "k", "operator": "Exists", "effect": "NoExecute"});
        let other = json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
        let cases: Vec<(Vec<Value>, Vec<Value>, Vec<Value>)> = vec![
            (vec![], vec![os.clone()], vec![os.clone()]),
            (vec![os.clone()], vec![], vec![os.clone()]),
            (vec![os.clone()], vec![os.clone()], vec![os.clone()]),
            (
                vec![other.clone()],
                vec![os.clone()],
                vec![other.clone(), os.clone()],
            ),
            (
                vec![os.clone()],
                vec![os_any_effect.clone()],
                vec![os_any_effect.clone()],
            ),
            (
                vec![os_exists.clone()],
                vec![os.clone()],
                vec![os_exists.clone()],
            ),
            (
                vec![os.clone(), other.clone()],
                vec![all.clone()],
                vec![all.clone()],
            ),
            (
                vec![ne300.clone()],
                vec![ne600.clone()],
                vec![ne600.clone()],
            ),
            (
                vec![ne600.clone()],
                vec![ne_forever.clone()],
                vec![ne_forever.clone()],
            ),
            (
                vec![ne_forever.clone()],
                vec![ne300.clone()],
                vec![ne_forever.clone()],
            ),
        ];
        for (first, second, want) in cases {
            assert_eq!(merge(&first, &second), want, "merge({first:?}, {second:?})");
        }
    }

    #[test]
    fn toleration_empty_operator_means_equal() {
        let a = json!({"key": "os", "value": "windows", "effect": "NoSchedule"});
        let b =
            json!({"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"});
        assert!(is_superset(&a, &b));
        assert_eq!(
            merge(std::slice::from_ref(&b), std::slice::from_ref(&a)).len(),
            1
        );
        assert!(!is_superset(&json!({"key": "os", "operator": "Bogus"}), &b));
        let _ = merge(&[json!(null), json!(1)], &[json!("x")]);
    }
}
