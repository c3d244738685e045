//! Node selector terms (`nodeAffinity` required terms, RuntimeClass scheduling): the one place
//! that decides whether a term selects a node, for the scheduler's NodeAffinity plugin and the
//! DaemonSet controller. Mirrors upstream `component-helpers/scheduling/corev1/nodeaffinity`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};

/// Whether `term` selects a node with `labels` and name `node_name`: every `matchExpressions`
/// requirement against the labels and every `matchFields` requirement against `metadata.name`
/// (the only field upstream supports). An empty term selects nothing.
pub fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

/// Whether one requirement holds for a label (or field) value, `None` when absent. `Gt`/`Lt`
/// compare integers and need exactly one value; an unknown operator matches nothing.
pub fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn requirements_follow_upstreams_operators() {
        let cases = [
            (
                req("os", "In", &["windows", "linux"]),
                Some("windows"),
                true,
            ),
            (req("os", "In", &["windows"]), None, false),
            (req("os", "NotIn", &["windows"]), Some("linux"), true),
            (req("os", "NotIn", &["windows"]), None, true),
            (req("os", "Exists", &[]), Some(""), true),
            (req("os", "DoesNotExist", &[]), None, true),
            (req("cpus", "Gt", &["4"]), Some("8"), true),
            (req("cpus", "Gt", &["4"]), Some("4"), false),
            (req("cpus", "Lt", &["4"]), Some("2"), true),
            (req("cpus", "Gt", &["4", "5"]), Some("8"), false),
            (req("cpus", "Gt", &["x"]), Some("8"), false),
            (req("cpus", "Lt", &["4"]), Some("many"), false),
            (req("os", "Equals", &["windows"]), Some("windows"), false),
        ];
        for (r, value, want) in cases {
            assert_eq!(requirement_matches(&r, value), want, "{r:?} on {value:?}");
        }
    }

    #[test]
    fn a_term_needs_all_its_requirements_and_an_empty_term_selects_nothing() {
        let labels = BTreeMap::from([("kubernetes.io/os".to_string(), "windows".to_string())]);
        let term = NodeSelectorTerm {
            match_expressions: Some(vec![req("kubernetes.io/os", "In", &["windows"])]),
            match_fields: Some(vec![req("metadata.name", "In", &["win-1"])]),
        };
        assert!(term_matches(&term, &labels, "win-1"));
        assert!(!term_matches(&term, &labels, "win-2"));
        let field_only = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("spec.unschedulable", "In", &["win-1"])]),
        };
        assert!(
            !term_matches(&field_only, &labels, "win-1"),
            "only metadata.name is a field"
        );
        assert!(!term_matches(
            &NodeSelectorTerm::default(),
            &labels,
            "win-1"
        ));
    }
}
