//! ClusterRole aggregation: the rules a ClusterRole with an `aggregationRule` is given, as
//! upstream's clusterrole-aggregation controller computes them (`syncClusterRole` and
//! `ruleExists` in pkg/controller/clusterroleaggregation/clusterroleaggregation_controller.go).

use k8s_openapi::api::rbac::v1::{AggregationRule, ClusterRole, PolicyRule};
use serde_json::{Map, Value};

use crate::selector::LabelSelector;

/// The rules of the ClusterRole named `name` whose aggregation rule is `aggregation_rule`,
/// gathered from `candidates` (every ClusterRole, in any order, the role itself included).
///
/// As upstream's `syncClusterRole`: for each selector in order, the candidates whose labels it
/// selects are taken sorted by name, skipping the role itself (so its own previous result never
/// feeds back), and each of their rules is appended unless an equal rule is already there
/// (`equality.Semantic.DeepEqual`: an absent list equals an empty one). A role matched by two
/// selectors contributes once. A selector that is not a valid `metav1.LabelSelector` selects
/// nothing here (upstream's controller stops with an error and leaves the role as it was;
/// validation refuses such selectors on write).
pub fn aggregate_rules(
    name: &str,
    aggregation_rule: &AggregationRule,
    candidates: &[ClusterRole],
) -> Vec<PolicyRule> {
    let mut sorted: Vec<&ClusterRole> = candidates.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in aggregation_rule
        .cluster_role_selectors
        .as_deref()
        .unwrap_or_default()
    {
        let Some(selector) = serde_json::to_value(selector)
            .ok()
            .and_then(|v| LabelSelector::from_json(&v).ok())
        else {
            continue;
        };
        for role in &sorted {
            if role.metadata.name.as_deref() == Some(name) || !selector.matches(&labels(role)) {
                continue;
            }
            for rule in role.rules.as_deref().unwrap_or_default() {
                if !rules.iter().any(|r| same_rule(r, rule)) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    rules
}

fn labels(role: &ClusterRole) -> Map<String, Value> {
    role.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// `equality.Semantic.DeepEqual` on two rules: an absent list equals an empty one.
fn same_rule(a: &PolicyRule, b: &PolicyRule) -> bool {
    fn list(v: &Option<Vec<String>>) -> &[String] {
        v.as_deref().unwrap_or_default()
    }
    a.verbs == b.verbs
        && list(&a.api_groups) == list(&b.api_groups)
        && list(&a.resources) == list(&b.resources)
        && list(&a.resource_names) == list(&b.resource_names)
        && list(&a.non_resource_urls) == list(&b.non_resource_urls)
}
