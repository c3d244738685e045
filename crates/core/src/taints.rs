//! Taints and tolerations: the one place that decides whether a toleration tolerates a taint,
//! for the scheduler's TaintToleration and NodeUnschedulable plugins, the DaemonSet controller
//! and taint-based eviction. Mirrors upstream `k8s.io/api/core/v1` `Toleration.ToleratesTaint`
//! and `component-helpers`' `TolerationsTolerateTaint`.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether `toleration` tolerates `taint`: an empty effect matches every effect, an empty key
/// matches every key, `Exists` ignores the value, `Equal` (also the empty operator, the default)
/// compares it, and any other operator tolerates nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn any_tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(operator),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.into(),
            time_added: None,
        }
    }

    #[test]
    fn tolerations_follow_upstreams_matching_rules() {
        // (toleration key, operator, value, effect), (taint key, value, effect), tolerated —
        // the cases of upstream's TestTolerationToleratesTaint, plus the operators it rejects.
        let cases = [
            (("", "Exists", "", ""), ("foo", "bar", "NoSchedule"), true),
            (
                ("foo", "Exists", "", ""),
                ("foo", "bar", "NoSchedule"),
                true,
            ),
            (
                ("foo", "Exists", "", "NoSchedule"),
                ("foo", "bar", "NoExecute"),
                false,
            ),
            (
                ("foo", "Equal", "bar", "NoSchedule"),
                ("foo", "bar", "NoSchedule"),
                true,
            ),
            (
                ("foo", "Equal", "bar", ""),
                ("foo", "bar", "PreferNoSchedule"),
                true,
            ),
            (
                ("foo", "Equal", "baz", "NoSchedule"),
                ("foo", "bar", "NoSchedule"),
                false,
            ),
            (("foo", "", "bar", ""), ("foo", "bar", "NoSchedule"), true),
            (
                ("other", "Exists", "", ""),
                ("foo", "bar", "NoSchedule"),
                false,
            ),
            // An empty key with Equal matches any key whose value matches.
            (("", "Equal", "bar", ""), ("foo", "bar", "NoSchedule"), true),
            (("", "Equal", "", ""), ("foo", "", "NoSchedule"), true),
            (
                ("foo", "Gt", "bar", ""),
                ("foo", "bar", "NoSchedule"),
                false,
            ),
        ];
        for ((k, op, v, e), (tk, tv, te), want) in cases {
            assert_eq!(
                tolerates(&toleration(k, op, v, e), &taint(tk, tv, te)),
                want,
                "toleration {k}/{op}/{v}/{e} for taint {tk}={tv}:{te}"
            );
        }
    }

    #[test]
    fn any_of_several_tolerations_is_enough() {
        let ts = [
            toleration("a", "Exists", "", ""),
            toleration("os", "Equal", "windows", "NoSchedule"),
        ];
        assert!(any_tolerates(&ts, &taint("os", "windows", "NoSchedule")));
        assert!(!any_tolerates(&ts, &taint("os", "linux", "NoSchedule")));
        assert!(!any_tolerates(&[], &taint("os", "windows", "NoSchedule")));
    }
}
