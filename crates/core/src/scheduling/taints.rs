//! Taints and tolerations: the one place that decides whether a toleration tolerates a taint and
//! which of a node's taints a pod does not tolerate. Follows upstream `k8s.io/api/core/v1`
//! `Toleration.ToleratesTaint` and `k8s.io/component-helpers/scheduling/corev1`
//! `TolerationsTolerateTaint` / `FindMatchingUntoleratedTaint` (also reached as
//! `v1helper.TolerationsTolerateTaint`), used by the scheduler's TaintToleration and
//! NodeUnschedulable plugins, the DaemonSet controller and taint-based eviction.
//!
//! The `Gt`/`Lt` toleration operators of upstream's alpha `TaintTolerationComparisonOperators`
//! feature gate are not enabled (the gate is off by default): they tolerate nothing, as any
//! operator other than `Exists` and `Equal` does.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// The taint effect that keeps new pods off a node.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// The taint effect that makes the scheduler avoid a node when it can.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// The taint effect that keeps new pods off a node and evicts running ones.
pub const NO_EXECUTE: &str = "NoExecute";

/// Whether `toleration` tolerates `taint` (upstream `Toleration.ToleratesTaint`): an empty effect
/// matches every effect, an empty key matches every key, `Exists` ignores the value, `Equal` (also
/// the empty operator, the default) compares it, and any other operator tolerates nothing.
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

/// Whether any of `tolerations` tolerates `taint` (upstream `TolerationsTolerateTaint`).
pub fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first of `taints` that `filter` selects and no toleration tolerates, with its index
/// (upstream `FindMatchingUntoleratedTaint`); `None` when the pod tolerates every selected taint.
pub fn find_matching_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<(usize, &'a Taint)> {
    taints
        .iter()
        .enumerate()
        .find(|(_, taint)| filter(taint) && !tolerations_tolerate_taint(tolerations, taint))
}

/// Upstream `DoNotScheduleTaintsFilterFunc`: the taints that keep a pod off a node, those with
/// the `NoSchedule` or `NoExecute` effect.
pub fn does_not_schedule(taint: &Taint) -> bool {
    taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE
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
    fn one_toleration_follows_upstreams_matching_rules() {
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
            // Gt/Lt need upstream's alpha comparison-operators gate, which is off.
            (("foo", "Gt", "1", ""), ("foo", "2", "NoSchedule"), false),
            (("foo", "Lt", "3", ""), ("foo", "2", "NoSchedule"), false),
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
        assert!(tolerations_tolerate_taint(
            &ts,
            &taint("os", "windows", "NoSchedule")
        ));
        assert!(!tolerations_tolerate_taint(
            &ts,
            &taint("os", "linux", "NoSchedule")
        ));
        assert!(!tolerations_tolerate_taint(
            &[],
            &taint("os", "windows", "NoSchedule")
        ));
    }

    #[test]
    fn untolerated_taints_are_found_among_those_the_filter_selects() {
        let all = |_: &Taint| true;
        let none = |_: &Taint| false;
        let no_execute = |t: &Taint| t.effect == NO_EXECUTE;
        let foo_no_schedule = || vec![toleration("foo", "Exists", "", "NoSchedule")];
        // (description, tolerations, taints, filter, tolerated) — upstream's
        // TestFindMatchingUntoleratedTaint with its comparison-operator gate off.
        type Filter<'f> = &'f dyn Fn(&Taint) -> bool;
        type Case<'f> = (&'f str, Vec<Toleration>, Vec<Taint>, Filter<'f>, bool);
        let cases: Vec<Case<'_>> = vec![
            (
                "empty tolerations tolerate empty taints",
                vec![],
                vec![],
                &all,
                true,
            ),
            (
                "non-empty tolerations tolerate empty taints",
                foo_no_schedule(),
                vec![],
                &all,
                true,
            ),
            (
                "tolerations match all taints",
                foo_no_schedule(),
                vec![taint("foo", "", "NoSchedule")],
                &all,
                true,
            ),
            (
                "tolerations don't match, but no taint passes the filter",
                foo_no_schedule(),
                vec![taint("bar", "", "NoSchedule")],
                &none,
                true,
            ),
            (
                "every taint passes, tolerations don't match",
                foo_no_schedule(),
                vec![taint("bar", "", "NoSchedule")],
                &all,
                false,
            ),
            (
                "tolerations match the taints the filter selects",
                vec![toleration("foo", "Exists", "", "NoExecute")],
                vec![
                    taint("foo", "", "NoExecute"),
                    taint("bar", "", "NoSchedule"),
                ],
                &no_execute,
                true,
            ),
            (
                "a Gt toleration tolerates nothing while the gate is off",
                vec![toleration(
                    "node.kubernetes.io/sla",
                    "Gt",
                    "750",
                    "NoSchedule",
                )],
                vec![taint("node.kubernetes.io/sla", "950", "NoSchedule")],
                &all,
                false,
            ),
            (
                "a later Exists toleration still tolerates",
                vec![
                    toleration("node.kubernetes.io/sla", "Gt", "950", "NoSchedule"),
                    toleration("node.kubernetes.io/sla", "Exists", "", "NoSchedule"),
                ],
                vec![taint("node.kubernetes.io/sla", "high", "NoSchedule")],
                &all,
                true,
            ),
        ];
        for (description, tolerations, taints, filter, tolerated) in cases {
            let found = find_matching_untolerated_taint(&taints, &tolerations, filter);
            assert_eq!(found.is_none(), tolerated, "{description}");
        }
    }

    #[test]
    fn the_first_untolerated_taint_is_reported_with_its_index() {
        let taints = [
            taint("soft", "", "PreferNoSchedule"),
            taint("a", "", "NoSchedule"),
            taint("b", "", "NoExecute"),
        ];
        let tolerations = [toleration("a", "Exists", "", "")];
        let found = find_matching_untolerated_taint(&taints, &tolerations, does_not_schedule);
        assert_eq!(found.map(|(i, t)| (i, t.key.as_str())), Some((2, "b")));
    }
}
