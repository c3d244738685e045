//! Node selectors and node affinity: the one place that decides whether a node satisfies a pod's
//! `nodeSelector` and required node affinity, how much its preferred terms add to a node's score,
//! and whether a node selector (a PersistentVolume's node affinity, RuntimeClass scheduling)
//! selects a node. Follows upstream `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`
//! (`GetRequiredNodeAffinity(pod).Match(node)`, `NewNodeSelector`, `NewPreferredSchedulingTerms`)
//! and `corev1.MatchNodeSelectorTerms`.
//!
//! As upstream, a selector is parsed once and then matched against many nodes. Terms are ORed and
//! the requirements of a term ANDed; an empty term selects nothing. A term with a requirement
//! upstream's parser rejects (an unknown operator, a key that is not a qualified name, a value
//! that is not a label value, `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values,
//! `Gt`/`Lt` without exactly one integer, a `matchFields` requirement other than `In`/`NotIn`
//! with exactly one value) selects nothing, while the other terms still count.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, PreferredSchedulingTerm,
};

use crate::validation::names;

/// The only node field a `matchFields` requirement can name.
pub const OBJECT_NAME_FIELD: &str = "metadata.name";

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// What node affinity reads of a node: its name and labels.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

impl<'a> NodeView<'a> {
    /// The name and labels of `node`.
    pub fn of(node: &'a Node) -> NodeView<'a> {
        NodeView {
            name: node.metadata.name.as_deref().unwrap_or_default(),
            labels: node.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
        }
    }
}

/// One parsed node selector term (upstream `nodeSelectorTerm`).
#[derive(Debug, Clone)]
struct Term<'a> {
    term: &'a NodeSelectorTerm,
    /// Whether every requirement parsed; an invalid term selects nothing.
    valid: bool,
}

impl<'a> Term<'a> {
    /// `None` for an empty term, which selects nothing.
    fn parse(term: &'a NodeSelectorTerm) -> Option<Term<'a>> {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return None;
        }
        let valid = exprs.iter().all(label_requirement_is_valid)
            && fields.iter().all(field_requirement_is_valid);
        Some(Term { term, valid })
    }

    fn matches(&self, node: NodeView<'_>) -> bool {
        if !self.valid {
            return false;
        }
        let exprs = self.term.match_expressions.as_deref().unwrap_or_default();
        let fields = self.term.match_fields.as_deref().unwrap_or_default();
        // Upstream reads a node without a name as having no fields, so `matchFields` is then
        // not checked.
        exprs
            .iter()
            .all(|r| label_requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
            && (node.name.is_empty() || fields.iter().all(|r| field_requirement_matches(r, node)))
    }
}

/// Upstream `labels.NewRequirement`'s checks, as `nodeSelectorRequirementsAsSelector` applies them.
fn label_requirement_is_valid(r: &NodeSelectorRequirement) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let operator_ok = match r.operator.as_str() {
        "In" | "NotIn" => !values.is_empty(),
        "Exists" | "DoesNotExist" => values.is_empty(),
        "Gt" | "Lt" => values.len() == 1 && values.iter().all(|v| v.parse::<i64>().is_ok()),
        _ => false,
    };
    operator_ok
        && names::qualified_name(&r.key).is_empty()
        && values.iter().all(|v| names::label_value(v).is_empty())
}

/// Upstream `nodeSelectorRequirementsAsFieldSelector`: `In` or `NotIn` with exactly one value.
fn field_requirement_is_valid(r: &NodeSelectorRequirement) -> bool {
    matches!(r.operator.as_str(), "In" | "NotIn") && r.values.as_ref().is_some_and(|v| v.len() == 1)
}

/// Whether a parsed (valid) label requirement holds for a label value, `None` when absent.
fn label_requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
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

/// Whether a parsed (valid) field requirement holds: a field other than `metadata.name` reads as
/// empty, as in upstream's `fields.Set`.
fn field_requirement_matches(r: &NodeSelectorRequirement, node: NodeView<'_>) -> bool {
    let field = if r.key == OBJECT_NAME_FIELD {
        node.name
    } else {
        ""
    };
    let wanted = r
        .values
        .as_deref()
        .and_then(<[String]>::first)
        .map_or("", String::as_str);
    match r.operator.as_str() {
        "In" => field == wanted,
        "NotIn" => field != wanted,
        _ => false,
    }
}

/// A parsed node selector (upstream `nodeaffinity.NodeSelector`): it selects a node when any of
/// its terms does. No terms select nothing.
#[derive(Debug, Clone, Default)]
pub struct NodeSelector<'a> {
    terms: Vec<Term<'a>>,
}

impl<'a> NodeSelector<'a> {
    /// Parses `terms`; the invalid ones will select nothing.
    pub fn new(terms: &'a [NodeSelectorTerm]) -> NodeSelector<'a> {
        NodeSelector {
            terms: terms.iter().filter_map(Term::parse).collect(),
        }
    }

    /// Whether any term selects `node`.
    pub fn matches(&self, node: NodeView<'_>) -> bool {
        self.terms.iter().any(|t| t.matches(node))
    }
}

/// Whether `terms` select `node`, parsing them on the way (upstream `MatchNodeSelectorTerms`).
/// Parse once with [`NodeSelector::new`] to match many nodes.
pub fn match_node_selector_terms(terms: &[NodeSelectorTerm], node: NodeView<'_>) -> bool {
    NodeSelector::new(terms).matches(node)
}

/// What a pod requires of its node (upstream `RequiredNodeAffinity`): every label of its
/// `nodeSelector`, and, when it has one, its required node affinity. The default requires nothing.
#[derive(Debug, Clone, Default)]
pub struct RequiredNodeAffinity<'a> {
    node_selector: Option<&'a BTreeMap<String, String>>,
    terms: Option<&'a [NodeSelectorTerm]>,
    selector: Option<NodeSelector<'a>>,
}

impl<'a> RequiredNodeAffinity<'a> {
    /// Reads and parses the pod's `nodeSelector` and
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (upstream
    /// `GetRequiredNodeAffinity`).
    pub fn of(spec: Option<&'a PodSpec>) -> RequiredNodeAffinity<'a> {
        let Some(spec) = spec else {
            return RequiredNodeAffinity::default();
        };
        let terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|r| r.node_selector_terms.as_slice());
        RequiredNodeAffinity {
            node_selector: spec.node_selector.as_ref().filter(|s| !s.is_empty()),
            terms,
            selector: terms.map(NodeSelector::new),
        }
    }

    /// Whether `node` has every label of the node selector and satisfies the required affinity
    /// (upstream `RequiredNodeAffinity.Match`).
    pub fn matches(&self, node: NodeView<'_>) -> bool {
        if let Some(sel) = self.node_selector
            && !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return false;
        }
        self.selector.as_ref().is_none_or(|s| s.matches(node))
    }

    /// The pod's `nodeSelector`, when it has a non-empty one.
    pub fn node_selector(&self) -> Option<&'a BTreeMap<String, String>> {
        self.node_selector
    }

    /// The pod's required node selector terms, when it has a required node affinity.
    pub fn terms(&self) -> Option<&'a [NodeSelectorTerm]> {
        self.terms
    }
}

/// A pod's parsed preferred node affinity (upstream `PreferredSchedulingTerms`): a node scores
/// the sum of the weights of the terms it matches. Terms of weight 0, empty terms and terms that
/// do not parse add nothing.
#[derive(Debug, Clone, Default)]
pub struct PreferredSchedulingTerms<'a> {
    terms: Vec<(i64, Term<'a>)>,
}

impl<'a> PreferredSchedulingTerms<'a> {
    /// Parses the pod's preferred terms.
    pub fn new(terms: &'a [PreferredSchedulingTerm]) -> PreferredSchedulingTerms<'a> {
        PreferredSchedulingTerms {
            terms: terms
                .iter()
                .filter(|p| p.weight != 0)
                .filter_map(|p| Some((i64::from(p.weight), Term::parse(&p.preference)?)))
                .collect(),
        }
    }

    /// The preferred terms of a pod spec's node affinity.
    pub fn of(spec: Option<&'a PodSpec>) -> PreferredSchedulingTerms<'a> {
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or_default();
        PreferredSchedulingTerms::new(terms)
    }

    /// Whether no term can add to a score.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The sum of the weights of the terms `node` matches.
    pub fn score(&self, node: NodeView<'_>) -> i64 {
        self.terms
            .iter()
            .filter(|(_, t)| t.matches(node))
            .map(|(w, _)| w)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn terms(v: Value) -> Vec<NodeSelectorTerm> {
        serde_json::from_value(v).expect("node selector terms fixture")
    }

    fn spec(v: Value) -> PodSpec {
        let mut v = v;
        v["containers"] = json!([]);
        serde_json::from_value(v).expect("pod spec fixture")
    }

    fn required(terms: Value) -> Value {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}})
    }

    #[test]
    fn node_selector_terms_match_like_upstream() {
        // Upstream's TestMatchNodeSelectorTerms and TestNodeSelectorMatch:
        // (name, terms, node name, node labels, selected).
        let l1 = json!({"key": "label_1", "operator": "In", "values": ["label_1_val"]});
        let h1 = json!({"key": "metadata.name", "operator": "In", "values": ["host_1"]});
        let cases = [
            ("no terms", json!([]), "host_1", labels(&[]), false),
            (
                "label matches matchExpressions",
                json!([{"matchExpressions": [l1]}]),
                "",
                labels(&[("label_1", "label_1_val")]),
                true,
            ),
            (
                "field matches matchFields",
                json!([{"matchFields": [h1]}]),
                "host_1",
                labels(&[]),
                true,
            ),
            (
                "a field requirement with two values is invalid",
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host_1", "host_2"]}]}]),
                "host_1",
                labels(&[]),
                false,
            ),
            (
                "a label named like the field is not the field",
                json!([{"matchFields": [h1]}]),
                "not_host_1",
                labels(&[("metadata.name", "host_1")]),
                false,
            ),
            (
                "matchExpressions do not read fields",
                json!([{"matchExpressions": [{"key": "metadata.name", "operator": "In", "values": ["host_1"]}]}]),
                "host_1",
                labels(&[]),
                false,
            ),
            (
                "both set, only the field matches",
                json!([{"matchExpressions": [l1], "matchFields": [h1]}]),
                "host_1",
                labels(&[]),
                false,
            ),
            (
                "both set, both match",
                json!([{"matchExpressions": [l1], "matchFields": [h1]}]),
                "host_1",
                labels(&[("label_1", "label_1_val")]),
                true,
            ),
            (
                "both set, the label mismatches",
                json!([{"matchExpressions": [l1], "matchFields": [h1]}]),
                "host_1",
                labels(&[("label_1", "label_1_val-failed")]),
                false,
            ),
            (
                "terms are ORed",
                json!([{"matchExpressions": [l1]}, {"matchFields": [h1]}]),
                "host_1",
                labels(&[("label_1", "label_1_val-failed")]),
                true,
            ),
            (
                "an invalid term does not spoil a valid one",
                json!([
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host_1", "host_2"]}]},
                    {"matchExpressions": [{"key": "invalid key", "operator": "In", "values": ["label_value"]}]},
                    {"matchFields": [h1]}
                ]),
                "host_1",
                labels(&[]),
                true,
            ),
        ];
        for (name, t, node_name, node_labels, want) in cases {
            let t = terms(t);
            let node = NodeView {
                name: node_name,
                labels: &node_labels,
            };
            assert_eq!(match_node_selector_terms(&t, node), want, "{name}");
        }
    }

    #[test]
    fn requirements_upstreams_parser_rejects_select_nothing() {
        // (requirement, node labels): each would match were it valid, as upstream's
        // TestNodeSelectorRequirementsAsSelector and labels.NewRequirement reject them.
        let node = labels(&[("foo", "bar"), ("n", "5")]);
        let invalid = [
            json!({"key": "foo", "operator": "Exists", "values": ["bar", "baz"]}),
            json!({"key": "foo", "operator": "DoesNotExist", "values": ["x"]}),
            json!({"key": "foo", "operator": "NotIn", "values": []}),
            json!({"key": "n", "operator": "Gt", "values": ["1", "2"]}),
            json!({"key": "n", "operator": "Gt", "values": ["x"]}),
            json!({"key": "foo", "operator": "NotIn", "values": ["invalid value: ___@#$%^"]}),
            json!({"key": "invalid key", "operator": "DoesNotExist"}),
            json!({"key": "foo", "operator": "Equals", "values": ["bar"]}),
        ];
        for r in invalid {
            let t = terms(json!([{"matchExpressions": [r.clone()]}]));
            let view = NodeView {
                name: "n1",
                labels: &node,
            };
            assert!(!match_node_selector_terms(&t, view), "{r}");
        }
        let fields_invalid = [
            json!({"key": "metadata.name", "operator": "Exists"}),
            json!({"key": "metadata.name", "operator": "In", "values": []}),
        ];
        for r in fields_invalid {
            let t = terms(json!([{"matchFields": [r.clone()]}]));
            let view = NodeView {
                name: "n1",
                labels: &node,
            };
            assert!(!match_node_selector_terms(&t, view), "{r}");
        }
    }

    #[test]
    fn operators_compare_like_upstream_label_requirements() {
        // (requirement, label value, matches).
        let cases = [
            (
                json!({"key": "os", "operator": "In", "values": ["windows", "linux"]}),
                Some("windows"),
                true,
            ),
            (
                json!({"key": "os", "operator": "In", "values": ["windows"]}),
                None,
                false,
            ),
            (
                json!({"key": "os", "operator": "NotIn", "values": ["windows"]}),
                Some("linux"),
                true,
            ),
            (
                json!({"key": "os", "operator": "NotIn", "values": ["windows"]}),
                None,
                true,
            ),
            (json!({"key": "os", "operator": "Exists"}), Some(""), true),
            (json!({"key": "os", "operator": "DoesNotExist"}), None, true),
            (
                json!({"key": "kernel-version", "operator": "Gt", "values": ["0204"]}),
                Some("0206"),
                true,
            ),
            (
                json!({"key": "cpus", "operator": "Gt", "values": ["4"]}),
                Some("4"),
                false,
            ),
            (
                json!({"key": "cpus", "operator": "Lt", "values": ["4"]}),
                Some("2"),
                true,
            ),
            (
                json!({"key": "cpus", "operator": "Lt", "values": ["4"]}),
                Some("many"),
                false,
            ),
            (
                json!({"key": "cpus", "operator": "Lt", "values": ["4"]}),
                None,
                false,
            ),
        ];
        for (r, value, want) in cases {
            let node_labels = value.map_or_else(BTreeMap::new, |v| {
                let key = r["key"].as_str().unwrap_or_default();
                labels(&[(key, v)])
            });
            let t = terms(json!([{"matchExpressions": [r.clone()]}]));
            let view = NodeView {
                name: "n1",
                labels: &node_labels,
            };
            assert_eq!(
                match_node_selector_terms(&t, view),
                want,
                "{r} on {value:?}"
            );
        }
    }

    #[test]
    fn pods_require_their_node_selector_and_required_affinity() {
        // Upstream's TestPodMatchesNodeSelectorAndAffinityTerms:
        // (name, pod spec, node labels, node name, matches).
        let foo_bar = labels(&[("foo", "bar")]);
        let gpu = labels(&[("GPU", "NVIDIA-GRID-K1")]);
        let f1 = json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node_1"]}]});
        let cases = [
            ("no selector", json!({}), labels(&[]), "", true),
            (
                "missing labels",
                json!({"nodeSelector": {"foo": "bar"}}),
                labels(&[]),
                "",
                false,
            ),
            (
                "same labels",
                json!({"nodeSelector": {"foo": "bar"}}),
                foo_bar.clone(),
                "",
                true,
            ),
            (
                "node labels are a superset",
                json!({"nodeSelector": {"foo": "bar"}}),
                labels(&[("foo", "bar"), ("baz", "blah")]),
                "",
                true,
            ),
            (
                "node labels are a subset",
                json!({"nodeSelector": {"foo": "bar", "baz": "blah"}}),
                foo_bar.clone(),
                "",
                false,
            ),
            (
                "In matches",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar", "value2"]}]}]))}),
                foo_bar.clone(),
                "",
                true,
            ),
            (
                "Gt matches",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "kernel-version", "operator": "Gt", "values": ["0204"]}]}]))}),
                labels(&[("kernel-version", "0206")]),
                "",
                true,
            ),
            (
                "NotIn matches",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "mem-type", "operator": "NotIn", "values": ["DDR", "DDR2"]}]}]))}),
                labels(&[("mem-type", "DDR3")]),
                "",
                true,
            ),
            (
                "Exists matches",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "GPU", "operator": "Exists"}]}]))}),
                gpu.clone(),
                "",
                true,
            ),
            (
                "affinity that doesn't match the labels",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "foo", "operator": "In", "values": ["value1", "value2"]}]}]))}),
                foo_bar.clone(),
                "",
                false,
            ),
            (
                "no terms",
                json!({"affinity": required(json!([]))}),
                foo_bar.clone(),
                "",
                false,
            ),
            (
                "an empty matchExpressions",
                json!({"affinity": required(json!([{"matchExpressions": []}]))}),
                foo_bar.clone(),
                "",
                false,
            ),
            ("no affinity", json!({}), foo_bar.clone(), "", true),
            (
                "node affinity without a required selector",
                json!({"affinity": {"nodeAffinity": {}}}),
                foo_bar.clone(),
                "",
                true,
            ),
            (
                "requirements are ANDed and match",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "GPU", "operator": "Exists"}, {"key": "GPU", "operator": "NotIn", "values": ["AMD", "INTER"]}]}]))}),
                gpu.clone(),
                "",
                true,
            ),
            (
                "requirements are ANDed and one fails",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "GPU", "operator": "Exists"}, {"key": "GPU", "operator": "In", "values": ["AMD", "INTER"]}]}]))}),
                gpu.clone(),
                "",
                false,
            ),
            (
                "terms are ORed",
                json!({"affinity": required(json!([
                    {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar", "value2"]}]},
                    {"matchExpressions": [{"key": "diffkey", "operator": "In", "values": ["wrong", "value2"]}]}
                ]))}),
                foo_bar.clone(),
                "",
                true,
            ),
            (
                "affinity and nodeSelector both satisfied",
                json!({"nodeSelector": {"foo": "bar"}, "affinity": required(json!([{"matchExpressions": [{"key": "foo", "operator": "Exists"}]}]))}),
                foo_bar.clone(),
                "",
                true,
            ),
            (
                "affinity satisfied, nodeSelector not",
                json!({"nodeSelector": {"foo": "bar"}, "affinity": required(json!([{"matchExpressions": [{"key": "foo", "operator": "Exists"}]}]))}),
                labels(&[("foo", "barrrrrr")]),
                "",
                false,
            ),
            (
                "an invalid value in a term",
                json!({"affinity": required(json!([{"matchExpressions": [{"key": "foo", "operator": "NotIn", "values": ["invalid value: ___@#$%^"]}]}]))}),
                foo_bar.clone(),
                "",
                false,
            ),
            (
                "matchFields In matches",
                json!({"affinity": required(json!([f1.clone()]))}),
                labels(&[]),
                "node_1",
                true,
            ),
            (
                "matchFields In does not match",
                json!({"affinity": required(json!([f1.clone()]))}),
                labels(&[]),
                "node_2",
                false,
            ),
            (
                "two terms: the fields term fails, the labels term matches",
                json!({"affinity": required(json!([f1.clone(), {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]))}),
                foo_bar.clone(),
                "node_2",
                true,
            ),
            (
                "one term: fields fail, labels match",
                json!({"affinity": required(json!([{"matchFields": f1["matchFields"].clone(), "matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]))}),
                foo_bar.clone(),
                "node_2",
                false,
            ),
            (
                "one term: fields and labels match",
                json!({"affinity": required(json!([{"matchFields": f1["matchFields"].clone(), "matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]))}),
                foo_bar.clone(),
                "node_1",
                true,
            ),
            (
                "two terms: neither matches",
                json!({"affinity": required(json!([f1.clone(), {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["not-match-to-bar"]}]}]))}),
                foo_bar.clone(),
                "node_2",
                false,
            ),
        ];
        for (name, s, node_labels, node_name, want) in cases {
            let s = spec(s);
            let node = NodeView {
                name: node_name,
                labels: &node_labels,
            };
            assert_eq!(
                RequiredNodeAffinity::of(Some(&s)).matches(node),
                want,
                "{name}"
            );
        }
        let nothing = labels(&[]);
        let anywhere = NodeView {
            name: "n",
            labels: &nothing,
        };
        assert!(
            RequiredNodeAffinity::of(None).matches(anywhere),
            "no spec requires nothing"
        );
    }

    #[test]
    fn preferred_terms_add_the_weights_of_the_terms_a_node_matches() {
        // Upstream's TestPreferredSchedulingTermsScore ("first and third term match"), plus a
        // weightless term and an invalid one, which add nothing.
        let s = spec(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host_1"]}]}},
                {"weight": 7, "preference": {"matchExpressions": [{"key": "unknown_label", "operator": "In", "values": ["unknown_label_val"]}]}},
                {"weight": 11, "preference": {"matchExpressions": [{"key": "label_1", "operator": "In", "values": ["label_1_val"]}]}},
                {"weight": 0, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host_1"]}]}},
                {"weight": 13, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["host_1", "host_2"]}]}}
            ]}}}),
        );
        let node_labels = labels(&[("label_1", "label_1_val")]);
        let preferred = PreferredSchedulingTerms::of(Some(&s));
        assert_eq!(
            preferred.score(NodeView {
                name: "host_1",
                labels: &node_labels
            }),
            16
        );
        assert_eq!(
            preferred.score(NodeView {
                name: "host_2",
                labels: &labels(&[])
            }),
            0
        );
        assert!(PreferredSchedulingTerms::of(None).is_empty());
    }

    #[test]
    fn a_node_is_read_by_its_name_and_labels() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "win-1", "labels": {"kubernetes.io/os": "windows"}}}),
        )
        .expect("node fixture");
        let t = terms(json!([{
            "matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["win-1"]}]
        }]));
        assert!(match_node_selector_terms(&t, NodeView::of(&node)));
        assert!(!match_node_selector_terms(
            &t,
            NodeView::of(&Node::default())
        ));
    }
}
